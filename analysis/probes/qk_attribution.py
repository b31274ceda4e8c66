"""QK attribution: why a head attends where it does. The pre-softmax score of head H of layer L at (query q, key k)
written exactly as a sum over pairs (query-side part, key-side part) of what the residual stream is made of.

The stream entering layer L is a sum of parts (model/frozen_stream.py): the token embedding, the positional
embedding (learned or sinusoidal), each earlier head's output z_h·W_O[h], each earlier attention output bias, each
earlier MLP's output (an MoE layer as one part) — and, in post- and peri-norm models, the β of every norm on the way.
The layer's input norm is taken with its scale frozen per position — σ (LayerNorm) or rms (RMSNorm) of the actual
residual at that position, as direct logit attribution freezes the final norm's — so it is linear: LN(x) =
Σ_c (c − mean c)/σ·γ + β, RMS(x) = Σ_c c/rms·γ; β is the part `ln_bias`. Each part then goes through W_Q of head H
(query side) or W_K of its k/v head, kv_head(H) (key side); the projection biases are the parts `q_bias` and
`k_bias`; a per-head QK-norm (Qwen3, Phi) is frozen per position the same way (its β: `q_norm_bias`, `k_norm_bias`);
RoPE is linear at a fixed position, so each part's q (k) is rotated by the query's (key's) angle. A pair's value is
scale·q_a·k_b, and a positional bias (ALiBi, T5's relative bias) is the one extra term `position_bias`.

The terms sum to the record's score (scale·q·kᵀ + bias). A soft-capped model (Gemma 2) caps the scaled score,
cap·tanh(s/cap), before the bias: the terms sum to the score before the cap, `score`, and the model's capped
score is reported beside it, `capped_score` (a tanh is not a sum). Post-norm models (BERT): with every norm frozen at
its actual scale, each earlier part reaches layer L through every norm after it, and those norms' β are parts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.analysis.probes.readout import check_row
from attnlab.model.frozen_stream import FrozenNorm, attn_parts, block_parts, embed_parts
from attnlab.model.inputs import InputError
from attnlab.model.positions import apply_rope
from attnlab.model.rope import layer_cos_sin

FROZEN = ("the layer's input norm is taken with its scale frozen at the actual residual of each position (σ for "
          "LayerNorm, rms for RMSNorm), as direct logit attribution freezes the final norm; so are a per-head QK-norm "
          "and, in post- and peri-norm models, every norm on the way")


@dataclass
class QKAttribution:
    model: str
    tokens: list[str]
    layer: int
    head: int
    kv_head: int  # the k/v head the query head shares (grouped-query attention)
    query: int
    key: int
    query_parts: list[str]  # the query side's parts, in stream order
    key_parts: list[str]  # the key side's parts
    values: np.ndarray  # float64 [len(query_parts), len(key_parts)]: scale·q_a·k_b
    q_vectors: np.ndarray  # float64 [len(query_parts), d_head]: each part's q (summing to the record's q)
    k_vectors: np.ndarray  # float64 [len(key_parts), d_head]: each part's k (summing to the record's k)
    position_bias: float | None  # ALiBi / relative bias at (q, k), or None
    score: float  # the record's score (before the soft cap, when the model caps)
    capped_score: float | None  # the record's soft-capped score (Gemma 2), else None
    weight: float  # the attention weight at (q, k)
    masked: bool  # the mask hides the key from the query (its score is never used)
    norm: str  # "LayerNorm", "RMSNorm" or "none" (post-norm: no norm before the attention)
    query_scale: float  # the frozen σ / rms at the query position
    key_scale: float  # ... at the key position

    @property
    def total(self) -> float:
        """Σ of every term."""
        return float(self.values.sum() + (self.position_bias or 0.0))

    @property
    def residual(self) -> float:
        """score minus the terms' sum (float rounding only)."""
        return self.score - self.total

    def terms(self, top: int | None = None) -> list[dict]:
        """[{query_side, key_side, value}] sorted by |value| (the largest `top`, or all)."""
        rows = [{"query_side": a, "key_side": b, "value": float(self.values[i, j])}
                for i, a in enumerate(self.query_parts) for j, b in enumerate(self.key_parts)]
        if self.position_bias is not None:
            rows.append({"query_side": "position_bias", "key_side": "position_bias", "value": self.position_bias})
        rows.sort(key=lambda t: -abs(t["value"]))
        return rows if top is None else rows[:top]

    def sums(self, side: str) -> dict[str, float]:
        """{part: Σ of its terms} for side "query" (summing over keys) or "key", sorted by |value|."""
        parts, v = (self.query_parts, self.values.sum(1)) if side == "query" else (self.key_parts, self.values.sum(0))
        return dict(sorted(((p, float(x)) for p, x in zip(parts, v)), key=lambda t: -abs(t[1])))

    def top_matrix(self, n_pairs: int = 12) -> tuple[list[str], list[str], np.ndarray]:
        """(query parts, key parts, values [q, k]): every part of the `n_pairs` largest pairs, both sides, and
        all their pairs' values (the small matrix the Heads page draws)."""
        pairs = [t for t in self.terms(n_pairs) if t["query_side"] != "position_bias"]
        qs = [p for p in self.query_parts if any(t["query_side"] == p for t in pairs)]
        ks = [p for p in self.key_parts if any(t["key_side"] == p for t in pairs)]
        qi, ki = [self.query_parts.index(p) for p in qs], [self.key_parts.index(p) for p in ks]
        return qs, ks, self.values[np.ix_(qi, ki)]

    def to_json(self, top: int | None = None) -> dict:
        def r(x):
            return None if x is None else round(float(x), 7)

        shown = self.terms(top)
        rest = self.total - sum(t["value"] for t in shown)
        return {"model": self.model, "layer": self.layer, "head": self.head, "kv_head": self.kv_head,
                "query": self.query, "key": self.key, "query_token": self.tokens[self.query],
                "key_token": self.tokens[self.key], "score": r(self.score),
                **({"capped_score": r(self.capped_score)} if self.capped_score is not None else {}),
                "weight": r(self.weight), "masked": self.masked,
                "terms": [t | {"value": r(t["value"])} for t in shown],
                **({"rest": r(rest)} if top is not None else {}), "residual": float(f"{self.residual:.3g}"),
                **{f"by_{side}_side": {p: r(v) for p, v in self.sums(side).items()} for side in ("query", "key")},
                "frozen_scale": {"norm": self.norm, "query": r(self.query_scale), "key": r(self.key_scale),
                                 "note": FROZEN}}


