"""CapturedRun: one forward pass with capture, torch-free and picklable — the tokens, one AttentionRecord
per attention site and a summary of the predictions. The app, the CLI and the long-input page all read it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from attnlab.model.record import AttentionRecord
from attnlab.model.router_record import RouterRecord

MAX_STORED_CELLS = 8_000_000  # above this many stored pattern cells a run keeps q and k only (exact on demand)
GROUP_LABELS = {"self": "self-attention", "encoder": "encoder self-attention",
                "decoder": "decoder self-attention", "cross": "cross-attention (target → source)"}
MATRICES = {"pattern": AttentionRecord.pattern, "scores": AttentionRecord.scores,
            "masked": AttentionRecord.masked_scores, "raw": AttentionRecord.raw_qk}


@dataclass
class CapturedRun:
    """Tokens, records per site (ordered as the forward ran them) and the top-k predictions per position."""

    model: str
    tokens: list[str]  # target (or only) text's labels
    ids: list[int]
    records: dict[str, AttentionRecord]
    backend: str  # the backend asked for; each record says what ran
    src_tokens: list[str] | None = None  # the source text's labels (encoder–decoder)
    src_ids: list[int] | None = None
    mask: tuple = ()  # the mask choice, e.g. ("sliding_window", 4); () = the model's own
    context: int = 0  # the model's context in tokens
    top_ids: np.ndarray | None = None  # int [T, K]
    top_tokens: list[list[str]] | None = None  # [T][K]
    top_probs: np.ndarray | None = None  # float32 [T, K]
    seconds: float = 0.0  # wall time of the forward pass and its capture
    kernels: list[str] = field(default_factory=list)
    routers: dict[str, RouterRecord] = field(default_factory=dict)  # mixture-of-experts routers by site

    def __getitem__(self, site: str) -> AttentionRecord:
        return self.records[site]

    def lazy_above(self, max_cells: int = MAX_STORED_CELLS) -> CapturedRun:
        """This run, its records keeping q and k only (patterns recomputed exactly on demand) when the stored
        patterns hold more than `max_cells` cells."""
        cells = sum(r.stored_cells for r in self.records.values())
        if cells <= max_cells:
            return self
        lazy = {s: replace(r, scores_full=None, pattern_full=None) for s, r in self.records.items()}
        return replace(self, records=lazy)

    @property
    def has_source(self) -> bool:
        """True when a source text is read through cross-attention."""
        return self.src_tokens is not None

    @property
    def n_heads(self) -> int:
        return next(iter(self.records.values())).n_heads

    # -- groups of sites ------------------------------------------------------------------------------
    def groups(self) -> dict[str, list[str]]:
        """Group → sites ordered by layer: 'self' (one stack) or 'encoder', 'decoder', 'cross'."""
        stacks = {r.stack for r in self.records.values() if r.attn_type == "self"}
        out: dict[str, list[str]] = {}
        for site, rec in self.records.items():
            g = "cross" if rec.attn_type == "cross" else rec.stack if len(stacks) > 1 else "self"
            out.setdefault(g, []).append(site)
        return {g: sorted(s, key=lambda x: self.records[x].layer) for g, s in out.items()}

    def sites(self, group: str) -> list[str]:
        return self.groups()[group]

    def group_tokens(self, group: str) -> tuple[list[str], list[str]]:
        """(query-axis tokens, key-axis tokens) of a group."""
        if group == "encoder":
            return self.src_tokens, self.src_tokens
        if group == "cross":
            return self.tokens, self.src_tokens
        return self.tokens, self.tokens

    @property
    def target_group(self) -> str:
        """The self-attention group over the target (or only) text: 'decoder' or 'self'."""
        return "decoder" if "decoder" in self.groups() else "self"

    @property
    def text_group(self) -> str:
        """The self-attention group over the text a reader typed: the source's ('encoder') when there is one."""
        return "encoder" if self.has_source else "self"

    @property
    def text_tokens(self) -> list[str]:
        """The labels of the text_group's tokens (the source's when there is one)."""
        return self.src_tokens if self.has_source else self.tokens

    def layer_records(self, group: str) -> list[AttentionRecord]:
        return [self.records[s] for s in self.sites(group)]

    def matrices(self, group: str, what: str = "pattern") -> np.ndarray:
        """float32 [L, H, q, k] of a group: 'pattern', 'scores' (scaled, unmasked), 'masked' (−inf) or 'raw'."""
        get = MATRICES[what]
        return np.stack([get(r) for r in self.layer_records(group)]).astype(np.float32)

    def mask_of(self, group: str) -> np.ndarray:
        """bool [q, k], True = may attend (the first layer's; every layer of a stack shares it)."""
        return self.layer_records(group)[0].mask_for()
