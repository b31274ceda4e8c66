"""Permutation equivariance, measured: shuffle the tokens, run the same random-weight model on both orders,
un-permute the second run and compare q, k, v, scores, weights and outputs hook by hook.

Without any position information and without a mask, self-attention is permutation-equivariant: with
inputs x_π (x_π[i] = x[π[i]]) every per-token quantity comes out as X_π[i] = X[π[i]] and every matrix as
M_π[i, j] = M[π[i], π[j]], so un-permuting (rows and columns by π⁻¹) gives back the original up to float32
rounding. Each position scheme (learned, sinusoidal, RoPE, ALiBi) breaks that, and so does a causal mask.

The models: one encoder configuration (ENCODER) built on MODEL_SEED; every scheme gets the same weights
(copied from the positional="none" model), only the position part differs. Everything returned is numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.model.config import ModelConfig
from attnlab.model.hooks import HEAD_AXIS
from attnlab.model.inputs import InputError, Inputs, validate_text
from attnlab.model.loaded import LoadedModel
from attnlab.model.masks import CAUSAL
from attnlab.model.transformer import build_model

MODEL_SEED = 0
MAX_TOKENS = 48  # matrices side by side stay readable
ENCODER = dict(arch="encoder", d_model=64, n_heads=4, n_layers=2, max_len=128, output_head="none")
# quantity -> hook; q, k, v, outputs are [H, T, d] per layer (token axis 1), scores and weights [H, T, T]
QUANTITIES = {"q": "hook_q", "k": "hook_k", "v": "hook_v", "scores": "hook_attn_scores", "weights": "hook_pattern",
              "outputs": "hook_z"}
MATRICES = ("scores", "weights")
NAMES = [f"*.{h}" for h in QUANTITIES.values()]
# (setting name, positional scheme, causal mask?), in table order
SETTINGS = (("none", "none", False), ("none + causal mask", "none", True), ("learned", "learned", False),
            ("sinusoidal", "sinusoidal", False), ("rope", "rope", False), ("alibi", "alibi", False))


@dataclass
class Study:
    """One text, one permutation, every setting."""

    tokens: list[str]  # the original token labels
    perm: list[int]  # permuted position i holds original token perm[i]
    settings: list[str]  # SETTINGS' names
    deltas: np.ndarray  # float64 [setting, layer, quantity]: max |original − un-permuted| (QUANTITIES order)
    original: dict  # setting -> quantity -> float32 [L, H, T, d] or [L, H, T, T]
    permuted: dict  # the permuted run as computed (rows in permuted order), same shapes
    unpermuted: dict  # the permuted run with rows (and columns) put back by the inverse permutation

    @property
    def permuted_tokens(self) -> list[str]:
        return [self.tokens[p] for p in self.perm]

    def table(self, layer: int | None = None) -> np.ndarray:
        """[setting, quantity] max |Δ| for one layer, or the max over layers (None)."""
        return self.deltas.max(axis=1) if layer is None else self.deltas[:, layer]


def parse_permutation(text: str, n: int) -> list[int]:
    """'2 0 1' or '2,0,1' -> [2, 0, 1]; ValueError unless it is a permutation of 0..n−1."""
    parts = text.replace(",", " ").split()
    try:
        perm = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"the permutation must be whole numbers 0…{n - 1}, e.g. "
                         f"{' '.join(map(str, range(n - 1, -1, -1)))}") from None
    if sorted(perm) != list(range(n)):
        raise ValueError(f"the permutation must name each of the {n} positions 0…{n - 1} exactly once "
                         f"(got {len(perm)} numbers)")
    return perm


def random_permutation(n: int, seed: int) -> list[int]:
    """A seeded random permutation of 0..n−1 (never the identity when n > 1: then it is reversed)."""
    perm = np.random.default_rng(seed).permutation(n).tolist()
    return perm[::-1] if n > 1 and perm == list(range(n)) else perm


def inverse(perm) -> np.ndarray:
    """π⁻¹: inverse[perm[i]] = i."""
    return np.argsort(np.asarray(perm))


def study_models(vocab_size: int, seed: int = MODEL_SEED) -> dict[str, torch.nn.Module]:
    """One encoder per positional scheme, all with the weights of the positional='none' model (seeded); a
    learned table comes from its own seeded build. The global RNG is left as it was."""
    models = {}
    with torch.random.fork_rng():
        for scheme in dict.fromkeys(s for _, s, _ in SETTINGS):
            torch.manual_seed(seed)
            models[scheme] = build_model(ModelConfig(vocab_size=vocab_size, positional=scheme, **ENCODER)).eval()
    shared = models["none"].state_dict()
    for scheme, m in models.items():
        missing, unexpected = m.load_state_dict(shared, strict=False)
        if unexpected or any(not k.startswith("embed.pos") for k in missing):
            raise RuntimeError(f"{scheme}: weights differ beyond the position table: {missing} {unexpected}")
    return models


def hooks_of(lm: LoadedModel, ids: torch.Tensor, labels: list[str], causal: bool) -> dict[str, np.ndarray]:
    """One eager forward through LoadedModel.forward: quantity -> float32 [L, H, T, d] or [L, H, T, T]."""
    fwd = lm.forward(Inputs(ids, labels), backend="eager", mask=CAUSAL if causal else None, names=NAMES,
                     records=False)
    out = {}
    for q, hook in QUANTITIES.items():
        per_layer = [heads_first(fwd.capture.tensor(f"blocks.{i}.attn.{hook}")[0], hook)
                     for i in range(lm.cfg.n_layers)]  # [H, T, …]
        out[q] = torch.stack(per_layer).float().cpu().numpy()  # [L, H, T, …]
    return out


def heads_first(x: torch.Tensor, hook: str) -> torch.Tensor:
    """One batch row of a hook value with its heads first: q, k, v, z [T, H, d] -> [H, T, d]; patterns as they are."""
    return x.transpose(0, 1) if HEAD_AXIS[hook] == 2 else x


def unpermute(x: np.ndarray, quantity: str, inv: np.ndarray) -> np.ndarray:
    """Rows (axis 2 of [L, H, T, …]) and, for a matrix, columns (axis 3) put back in the original order."""
    x = x[:, :, inv]
    return x[:, :, :, inv] if quantity in MATRICES else x


def run_study(ids: list[int], labels: list[str], perm: list[int], vocab_size: int,
              seed: int = MODEL_SEED) -> Study:
    """Every setting of SETTINGS on ids and on ids[perm]: the matrices and max |Δ| per layer and quantity."""
    if sorted(perm) != list(range(len(ids))):
        raise ValueError("perm must be a permutation of the token positions")
    models = study_models(vocab_size, seed)
    inv = inverse(perm)
    x = torch.tensor([ids], dtype=torch.long)  # [1, T]
    xp = x[:, perm]  # [1, T]: position i holds token perm[i]
    plabels = [labels[p] for p in perm]
    original, permuted, unpermuted, deltas = {}, {}, {}, []
    for name, scheme, causal in SETTINGS:
        cfg = ModelConfig(vocab_size=vocab_size, positional=scheme, **ENCODER)
        lm = LoadedModel(f"perm-{scheme}", models[scheme], None, cfg, "random")
        a, b = hooks_of(lm, x, labels, causal), hooks_of(lm, xp, plabels, causal)
        u = {q: unpermute(b[q], q, inv) for q in QUANTITIES}
        original[name], permuted[name], unpermuted[name] = a, b, u
        d = [[float(np.abs(a[q][i].astype(np.float64) - u[q][i]).max()) for q in QUANTITIES]
             for i in range(cfg.n_layers)]
        deltas.append(d)
    return Study(list(labels), list(perm), [s for s, _, _ in SETTINGS], np.array(deltas), original, permuted,
                 unpermuted)


def permutation_study(lm: LoadedModel, text: str, order: str | None = None, seed: int = 0) -> Study:
    """Tokenize `text` with lm's tokenizer (no special tokens) and run every setting with the permutation
    typed in `order` ('2 0 1 …'), the text reversed (order 'reverse'), or a random one drawn with `seed`
    (order None)."""
    validate_text(text)
    enc = lm.tokenizer.encode(text, add_special=False)
    n = len(enc.ids)
    if not 2 <= n <= MAX_TOKENS:
        raise InputError(f"the text is {n} tokens long; this page shuffles 2 to {MAX_TOKENS} tokens")
    if order is None:
        perm = random_permutation(n, seed)
    elif order.strip() == "reverse":
        perm = list(range(n - 1, -1, -1))
    else:
        perm = parse_permutation(order, n)
    return run_study(list(enc.ids), list(enc.labels), perm, lm.tokenizer.vocab_size)