def refusal(lm) -> str | None:
    """One line saying why QK attribution does not apply to `lm` (a transformers view, an encoder–decoder, a vision
    model), or None when it does."""
    if not lm.capabilities.converted:
        return (f"QK attribution needs a converted model: {lm.name} runs in transformers as a view (patterns only, "
                "no hook on each head's output)")
    if lm.reads_source or lm.reads_image:
        return f"QK attribution covers one self-attention stack (a decoder or an encoder); {lm.name} is {lm.a_kind}"
    return None


def check_model(lm) -> None:
    """InputError with `refusal`'s line when QK attribution does not apply."""
    if (why := refusal(lm)) is not None:
        raise InputError(why)


@torch.no_grad()
def qk_attribution(lm, inputs, layer: int, head: int, query: int = -1, key: int | None = None,
                   backend: str = "eager") -> QKAttribution:
    """The score of `head` of `layer` at (query, key) split into query-side × key-side pairs (key None: the key the
    query attends to most). Positions count from 0 ([BOS] included); negative ones from the end."""
    check_model(lm)
    stack, cfg = lm.model, lm.cfg
    layer = check_row(layer, len(stack.blocks), "layer")
    if not 0 <= head < cfg.n_heads:
        raise InputError(f"head {head} is out of range: this model has heads 0–{cfg.n_heads - 1}")
    T = inputs.ids.shape[1]
    query = check_row(query, T, "query", has="the text has positions")
    key = check_row(key, T, "key", has="the text has positions")
    blocks = stack.blocks
    names = ["hook_embed", "hook_pos_embed"] + [f"{b.attn.site}.hook_z" for b in blocks[:layer]] + \
        [f"{b.site}.hook_mlp_out" for b in blocks[:layer]]
    fwd = lm.forward(inputs, backend=backend, names=names)
    t = fwd.capture.tensors
    blk, attn = blocks[layer], blocks[layer].attn
    rec = fwd.capture[attn.site]
    if key is None:
        key = int(np.argmax(rec.pattern(head)[query]))
    type_ids = None if inputs.type_ids is None else inputs.type_ids[0].to(lm.device)
    pos = t["hook_pos_embed"][0][0] if "hook_pos_embed" in t else None  # [B, T, D] -> [T, D]
    parts = embed_parts(stack.embed, t["hook_embed"][0][0], pos, type_ids)
    for b in blocks[:layer]:
        heads = attn_parts(b.attn, t[f"{b.attn.site}.hook_z"][0][0])
        parts = block_parts(b, parts, heads, t[f"{b.site}.hook_mlp_out"][0][0])
    g = rec.kv_head(head)
    q_side, q_scale = _side(lm, blk.ln_attn, attn, parts, query, head, "q")
    k_side, k_scale = _side(lm, blk.ln_attn, attn, parts, key, g, "k")
    qv, kv = torch.stack(list(q_side.values())), torch.stack(list(k_side.values()))  # [Cq, d], [Ck, d]
    values = (qv @ kv.T * attn.scale).cpu().numpy()  # [Cq, Ck]
    bias = None if rec.bias is None else float(rec.bias[head, query, key])
    score, capped = float(rec.scores(head)[query, key]), None
    if rec.softcap is not None:  # the terms sum to the scaled score before the cap (+ the bias after it)
        score, capped = float(rec.raw_qk(head)[query, key] * np.float32(rec.scale)) + (bias or 0.0), score
    return QKAttribution(lm.name, list(inputs.tokens), layer, head, g, query, key, list(q_side), list(k_side), values,
                         qv.cpu().numpy(), kv.cpu().numpy(),
                         bias, score, capped, float(rec.pattern(head)[query, key]),
                         not bool(rec.mask_for()[query, key]), type(blk.ln_attn).__name__.replace("Identity", "none"),
                         q_scale, k_scale)


