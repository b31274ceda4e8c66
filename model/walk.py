"""One decoder's own path, step by step (the Block page's walk): the model's modules — embeddings, norms,
attention, MLP, LM head — called one at a time with the residual rules written out (pre, post, peri, parallel),
each stage handed to a callback. Its logits equal the forward pass's (analysis/machinery/block_walk.py checks)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from attnlab.model.masks import as_spec
from attnlab.model.readout import Readout


def _sublayer(rule: str, x, f, n_in, n_out):
    """(new stream, what was added before any output norm) under the residual rule."""
    if rule == "pre":
        d = f(n_in(x))
        return x + d, d
    if rule == "post":
        d = f(x)
        return n_out(x + d), d
    d = n_out(f(n_in(x)))  # peri: the output norm is part of what is added
    return x + d, d


def walk_stream(net, ids: torch.Tensor, keep: Callable[[int, str, torch.Tensor], None]) -> torch.Tensor:
    """The step-by-step forward of a Decoder `net` over ids [1, T] (eager attention, the model's own mask): its
    logits [1, T, V]; keep(layer, name, stream [1, T, D]) sees each stage (layer −1: embeddings, L: the end)."""
    cfg = net.cfg
    T = ids.shape[1]
    pos = torch.arange(T, device=ids.device)
    if cfg.project_tokens:  # OPT-350m: the d_embed-wide embedding is projected to d_model before the positions
        keep(-1, "token embedding (projected)", net.embed.project(net.embed.tok(ids)))  # [1, T, E] -> [1, T, D]
    else:
        keep(-1, "token embedding", net.embed.tok(ids))
    x = net.embed(ids, pos)  # [1, T, D]
    keep(-1, "h₀ = embedding + position" if cfg.positional in ("learned", "sinusoidal") else "h₀ = embedding", x)
    ctxs = net.layer_ctxs(True, as_spec(None, net.default_mask), T, 0, None, "eager", None, pos)
    for i, (blk, ctx) in enumerate(zip(net.blocks, ctxs)):
        if cfg.norm == "parallel":  # attention and MLP both read x; both are added to it
            keep(i, "norm before attention", blk.ln_attn(x))
            a = blk.attn(blk.ln_attn(x), ctx)
            keep(i, "attention output", a)
            keep(i, "norm before MLP", blk.ln_mlp(x))
            m = blk.mlp(blk.ln_mlp(x))
            keep(i, "MLP output", m)
            x = x + a + m
            keep(i, "residual after MLP (attention and MLP added in parallel)", x)
            continue
        if cfg.norm != "post":
            keep(i, "norm before attention", blk.ln_attn(x))
        x, d = _sublayer(cfg.norm, x, lambda h, b=blk, c=ctx: b.attn(h, c), blk.ln_attn, blk.ln_attn_out)
        keep(i, "attention output", d)
        keep(i, "residual after attention" + (" (then normed)" if cfg.norm == "post" else ""), x)
        if cfg.norm != "post":
            keep(i, "norm before MLP", blk.ln_mlp(x))
        x, d = _sublayer(cfg.norm, x, blk.mlp, blk.ln_mlp, blk.ln_mlp_out)
        keep(i, "MLP output", d)
        keep(i, "residual after MLP" + (" (then normed)" if cfg.norm == "post" else ""), x)
    h = net.ln_f(x)
    keep(len(net.blocks), "final norm" if cfg.norm != "post" else "final stream (post-LN: no final norm)", h)
    return Readout(net, net.lm_head).logits(x)  # [1, T, V]: the model's own readout (soft cap, OPT-350m's projection)
