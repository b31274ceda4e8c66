"""The Block page's side-by-side variants, on seeded random-weight decoders (never a trained model): pre- vs post-
vs peri-LN, LayerNorm vs RMSNorm vs BatchNorm, GELU vs SwiGLU, QK-norm off vs on.

Every variant is `build_model(ModelConfig(...))` under `torch.manual_seed(seed)`, then given the first variant's
tensor wherever the name and shape match, so the variants differ only where the choice changes the weights'
shapes. The model has no BatchNorm: `SeqBatchNorm` normalises each feature over the batch AND the sequence (batch
statistics, as in training) and replaces every LayerNorm of a copy of the LayerNorm variant — so a later token
changes an earlier token's output, which `norm_leak` measures (LayerNorm and RMSNorm: exactly 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from attnlab.analysis.machinery.block_walk import deltas, walk_stream
from attnlab.model import hooks
from attnlab.model.config import ModelConfig
from attnlab.model.inputs import Inputs
from attnlab.model.transformer import build_model

BATCHNORM = "BatchNorm"
COMPARISONS: dict[str, dict[str, dict]] = {
    "residual": {"pre-LN": {"norm": "pre"}, "post-LN": {"norm": "post"}, "peri-LN": {"norm": "peri"}},
    "norm": {"LayerNorm": {}, "RMSNorm": {"norm_type": "rmsnorm"}, BATCHNORM: {}},
    "mlp": {"GELU (hidden 4D)": {"mlp": "gelu"}, "SwiGLU (hidden 8D/3)": {"mlp": "swiglu"}},
    "qk": {"QK-norm off": {}, "QK-norm on": {"qk_norm": True}},
}
D_MODEL, N_HEADS, N_LAYERS = 64, 4, 4


class SeqBatchNorm(nn.Module):
    """BatchNorm over a [B, T, D] stream: each feature normalised by its mean and variance over every token of
    the batch (B·T values), then the replaced norm's own scale and shift."""

    def __init__(self, like: nn.LayerNorm):
        super().__init__()
        self.weight, self.bias, self.eps = like.weight, like.bias, like.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=(0, 1), keepdim=True)  # [1, 1, D]
        var = x.var(dim=(0, 1), unbiased=False, keepdim=True)  # [1, 1, D]
        y = (x - mean) / torch.sqrt(var + self.eps)
        return y * self.weight + (self.bias if self.bias is not None else 0)


def base_config(vocab_size: int, n_tokens: int) -> ModelConfig:
    """The random decoder the variants start from: learned positions, pre-LN, LayerNorm, GELU, no QK-norm."""
    return ModelConfig(arch="decoder", vocab_size=vocab_size, d_model=D_MODEL, n_heads=N_HEADS, n_layers=N_LAYERS,
                       max_len=max(16, n_tokens), positional="learned")


def with_batchnorm(net: nn.Module) -> nn.Module:
    """`net` (shared weights) with every LayerNorm replaced by SeqBatchNorm."""
    for name, m in list(net.named_modules()):
        if isinstance(m, nn.LayerNorm):
            parent, _, leaf = name.rpartition(".")
            setattr(net.get_submodule(parent) if parent else net, leaf, SeqBatchNorm(m))
    return net


def build_variants(kind: str, vocab_size: int, n_tokens: int, seed: int) -> tuple[dict[str, nn.Module], dict]:
    """({variant: model}, {variant: (tensors shared with the first variant, tensors)}) for a comparison."""
    if kind not in COMPARISONS:
        raise ValueError(f"unknown comparison {kind!r}; choose one of {', '.join(COMPARISONS)}")
    base = base_config(vocab_size, n_tokens)
    models, shared, ref = {}, {}, None
    for name, change in COMPARISONS[kind].items():
        torch.manual_seed(seed)
        net = build_model(base.replace(**change)).eval()
        if ref is None:
            ref = net.state_dict()
        own = net.state_dict()
        same = {k: v for k, v in ref.items() if k in own and own[k].shape == v.shape}
        net.load_state_dict(own | same)
        shared[name] = (len(same), len(own))
        models[name] = with_batchnorm(net) if name == BATCHNORM else net
    return models, shared


@dataclass(frozen=True)
class Variant:
    """One variant's numbers at the chosen token."""

    name: str
    resid_norms: np.ndarray  # float64 [L + 1]
    attn_delta: np.ndarray  # float64 [L]
    mlp_delta: np.ndarray  # float64 [L]
    score_std: np.ndarray  # float64 [L]: std of the scaled scores scale·q·kᵀ over visible cells, all heads
    score_max: np.ndarray  # float64 [L]: max |scaled score| over visible cells
    mlp_params: int  # parameters of one block's MLP
    shared: tuple[int, int]  # (tensors shared with the first variant, tensors)
    top_token: str  # the most likely next token at the chosen position


@torch.no_grad()
def compare_variants(lm, inputs: Inputs, kind: str, position: int = -1, seed: int = 0) -> list[Variant]:
    """The variants of `kind` over the tokens of `inputs` (the page model's tokenizer; random weights)."""
    ids = inputs.ids.cpu()
    T = ids.shape[1]
    t = position % T
    models, shared = build_variants(kind, lm.cfg.vocab_size, T, seed)
    out = []
    for name, net in models.items():
        with hooks.capture() as cap:
            logits, steps = walk_stream(net, ids, t)
        resid, attn, mlp = deltas(steps, N_LAYERS)
        std, mx = [], []
        for site in cap.sites:
            rec = cap[site]
            vis = rec.scores()[:, rec.mask_for()]  # [H, q, k] -> [H, visible cells]
            std.append(float(vis.std()))
            mx.append(float(np.abs(vis).max()))
        mlp_params = sum(p.numel() for p in net.blocks[0].mlp.parameters())
        top = int(logits[0, t].argmax())
        out.append(Variant(name, resid, attn, mlp, np.array(std), np.array(mx), mlp_params, shared[name],
                           lm.label(top)))
    return out


@dataclass(frozen=True)
class Leak:
    """How far each token's output moves when one later token is changed, per norm."""

    tokens: list[str]
    changed: int  # the position whose token was replaced
    new_token: str
    delta: dict[str, np.ndarray]  # norm -> float64 [T]: max |Δ logits| at each position


@torch.no_grad()
def norm_leak(lm, inputs: Inputs, changed: int = -1, new_id: int | None = None, seed: int = 0) -> Leak:
    """Replace token `changed` by `new_id` (default: the next id) and measure max |Δ logits| per position under
    LayerNorm, RMSNorm and BatchNorm (same weights). Causal attention keeps earlier tokens blind to a later
    one, so the per-token norms give exactly 0 before `changed`; BatchNorm's statistics over the sequence do not."""
    ids = inputs.ids.cpu()
    T = ids.shape[1]
    c = changed % T
    V = lm.cfg.vocab_size
    new = (int(ids[0, c]) + 1) % V if new_id is None else int(new_id)
    if not 0 <= new < V:
        raise ValueError(f"token id {new} is outside the vocabulary of {V}")
    other = ids.clone()
    other[0, c] = new
    models, _ = build_variants("norm", V, T, seed)
    delta = {}
    for name, net in models.items():
        a, _ = walk_stream(net, ids, 0, record=False)
        b, _ = walk_stream(net, other, 0, record=False)
        delta[name] = (a - b).abs().amax(-1)[0].double().numpy()  # [1, T, V] -> [T]
    seen = dict(reversed(list(zip(ids[0].tolist(), inputs.tokens))))  # id -> its first label in the text
    return Leak(list(inputs.tokens), c, seen.get(new, lm.label(new)), delta)
