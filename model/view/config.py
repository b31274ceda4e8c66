"""ViewConfig: the sizes of a transformers model that the pages show and the runs check against."""

from __future__ import annotations

from dataclasses import dataclass

VIEW_CONTEXT = 2048  # the context of a model whose config names none
MAX_CELLS = 32_000_000  # attention weights one run may return (L·H·T² over every site): 128 MiB in float32
LM_HEADS = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForConditionalGeneration", "ForSeq2SeqLM", "ForPreTraining")


def _first(config, *names, default=None):
    for n in names:
        v = getattr(config, n, None)
        if isinstance(v, int) and v > 0:
            return v
    return default


@dataclass(frozen=True)
class ViewConfig:
    arch: str  # decoder | encoder | encdec
    n_layers: int  # (encoder) layers
    dec_layers: int  # decoder layers of an encoder–decoder, else 0
    n_heads: int
    d_model: int
    max_len: int  # tokens one text may have (the position table, else VIEW_CONTEXT)
    vocab_size: int
    model_type: str
    head: str  # the transformers class that runs
    has_logits: bool  # the class predicts tokens (a language-model head)
    decoder_start: int | None = None  # the first decoder token of an encoder–decoder
    type_vocab_size: int = 0
    positional: str = "the model's own"
    norm: str = "the model's own"
    mlp: str = "the model's own"
    output_head_kind: str = "lm"

    @classmethod
    def of(cls, config, arch: str, head: str) -> ViewConfig:
        """The sizes of a transformers PretrainedConfig (its attribute_map resolves n_head, d_model, …)."""
        layers = _first(config, "encoder_layers", "num_hidden_layers", "n_layer", "num_layers", default=0)
        dec = _first(config, "decoder_layers", "num_decoder_layers", default=layers) if arch == "encdec" else 0
        lm = head.endswith(LM_HEADS)
        return cls(arch=arch, n_layers=layers, dec_layers=dec,
                   n_heads=_first(config, "encoder_attention_heads", "num_attention_heads", "n_head", "n_heads",
                                  default=0),
                   d_model=_first(config, "d_model", "hidden_size", "n_embd", default=0),
                   max_len=_first(config, "max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                                  "n_ctx", default=VIEW_CONTEXT),
                   vocab_size=_first(config, "vocab_size", default=0), model_type=config.model_type, head=head,
                   has_logits=lm, decoder_start=getattr(config, "decoder_start_token_id", None),
                   type_vocab_size=_first(config, "type_vocab_size", default=0), output_head_kind="lm" if lm else "none")

    @property
    def sites(self) -> int:
        """Attention sites one run returns (an encoder–decoder's decoder has self- and cross-attention)."""
        return self.n_layers + 2 * self.dec_layers

    def cpu_context(self) -> int:
        """The most tokens per text whose weights (every site, every head, T²) stay within MAX_CELLS."""
        per = max(1, self.sites * max(1, self.n_heads))
        return max(2, min(self.max_len, int((MAX_CELLS / per) ** 0.5)))
