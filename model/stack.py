"""One stack of blocks (embeddings → blocks → final norm) with its masks and position contexts, and the names
of every hook point under a model."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
from attnlab.model import hooks
from attnlab.model.attention import Attention
from attnlab.model.attn_ctx import AttnCtx
from attnlab.model.config import BACKENDS, ModelConfig
from attnlab.model.embeddings import Embeddings
from attnlab.model.inputs import InputError
from attnlab.model.layers import MLP, Block
from attnlab.model.masks import BIDIRECTIONAL, CAUSAL, MaskSpec, as_spec, build_mask
from attnlab.model.moe import MoE
from attnlab.model.norms import has_hooks, make_norm, norm_hook_names
from attnlab.model.positions import alibi_bias, alibi_slopes
from attnlab.model.relative_bias import RelativeBias
from attnlab.model.rope import layer_cos_sin, local_rope


class ContextLengthError(ValueError):
    """The input is longer than the model's context."""


@dataclass
class ModelOutput:
    logits: torch.Tensor | None  # [B, T, V] (None for an encoder without a head)
    hidden: torch.Tensor  # [B, T, D] last hidden states (after the final norm, if any)


class Stack(nn.Module):
    """Embeddings → blocks → final norm; the base of Encoder and Decoder."""

    stack_name = ""
    FINAL_NORM = "ln_final"  # TransformerLens's name of the final norm: ln_final.hook_scale, ln_final.hook_normalized

    def __init__(self, cfg: ModelConfig, n_layers: int, cross: bool, default_mask: MaskSpec,
                 embed: nn.Module | None = None):
        super().__init__()
        self.cfg, self.default_mask = cfg, default_mask
        self.embed = embed if embed is not None else Embeddings(cfg)
        self.blocks = nn.ModuleList(Block(cfg, cross) for _ in range(n_layers))
        self.ln_f = make_norm(cfg) if cfg.norm in ("pre", "peri", "parallel") else nn.Identity()
        self._rope_freqs: dict = {}  # RoPE's frequencies per device and kind (rope.layer_cos_sin)
        if cfg.positional == "alibi":
            self.register_buffer("alibi_slopes", alibi_slopes(cfg.n_heads), persistent=False)
        elif cfg.positional == "relative":  # T5: one bias table per stack, shared by its self-attention layers
            self.rel_bias = RelativeBias(cfg.rel_buckets, cfg.rel_max_distance, cfg.n_heads,
                                         bidirectional=default_mask is BIDIRECTIONAL)
        # layers with the sliding window when only some have it (Gemma 2); the others see every earlier key
        self.full_layers = () if cfg.sliding_layers is None else \
            tuple(i for i in range(n_layers) if i not in cfg.sliding_layers)
        for i, blk in enumerate(self.blocks):
            for m in blk.modules():
                if isinstance(m, (Attention, MoE)):
                    m.stack, m.layer = self.stack_name, i
                if isinstance(m, Attention) and cfg.scale_by_layer:  # GPT-2's scale_attn_by_inverse_layer_idx
                    m.scale = cfg.score_scale / (i + 1)

    def run(self, tokens, *, mask=None, attention_mask=None, token_type_ids=None, cache=None, backend=None,
            memory=None, memory_mask=None) -> torch.Tensor:
        """Hidden states [B, T, D] after the final norm."""
        cfg = self.cfg
        backend = _backend(backend or cfg.backend)
        B, T = tokens.shape
        offset = len(cache) if cache is not None else 0
        if offset + T > cfg.max_len:
            raise ContextLengthError(
                f"the input has {offset + T} tokens; this model's context is {cfg.max_len} tokens")
        spec = as_spec(mask, self.default_mask)
        if cache is not None and not spec.causal_like and offset + T > T:
            raise ValueError(f"a KV cache needs a causal mask; got {spec.kind!r}")
        device = tokens.device
        pos = torch.arange(offset, offset + T, device=device)
        x = self.embed(tokens, real_positions(pos, attention_mask), token_type_ids)
        ctxs = self.layer_ctxs(mask is None, spec, T, offset, attention_mask, backend, cache, pos)
        cross_ctx = self.cross_ctx(T, memory, memory_mask, backend, device, cache, offset)
        for i, (blk, c) in enumerate(zip(self.blocks, ctxs)):
            x = blk(x, c, cross_ctx)
            hooks.step_done(i + 1, len(self.blocks))
        if cache is not None:
            cache.advance(T)
        return self.final_norm(x)

    def cross_ctx(self, T: int, memory, memory_mask, backend: str, device=None, cache=None,
                  offset: int = 0) -> AttnCtx | None:
        """The cross-attention context of T queries reading the encoder's output `memory` [B, S, D] (each batch row
        its own; `memory_mask` bool [B, S], True = a real source token), or the cache's source keys; None without
        either."""
        if memory is None and not (cache is not None and cache.cross):
            return None
        S = memory.shape[1] if memory is not None else next(iter(cache.cross.values()))[0].shape[2]
        cmask = build_mask(BIDIRECTIONAL, T, S, 0, memory_mask, device)
        return AttnCtx(backend, cmask, q_offset=offset, cache=cache, memory=memory, dead_rows=memory_mask is not None)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        """The final norm, with its hooks (ln_final.hook_scale, ln_final.hook_normalized) when the stack has one."""
        cap = hooks.active()
        if cap is None or cap.records_only or not has_hooks(self.ln_f):
            return self.ln_f(x)
        return self.ln_f.forward_hooked(x, cap, hooks.point(self.site, self.FINAL_NORM))

    def layer_ctxs(self, own: bool, spec, T, offset, attention_mask, backend, cache, pos) -> list[AttnCtx]:
        """Each block's self-attention context: `spec` in every layer, except that the model's own mask (`own`)
        is causal in the layers cfg.sliding_layers leaves out (Gemma 2's global layers); each layer's RoPE (Gemma
        3's local one on its sliding layers). Layers alike share one context."""
        made: dict[tuple[bool, bool], AttnCtx] = {}

        def ctx(i: int) -> AttnCtx:
            key = (own and i in self.full_layers, local_rope(self.cfg, i))
            if key not in made:
                made[key] = self._self_ctx(CAUSAL if key[0] else spec, T, offset, attention_mask, backend, cache, pos,
                                           layer=i)
            return made[key]

        return [ctx(i) for i in range(len(self.blocks))]

    def _self_ctx(self, spec, T, offset, attention_mask, backend, cache, pos, layer: int = 0) -> AttnCtx:
        k_len = offset + T
        device = pos.device
        mask = build_mask(spec, T, k_len, offset, attention_mask, device)
        bias = rope = None
        if self.cfg.positional == "alibi":
            bias = alibi_bias(self.alibi_slopes, pos, torch.arange(k_len, device=device))  # [H, T, k]
        elif self.cfg.positional == "relative":
            bias = self.rel_bias(pos, torch.arange(k_len, device=device))  # [H, T, k]
        elif self.cfg.positional == "rope":
            # k_len: the highest position + 1; float32
            rope = layer_cos_sin(self.cfg, pos, layer, n_positions=k_len, memo=self._rope_freqs)
        square_causal = spec.kind == "causal" and offset == 0 and attention_mask is None
        is_causal = backend != "eager" and square_causal and bias is None and mask is not None and T > 1
        if is_causal:
            mask = None  # SDPA's top-left causal equals bottom-right when q = k
        dead_rows = spec.kind == "custom" or attention_mask is not None  # else every query sees its own key
        return AttnCtx(backend, mask, is_causal, bias, rope, offset, cache, dead_rows=dead_rows)

    def hook_names(self) -> list[str]:
        """Every hook point of this stack in the order they fire, each module's from its own declaration (the
        HOOKS of the embeddings, blocks, attention, MLPs, routers and norms; the final norm's under FINAL_NORM)."""
        final = norm_hook_names(self.ln_f, hooks.point(self.site, self.FINAL_NORM))
        return [*self.embed.hook_names(), *(n for blk in self.blocks for n in blk.hook_names()), *final]

    def blocks_ctx(self, T: int, backend: str | None = None, device=None,
                   attention_mask: torch.Tensor | None = None) -> list[AttnCtx]:
        """Each block's self-attention context in a plain run over T tokens (own mask, no cache, any batch; with
        `attention_mask` bool [B, T], each row's real tokens): what the blocks read when they run one at a time
        (activation patching starts runs at a chosen block)."""
        pos = torch.arange(T, device=device)
        return self.layer_ctxs(True, self.default_mask, T, 0, attention_mask, _backend(backend or self.cfg.backend),
                               None, pos)


