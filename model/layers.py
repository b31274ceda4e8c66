"""The MLP and the transformer block (pre/post/peri-norm chosen once)."""

from __future__ import annotations

import torch
import torch.nn as nn
from attnlab.model import hooks
from attnlab.model.attention import Attention
from attnlab.model.config import ModelConfig
from attnlab.model.moe import MoE
from attnlab.model.norms import has_hooks, make_norm, norm_hook_names


class QuickGELU(nn.Module):
    """x·σ(1.702·x): CLIP's approximation of GELU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


# mlp choice → activation; the gated ones (act(gate(x))·up(x)) are SwiGLU and GeGLU (tanh GELU: T5 v1.1, Gemma)
ACTIVATIONS = {"gelu": lambda: nn.GELU(), "gelu_tanh": lambda: nn.GELU(approximate="tanh"), "relu": nn.ReLU,
               "quick_gelu": QuickGELU, "silu": nn.SiLU, "swiglu": nn.SiLU, "geglu": lambda: nn.GELU(approximate="tanh")}
GATED = ("swiglu", "geglu")
MLP_ROWS = 1024  # rows of a long text's MLP computed between two pauses (hooks.by_rows)


class MLP(nn.Module):
    """Position-wise feed-forward: act(up(x)) (GELU, tanh GELU, ReLU, quick GELU, SiLU) or gated
    act(gate(x))·up(x) (SwiGLU: SiLU gate, GeGLU: tanh-GELU gate), then down."""

    HOOKS = ("hook_pre", "hook_pre_linear", "hook_post")  # hook_pre_linear: a gated MLP's only

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        kind = cfg.mlp
        self.gated = kind in GATED
        if self.gated:
            self.gate = nn.Linear(cfg.d_model, cfg.hidden, bias=cfg.mlp_biases)
        self.up = nn.Linear(cfg.d_model, cfg.hidden, bias=cfg.mlp_biases)
        self.site: str | None = None  # set by name_sites() (None: a MoE expert, not hooked)
        self.down = nn.Linear(cfg.hidden, cfg.d_model, bias=cfg.mlp_biases)
        self.act = ACTIVATIONS[kind]()

    @property
    def hook_points(self) -> tuple[str, ...]:
        """hook_pre: the (gate's) pre-activation; hook_pre_linear: SwiGLU's up projection; hook_post: the hidden
        units the down projection reads, all [B, T, hidden]."""
        return self.HOOKS if hasattr(self, "gate") else (self.HOOKS[0], self.HOOKS[2])

    def hook_names(self) -> list[str]:
        return [f"{self.site}.{p}" for p in self.hook_points]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cap = hooks.active()
        if cap is not None and self.site is not None and not cap.records_only and \
                any(cap.touches(f"{self.site}.{p}") for p in self.hook_points):
            return self._forward_hooked(x, cap)
        return hooks.by_rows(self._plain, x, self.down.out_features, MLP_ROWS)  # a long text: row chunks, paused

    def _plain(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.gate(x)) * self.up(x) if self.gated else self.act(self.up(x))
        return self.down(h)

    def _forward_hooked(self, x: torch.Tensor, cap: hooks.Capture) -> torch.Tensor:
        s = self.site
        if hasattr(self, "gate"):  # gated: act(gate(x)) · up(x)
            h = self.act(cap.hook(f"{s}.hook_pre", self.gate(x))) * cap.hook(f"{s}.hook_pre_linear", self.up(x))
        else:
            h = self.act(cap.hook(f"{s}.hook_pre", self.up(x)))
        return self.down(cap.hook(f"{s}.hook_post", h))


def _pre(x, f, n_in, n_out):
    return x + f(n_in(x))


def _post(x, f, n_in, n_out):
    return n_out(x + f(x))


def _peri(x, f, n_in, n_out):
    return x + n_out(f(n_in(x)))


RESIDUALS = {"pre": _pre, "post": _post, "peri": _peri, "parallel": _pre}  # parallel: see Block.forward


class Block(nn.Module):
    """Self-attention, optional cross-attention, MLP; each sub-layer wrapped by the residual rule.

    Hook points (TransformerLens's names, all [B, T, D]): the residual stream entering the block, between its
    sub-layers and leaving it, and the sub-layers' outputs before any norm on their way back (peri/post-norm); each
    norm's hook_scale and hook_normalized under its TransformerLens name (norm_names: ln1, ln2, ln1_post, …)."""

    HOOKS = ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")
    CROSS_HOOKS = ("hook_cross_attn_out", "hook_resid_mid_cross")  # a decoder block with cross-attention
    SPLIT_HOOKS = ("hook_mlp_in",)  # a run with split inputs: the MLP's own copy of the stream

    def __init__(self, cfg: ModelConfig, cross: bool = False):
        super().__init__()
        self.residual = RESIDUALS[cfg.norm]
        norm_in, norm_out = cfg.norm in ("pre", "peri", "parallel"), cfg.norm in ("post", "peri")

        def norms():
            return (make_norm(cfg) if norm_in else nn.Identity(), make_norm(cfg) if norm_out else nn.Identity())

        self.attn = Attention(cfg)
        self.ln_attn, self.ln_attn_out = norms()
        if cross:
            self.cross_attn = Attention(cfg, cross=True)
            self.ln_cross, self.ln_cross_out = norms()
        self.mlp = MoE(cfg, MLP) if cfg.mlp == "moe" else MLP(cfg)
        self.ln_mlp, self.ln_mlp_out = norms()
        self.has_cross = cross
        self.parallel = cfg.norm == "parallel"  # GPT-NeoX, Phi: attention and MLP read the same x
        self.norm_rule = cfg.norm  # pre | post | peri | parallel (model/frozen_stream.py reads it)
        self.splits = cfg.norm in ("pre", "parallel")  # the stream is a plain sum of the sub-layers' outputs
        self.site = "block"  # set by name_sites()
        self.norm_names = self._norm_names()

    def _norm_names(self) -> dict[str, str]:
        """{norm attribute: TransformerLens's name} for the norms with a scale: sub-layer k (1 self-attention, 2
        cross-attention when there is one, then the MLP: TL's T5Block) has ln{k} before it, or after it in a
        post-norm block; a peri-norm block's norm after it is ln{k}_post (TL's Gemma 2)."""
        out = {}
        for k, sub in enumerate(("attn", "cross", "mlp") if self.has_cross else ("attn", "mlp"), 1):
            before, after = f"ln_{sub}", f"ln_{sub}_out"
            if has_hooks(getattr(self, before)):
                out[before] = f"ln{k}"
            if has_hooks(getattr(self, after)):
                out[after] = f"ln{k}_post" if before in out else f"ln{k}"
        return out

    def _norm_hooks(self, attr: str) -> list[str]:
        """The hook names of norm `attr` ([] without a scale)."""
        return norm_hook_names(getattr(self, attr), f"{self.site}.{self.norm_names.get(attr)}")

    def _normed(self, attr: str, cap: hooks.Capture):
        """Norm `attr` as a function of x, firing its hooks (hook_scale, hook_normalized) inside `cap`."""
        norm, tl = getattr(self, attr), self.norm_names.get(attr)
        return norm if tl is None else lambda h: norm.forward_hooked(h, cap, f"{self.site}.{tl}")

    def hook_names(self) -> list[str]:
        """This block's hook names and its sub-layers', in the order they fire (a parallel block, whose attention
        and MLP read the same x, has no hook_resid_mid)."""
        pre, attn_out, mid, mlp_out, post = (f"{self.site}.{p}" for p in self.HOOKS)
        n = self._norm_hooks
        names = [pre, *n("ln_attn"), *self.attn.hook_names(), attn_out, *n("ln_attn_out"),
                 *([] if self.parallel else [mid])]
        if self.has_cross:
            cross_out, mid_cross = (f"{self.site}.{p}" for p in self.CROSS_HOOKS)
            names += [*n("ln_cross"), *self.cross_attn.hook_names(), cross_out, *n("ln_cross_out"), mid_cross]
        return names + [*n("ln_mlp"), *self.mlp.hook_names(), mlp_out, *n("ln_mlp_out"), post]

    def forward(self, x, self_ctx, cross_ctx=None):
        cap = hooks.active()
        if cap is not None and not cap.records_only:
            return self._forward_hooked(x, self_ctx, cross_ctx, cap)
        if self.parallel:  # x + attn(ln_attn(x)) + mlp(ln_mlp(x)); Phi shares one norm (its weights fill both)
            return x + self.attn(self.ln_attn(x), self_ctx) + self.mlp(self.ln_mlp(x))
        x = self.residual(x, lambda h: self.attn(h, self_ctx), self.ln_attn, self.ln_attn_out)
        if self.has_cross:
            x = self.residual(x, lambda h: self.cross_attn(h, cross_ctx), self.ln_cross, self.ln_cross_out)
        return self.residual(x, self.mlp, self.ln_mlp, self.ln_mlp_out)

    def _forward_hooked(self, x, self_ctx, cross_ctx, cap: hooks.Capture):
        """forward with the residual-stream hooks (HOOKS, CROSS_HOOKS)."""
        if cap.split_inputs:
            return self._forward_split(x, self_ctx, cap)
        s, n = self.site, lambda attr: self._normed(attr, cap)
        x = cap.hook(f"{s}.hook_resid_pre", x)
        if getattr(self, "parallel", False):
            a = cap.hook(f"{s}.hook_attn_out", self.attn(n("ln_attn")(x), self_ctx))
            return cap.hook(f"{s}.hook_resid_post", x + a + cap.hook(f"{s}.hook_mlp_out", self.mlp(n("ln_mlp")(x))))
        x = self.residual(x, lambda h: cap.hook(f"{s}.hook_attn_out", self.attn(h, self_ctx)),
                          n("ln_attn"), n("ln_attn_out"))
        x = cap.hook(f"{s}.hook_resid_mid", x)
        if self.has_cross:
            x = self.residual(x, lambda h: cap.hook(f"{s}.hook_cross_attn_out", self.cross_attn(h, cross_ctx)),
                              n("ln_cross"), n("ln_cross_out"))
            x = cap.hook(f"{s}.hook_resid_mid_cross", x)
        x = self.residual(x, lambda h: cap.hook(f"{s}.hook_mlp_out", self.mlp(h)), n("ln_mlp"), n("ln_mlp_out"))
        return cap.hook(f"{s}.hook_resid_post", x)

    def _forward_split(self, x, ctx, cap: hooks.Capture):
        """_forward_hooked with split inputs (Attention.SPLIT_HOOKS, SPLIT_HOOKS): each query head, each k/v head's k and v, and
        the MLP read their own copy of the stream, so an intervention can give each one its own input. Pre-norm
        and parallel blocks only (elsewhere a norm stands between the stream and the sub-layers' sum)."""
        if not self.splits or self.has_cross:
            raise ValueError("split inputs need a pre-norm or parallel decoder block without cross-attention")
        s, a = self.site, self.attn
        x = cap.hook(f"{s}.hook_resid_pre", x)
        B, T, D = x.shape
        per = [cap.hook(f"{a.site}.{p}", _own(cap, f"{a.site}.{p}", x[:, :, None].expand(B, T, n, D)))  # [B, T, n, D]
               for p, n in zip(a.SPLIT_HOOKS, (a.n_heads, a.n_kv_heads, a.n_kv_heads))]
        ln1 = self._normed("ln_attn", cap)  # fires once per q, k and v input ([B, T, n, 1] scales), as TL's ln1
        attn = cap.hook(f"{s}.hook_attn_out", a.forward_split(*(ln1(p) for p in per), ctx))
        mid = x + attn if self.parallel else cap.hook(f"{s}.hook_resid_mid", x + attn)
        mlp_in = cap.hook(f"{s}.hook_mlp_in", _own(cap, f"{s}.hook_mlp_in", x if self.parallel else mid))
        mlp = self.mlp(self._normed("ln_mlp", cap)(mlp_in))
        return cap.hook(f"{s}.hook_resid_post", mid + cap.hook(f"{s}.hook_mlp_out", mlp))


def _own(cap: hooks.Capture, name: str, x: torch.Tensor) -> torch.Tensor:
    """A split input as hook `name` gets it: a view of the stream (expand, no copy), or a copy when an intervention
    on it may change it in place (writing through the view would change the stream and every other head's input)."""
    return x.clone() if name in cap.interventions else x
