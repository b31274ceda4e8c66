"""ModelConfig: one frozen, validated description of a transformer."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

ARCHS = ("decoder", "encoder", "encdec")
NORMS = ("pre", "post", "peri")
NORM_TYPES = ("layernorm", "rmsnorm")
POSITIONALS = ("learned", "sinusoidal", "rope", "alibi", "none")
MLPS = ("gelu", "gelu_tanh", "swiglu", "moe")
EXPERT_MLPS = ("gelu", "gelu_tanh", "swiglu")
BACKENDS = ("eager", "sdpa", "flash")
OUTPUT_HEADS = ("none", "lm", "mlm")


@dataclass(frozen=True)
class ModelConfig:
    """Every choice of a model, made once. Strings name the options; `__post_init__` validates."""

    arch: str = "decoder"  # decoder | encoder | encdec
    vocab_size: int = 260
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int | None = None  # k/v heads (grouped-query attention): None = n_heads, 1 = multi-query
    n_layers: int = 2
    n_dec_layers: int | None = None  # encdec only: decoder depth (default n_layers)
    d_mlp: int | None = None  # default 4·d_model (gelu) or 8·d_model/3 rounded (swiglu)
    max_len: int = 128
    positional: str = "learned"
    norm: str = "pre"
    norm_type: str = "layernorm"
    mlp: str = "gelu"
    qk_norm: bool = False
    bias: bool = True
    qkv_bias: bool | None = None  # biases on the q, k, v projections only (Qwen2); None = follow `bias`
    tie_embeddings: bool = True
    output_head: str | None = None  # none | lm | mlm; default lm for decoders, none otherwise
    type_vocab_size: int = 0  # BERT token types (0: none)
    embed_norm: bool = False  # BERT: LayerNorm after the embeddings
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    sliding_window: int | None = None  # decoder's default mask: a query sees itself and window−1 earlier keys
    backend: str = "eager"
    # mlp="moe" (model/moe.py): a router sends each token to top_k of n_experts MLPs of kind expert_mlp
    n_experts: int = 0
    top_k: int = 2
    expert_mlp: str = "swiglu"
    shared_expert: bool = False  # one more MLP that every token passes through
    router_aux_coef: float = 0.01  # weight of the load-balancing loss in training

    def __post_init__(self) -> None:
        def choice(name: str, options: tuple[str, ...]) -> None:
            value = getattr(self, name)
            if value not in options:
                raise ValueError(f"{name}={value!r} is not one of {', '.join(options)}")

        choice("arch", ARCHS)
        choice("positional", POSITIONALS)
        choice("norm", NORMS)
        choice("norm_type", NORM_TYPES)
        choice("mlp", MLPS)
        choice("backend", BACKENDS)
        if self.output_head is not None:
            choice("output_head", OUTPUT_HEADS)
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_kv_heads is not None and (self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads):
            raise ValueError(f"n_kv_heads={self.n_kv_heads} must be ≥ 1 and divide n_heads={self.n_heads}")
        if self.sliding_window is not None and (self.sliding_window < 1 or self.arch == "encoder"):
            raise ValueError(f"sliding_window={self.sliding_window} needs a decoder and a window ≥ 1")
        if self.positional == "rope" and self.d_head % 2:
            raise ValueError(f"RoPE needs an even head size, got d_head={self.d_head}")
        if self.n_dec_layers is not None and self.arch != "encdec":
            raise ValueError("n_dec_layers is only for arch='encdec'")
        if self.d_mlp is not None and self.d_mlp < 1:
            raise ValueError(f"d_mlp must be ≥ 1, got {self.d_mlp}")
        if self.type_vocab_size < 0:
            raise ValueError("type_vocab_size must be ≥ 0")
        if self.mlp == "moe":
            choice("expert_mlp", EXPERT_MLPS)
            if self.n_experts < 2 or not 1 <= self.top_k <= self.n_experts:
                raise ValueError(f"mlp='moe' needs n_experts ≥ 2 and 1 ≤ top_k ≤ n_experts, got "
                                 f"n_experts={self.n_experts}, top_k={self.top_k}")
        if self.arch == "decoder" and self.output_head == "mlm":
            raise ValueError("a decoder has an 'lm' head (or 'none'), not 'mlm'")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads: n_heads (multi-head), fewer (grouped-query) or 1 (multi-query)."""
        return self.n_kv_heads or self.n_heads

    @property
    def attn_bias(self) -> bool:
        """Whether the q, k, v projections have biases."""
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def hidden(self) -> int:
        """MLP hidden width (of each expert, for mlp='moe')."""
        if self.d_mlp is not None:
            return self.d_mlp
        kind = self.expert_mlp if self.mlp == "moe" else self.mlp
        return 4 * self.d_model if kind != "swiglu" else int(8 * self.d_model / 3)

    @property
    def output_head_kind(self) -> str:
        """The output head actually built: lm, mlm or none."""
        if self.output_head is not None:
            return self.output_head
        return "none" if self.arch == "encoder" else "lm"

    @property
    def dec_layers(self) -> int:
        return self.n_dec_layers or self.n_layers

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown config fields: {', '.join(sorted(unknown))}")
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)