def _side(lm, ln, attn, parts, pos: int, row: int, side: str) -> tuple[dict[str, torch.Tensor], float]:
    """{part: its q (or k) of one head at position `pos`, float64 [d]} through the frozen norm, the projection
    rows of head `row` (a query head for side "q", a k/v head for "k"), the frozen QK-norm and RoPE; and the frozen
    scale."""
    d = attn.d_head
    x = {name: c[pos] for name, c in parts.items()}  # [D] each
    frozen = FrozenNorm(ln, sum(x.values()))
    normed = {name: frozen(c) for name, c in x.items()}
    if frozen.bias is not None:
        normed["ln_bias"] = frozen.bias
    weights, biases = attn.qkv_weights()
    w, b = weights["qk".index(side)], biases["qk".index(side)]  # W_Q [H·d, D] (or W_K [Hkv·d, D]), its bias
    w = w.detach().double()[row * d:(row + 1) * d]  # [d, D]: this head's rows
    out = {name: w @ c for name, c in normed.items()}
    if b is not None:
        out[f"{side}_bias"] = b.detach().double()[row * d:(row + 1) * d]
    qk_norm = attn.q_norm if side == "q" else attn.k_norm
    if not isinstance(qk_norm, torch.nn.Identity):
        frozen_qk = FrozenNorm(qk_norm, sum(out.values()))
        out = {name: frozen_qk(c) for name, c in out.items()}
        if frozen_qk.bias is not None:
            out[f"{side}_norm_bias"] = frozen_qk.bias
    if lm.cfg.positional == "rope":
        cos, sin = layer_cos_sin(lm.cfg, torch.tensor([pos], device=lm.device), attn.layer)  # [1, rot]
        out = {name: apply_rope(c[None], cos, sin)[0] for name, c in out.items()}  # [1, d] -> [d]
    return out, float(frozen.scale)
