"""TransformerLens's HookedTransformerConfig names on ModelConfig (mixed in), for the ones that map exactly.

Not here: TL's `d_mlp` (ModelConfig's own d_mlp field may be None; `cfg.hidden` is the MLP width) and `act_fn`
(TL copies the checkpoint's activation string, e.g. GPT-2's "gelu_new" or another's "gelu_pytorch_tanh" for the
same tanh GELU, which ModelConfig.mlp does not keep).
"""

from __future__ import annotations

# ModelConfig.positional -> TL's positional_embedding_type (TL has no sinusoidal, 2-D or position-free stack)
TL_POSITIONAL = {"learned": "standard", "rope": "rotary", "alibi": "alibi", "relative": "relative_positional_bias"}
TL_NORM = {"layernorm": "LN", "rmsnorm": "RMS"}  # ModelConfig.norm_type -> TL's normalization_type (weights kept)


class TLConfigNames:
    """d_vocab, n_ctx, normalization_type, positional_embedding_type and n_key_value_heads, as TransformerLens's
    loader sets them for the same checkpoint."""

    @property
    def d_vocab(self) -> int:
        """The vocabulary size (TL's d_vocab)."""
        return self.vocab_size

    @property
    def n_ctx(self) -> int:
        """The positional context, the most tokens one forward reads (TL's n_ctx: max_position_embeddings)."""
        return self.max_len

    @property
    def normalization_type(self) -> str:
        """"LN" (LayerNorm) or "RMS" (RMSNorm), weights unfolded (TL's LNPre/RMSPre follow fold_ln only)."""
        return TL_NORM[self.norm_type]

    @property
    def positional_embedding_type(self) -> str:
        """"standard" (learned, added to the stream), "rotary", "alibi" or "relative_positional_bias" (T5)."""
        if self.positional not in TL_POSITIONAL:
            raise ValueError(f"positional={self.positional!r} has no TransformerLens positional_embedding_type "
                             f"(it has {', '.join(TL_POSITIONAL.values())})")
        return TL_POSITIONAL[self.positional]

    @property
    def n_key_value_heads(self) -> int | None:
        """The k/v heads of grouped- or multi-query attention; None when every head has its own (as TL's loader,
        which sets None when the checkpoint's k/v heads equal its heads)."""
        return None if self.kv_heads == self.n_heads else self.kv_heads
