"""Run a model for head statistics: patterns per stack on the user's text, and a repeated random sequence.

`model_head_statistics(lm, inputs)` is the whole table: one row per (stack, layer, head) over every
attention stack of the model — "encoder" and/or "decoder" self-attention, and "cross" for an
encoder–decoder's cross-attention. The pattern statistics (analysis.attention.head_stats) come from the user's
text; the duplicate-token and induction scores from a second run on a repeated random sequence, as
TransformerLens' head detectors and Olsson et al. 2022 ("In-context Learning and Induction Heads") do:
    [leading specials, e.g. BOS] x_1 … x_P x_1 … x_P,   x_i random non-special ids of the vocabulary
(drawn without replacement when the vocabulary allows, so each token's only earlier copy is P back).
Nothing is appended after the repeats (no EOS), so every row past the first period is scored.
Cross-attention heads get the statistics that make sense across two sequences (entropy, max weight,
sink mass = weight on the first source token) and NaN for distance, diagonal, previous-token,
duplicate-token and induction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from attnlab.analysis.attention.head_stats import STATS, head_label, head_statistics
from attnlab.analysis.attention.scores import check_patterns, valid_rows
from attnlab.model.inputs import InputError, Inputs
from scipy.special import entr

DEFAULT_PERIOD = 20
COLUMNS = ("stack", "layer", "head", *STATS, "duplicate_token", "induction", "label", "site")


def collect_patterns(capture) -> dict[str, np.ndarray]:
    """Patterns per stack from a capture of one forward: {"encoder"|"decoder": [L, H, T, T], "cross": [L, H, T, S]}.

    Uses each record's `pattern()` (exact recompute for fused backends), batch 0, float64.
    """
    out: dict[str, list] = {}
    for site in capture.sites:
        rec = capture[site]
        key = "cross" if rec.attn_type == "cross" else (rec.stack or "decoder")
        out.setdefault(key, []).append((rec.layer, rec.pattern().astype(np.float64)))
    return {k: np.stack([p for _, p in sorted(v, key=lambda x: x[0])]) for k, v in out.items()}


def collect_masks(capture) -> dict[str, np.ndarray]:
    """The first layer's bool mask [q, k] per stack (True = may attend), keyed as collect_patterns."""
    out = {}
    for site in capture.sites:
        rec = capture[site]
        key = "cross" if rec.attn_type == "cross" else (rec.stack or "decoder")
        if key not in out or rec.layer == 0:
            out[key] = rec.mask_for()
    return out


def collect_sites(capture) -> dict[str, list[str]]:
    """Site names per stack, ordered by layer."""
    out: dict[str, list] = {}
    for site in capture.sites:
        rec = capture[site]
        key = "cross" if rec.attn_type == "cross" else (rec.stack or "decoder")
        out.setdefault(key, []).append((rec.layer, site))
    return {k: [s for _, s in sorted(v)] for k, v in out.items()}


# -- the repeated random sequence ------------------------------------------------------------------------
def special_ids(tokenizer) -> set[int]:
    """Ids of the tokenizer's special tokens ([BOS], [EOS], [PAD], [MASK], and any added special token)."""
    ids = {getattr(tokenizer, a, None) for a in ("bos_id", "eos_id", "pad_id", "mask_id")}
    inner = getattr(tokenizer, "tok", None)
    if inner is not None and hasattr(inner, "get_added_tokens_decoder"):
        ids |= {i for i, t in inner.get_added_tokens_decoder().items() if getattr(t, "special", False)}
    return {int(i) for i in ids if i is not None}


def leading_specials(tokenizer) -> list[int]:
    """The special ids the tokenizer puts before any text (e.g. [BOS] or [CLS]); [] if none."""
    enc = tokenizer.encode("a")
    n = 0
    while n < len(enc.ids) and enc.special and enc.special[n]:
        n += 1
    return list(enc.ids[:n])


def random_body(tokenizer, vocab_size: int, period: int, rng: np.random.Generator) -> np.ndarray:
    """`period` random ids below `vocab_size` that are not special, distinct when enough exist."""
    n = min(vocab_size, getattr(tokenizer, "vocab_size", vocab_size))
    candidates = np.setdiff1d(np.arange(n), sorted(special_ids(tokenizer)))
    if candidates.size == 0:
        raise InputError("the vocabulary has no non-special tokens to build a repeated sequence from")
    return rng.choice(candidates, size=period, replace=candidates.size < period)


@dataclass
class RepeatedInputs:
    inputs: Inputs
    period: int
    start: int  # index of the first random token (after the leading specials) on the target side
    src_start: int | None = None  # the same on the source side (encoder–decoder)


def default_period(lm) -> int:
    room = (lm.context - 2) // 2  # a leading special or two
    return max(2, min(DEFAULT_PERIOD, room))


