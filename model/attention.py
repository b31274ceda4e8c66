"""Multi-head self- and cross-attention with three backends and hook points.

eager: softmax(scale·q·kᵀ + bias, masked to −inf) · v, pattern materialised.
sdpa / flash: F.scaled_dot_product_attention (flash pinned); a capture keeps q and k instead.

Grouped-query attention (cfg.n_kv_heads < n_heads; 1 = multi-query): the k/v projections produce
n_kv_heads heads and query head h shares k/v head h // (n_heads // n_kv_heads). The KV cache, hook_k,
hook_v and the record's k hold the k/v heads only; k and v are repeated per query group just before
the maths (`repeat_kv`, the same for every backend), so eager ≡ sdpa ≡ flash exactly as for MHA — except where
SDPA's flash kernel reads the grouped heads itself (`enable_gqa`, the same numbers without the copy).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from attnlab.model import hooks
from attnlab.model.attention_kernels import eager_attention, explicit_mask, fused_attention, repeat_kv
from attnlab.model.attn_ctx import AttnCtx
from attnlab.model.config import ModelConfig
from attnlab.model.norms import make_norm, norm_hook_names, run_head_norm
from attnlab.model.positions import apply_rope
from attnlab.model.record import AttentionRecord


def _hook_heads(cap, name: str, x: torch.Tensor) -> torch.Tensor:
    """Fire hook `name` on x [B, H, T, d] in TransformerLens's layout [B, T, H, d]; the (maybe replaced) value back
    in [B, H, T, d]."""
    return cap.hook(name, x.transpose(1, 2)).transpose(1, 2)  # [B, H, T, d] -> [B, T, H, d] -> [B, H, T, d]


class Attention(nn.Module):
    """Multi-head (or grouped-query) attention. Self-attention reads x; cross-attention takes keys/values
    from ctx.memory. qkv's output rows are [q (n_heads·d_head) | k (n_kv_heads·d_head) | v (same)]; with
    cfg.qkv_layout "split" they are three Linears q, k, v instead (project_qkv, qkv_weights hide the difference).

    Hook points, in TransformerLens's layouts (the maths inside runs [B, H, T, d]): hook_q [B, q, H, d]; hook_k,
    hook_v [B, k, Hkv, d] (the k/v heads, not repeated; every key so far under a KV cache); hook_attn_scores,
    hook_pattern [B, H, q, k]; hook_mask [B|1, 1, q, k]; hook_z [B, q, H, d]; hook_result [B, q, H, D] (each head's
    output before the sum, on demand)."""

    HOOKS = ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_mask", "hook_pattern", "hook_z", "hook_result")
    PATTERN_HOOKS = HOOKS[3:6]  # fired only where the pattern is materialised (eager maths, attention_kernels.py)
    # a run with split inputs: each query head's, each k/v head's copy of the stream it reads [B, T, n, D]
    SPLIT_HOOKS = ("hook_q_input", "hook_k_input", "hook_v_input")

    def hook_names(self) -> list[str]:
        """This site's hook names, in the order they fire (q/k norms first: cross-attention norms k before q)."""
        norms = ((self.k_norm, "k_norm"), (self.q_norm, "q_norm")) if self.cross else \
            ((self.q_norm, "q_norm"), (self.k_norm, "k_norm"))
        return [*(n for m, name in norms for n in norm_hook_names(m, f"{self.site}.{name}")),
                *(f"{self.site}.{p}" for p in self.HOOKS)]

    def __init__(self, cfg: ModelConfig, cross: bool = False):
        super().__init__()
        self.cross, self.n_heads, self.d_head = cross, cfg.n_heads, cfg.d_head
        self.n_kv_heads = cfg.kv_heads
        self.group = cfg.n_heads // cfg.kv_heads  # query heads per k/v head
        self.scale = cfg.score_scale  # 1/√d_head unless the config says otherwise
        self.softcap = cfg.attn_softcap  # SDPA has no soft-capping: a capped site runs the eager math
        d, d_q, d_kv = cfg.d_model, cfg.d_attn, cfg.kv_heads * cfg.d_head
        self.split = (d_q, d_kv, d_kv)
        self.fused = cfg.qkv_layout == "fused"
        if not self.fused:  # qkv_layout "split": a checkpoint's separate q, k, v tensors, used as stored
            self.q, self.k, self.v = (nn.Linear(d, n, bias=cfg.attn_bias) for n in self.split)
        elif cross:  # fused: q alone (it reads x), k | v stacked (they read the encoder's output)
            self.q = nn.Linear(d, d_q, bias=cfg.attn_bias)
            self.kv = nn.Linear(d, 2 * d_kv, bias=cfg.attn_bias)
        else:
            self.qkv = nn.Linear(d, d_q + 2 * d_kv, bias=cfg.attn_bias)
        self.out = nn.Linear(d_q, d, bias=cfg.attn_out_bias)
        if cfg.qk_norm:
            self.q_norm = make_norm(cfg, cfg.d_head)
            self.k_norm = make_norm(cfg, cfg.d_head)
        else:
            self.q_norm = self.k_norm = nn.Identity()
        self.qk_norm = cfg.qk_norm
        self.site, self.stack, self.layer = "attn", "", 0  # set by name_sites()

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention's q [B, T, H·d], k and v [B, T, Hkv·d] from x [B, T, D], whichever the layout."""
        if self.fused:
            return self.qkv(x).split(self.split, dim=-1)
        return self.q(x), self.k(x), self.v(x)

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention's k and v [B, S, Hkv·d] from the encoder's output memory [B, S, D]."""
        if self.fused:
            return self.kv(memory).split(self.split[1:], dim=-1)
        return self.k(memory), self.v(memory)

    def qkv_weights(self) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor | None, ...]]:
        """The projection weights (W_Q [H·d, D], W_K and W_V [Hkv·d, D]) and biases (None without), whichever the
        layout (fused: views of the one weight; cross-attention's k and v read the encoder's output)."""
        if self.fused and self.cross:
            kb = (None, None) if self.kv.bias is None else self.kv.bias.split(self.split[1:])
            return (self.q.weight, *self.kv.weight.split(self.split[1:])), (self.q.bias, *kb)
        if self.fused:
            b = (None,) * 3 if self.qkv.bias is None else self.qkv.bias.split(self.split)
            return self.qkv.weight.split(self.split), b
        return (self.q.weight, self.k.weight, self.v.weight), (self.q.bias, self.k.bias, self.v.bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        return x.view(B, T, D // self.d_head, self.d_head).transpose(1, 2)  # [B, T, h·d] -> [B, h, T, d]

    def _project(self, x: torch.Tensor, ctx: AttnCtx):
        """q [B, H, q, d]; k, v [B, Hkv, k, d] (every key so far, from the cache when there is one)."""
        if self.cross:
            q = self._heads(self.q(x))
            cached = ctx.cache.cross.get(self.site) if ctx.cache is not None else None
            if cached is None:
                k, v = self.project_kv(ctx.memory)
                k, v = self._head_norm("k_norm", self._heads(k)), self._heads(v)
                if ctx.cache is not None:
                    ctx.cache.cross[self.site] = (k, v)  # computed once per source
            else:
                k, v = cached
            return self._head_norm("q_norm", q), k, v
        q, k, v = self.project_qkv(x)
        return self._finish(self._heads(q), self._heads(k), self._heads(v), ctx)

    def _head_norm(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """The per-head q or k norm `name` ("q_norm" | "k_norm") of x [B, n, T, d]; x itself without QK-norm."""
        return run_head_norm(getattr(self, name), x, self.site, name) if self.qk_norm else x

    def _finish(self, q, k, v, ctx: AttnCtx):
        """q [B, H, q, d], k, v [B, Hkv, k, d] from their projections: q/k norms, RoPE, the cache."""
        q, k = self._head_norm("q_norm", q), self._head_norm("k_norm", k)
        if ctx.rope is not None:
            cos_sin = ctx.rope_in(q.dtype)
            q, k = apply_rope(q, *cos_sin), apply_rope(k, *cos_sin)
        if ctx.cache is not None:
            k, v = ctx.cache.append(self.site, k, v)
        return q, k, v

    def forward(self, x: torch.Tensor, ctx: AttnCtx) -> torch.Tensor:
        q, k, v = self._project(x, ctx)
        cap = hooks.active()
        if cap is not None and not cap.records_only:
            return self._out_captured(self._forward_captured(q, k, v, ctx, cap), cap)
        # the fast path: no hook fires; a capture that keeps records only adds this site's record after the maths
        k_kv = k  # a record keeps the k/v heads only
        eager = ctx.backend == "eager" or self.softcap is not None
        k, v = self._kv(q, k, v, ctx, eager)
        pattern = None
        if eager:
            z, _, pattern = eager_attention(q, k, v, explicit_mask(ctx.mask, ctx.is_causal, q, k), ctx.bias,
                                            self.scale, self.site, None, self.softcap, ctx.dead_rows)
        else:
            z = fused_attention(q, k, v, ctx.mask, ctx.bias, self.scale, ctx.is_causal, ctx.backend,
                                ctx.dead_rows)
        if cap is not None and cap.keep_records:
            self._keep(cap, ctx, q, k_kv, *self._ran(ctx, q, k, v, pattern is not None), None, pattern)
        B, H, T, d = z.shape
        return self.out(z.transpose(1, 2).reshape(B, T, H * d))  # [B, H, T, d] -> [B, T, D]

    def _kv(self, q, k, v, ctx: AttnCtx, eager: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """k and v [B, Hkv, k, d] as the maths reads them: repeated per query group, [B, H, k, d], unless the fused
        kernel reads grouped heads itself (the same numbers, no copy)."""
        if self.group == 1 or (not eager and ctx.grouped(q, k, v, ctx.bias, self.scale)):
            return k, v
        return repeat_kv(k, self.group), repeat_kv(v, self.group)  # [B, Hkv, k, d] -> [B, H, k, d]

    def _ran(self, ctx: AttnCtx, q, k, v, eager: bool) -> tuple[str, str]:
        """The backend and the kernel that computed this site's pattern (a record's backend, kernel)."""
        if not eager:
            return ctx.backend, ctx.kernel(q, k, v, ctx.bias, self.scale)
        if ctx.backend == "eager":
            return "eager", "eager"
        if self.softcap is not None:
            return "eager", "eager (soft-capped scores: SDPA has no tanh cap)"
        return "eager", "eager (a pattern hook is on the path)"

    def forward_split(self, xq: torch.Tensor, xk: torch.Tensor, xv: torch.Tensor, ctx: AttnCtx) -> torch.Tensor:
        """forward (inside a capture) from one normed input per query head, xq [B, T, H, D], and per k/v head,
        xk and xv [B, T, Hkv, D]: head h's q reads xq[:, :, h] only (self-attention)."""
        if self.cross:
            raise ValueError("split inputs are for self-attention; cross-attention reads the encoder's output")
        w, b = self.qkv_weights()  # [H·d, D], [Hkv·d, D], [Hkv·d, D]
        q, k, v = (self._per_head(x, wi, bi) for x, wi, bi in zip((xq, xk, xv), w, b))
        cap = hooks.active()
        return self._out_captured(self._forward_captured(*self._finish(q, k, v, ctx), ctx, cap), cap)

    def _per_head(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """Each head's projection of its own input: x [B, T, n, D], w [n·d, D] -> [B, n, T, d]."""
        n = x.shape[2]
        y = torch.einsum("btne,nde->bntd", x, w.view(n, self.d_head, -1))  # w: [n·d, D] -> [n, d, D]
        return y if b is None else y + b.view(n, 1, self.d_head)

    def _out_captured(self, z: torch.Tensor, cap: hooks.Capture) -> torch.Tensor:
        """The output projection of z [B, T, H, d], as the fast path computes it. Each head's share (hook_result
        [B, T, H, D], summing with the bias to the output) is computed only when kept or intervened on, beside the
        projection: kept, it leaves the output bit-identical; changed, the output moves by exactly the change."""
        B, T, H, d = z.shape
        out = self.out(z.reshape(B, T, H * d))  # [B, T, H, d] -> [B, T, D]
        name = f"{self.site}.hook_result"
        if not cap.touches(name):
            return out
        w = self.out.weight.view(-1, H, d)  # [D, H·d] -> [D, H, d]
        result = torch.einsum("bthd,ehd->bthe", z, w)  # [B, T, H, D]
        if name not in cap.interventions:
            cap.hook(name, result)
            if cap.detach:
                return out
            # kept with gradients: the gradient reaches z through the heads' shares alone (∂/∂result is the gradient
            # on each share), while the value stays the fast path's, bit for bit (x − x.detach() is exactly 0)
            shares = result.sum(2) if self.out.bias is None else result.sum(2) + self.out.bias  # [B, T, D]
            return out.detach() + (shares - shares.detach())
        before = result.clone()  # an intervention may change its argument in place (TransformerLens hooks do)
        return out + (cap.hook(name, result) - before).sum(2)

    def _forward_captured(self, q, k, v, ctx: AttnCtx, cap: hooks.Capture) -> torch.Tensor:
        """z [B, q, H, d] (TransformerLens's layout, after hook_z) with every hook of the site fired."""
        s = self.site
        q, k, v = (_hook_heads(cap, f"{s}.hook_{n}", x) for n, x in (("q", q), ("k", k), ("v", v)))
        k_kv = k  # the record keeps the k/v heads only
        eager = ctx.backend == "eager" or self.softcap is not None or cap.changes_any(self._pattern_names())
        beside = not eager and cap.wants_any(self._pattern_names())  # kept only: eager maths beside the kernel
        k, v = self._kv(q, k, v, ctx, eager or beside)
        scores = pattern = None
        if eager:
            z, scores, pattern = eager_attention(q, k, v, explicit_mask(ctx.mask, ctx.is_causal, q, k), ctx.bias,
                                                 self.scale, s, cap, self.softcap, ctx.dead_rows)
        else:
            z = fused_attention(q, k, v, ctx.mask, ctx.bias, self.scale, ctx.is_causal, ctx.backend,
                                ctx.dead_rows)
            if beside:
                _, scores, pattern = eager_attention(q, k, v, explicit_mask(ctx.mask, ctx.is_causal, q, k),
                                                     ctx.bias, self.scale, s, cap, self.softcap, ctx.dead_rows)
        z = cap.hook(f"{s}.hook_z", z.transpose(1, 2))  # [B, H, q, d] -> [B, q, H, d]
        if cap.keep_records:
            # Scores are kept only when an intervention changed them; otherwise scale·q·kᵀ + bias is
            # recomputed from q and k on demand (holding a second [B, H, T, T] per layer made an eager
            # capture 1.3–1.9× slower than transformers' output_attentions at T = 512–2048).
            if f"{s}.hook_attn_scores" not in cap.interventions:
                scores = None
            self._keep(cap, ctx, q, k_kv, *self._ran(ctx, q, k, v, eager), scores, pattern)
        return z

    def _pattern_names(self) -> list[str]:
        return [f"{self.site}.{p}" for p in self.PATTERN_HOOKS]

    def _keep(self, cap: hooks.Capture, ctx: AttnCtx, q, k, backend, kernel, scores, pattern) -> None:
        """This site's record into cap: q [B, H, q, d], k [B, Hkv, k, d], the bias and an eager run's scores and pattern
        stay tensors where they are (a GPU's: no copy, no sync), detached, until the record is read."""
        if not cap.keep_patterns:
            scores = pattern = None
        cap.add(self.site, self._record, _frozen(q), _frozen(k), ctx.q_offset, ctx.record_mask(k.shape[2]),
                _frozen(ctx.bias), backend, kernel, _frozen(scores), _frozen(pattern))

    def _record(self, q, k, q_offset, mask, bias, backend, kernel, scores, pattern) -> AttentionRecord:
        return AttentionRecord(
            site=self.site, stack=self.stack, layer=self.layer, attn_type="cross" if self.cross else "self",
            backend=backend, kernel=kernel, scale=self.scale, q_offset=q_offset, q=q, k=k, mask=mask, bias=bias,
            scores_full=scores, pattern_full=pattern, softcap=self.softcap,
        )


def _frozen(t: torch.Tensor | None) -> torch.Tensor | None:
    """t without its autograd history (t itself when it has none)."""
    return t.detach() if t is not None and t.requires_grad else t
