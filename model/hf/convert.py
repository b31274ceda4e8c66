"""Hugging Face GPT-2 / BERT checkpoints (Llama, Qwen2, Mistral: model/hf/llama.py) → our ModelConfig and state dict. Pure functions.

Every key is accounted for (mapped or knowingly ignored) and every shape asserted against the
config; anything else is a CheckpointError naming the key. No `transformers` import here.
"""

from __future__ import annotations

import torch

from model.checkpoint import CheckpointError
from model.config import ModelConfig

FAMILIES = {
    "gpt2": "gpt2 (GPT-2, DistilGPT-2 and other GPT2LMHeadModel/GPT2Model checkpoints)",
    "bert": "bert (BERT, MiniLM and other BertModel/BertForMaskedLM checkpoints)",
    # converted in model/hf/llama.py
    "llama": "llama (Llama, TinyLlama, SmolLM and other LlamaForCausalLM checkpoints)",
    "qwen2": "qwen2 (Qwen2, Qwen2.5 and other Qwen2ForCausalLM checkpoints)",
    "mistral": "mistral (Mistral and other MistralForCausalLM checkpoints, sliding window included)",
    "mixtral": "mixtral (Mixtral and other MixtralForCausalLM mixture-of-experts checkpoints)",
    "vit": "vit (ViT: ViTModel and ViTForImageClassification checkpoints; converted in model/hf/vit.py)",
}
# Hugging Face activation names → our MLP choice.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}

State = dict[str, torch.Tensor]


def supported_families() -> str:
    return "; ".join(FAMILIES.values())


def _activation(name: str, family: str) -> str:
    if name not in ACTIVATIONS:
        raise CheckpointError(f"{family}: activation {name!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


def _require(hf: dict, family: str, *names: str) -> None:
    missing = [n for n in names if hf.get(n) is None]
    if missing:
        raise CheckpointError(f"{family} config.json lacks {', '.join(missing)}")


def _refuse(hf: dict, family: str, **unsupported) -> None:
    """Raise for a config option whose value would change the maths in a way we do not implement."""
    for key, (default, ok) in unsupported.items():
        value = hf.get(key, default)
        if value != ok:
            raise CheckpointError(f"{family}: {key}={value!r} is not supported (only {ok!r})")


def _build(**kw) -> ModelConfig:
    try:
        return ModelConfig(**kw)
    except ValueError as e:
        raise CheckpointError(f"config.json describes a model we cannot build: {e}") from None


# -- GPT-2 --------------------------------------------------------------------------------------------
def gpt2_config(hf: dict) -> ModelConfig:
    """A GPT-2 config.json dict → ModelConfig (pre-LN decoder, learned positions, tied LM head)."""
    _require(hf, "gpt2", "vocab_size", "n_embd", "n_head", "n_layer", "n_positions")
    _refuse(hf, "gpt2", scale_attn_weights=(True, True), scale_attn_by_inverse_layer_idx=(False, False),
            add_cross_attention=(False, False))
    d = hf["n_embd"]
    return _build(
        arch="decoder", vocab_size=hf["vocab_size"], d_model=d, n_heads=hf["n_head"], n_layers=hf["n_layer"],
        d_mlp=hf.get("n_inner") or 4 * d, max_len=hf["n_positions"], positional="learned", norm="pre",
        mlp=_activation(hf.get("activation_function", "gelu_new"), "gpt2"), bias=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)), output_head="lm",
        norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
    )