def repeated_random_inputs(lm, period: int | None = None, seed: int = 0) -> RepeatedInputs:
    """Inputs of [leading specials] + x_1..x_P + x_1..x_P (both sides of an encoder–decoder)."""
    period = default_period(lm) if period is None else int(period)
    rng = np.random.default_rng(seed)

    def side(tok):
        prefix = leading_specials(tok)
        body = random_body(tok, lm.cfg.vocab_size, period, rng)
        ids = prefix + [int(i) for i in body] * 2
        if period < 2 or len(ids) > lm.context:
            raise InputError(f"period {period} gives {len(ids)} tokens; this model takes 2 ≤ 2P + "
                             f"{len(prefix)} ≤ {lm.context}")
        return torch.tensor([ids]), [tok.label(i) for i in ids], len(prefix)

    ids, labels, start = side(lm.tokenizer)
    if not lm.reads_source:
        return RepeatedInputs(Inputs(ids, labels), period, start)
    src_ids, src_labels, src_start = side(lm.src_tokenizer or lm.tokenizer)
    return RepeatedInputs(Inputs(ids, labels, src_ids, src_labels), period, start, src_start)


# -- statistics -----------------------------------------------------------------------------------------
def cross_head_statistics(patterns, mask=None, stack: str = "cross") -> pd.DataFrame:
    """Statistics of cross-attention patterns [L, H, T, S]: entropy, max weight, sink mass; NaN otherwise."""
    a = check_patterns(patterns, ndim=4, name="cross patterns")
    n_layers, n_heads, _, s = a.shape
    valid = valid_rows(a, mask)  # [L, H, T]
    n = valid.sum(-1)

    def mean(x):
        return np.divide(np.where(valid, x, 0).sum(-1), n, out=np.full(n.shape, np.nan), where=n > 0)

    vals = {"entropy": mean(entr(a).sum(-1)), "max_weight": mean(a.max(-1)), "sink_mass": mean(a[..., 0])}
    layer, head = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    df = pd.DataFrame({"stack": stack, "layer": layer.ravel(), "head": head.ravel()})
    for c in (*STATS, "duplicate_token", "induction"):
        df[c] = vals[c].ravel() if c in vals else np.nan
    keys = np.ones(a.shape[-2:], bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), a.shape[-2:])
    counts = keys.sum(-1)
    max_h = np.log(counts[counts > 0]).mean() if (counts > 0).any() and s > 1 else np.nan
    ratio = df["entropy"] / max_h if np.isfinite(max_h) and max_h > 0 else np.full(len(df), np.nan)
    df["label"] = [head_label({**r, "entropy_ratio": e}) for r, e in zip(df.to_dict("records"), ratio)]
    return df


@torch.no_grad()
def capture_run(lm, inputs, backend: str = "eager", interventions=None):
    """One forward with records for every attention site: the Capture."""
    return lm.forward(inputs, backend=backend, interventions=interventions).capture


def model_head_statistics(lm, inputs, *, period: int | None = None, seed: int = 0, backend: str = "eager",
                          repeated: bool = True, interventions=None) -> pd.DataFrame:
    """One DataFrame over every stack of `lm`: head_statistics on `inputs`, scores on a repeated sequence.

    Columns: COLUMNS (head_statistics' columns plus "site", the hook prefix of the head's layer).
    Rows ordered encoder, decoder, cross, then layer, head. repeated=False leaves duplicate-token and
    induction NaN (one forward instead of two). `interventions` (model.hooks) apply to both runs.
    """
    cap = capture_run(lm, inputs, backend, interventions)
    pats, masks, sites = collect_patterns(cap), collect_masks(cap), collect_sites(cap)
    rep_pats, rep = {}, None
    if repeated:
        rep = repeated_random_inputs(lm, period, seed)
        rep_pats = collect_patterns(capture_run(lm, rep.inputs, backend, interventions))
    frames = []
    for stack in ("encoder", "decoder", "cross"):
        if stack not in pats:
            continue
        if stack == "cross":
            df = cross_head_statistics(pats[stack], masks[stack])
        else:
            start = rep.src_start if (rep is not None and lm.reads_source and stack == "encoder") else \
                (rep.start if rep is not None else 0)
            df = head_statistics(pats[stack], masks[stack], stack=stack, repeat_patterns=rep_pats.get(stack),
                                 period=rep.period if rep is not None else None, repeat_start=start)
        df["site"] = [sites[stack][i] for i in df["layer"]]
        frames.append(df)
    return pd.concat(frames, ignore_index=True)[list(COLUMNS)]


def head_table(lm, inputs, backend: str = "eager", period: int = 0, seed: int = 0) -> tuple[pd.DataFrame, int]:
    """(model_head_statistics on `inputs`, the repeat period used): period 0 means the model's default."""
    period = period or default_period(lm)
    return model_head_statistics(lm, inputs, period=period, seed=seed, backend=backend), period
