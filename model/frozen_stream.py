"""The residual stream as a sum of named parts, every norm on the way taken with its scale frozen.

A norm is linear once its divisor is fixed at the value the actual input gives at each position: LayerNorm(x) =
Σ_c (c − mean c)/σ·γ + β and RMSNorm(x) = Σ_c c/rms·γ over parts c summing to x, with σ (or rms) of x itself (the
convention of direct logit attribution). With it, each block's residual rule maps a sum of parts to a sum of parts
exactly:

* pre, parallel: x + Σ_h head_h + b_O + mlp_out (each head's z_h·W_O[h], the output bias, the MLP's output);
* peri (Gemma 2): the sub-layer's output norm frozen on that output, its β a part of its own;
* post (BERT): the norm after each sub-layer frozen on the whole stream, so every earlier part passes through it
  (centred, divided by its σ, times γ) and its β is a new part.

Parts are float64 [T, D] per name, in the order they were written. An MoE layer is one part (its mixed output).
"""

from __future__ import annotations

import torch
import torch.nn as nn

Parts = dict[str, torch.Tensor]  # name -> float64 [T, D]


class FrozenNorm:
    """`norm` (LayerNorm, RMSNorm or Identity) made linear at the actual input x [..., D]: `self(c)` is the part
    that c of x becomes, `bias` the β it adds (None without one), `scale` [..., 1] the frozen σ or rms."""

    def __init__(self, norm: nn.Module, x: torch.Tensor):
        x = x.double()
        self.centre = isinstance(norm, nn.LayerNorm)
        if isinstance(norm, nn.Identity):
            self.scale = torch.ones_like(x[..., :1])
        elif self.centre:
            self.scale = (x.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
        elif isinstance(norm, nn.RMSNorm):
            eps = norm.eps if norm.eps is not None else torch.finfo(torch.float32).eps
            self.scale = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        else:
            raise TypeError(f"no frozen form for {type(norm).__name__}")
        w = getattr(norm, "weight", None)
        self.weight = None if w is None else w.detach().double()
        b = getattr(norm, "bias", None)
        self.bias = None if b is None else b.detach().double()

    def __call__(self, c: torch.Tensor) -> torch.Tensor:
        c = c.double()
        if self.centre:
            c = c - c.mean(-1, keepdim=True)
        c = c / self.scale
        return c if self.weight is None else c * self.weight


def through(norm: nn.Module, parts: Parts, bias_name: str) -> Parts:
    """Every part through `norm` frozen on their sum; its β (when it has one) added as `bias_name`."""
    frozen = FrozenNorm(norm, sum(parts.values()))
    out = {name: frozen(c) for name, c in parts.items()}
    if frozen.bias is not None:
        out[bias_name] = frozen.bias.expand_as(next(iter(out.values()))).clone()
    return out


def embed_parts(embed: nn.Module, tok: torch.Tensor, pos: torch.Tensor | None, type_ids: torch.Tensor | None,
                site: str = "") -> Parts:
    """The stream entering block 0 of an `Embeddings` module: `embed` (token embeddings as hook_embed holds them,
    [T, E]), `pos_embed` (learned or sinusoidal, [T, E]) and `type_embed` (BERT's token types), then the embedding
    norm (frozen) and the projection to d_model (its bias a part) when the model has them."""
    if getattr(embed, "project_tokens", False):  # OPT-350m: the tokens projected, then the d_model-wide positions
        parts = {"embed": tok.double() @ embed.project.weight.detach().double().T}  # [T, E] @ [E, D] -> [T, D]
        if pos is not None:
            parts["pos_embed"] = pos.double().expand_as(parts["embed"])
        return parts
    parts = {"embed": tok.double()}
    if pos is not None:
        parts["pos_embed"] = pos.double().expand_as(parts["embed"])
    if embed.types is not None:
        tt = type_ids if type_ids is not None else torch.zeros(tok.shape[0], dtype=torch.long, device=tok.device)
        parts["type_embed"] = embed.types.weight.detach().double()[tt]  # [T, E]
    parts = through(embed.norm, parts, f"{site}embed.norm.bias")
    if isinstance(embed.project, nn.Linear):
        w = embed.project.weight.detach().double()  # [D, E]
        parts = {name: c @ w.T for name, c in parts.items()}
        if embed.project.bias is not None:
            parts[f"{site}embed.project.bias"] = embed.project.bias.detach().double().expand(tok.shape[0], -1).clone()
    return parts


def attn_parts(attn: nn.Module, z: torch.Tensor) -> Parts:
    """A self-attention's output as parts: `{site}.head.{h}` = z_h·W_O[h] for each head and
    `{site}.bias` (the output bias b_O, when there is one), all [T, D]. z is one sequence of hook_z: [T, H, d]."""
    T, H, d = z.shape
    w = attn.out.weight.detach().double().view(-1, H, d)  # [D, H·d] -> [D, H, d]
    heads = torch.einsum("thd,ehd->hte", z.double(), w)  # [H, T, D]
    parts = {f"{attn.site}.head.{h}": heads[h] for h in range(H)}
    if attn.out.bias is not None:
        parts[f"{attn.site}.bias"] = attn.out.bias.detach().double().expand(T, -1).clone()
    return parts


def block_parts(block: nn.Module, parts: Parts, attn: Parts, mlp_out: torch.Tensor) -> Parts:
    """The stream after `block` (its residual rule, block.norm_rule) from the stream before it (`parts`), its
    attention's parts and its MLP's output [T, D] (hook_mlp_out: before any norm on its way back)."""
    s, rule = block.site, block.norm_rule
    mlp = {f"{s}.mlp": mlp_out.double()}
    if rule in ("pre", "parallel"):
        return parts | attn | mlp
    if rule == "peri":
        return parts | through(block.ln_attn_out, attn, f"{s}.ln_attn_out.bias") | \
            through(block.ln_mlp_out, mlp, f"{s}.ln_mlp_out.bias")
    if rule == "post":
        mid = through(block.ln_attn_out, parts | attn, f"{s}.ln_attn_out.bias")
        return through(block.ln_mlp_out, mid | mlp, f"{s}.ln_mlp_out.bias")
    raise ValueError(f"unknown residual rule {rule!r}")