def hook_names(root: nn.Module) -> list[str]:
    """Every hook point under `root`, stack by stack in forward order."""
    return [n for m in root.modules() if isinstance(m, Stack) for n in m.hook_names()]


def split_hook_names(root: nn.Module) -> list[str]:
    """The hooks a run with split inputs adds under `root` (each block's Attention.SPLIT_HOOKS, Block.SPLIT_HOOKS)."""
    return [f"{site}.{p}" for m in root.modules() if isinstance(m, Block)
            for site, ps in ((m.attn.site, Attention.SPLIT_HOOKS), (m.site, Block.SPLIT_HOOKS)) for p in ps]


def check_hook_names(root: nn.Module, names, split: bool = False) -> None:
    """One-line InputError when a name in `names` is no hook point of `root` (an intervention on a misspelt or
    absent hook would otherwise change nothing, silently)."""
    known = set(hook_names(root)) | (set(split_hook_names(root)) if split else set())
    for n in names:
        if n not in known:
            raise InputError(f"{n} is not a hook of this model (lm.model.hook_names() lists them)")



def real_positions(pos: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The positions of T tokens `pos` [T]; with a padding mask [B, k] over every key so far (the last T are these
    tokens), each row's count of real tokens before each one [B, T]: padding on the left does not move a row's
    positions, as in a run of its own (padding's own positions are clamped to 0; nothing attends to them)."""
    if attention_mask is None:
        return pos
    counted = attention_mask.to(device=pos.device, dtype=torch.long).cumsum(1) - 1  # [B, k]
    return counted[:, -pos.shape[0]:].clamp(min=0)  # [B, T]

def _backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    return backend


def name_sites(root: nn.Module) -> None:
    """Name every hooked module from its module path (e.g. 'decoder.blocks.1.cross_attn'); a stack's embeddings
    take the stack's name; a MoE's experts stay unhooked."""
    for name, m in root.named_modules():
        if isinstance(m, (Attention, MoE, Block, Stack)):
            m.site = name
        if isinstance(m, Stack):
            m.embed.site = name
        if isinstance(m, MLP):
            m.site = None if ".experts." in name or name.endswith(".shared") else name


def init_weights(module: nn.Module) -> None:
    """GPT-2 style: N(0, 0.02) weights, zero biases, unit norms."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
