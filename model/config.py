"""ModelConfig: one frozen, validated description of a transformer."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

from attnlab.model.tl_config import TLConfigNames

ARCHS = ("decoder", "encoder", "encdec", "vit")
# what each architecture is trained to do: next token, hidden tokens, a target from a source, an image's class
OBJECTIVES = {"decoder": "causal", "encoder": "masked", "encdec": "seq2seq", "vit": "classify"}
NORMS = ("pre", "post", "peri", "parallel")  # parallel: x + attn(ln_attn(x)) + mlp(ln_mlp(x))
NORM_TYPES = ("layernorm", "rmsnorm")
POSITIONALS = ("learned", "sinusoidal", "rope", "alibi", "none", "learned2d", "sinusoidal2d", "relative")
IMAGE_POSITIONALS = ("learned", "learned2d", "sinusoidal2d", "none")  # a ViT's choices
MLPS = ("gelu", "gelu_tanh", "swiglu", "moe", "geglu", "relu", "quick_gelu", "silu")  # geglu: gelu_tanh(gate)·up
EXPERT_MLPS = ("gelu", "gelu_tanh", "swiglu")
BACKENDS = ("eager", "sdpa", "flash")
OUTPUT_HEADS = ("none", "lm", "mlm")
QKV_LAYOUTS = ("fused", "split")  # self-attention's projections: one Linear (rows q | k | v) or three
ROPE_SCALINGS = ("none", "linear", "llama3", "yarn", "longrope")  # how RoPE's frequencies are rescaled (model/rope.py)


@dataclass(frozen=True)
class ModelConfig(TLConfigNames):
    """Every choice of a model, made once. Strings name the options; `__post_init__` validates. TransformerLens's
    names for some (d_vocab, n_ctx, ...) come from TLConfigNames (model/tl_config.py)."""

    arch: str = "decoder"  # decoder | encoder | encdec | vit
    vocab_size: int = 260
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int | None = None  # k/v heads (grouped-query attention): None = n_heads, 1 = multi-query
    n_layers: int = 2
    n_dec_layers: int | None = None  # encdec only: decoder depth (default n_layers)
    dec_d_mlp: int | None = None  # encdec only: the decoder's MLP width when not d_mlp (BART's decoder_ffn_dim)
    d_mlp: int | None = None  # default 4·d_model (gelu) or 8·d_model/3 rounded (swiglu)
    max_len: int = 128
    positional: str = "learned"
    norm: str = "pre"
    norm_type: str = "layernorm"
    mlp: str = "gelu"
    qk_norm: bool = False
    bias: bool = True
    qkv_bias: bool | None = None  # biases on the q, k, v projections only (Qwen2); None = follow `bias`
    out_bias: bool | None = None  # a bias on the attention output projection; None = follow `bias` (Llama's
    # attention_bias: q, k, v and o)
    mlp_bias: bool | None = None  # biases on the MLP's linear layers; None = follow `bias` (Llama's mlp_bias)
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
    # vit only: a square image of image_size² pixels cut into (image_size/patch_size)² patches, a [CLS] token
    # first (max_len is set to 1 + patches) and a classification head of n_classes on it (0: none)
    image_size: int = 0
    patch_size: int = 0
    n_channels: int = 3
    n_classes: int = 0
    # Hugging Face families (model/families) need these; each is decided once where the model is built
    head_dim: int | None = None  # per-head size when not d_model / n_heads (Qwen3, Gemma)
    rotary_dim: int | None = None  # RoPE turns only the first rotary_dim dims of each head (Phi, GPT-NeoX); None: all
    rope_scaling: str = "none"  # none | linear | llama3 (model/rope.py)
    rope_factor: float = 1.0  # linear and llama3: long wavelengths are stretched by this factor
    rope_low_freq: float = 1.0  # llama3's low_freq_factor
    rope_high_freq: float = 4.0  # llama3's high_freq_factor
    rope_original_len: int = 8192  # llama3's, yarn's and longrope's original_max_position_embeddings
    rope_attn_factor: float = 1.0  # yarn, longrope: cos and sin × this (so every score × its square)
    rope_beta: tuple[float, float] = (32.0, 1.0)  # yarn's beta_fast, beta_slow: the ramp's bounds in rotations
    rope_truncate: bool = True  # yarn: the ramp's bounds rounded outwards to whole dims
    rope_short: tuple[float, ...] = ()  # longrope: each frequency ÷ this while positions stay ≤ rope_original_len
    rope_long: tuple[float, ...] = ()  # longrope: … ÷ this once a forward reaches past it
    rope_local_base: float | None = None  # Gemma 3: RoPE's base on the sliding_layers (unscaled there); rope_base elsewhere
    attn_scale: float | None = None  # the score scale when not 1/√d_head (Gemma 2: query_pre_attn_scalar^-½)
    scale_by_layer: bool = False  # layer i's score scale ÷ (i + 1) (GPT-2's scale_attn_by_inverse_layer_idx)
    attn_softcap: float | None = None  # scaled scores → cap·tanh(score/cap) before the bias and mask (Gemma 2)
    logit_softcap: float | None = None  # logits → cap·tanh(logits/cap) (Gemma 2)
    embed_scale: float = 1.0  # token embeddings × this (Gemma: √d_model)
    sliding_layers: tuple[int, ...] | None = None  # the layers that use sliding_window (None: every layer)
    lm_head_bias: bool = False  # the LM head has a bias (Phi)
    # encoder, encoder–decoder and vision families: learned positions read row position + pos_offset of a table
    # of max_len + pos_offset rows (RoBERTa: padding_idx + 1; BART: 2)
    pos_offset: int = 0
    # RoBERTa, XLM-R: a token of this id (padding_idx = pos_offset − 1) reads the padding row, and the positions
    # after it do not count it (transformers' create_position_ids_from_input_ids)
    pad_position_id: int | None = None
    d_embed: int | None = None  # factorised embeddings (ALBERT, ELECTRA): this width, then Linear(d_embed, d_model)
    # OPT-350m (project_in / project_out): only the d_embed-wide token embeddings are projected (no bias) to d_model,
    # before the d_model-wide positions are added, and a decoder's final hidden states back to d_embed for its head
    project_tokens: bool = False
    rel_buckets: int = 0  # positional="relative" (T5): buckets of the learned per-head bias (model/relative_bias.py)
    rel_max_distance: int = 128  # T5: distances beyond this share the last bucket
    distill_token: bool = False  # vit: DeiT's distillation token after [CLS] (max_len = 2 + patches)
    patch_bias: bool = True  # vit: a bias on the patch projection (CLIP: none)
    distill_head: bool = False  # vit (DeiT with teacher): logits = mean of [CLS]'s and [DIST]'s classifiers
    logit_scale: float = 1.0  # the final hidden states × this before the LM head (T5 with tied embeddings: d^-0.5)
    qkv_layout: str = "fused"  # split: self-attention's q, k, v are three Linears (attn.q/k/v), as a checkpoint
    # that stores them apart has them, so its tensors are used as stored (no copy into a fused weight)

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
        choice("qkv_layout", QKV_LAYOUTS)
        if self.output_head is not None:
            choice("output_head", OUTPUT_HEADS)
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_kv_heads is not None and (self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads):
            raise ValueError(f"n_kv_heads={self.n_kv_heads} must be ≥ 1 and divide n_heads={self.n_heads}")
        if self.sliding_window is not None and (self.sliding_window < 1 or self.arch == "encoder"):
            raise ValueError(f"sliding_window={self.sliding_window} needs a decoder and a window ≥ 1")
        if self.positional == "rope" and self.d_head % 2:
            raise ValueError(f"RoPE needs an even head size, got d_head={self.d_head}")
        if (self.n_dec_layers is not None or self.dec_d_mlp is not None) and self.arch != "encdec":
            raise ValueError("n_dec_layers and dec_d_mlp are only for arch='encdec'")
        if self.dec_d_mlp is not None and self.dec_d_mlp < 1:
            raise ValueError(f"dec_d_mlp must be ≥ 1, got {self.dec_d_mlp}")
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
        self._check_family_fields()
        self._check_families()
        if self.arch == "vit":
            self._check_vit()
        elif self.positional not in (*POSITIONALS[:5], "relative"):
            raise ValueError(f"positional={self.positional!r} is for arch='vit' (2-D patch positions)")

    def _check_families(self) -> None:
        if self.pos_offset < 0 or (self.d_embed is not None and self.d_embed < 1):
            raise ValueError("pos_offset must be ≥ 0 and d_embed ≥ 1")
        if self.project_tokens and (self.d_embed is None or self.arch != "decoder" or self.embed_norm
                                    or self.type_vocab_size):
            raise ValueError("project_tokens needs d_embed on a decoder without an embedding norm or token types")
        if self.pad_position_id is not None and (self.positional != "learned" or self.pos_offset < 1):
            raise ValueError("pad_position_id needs learned positions with a padding row (pos_offset ≥ 1)")
        if (self.positional == "relative") != (self.rel_buckets > 0):
            raise ValueError("positional='relative' needs rel_buckets ≥ 1 (and rel_buckets needs it)")
        if self.rel_max_distance < 1:
            raise ValueError(f"rel_max_distance must be ≥ 1, got {self.rel_max_distance}")
        if (self.distill_token or self.distill_head) and (self.arch != "vit" or self.positional != "learned"):
            raise ValueError("distill_token / distill_head are for arch='vit' with learned positions")
        if self.distill_head and not (self.distill_token and self.n_classes):
            raise ValueError("distill_head needs distill_token and n_classes ≥ 1")
        if not self.logit_scale > 0:
            raise ValueError(f"logit_scale must be > 0, got {self.logit_scale}")

    def _check_family_fields(self) -> None:
        choice = self.rope_scaling
        if choice not in ROPE_SCALINGS:
            raise ValueError(f"rope_scaling={choice!r} is not one of {', '.join(ROPE_SCALINGS)}")
        if self.head_dim is not None and self.head_dim < 1:
            raise ValueError(f"head_dim must be ≥ 1, got {self.head_dim}")
        if self.rotary_dim is not None and not (0 < self.rotary_dim <= self.d_head and self.rotary_dim % 2 == 0):
            raise ValueError(f"rotary_dim={self.rotary_dim} must be even and in 1..d_head={self.d_head}")
        if (self.rope_scaling != "none" or self.rotary_dim is not None) and self.positional != "rope":
            raise ValueError("rope_scaling and rotary_dim need positional='rope'")
        if self.rope_local_base is not None and not (self.positional == "rope" and self.sliding_window
                                                     and self.rope_local_base > 0):
            raise ValueError("rope_local_base needs positional='rope', a sliding_window and a base > 0")
        if self.rope_scaling != "none" and self.rope_factor <= 0:
            raise ValueError(f"rope_factor must be > 0, got {self.rope_factor}")
        if self.rope_scaling == "llama3" and not 0 < self.rope_low_freq < self.rope_high_freq:
            raise ValueError("llama3 RoPE scaling needs 0 < rope_low_freq < rope_high_freq")
        for name in ("rope_beta", "rope_short", "rope_long"):  # JSON gives lists
            object.__setattr__(self, name, tuple(float(x) for x in getattr(self, name)))
        half = (self.rotary_dim or self.d_head) // 2
        if self.rope_scaling == "longrope" and not len(self.rope_short) == len(self.rope_long) == half:
            raise ValueError(f"longrope needs rope_short and rope_long of rotary dims / 2 = {half} factors each")
        if not self.rope_attn_factor > 0:
            raise ValueError(f"rope_attn_factor must be > 0, got {self.rope_attn_factor}")
        for name in ("attn_scale", "attn_softcap", "logit_softcap"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.norm == "parallel" and self.arch == "encdec":
            raise ValueError("norm='parallel' is for a decoder or an encoder (no cross-attention)")
        if self.sliding_layers is not None:
            object.__setattr__(self, "sliding_layers", tuple(int(i) for i in self.sliding_layers))  # JSON gives a list
            if self.sliding_window is None or not all(0 <= i < self.n_layers for i in self.sliding_layers):
                raise ValueError("sliding_layers needs sliding_window and layer indices in 0..n_layers-1")

    def _check_vit(self) -> None:
        if self.positional not in IMAGE_POSITIONALS:
            raise ValueError(f"a ViT's positional must be one of {', '.join(IMAGE_POSITIONALS)}")
        if self.patch_size < 1 or self.image_size < self.patch_size or self.image_size % self.patch_size:
            raise ValueError(f"image_size={self.image_size} must be a positive multiple of patch_size={self.patch_size}")
        if self.n_channels < 1 or self.n_classes < 0:
            raise ValueError("a ViT needs n_channels ≥ 1 and n_classes ≥ 0")
        if self.positional == "sinusoidal2d" and self.d_model % 4:
            raise ValueError(f"sinusoidal2d positions need d_model divisible by 4, got {self.d_model}")
        object.__setattr__(self, "max_len", self.n_prefix + self.n_patches)  # [CLS] (+ [DIST]) + patches

    @property
    def grid(self) -> int:
        """Patches per image side (a ViT)."""
        return self.image_size // self.patch_size if self.patch_size else 0

    @property
    def n_prefix(self) -> int:
        """Tokens before a ViT's patches: [CLS], and DeiT's distillation token."""
        return 2 if self.distill_token else 1

    @property
    def n_patches(self) -> int:
        return self.grid ** 2

    @property
    def d_head(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @property
    def d_attn(self) -> int:
        """Width of the query heads together, n_heads·d_head (= d_model unless head_dim says otherwise)."""
        return self.n_heads * self.d_head

    @property
    def score_scale(self) -> float:
        """The factor on q·kᵀ: attn_scale, else 1/√d_head."""
        return self.attn_scale if self.attn_scale is not None else 1.0 / math.sqrt(self.d_head)

    @property
    def kv_heads(self) -> int:
        """Key/value heads: n_heads (multi-head), fewer (grouped-query) or 1 (multi-query)."""
        return self.n_kv_heads or self.n_heads

    @property
    def attn_bias(self) -> bool:
        """Whether the q, k, v projections have biases."""
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def attn_out_bias(self) -> bool:
        """Whether the attention output projection has a bias."""
        return self.bias if self.out_bias is None else self.out_bias

    @property
    def mlp_biases(self) -> bool:
        """Whether the MLP's linear layers have biases."""
        return self.bias if self.mlp_bias is None else self.mlp_bias

    @property
    def hidden(self) -> int:
        """MLP hidden width (of each expert, for mlp='moe')."""
        if self.d_mlp is not None:
            return self.d_mlp
        kind = self.expert_mlp if self.mlp == "moe" else self.mlp
        return 4 * self.d_model if kind not in ("swiglu", "geglu") else int(8 * self.d_model / 3)

    @property
    def output_head_kind(self) -> str:
        """The output head actually built: lm, mlm or none."""
        if self.output_head is not None:
            return self.output_head
        if self.arch == "vit":
            return "classes" if self.n_classes else "none"
        return "none" if self.arch == "encoder" else "lm"

    @property
    def objective(self) -> str:
        """What this architecture is trained to do: "causal", "masked", "seq2seq" or "classify" (OBJECTIVES)."""
        return OBJECTIVES[self.arch]

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