def convert_gpt2(hf_state: State, cfg: ModelConfig) -> State:
    """GPT2LMHeadModel / GPT2Model tensors (with or without the `transformer.` prefix) → ours."""
    s = _strip(hf_state, "transformer.", "wte.weight")
    D, H, V = cfg.d_model, cfg.hidden, cfg.vocab_size
    # GPT-2 stores Linear layers as Conv1D with weight [in, out]; nn.Linear wants [out, in]: transpose.
    conv = {"attn.c_attn": ("attn.qkv", (D, 3 * D)), "attn.c_proj": ("attn.out", (D, D)),
            "mlp.c_fc": ("mlp.up", (D, H)), "mlp.c_proj": ("mlp.down", (H, D))}
    m = _Mapper(s, "gpt2")
    m.take("wte.weight", "embed.tok.weight", (V, D))
    m.take("wpe.weight", "embed.pos.weight", (cfg.max_len, D))
    for i in range(cfg.n_layers):
        h, b = f"h.{i}.", f"blocks.{i}."
        for src, dst in (("ln_1", "ln_attn"), ("ln_2", "ln_mlp")):
            m.take(h + src + ".weight", b + dst + ".weight", (D,))
            m.take(h + src + ".bias", b + dst + ".bias", (D,))
        for src, (dst, shape) in conv.items():
            m.take(h + src + ".weight", b + dst + ".weight", shape, transpose=True)
            m.take(h + src + ".bias", b + dst + ".bias", (shape[1],))
        m.ignore(h + "attn.bias", h + "attn.masked_bias")  # old checkpoints' causal-mask buffers
    m.take("ln_f.weight", "ln_f.weight", (D,))
    m.take("ln_f.bias", "ln_f.bias", (D,))
    lm_head = hf_state.get("lm_head.weight")
    if cfg.tie_embeddings:
        if lm_head is not None and not torch.equal(lm_head, m.out["embed.tok.weight"]):
            raise CheckpointError("gpt2: lm_head.weight differs from wte.weight but tie_word_embeddings is true")
    elif lm_head is None:
        raise CheckpointError("gpt2: tie_word_embeddings is false but the checkpoint has no lm_head.weight")
    else:
        m.out["lm_head.weight"] = _shaped(lm_head, (V, D), "lm_head.weight", "gpt2")
    m.ignore_outside("lm_head.weight")
    return m.done()


# -- BERT ---------------------------------------------------------------------------------------------
def bert_config(hf: dict, mlm: bool | None = None) -> ModelConfig:
    """A BERT config.json dict → ModelConfig (post-LN encoder, token types, embedding LayerNorm).

    `mlm`: build BERT's masked-LM head; None decides from `architectures` (the loader decides from
    the weights actually present).
    """
    _require(hf, "bert", "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
             "intermediate_size", "max_position_embeddings")
    _refuse(hf, "bert", position_embedding_type=("absolute", "absolute"), is_decoder=(False, False),
            add_cross_attention=(False, False))
    if mlm is None:
        mlm = any(a in ("BertForMaskedLM", "BertForPreTraining") for a in hf.get("architectures") or [])
    return _build(
        arch="encoder", vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], n_heads=hf["num_attention_heads"],
        n_layers=hf["num_hidden_layers"], d_mlp=hf["intermediate_size"], max_len=hf["max_position_embeddings"],
        positional="learned", norm="post", mlp=_activation(hf.get("hidden_act", "gelu"), "bert"), bias=True,
        tie_embeddings=True, output_head="mlm" if mlm else "none", type_vocab_size=int(hf.get("type_vocab_size", 2)),
        embed_norm=True, norm_eps=float(hf.get("layer_norm_eps", 1e-12)),
    )


def has_mlm_head(hf_state: State) -> bool:
    return any(k.startswith("cls.predictions.transform.") for k in hf_state)


def convert_bert(hf_state: State, cfg: ModelConfig) -> State:
    """BertModel (unprefixed) or BertForMaskedLM / BertForPreTraining (`bert.` prefix) tensors → ours.

    Pooler and next-sentence head are ignored; the MLM head is converted when cfg.output_head_kind == "mlm".
    """
    s = _strip(_rename_gamma_beta(hf_state), "bert.", "embeddings.word_embeddings.weight")
    D, H, V = cfg.d_model, cfg.hidden, cfg.vocab_size
    m = _Mapper(s, "bert")
    e = "embeddings."
    m.take(e + "word_embeddings.weight", "embed.tok.weight", (V, D))
    m.take(e + "position_embeddings.weight", "embed.pos.weight", (cfg.max_len, D))
    m.take(e + "token_type_embeddings.weight", "embed.types.weight", (cfg.type_vocab_size, D))
    m.norm(e + "LayerNorm", "embed.norm", D)
    m.ignore(e + "position_ids", e + "token_type_ids")  # index buffers
    for i in range(cfg.n_layers):
        h, b = f"encoder.layer.{i}.", f"blocks.{i}."
        qkv = [h + f"attention.self.{n}" for n in ("query", "key", "value")]
        m.fused_qkv(qkv, [D, D, D], b + "attn.qkv", D)  # rows [0:D] q, [D:2D] k, [2D:3D] v
        m.linear(h + "attention.output.dense", b + "attn.out", (D, D))
        m.norm(h + "attention.output.LayerNorm", b + "ln_attn_out", D)
        m.linear(h + "intermediate.dense", b + "mlp.up", (H, D))
        m.linear(h + "output.dense", b + "mlp.down", (D, H))
        m.norm(h + "output.LayerNorm", b + "ln_mlp_out", D)
    m.ignore_prefix("pooler.", "cls.seq_relationship.")  # sentence-level heads: not part of our model
    p = "cls.predictions."
    if cfg.output_head_kind == "mlm":
        m.linear(p + "transform.dense", "mlm.dense", (D, D))
        m.norm(p + "transform.LayerNorm", "mlm.norm", D)
        m.take(p + "bias", "mlm.decoder.bias", (V,))
        dec_b = hf_state.get(p + "decoder.bias")
        if dec_b is not None and not torch.equal(dec_b, m.out["mlm.decoder.bias"]):
            raise CheckpointError("bert: cls.predictions.decoder.bias differs from cls.predictions.bias")
        dec_w = hf_state.get(p + "decoder.weight")
        if dec_w is not None and not torch.equal(dec_w, m.out["embed.tok.weight"]):
            raise CheckpointError("bert: an MLM decoder not tied to the word embeddings is not supported")
        m.ignore(p + "decoder.bias", p + "decoder.weight")
    elif any(k.startswith(p) for k in m.rest):
        raise CheckpointError("bert: the checkpoint has an MLM head but the config asks for none")
    return m.done()


