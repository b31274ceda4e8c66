"""Encoder, Decoder, EncoderDecoder and ViT, built by composition from the same stack of blocks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from model import hooks
from model.attention import Attention, AttnCtx
from model.cache import KVCache
from model.config import BACKENDS, ModelConfig
from model.hooks import BLOCK_HOOKS, CROSS_HOOKS, FINAL_HOOK, HOOK_POINTS
from model.inputs import Inputs
from model.layers import MLP, Block
from model.masks import BIDIRECTIONAL, CAUSAL, MaskSpec, as_spec, build_mask
from model.moe import ROUTER_HOOKS, MoE
from model.norms import make_norm
from model.patches import PatchEmbed
from model.positions import alibi_bias, alibi_slopes, sinusoidal_table
from model.rope import rope_cos_sin, rope_inv_freq


class ContextLengthError(ValueError):
    """The input is longer than the model's context."""


@dataclass
class ModelOutput:
    logits: torch.Tensor | None  # [B, T, V] (None for an encoder without a head)
    hidden: torch.Tensor  # [B, T, D] last hidden states (after the final norm, if any)


class Embeddings(nn.Module):
    """Token + position (+ token type) embeddings, optionally normalised (BERT)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        if cfg.positional == "learned":
            self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        elif cfg.positional == "sinusoidal":
            self.register_buffer("sin_table", sinusoidal_table(cfg.max_len, cfg.d_model), persistent=False)
        self.types = nn.Embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) if cfg.embed_norm else nn.Identity()
        self.positional = cfg.positional
        self.scale = cfg.embed_scale  # Gemma: √d_model
        self.site = ""  # the stack's name, set by name_sites()

    @property
    def hook_points(self) -> tuple[str, ...]:
        return ("hook_embed", "hook_pos_embed") if self.positional in ("learned", "sinusoidal") else ("hook_embed",)

    def forward(self, tokens, positions, token_type_ids=None):
        cap = hooks.active()
        x = self.tok(tokens)  # [B, T, D]
        if self.scale != 1.0:
            x = x * self.scale
        if cap is not None:
            x = cap.hook(hooks.point(self.site, "hook_embed"), x)
        if self.positional in ("learned", "sinusoidal"):
            p = self.pos(positions) if self.positional == "learned" else self.sin_table[positions]  # [T, D]
            x = x + (p if cap is None else cap.hook(hooks.point(self.site, "hook_pos_embed"), p))
        if self.types is not None:
            tt = token_type_ids if token_type_ids is not None else torch.zeros_like(tokens)
            x = x + self.types(tt)
        return self.norm(x)


class Stack(nn.Module):
    """Embeddings → blocks → final norm; the base of Encoder and Decoder."""

    stack_name = ""

    def __init__(self, cfg: ModelConfig, n_layers: int, cross: bool, default_mask: MaskSpec,
                 embed: nn.Module | None = None):
        super().__init__()
        self.cfg, self.default_mask = cfg, default_mask
        self.embed = embed if embed is not None else Embeddings(cfg)
        self.blocks = nn.ModuleList(Block(cfg, cross) for _ in range(n_layers))
        self.ln_f = make_norm(cfg) if cfg.norm in ("pre", "peri", "parallel") else nn.Identity()
        if cfg.positional == "alibi":
            self.register_buffer("alibi_slopes", alibi_slopes(cfg.n_heads), persistent=False)
        # layers with the sliding window when only some have it (Gemma 2); the others see every earlier key
        self.full_layers = () if cfg.sliding_layers is None else \
            tuple(i for i in range(n_layers) if i not in cfg.sliding_layers)
        for i, blk in enumerate(self.blocks):
            for m in blk.modules():
                if isinstance(m, (Attention, MoE)):
                    m.stack, m.layer = self.stack_name, i

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
        x = self.embed(tokens, pos, token_type_ids)
        ctxs = self.layer_ctxs(mask is None, spec, T, offset, attention_mask, backend, cache, pos)
        cross_ctx = None
        if memory is not None or (cache is not None and cache.cross):
            S = memory.shape[1] if memory is not None else next(iter(cache.cross.values()))[0].shape[2]
            cmask = build_mask(BIDIRECTIONAL, T, S, 0, memory_mask, device)
            cross_ctx = AttnCtx(backend, cmask, q_offset=offset, cache=cache, memory=memory)
        for blk, c in zip(self.blocks, ctxs):
            x = blk(x, c, cross_ctx)
        if cache is not None:
            cache.advance(T)
        return self.final_norm(x)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        """The final norm, with its hook (ln_final.hook_normalized) when the stack has one."""
        x = self.ln_f(x)
        cap = hooks.active()
        if cap is not None and not isinstance(self.ln_f, nn.Identity):
            x = cap.hook(hooks.point(self.site, FINAL_HOOK), x)
        return x

    def layer_ctxs(self, own: bool, spec, T, offset, attention_mask, backend, cache, pos) -> list[AttnCtx]:
        """Each block's self-attention context: `spec` in every layer, except that the model's own mask (`own`)
        is causal in the layers cfg.sliding_layers leaves out (Gemma 2's global layers)."""
        ctx = self._self_ctx(spec, T, offset, attention_mask, backend, cache, pos)
        if not (own and self.full_layers):
            return [ctx] * len(self.blocks)
        full = self._self_ctx(CAUSAL, T, offset, attention_mask, backend, cache, pos)
        return [full if i in self.full_layers else ctx for i in range(len(self.blocks))]

    def _self_ctx(self, spec, T, offset, attention_mask, backend, cache, pos) -> AttnCtx:
        k_len = offset + T
        device = pos.device
        mask = build_mask(spec, T, k_len, offset, attention_mask, device)
        bias = rope = None
        if self.cfg.positional == "alibi":
            bias = alibi_bias(self.alibi_slopes, pos, torch.arange(k_len, device=device))  # [H, T, k]
        elif self.cfg.positional == "rope":
            rope = rope_cos_sin(pos, rope_inv_freq(self.cfg, pos.device))  # float32 whatever the weights
        square_causal = spec.kind == "causal" and offset == 0 and attention_mask is None
        is_causal = backend != "eager" and square_causal and bias is None and mask is not None and T > 1
        if is_causal:
            mask = None  # SDPA's top-left causal equals bottom-right when q = k
        return AttnCtx(backend, mask, is_causal, bias, rope, offset, cache)

    def hook_names(self) -> list[str]:
        """Every hook point of the model, in module order."""
        return hook_names(self)

    def blocks_ctx(self, T: int, backend: str | None = None, device=None) -> list[AttnCtx]:
        """Each block's self-attention context in a plain run over T tokens (own mask, no cache, any batch): what
        the blocks read when they run one at a time (activation patching starts runs at a chosen block)."""
        pos = torch.arange(T, device=device)
        return self.layer_ctxs(True, self.default_mask, T, 0, None, _backend(backend or self.cfg.backend), None, pos)


def hook_names(root: nn.Module) -> list[str]:
    """Every hook point under `root`, stack by stack in forward order."""
    return [n for m in root.modules() if isinstance(m, Stack) for n in _stack_hooks(m)]


def _stack_hooks(stack: Stack) -> list[str]:
    names = [hooks.point(stack.site, p) for p in stack.embed.hook_points]
    for blk in stack.blocks:
        parallel = getattr(blk, "parallel", False)  # attention and MLP read the same x: no resid_mid
        s, subs = blk.site, [(blk.attn, ("hook_attn_out",) if parallel else ("hook_attn_out", "hook_resid_mid"))]
        if blk.has_cross:
            subs.append((blk.cross_attn, CROSS_HOOKS))
        names.append(f"{s}.{BLOCK_HOOKS[0]}")
        for attn, after in subs:
            names += [f"{attn.site}.{p}" for p in HOOK_POINTS] + [f"{s}.{p}" for p in after]
        mlp = blk.mlp
        names += [f"{mlp.site}.{p}" for p in (ROUTER_HOOKS if isinstance(mlp, MoE) else mlp.hook_points)]
        names += [f"{s}.hook_mlp_out", f"{s}.hook_resid_post"]
    if not isinstance(stack.ln_f, nn.Identity):
        names.append(hooks.point(stack.site, FINAL_HOOK))
    return names


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


class MLMHead(nn.Module):
    """BERT's masked-LM head: dense → GELU → LayerNorm → tied decoder + bias."""

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.act = nn.GELU(approximate="tanh" if cfg.mlp == "gelu_tanh" else "none")
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.decoder = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.decoder.weight = embedding.weight

    def forward(self, x):
        return self.decoder(self.norm(self.act(self.dense(x))))


class Decoder(Stack):
    """Causal language model: embeddings + positions → blocks → norm → LM head. Its own mask is causal,
    or sliding-window when cfg.sliding_window is set (Mistral)."""

    stack_name = "decoder"

    def __init__(self, cfg: ModelConfig, cross: bool = False):
        own = CAUSAL if cfg.sliding_window is None else MaskSpec("sliding_window", window=cfg.sliding_window)
        super().__init__(cfg, cfg.dec_layers if cross else cfg.n_layers, cross, own)
        self.lm_head = None
        if cfg.output_head_kind == "lm":
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.lm_head_bias)
        self.logit_softcap = cfg.logit_softcap  # Gemma 2: logits → cap·tanh(logits/cap)
        init_weights(self)
        if self.lm_head is not None and cfg.tie_embeddings:
            self.lm_head.weight = self.embed.tok.weight
        name_sites(self)

    def forward(self, tokens, *, cache: KVCache | None = None, mask=None, attention_mask=None,
                token_type_ids=None, backend=None, memory=None, memory_mask=None) -> ModelOutput:
        h = self.run(tokens, mask=mask, attention_mask=attention_mask, token_type_ids=token_type_ids,
                     cache=cache, backend=backend, memory=memory, memory_mask=memory_mask)
        logits = self.lm_head(h) if self.lm_head is not None else None
        if logits is not None and self.logit_softcap is not None:
            logits = torch.tanh(logits / self.logit_softcap) * self.logit_softcap
        return ModelOutput(logits, h)

    def forward_inputs(self, inputs: Inputs, *, backend=None, cache: KVCache | None = None, mask=None) -> ModelOutput:
        """One forward over `inputs` (ids, token types)."""
        return self(inputs.ids, cache=cache, mask=mask, attention_mask=inputs.attention_mask,
                    token_type_ids=inputs.type_ids, backend=backend)


