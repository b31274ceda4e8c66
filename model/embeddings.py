"""A stack's input: token embeddings with learned or sinusoidal positions (offset, scaled, factorised), and
BERT's masked-LM head tied to them."""

from __future__ import annotations

import torch
import torch.nn as nn
from attnlab.model import hooks
from attnlab.model.config import ModelConfig
from attnlab.model.norms import LayerNorm, norm_hook_names, run_norm
from attnlab.model.positions import sinusoidal_table


class Embeddings(nn.Module):
    """Token (× embed_scale) + position (+ token type) embeddings, optionally normalised (BERT), of width
    d_embed projected to d_model when factorised (ALBERT, ELECTRA: the sum; OPT-350m, cfg.project_tokens: the
    token embeddings alone, before the positions). Position p reads row p + pos_offset."""

    HOOKS = ("hook_embed", "hook_pos_embed")  # [B, T, E] token embeddings; [B, T, E|D] positions (learned, sinusoidal)
    NORM = "embed.ln"  # TransformerLens's BertEmbed.ln: embed.ln.hook_scale, embed.ln.hook_normalized (BERT)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        e = cfg.d_embed or cfg.d_model
        p = cfg.d_model if cfg.project_tokens else e  # the positions' width
        self.tok = nn.Embedding(cfg.vocab_size, e)
        n_pos = cfg.max_len + cfg.pos_offset
        if cfg.positional == "learned":
            self.pos = nn.Embedding(n_pos, p)
        elif cfg.positional == "sinusoidal":
            self.register_buffer("sin_table", sinusoidal_table(n_pos, p), persistent=False)
        self.types = nn.Embedding(cfg.type_vocab_size, e) if cfg.type_vocab_size else None
        self.norm = LayerNorm(e, eps=cfg.norm_eps) if cfg.embed_norm else nn.Identity()  # hooks: embed.ln (TL)
        self.project = nn.Linear(e, cfg.d_model, bias=not cfg.project_tokens) if cfg.d_embed else nn.Identity()
        self.project_tokens = cfg.project_tokens
        self.positional, self.offset, self.scale = cfg.positional, cfg.pos_offset, cfg.embed_scale  # scale: Gemma √d
        self.pad_id = cfg.pad_position_id
        self.site = ""  # the stack's name, set by name_sites()

    @property
    def hook_points(self) -> tuple[str, ...]:
        return self.HOOKS if self.positional in ("learned", "sinusoidal") else self.HOOKS[:1]

    def hook_names(self) -> list[str]:
        norm = [] if self.project_tokens else norm_hook_names(self.norm, hooks.point(self.site, self.NORM))
        return [*(hooks.point(self.site, p) for p in self.hook_points), *norm]

    def forward(self, tokens, positions, token_type_ids=None):
        cap = hooks.active()
        x = self.tok(tokens)  # [B, T, E]
        if self.scale != 1.0:
            x = x * self.scale
        if cap is not None:
            x = cap.hook(hooks.point(self.site, "hook_embed"), x)
        if self.project_tokens:
            x = self.project(x)  # [B, T, E] -> [B, T, D]
        if self.positional in ("learned", "sinusoidal"):
            positions = self.skip_padding(tokens, positions)
            p = self.pos(positions + self.offset) if self.positional == "learned" else \
                self.sin_table[positions + self.offset]  # [T, E] ([B, T, E] in a padded batch or with a padding id)
            if cap is not None:
                name = hooks.point(self.site, "hook_pos_embed")
                p = cap.hook(name, batched(cap, name, p, x))
            x = x + p
        if self.types is not None:
            tt = token_type_ids if token_type_ids is not None else torch.zeros_like(tokens)
            x = x + self.types(tt)
        if self.project_tokens:
            return x
        return self.project(run_norm(self.norm, x, hooks.point(self.site, self.NORM)))  # [B, T, E] -> [B, T, D]


    def skip_padding(self, tokens, positions):
        """positions [T] or [B, T] (a padded batch); RoBERTa's [B, T]: its padding id at −1 (the padding row), every
        other token at the count of non-padding tokens before it (= positions where there is no padding)."""
        if self.pad_id is None:
            return positions
        keep = tokens != self.pad_id  # [B, T]; no check for "none": a forward never waits on its device
        counted = torch.cumsum(keep, dim=1) - 1 + positions[..., :1]  # [B, T]
        return torch.where(keep, counted, torch.full_like(counted, -1))


def batched(cap: hooks.Capture, name: str, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Positions [T, E] (or already [B, T, E]) with x's batch axis, as TransformerLens's hook_pos_embed holds them:
    a view (expand, no copy), or a copy when an intervention on hook `name` may change it in place."""
    pos = pos.expand(*x.shape[:-1], pos.shape[-1])  # [T, E] -> [B, T, E]
    return pos.clone() if name in cap.interventions else pos


class MLMHead(nn.Module):
    """BERT's masked-LM head: dense → the layers' activation (GELU, tanh-GELU or ReLU; GELU otherwise) →
    LayerNorm → tied decoder + bias (to the embedding width d_embed when factorised: ALBERT, ELECTRA's
    generator)."""

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding):
        super().__init__()
        e = cfg.d_embed or cfg.d_model
        self.dense = nn.Linear(cfg.d_model, e)
        self.act = nn.ReLU() if cfg.mlp == "relu" else nn.GELU(
            approximate="tanh" if cfg.mlp in ("gelu_tanh", "geglu") else "none")
        self.norm = nn.LayerNorm(e, eps=cfg.norm_eps)
        self.decoder = nn.Linear(e, cfg.vocab_size)
        self.decoder.weight = embedding.weight

    def forward(self, x):
        return self.decoder(self.norm(self.act(self.dense(x))))
