"""Encoder, Decoder, EncoderDecoder and ViT, built by composition from the same stack of blocks."""

from __future__ import annotations

import torch
import torch.nn as nn
from attnlab.model import hooks
from attnlab.model.cache import KVCache
from attnlab.model.config import ModelConfig
from attnlab.model.embeddings import MLMHead
from attnlab.model.inputs import Inputs
from attnlab.model.masks import BIDIRECTIONAL, CAUSAL, MaskSpec, as_spec
from attnlab.model.patches import PatchEmbed
from attnlab.model.stack import (
    ContextLengthError,
    ModelOutput,
    Stack,
    _backend,
    hook_names,
    init_weights,
    name_sites,
)

__all__ = ["ContextLengthError", "Decoder", "Encoder", "EncoderDecoder", "ViT", "build_model"]
UNEMBED_ROWS = 512  # rows of a long text's unembedding computed between two pauses (Decoder.unembed)


class Decoder(Stack):
    """Causal language model: embeddings + positions → blocks → norm → LM head. Its own mask is causal,
    or sliding-window when cfg.sliding_window is set (Mistral)."""

    stack_name = "decoder"
    UNEMBED, UNEMBED_HOOKS = "unembed", ("hook_in", "hook_out")  # TransformerLens's Unembed: [B, T, D] in, [B, T, V] out

    def __init__(self, cfg: ModelConfig, cross: bool = False):
        own = CAUSAL if cfg.sliding_window is None else MaskSpec("sliding_window", window=cfg.sliding_window)
        super().__init__(cfg, cfg.dec_layers if cross else cfg.n_layers, cross, own)
        self.lm_head = None
        # OPT-350m: the final hidden states projected back to the token embeddings' width before the head
        self.project_out = nn.Linear(cfg.d_model, cfg.d_embed, bias=False) if cfg.project_tokens else None
        if cfg.output_head_kind == "lm":
            self.lm_head = nn.Linear(cfg.d_embed if cfg.project_tokens else cfg.d_model, cfg.vocab_size,
                                     bias=cfg.lm_head_bias)
        self.logit_softcap = cfg.logit_softcap  # Gemma 2: logits → cap·tanh(logits/cap)
        self.logit_scale = cfg.logit_scale  # T5 (tied): the final hidden states × d_model^-0.5 before the LM head
        init_weights(self)
        if self.lm_head is not None and cfg.tie_embeddings:
            self.lm_head.weight = self.embed.tok.weight
        name_sites(self)

    def forward(self, tokens, *, cache: KVCache | None = None, mask=None, attention_mask=None,
                token_type_ids=None, backend=None, memory=None, memory_mask=None) -> ModelOutput:
        h = self.run(tokens, mask=mask, attention_mask=attention_mask, token_type_ids=token_type_ids,
                     cache=cache, backend=backend, memory=memory, memory_mask=memory_mask)
        if self.project_out is not None:
            h = self.project_out(h)  # [B, T, D] -> [B, T, E]: the last hidden state, as transformers returns it
        logits = None
        if self.lm_head is not None:
            logits = self.unembed(h * self.logit_scale if self.logit_scale != 1.0 else h)  # [B, T, V]
        if logits is not None and self.logit_softcap is not None:
            logits = torch.tanh(logits / self.logit_softcap) * self.logit_softcap
        return ModelOutput(logits, h)

    def unembed(self, h: torch.Tensor) -> torch.Tensor:
        """lm_head(h) [B, T, V], UNEMBED_ROWS rows at a time while a server pauses between steps (hooks.by_rows):
        a 5,600-token SmolLM2 text's [T, 49,152] product is seconds of work, too long to hold the lock for. Inside a
        capture that keeps or changes them, TransformerLens's unembed.hook_in (h [B, T, D], what the head reads)
        and unembed.hook_out (the logits [B, T, V], before any softcap, as TL's) fire around it."""
        cap = hooks.active()
        names = () if cap is None or cap.records_only else self.unembed_hooks()
        touched = bool(names) and cap.wants_any(names)
        if touched:
            h = cap.hook(names[0], h)
        logits = hooks.by_rows(self.lm_head, h, self.lm_head.out_features, UNEMBED_ROWS)
        return cap.hook(names[1], logits) if touched else logits

    def unembed_hooks(self) -> tuple[str, ...]:
        """unembed.hook_in and unembed.hook_out under this stack's site (none without an LM head)."""
        if self.lm_head is None:
            return ()
        return tuple(hooks.point(self.site, f"{self.UNEMBED}.{p}") for p in self.UNEMBED_HOOKS)

    def hook_names(self) -> list[str]:
        return [*super().hook_names(), *self.unembed_hooks()]

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
        dec = {"d_mlp": cfg.dec_d_mlp} if cfg.dec_d_mlp is not None else {}  # BART's decoder_ffn_dim
        self.decoder = Decoder(cfg.replace(output_head="lm", **dec), cross=True)
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
        self.head_dist = nn.Linear(cfg.d_model, cfg.n_classes) if cfg.distill_head else None  # DeiT's, on [DIST]
        init_weights(self)
        for name, p in self.embed.named_parameters():  # patch projection, [CLS], positions: N(0, 0.02)
            if name != "proj.bias" and not name.startswith("norm."):
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
        logits = self.head(h[:, 0]) if self.head is not None else None  # [B, n_classes]
        if self.head_dist is not None:  # DeiT with teacher: the mean of both classifiers
            logits = (logits + self.head_dist(h[:, 1])) / 2
        return ModelOutput(logits, h)

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