# -- helpers ------------------------------------------------------------------------------------------
def _strip(state: State, prefix: str, probe: str) -> State:
    """Drop the task model's prefix (`transformer.`, `bert.`) when the base model's keys carry it."""
    if probe in state:
        return dict(state)
    if prefix + probe not in state:
        raise CheckpointError(f"the weights have neither {probe} nor {prefix}{probe}: not this family's layout")
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}


def _rename_gamma_beta(state: State) -> State:
    """Very old BERT checkpoints call LayerNorm weight/bias gamma/beta."""
    def fix(k: str) -> str:
        if ".LayerNorm." in k and k.endswith((".gamma", ".beta")):
            return k.rsplit(".", 1)[0] + (".weight" if k.endswith(".gamma") else ".bias")
        return k

    return {fix(k): v for k, v in state.items()}


def _shaped(t: torch.Tensor, shape: tuple[int, ...], key: str, family: str) -> torch.Tensor:
    if tuple(t.shape) != tuple(shape):
        raise CheckpointError(
            f"{family}: {key} has shape {tuple(t.shape)}, config.json needs {tuple(shape)} "
            "(the weights do not match the config)")
    return t


class _Mapper:
    """Moves tensors from the HF dict to ours, checking shapes; `done()` rejects anything left over."""

    def __init__(self, state: State, family: str):
        self.rest, self.family, self.out = dict(state), family, {}

    def pop(self, key: str, shape: tuple[int, ...]) -> torch.Tensor:
        if key not in self.rest:
            raise CheckpointError(f"{self.family}: the checkpoint lacks {key} (the weights do not match the config)")
        return _shaped(self.rest.pop(key), shape, key, self.family)

    def take(self, src: str, dst: str, shape: tuple[int, ...], transpose: bool = False) -> None:
        t = self.pop(src, shape)
        self.out[dst] = t.t().contiguous() if transpose else t

    def linear(self, src: str, dst: str, shape: tuple[int, int]) -> None:
        self.take(src + ".weight", dst + ".weight", shape)
        self.take(src + ".bias", dst + ".bias", (shape[0],))

    def fused_qkv(self, srcs: list[str], rows: list[int], dst: str, d: int, bias: bool = True) -> None:
        """Separate q, k, v Linear layers (`rows` outputs each) → our fused `dst`: rows stacked q, k, v."""
        self.out[dst + ".weight"] = torch.cat([self.pop(n + ".weight", (r, d)) for n, r in zip(srcs, rows)])  # [Σr, d]
        if bias:
            self.out[dst + ".bias"] = torch.cat([self.pop(n + ".bias", (r,)) for n, r in zip(srcs, rows)])  # [Σr]

    def norm(self, src: str, dst: str, d: int) -> None:
        self.take(src + ".weight", dst + ".weight", (d,))
        self.take(src + ".bias", dst + ".bias", (d,))

    def ignore(self, *keys: str) -> None:
        for k in keys:
            self.rest.pop(k, None)

    def ignore_prefix(self, *prefixes: str) -> None:
        for k in [k for k in self.rest if k.startswith(prefixes)]:
            del self.rest[k]

    def ignore_outside(self, *keys: str) -> None:
        """Keys of the task model's head that live outside the base prefix (handled by the caller)."""
        self.ignore(*keys)

    def done(self) -> State:
        if self.rest:
            extra = sorted(self.rest)
            more = f" and {len(extra) - 5} more" if len(extra) > 5 else ""
            raise CheckpointError(
                f"{self.family}: unexpected weights {', '.join(extra[:5])}{more} "
                "(more layers than the config says, or not this family's layout)")
        return self.out
