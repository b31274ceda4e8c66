"""What a loaded model can do (Capabilities, frozen, one field per capability) and what its architecture means
for code outside model/ (ModelKind): the only place outside model/transformer.py that reads `arch`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from attnlab.model.config import OBJECTIVES

ARCH_NAMES = {"decoder": "decoder", "encoder": "encoder", "encdec": "encoder–decoder", "vit": "vision transformer"}


@dataclass(frozen=True)
class Capabilities:
    """What a page or a probe may ask of a loaded model; read as attributes (`lm.capabilities.internals`)."""

    converted: bool
    """Our own hooked model (not a transformers view): every hook, backend and intervention."""
    has_qk: bool
    """Records keep q and k: raw scores, the neuron view, the query–key view."""
    has_cache: bool
    """Runs step by step with a KV cache (causal self-attention)."""
    generates: bool
    """Generates text token by token."""
    interventions: bool
    """Hooks may change activations (zero or replace a head, patch a run)."""
    masks: bool
    """Runs under another attention mask than its own."""
    internals: bool
    """Exposes its residual stream, blocks and heads' inputs (lens, patching, circuits, backends)."""
    relevance: bool
    """Gradient relevance: a backward pass from a predicted token."""
    reads_source: bool
    """Reads a source text beside the target (an encoder–decoder)."""
    reads_image: bool
    """Reads an image, not text (a vision transformer)."""
    has_logits: bool
    """Predicts tokens (a language-model or masked-language-model head, or an encoder–decoder)."""
    causal: bool
    """Its (decoder) self-attention is causal."""
    next_token: bool
    """Predicts the next token of one text (a decoder-only language model)."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def check(cls, names) -> tuple[str, ...]:
        """`names` as a tuple, or a ValueError naming the first that is no capability."""
        names = (names,) if isinstance(names, str) else tuple(names)
        for n in names:
            if n not in cls.names():
                raise ValueError(f"unknown capability {n!r}; capabilities are {', '.join(cls.names())}")
        return names

    def as_dict(self) -> dict[str, bool]:
        return asdict(self)


class ModelKind:
    """What a model's architecture means, as properties both LoadedModel and ViewModel share (needs `arch`)."""

    arch: str

    @property
    def kind(self) -> str:
        """The architecture in words, for display: "decoder", "encoder–decoder", …"""
        return ARCH_NAMES[self.arch]

    @property
    def a_kind(self) -> str:
        """The kind with its article, for a sentence: "a decoder", "an encoder–decoder", …"""
        return ("an " if self.kind[0] in "aeiou" else "a ") + self.kind

    @property
    def reads_image(self) -> bool:
        """True when the model reads an image (a vision transformer), not text."""
        return self.arch == "vit"

    @property
    def reads_source(self) -> bool:
        """True when the model reads a source text beside the target (an encoder–decoder)."""
        return self.arch == "encdec"

    @property
    def predicts_next_token(self) -> bool:
        """True for a decoder-only language model: one text, each position predicts the next token."""
        return self.arch == "decoder"

    @property
    def fills_masks(self) -> bool:
        """True for a text encoder: it reads the whole text at once (a masked-token model when it has a head)."""
        return self.arch == "encoder"

    @property
    def objective(self) -> str:
        """What the architecture is trained to do: "causal" (next token), "masked" (hidden tokens), "seq2seq" (a
        target from a source) or "classify" (an image's class); code outside model/ keys its tables by it."""
        return OBJECTIVES[self.arch]

    @property
    def is_causal(self) -> bool:
        """True when the (decoder) self-attention is causal: a decoder or an encoder–decoder."""
        return self.arch in ("decoder", "encdec")

    @property
    def n_blocks(self) -> int:
        """Transformer blocks a forward runs: an encoder–decoder's encoder and decoder blocks together."""
        return self.cfg.n_layers + (self.cfg.dec_layers if self.reads_source else 0)

    @property
    def n_sites(self) -> int:
        """Attention sites a forward runs: one per block, and an encoder–decoder's cross-attention too."""
        return self.n_blocks + (self.cfg.dec_layers if self.reads_source else 0)