class Encoder(Stack):
    """Bidirectional encoder, optionally with BERT's masked-LM head."""

    stack_name = "encoder"

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, cfg.n_layers, False, BIDIRECTIONAL)
        init_weights(self)
        self.mlm = MLMHead(cfg, self.embed.tok) if cfg.output_head_kind == "mlm" else None
        if self.mlm is not None:
            init_weights(self.mlm)
            self.mlm.decoder.weight = self.embed.tok.weight
        name_sites(self)

    def forward(self, tokens, *, attention_mask=None, token_type_ids=None, mask=None, backend=None) -> ModelOutput:
        h = self.run(tokens, mask=mask, attention_mask=attention_mask, token_type_ids=token_type_ids,
                     backend=backend)
        return ModelOutput(self.mlm(h) if self.mlm is not None else None, h)

    def forward_inputs(self, inputs: Inputs, *, backend=None, cache: KVCache | None = None, mask=None) -> ModelOutput:
        """One forward over `inputs` (ids, token types); an encoder has no KV cache."""
        if cache is not None:
            raise ValueError("an encoder has no KV cache")
        return self(inputs.ids, attention_mask=inputs.attention_mask, token_type_ids=inputs.type_ids, mask=mask,
                    backend=backend)


class EncoderDecoder(nn.Module):
    """Encoder over the source; a causal decoder whose cross-attention reads the encoder's output."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg.replace(output_head="none"))
        self.decoder = Decoder(cfg.replace(output_head="lm"), cross=True)
        name_sites(self)

    def encode(self, src, *, src_mask=None, backend=None) -> torch.Tensor:
        return self.encoder(src, attention_mask=src_mask, backend=backend).hidden

    def decode(self, tgt, memory, *, src_mask=None, cache=None, mask=None, backend=None) -> ModelOutput:
        return self.decoder(tgt, cache=cache, mask=mask, backend=backend, memory=memory, memory_mask=src_mask)

    def forward(self, src, tgt, *, src_mask=None, cache=None, mask=None, backend=None) -> ModelOutput:
        memory = self.encode(src, src_mask=src_mask, backend=backend)
        return self.decode(tgt, memory, src_mask=src_mask, cache=cache, mask=mask, backend=backend)

    def forward_inputs(self, inputs: Inputs, *, backend=None, cache: KVCache | None = None, mask=None) -> ModelOutput:
        """One forward over `inputs` (source → target). A cache that already holds the cross-attention
        keys and values skips the encoder."""
        memory = None
        if cache is None or not cache.cross:
            if inputs.src_ids is None:
                raise ValueError("an encoder–decoder needs src ids (the source text)")
            memory = self.encode(inputs.src_ids, src_mask=inputs.src_mask, backend=backend)
        return self.decode(inputs.ids, memory, src_mask=inputs.src_mask, cache=cache, mask=mask, backend=backend)

    def hook_names(self) -> list[str]:
        return hook_names(self)


class ViT(Stack):
    """Vision Transformer (Dosovitskiy et al. 2021): [CLS] + patch tokens with positions → the same bidirectional
    blocks → final norm → a linear classifier on [CLS] (logits [B, n_classes]; None without classes)."""

    stack_name = ""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, cfg.n_layers, False, BIDIRECTIONAL, embed=PatchEmbed(cfg))
        self.head = nn.Linear(cfg.d_model, cfg.n_classes) if cfg.n_classes else None
        init_weights(self)
        for name, p in self.embed.named_parameters():  # patch projection, [CLS], positions: N(0, 0.02)
            if name != "proj.bias":
                nn.init.normal_(p, std=0.02)
        name_sites(self)

    def forward(self, pixels, *, mask=None, backend=None) -> ModelOutput:
        x = self.embed(pixels)  # [B, 1 + N, D]
        T = x.shape[1]
        ctx = self._self_ctx(as_spec(mask, self.default_mask), T, 0, None, _backend(backend or self.cfg.backend),
                             None, torch.arange(T, device=x.device))
        for blk in self.blocks:
            x = blk(x, ctx)
        h = self.final_norm(x)
        return ModelOutput(self.head(h[:, 0]) if self.head is not None else None, h)

    def forward_inputs(self, inputs: Inputs, *, backend=None, cache: KVCache | None = None, mask=None) -> ModelOutput:
        """One forward over `inputs.pixels`; a ViT has no KV cache."""
        if cache is not None:
            raise ValueError("a ViT has no KV cache")
        if inputs.pixels is None:
            raise ValueError("a ViT reads pixels (Inputs.pixels from LoadedModel.encode_image), not token ids")
        return self(inputs.pixels, mask=mask, backend=backend)


def build_model(cfg: ModelConfig) -> nn.Module:
    """The model for cfg.arch."""
    return {"decoder": Decoder, "encoder": Encoder, "encdec": EncoderDecoder, "vit": ViT}[cfg.arch](cfg)
