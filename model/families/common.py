"""What every family's converter shares: the tensor mover (`Mapper`) and config checks. Pure functions.

Every key is accounted for (mapped or knowingly ignored) and every shape asserted against the config;
anything else is a CheckpointError naming the key. No `transformers` import here.
"""

from __future__ import annotations

import torch
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.config import ModelConfig

# Hugging Face activation names → our MLP choice.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "gelu_fast": "gelu_tanh"}  # gelu_fast: the tanh form with √(2/π) rounded to 0.7978845608 (GPT-NeoX-20B)

State = dict[str, torch.Tensor]


def activation(name: str, family: str) -> str:
    if name not in ACTIVATIONS:
        raise CheckpointError(f"{family}: activation {name!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


def require(hf: dict, family: str, *names: str) -> None:
    missing = [n for n in names if hf.get(n) is None]
    if missing:
        raise CheckpointError(f"{family} config.json lacks {', '.join(missing)}")


def refuse(hf: dict, family: str, **unsupported) -> None:
    """Raise for a config option whose value would change the maths in a way we do not implement."""
    for key, (default, ok) in unsupported.items():
        value = hf.get(key, default)
        if value != ok:
            raise CheckpointError(f"{family}: {key}={value!r} is not supported (only {ok!r})")


def build(**kw) -> ModelConfig:
    try:
        return ModelConfig(**kw)
    except ValueError as e:
        raise CheckpointError(f"config.json describes a model we cannot build: {e}") from None


def lm_head(m: Mapper, hf_state: State, cfg: ModelConfig, family: str, embed: str = "embed_tokens.weight") -> None:
    """The LM head: tied (a stored copy must equal the embeddings) or its own `lm_head.weight` [V, D]."""
    head = hf_state.get("lm_head.weight")
    if cfg.tie_embeddings:
        if head is not None and not torch.equal(head, m.out["embed.tok.weight"]):
            raise CheckpointError(f"{family}: lm_head.weight differs from {embed} but tie_word_embeddings is true")
    elif head is None:
        raise CheckpointError(f"{family}: tie_word_embeddings is false but the checkpoint has no lm_head.weight")
    else:
        m.out["lm_head.weight"] = shaped(head, (cfg.vocab_size, cfg.d_model), "lm_head.weight", family)
    m.ignore_outside("lm_head.weight")


# -- helpers ------------------------------------------------------------------------------------------
def strip(state: State, prefix: str, probe: str) -> State:
    """Drop the task model's prefix (`transformer.`, `bert.`) when the base model's keys carry it."""
    if probe in state:
        return dict(state)
    if prefix + probe not in state:
        raise CheckpointError(f"the weights have neither {probe} nor {prefix}{probe}: not this family's layout")
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}


def rename_gamma_beta(state: State) -> State:
    """Very old BERT checkpoints call LayerNorm weight/bias gamma/beta."""
    def fix(k: str) -> str:
        if ".LayerNorm." in k and k.endswith((".gamma", ".beta")):
            return k.rsplit(".", 1)[0] + (".weight" if k.endswith(".gamma") else ".bias")
        return k

    return {fix(k): v for k, v in state.items()}


def shaped(t: torch.Tensor, shape: tuple[int, ...], key: str, family: str) -> torch.Tensor:
    if tuple(t.shape) != tuple(shape):
        raise CheckpointError(
            f"{family}: {key} has shape {tuple(t.shape)}, config.json needs {tuple(shape)} "
            "(the weights do not match the config)")
    return t


class Mapper:
    """Moves tensors from the HF dict to ours, checking shapes; `done()` rejects anything left over."""

    def __init__(self, state: State, family: str):
        self.rest, self.family, self.out = dict(state), family, {}

    def pop(self, key: str, shape: tuple[int, ...]) -> torch.Tensor:
        if key not in self.rest:
            raise CheckpointError(f"{self.family}: the checkpoint lacks {key} (the weights do not match the config)")
        return shaped(self.rest.pop(key), shape, key, self.family)

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

    def qkv(self, srcs: list[str], rows: list[int], dst: str, d: int, cfg: ModelConfig, parts: str = "qkv",
            bias: bool | None = None) -> None:
        """Separate q, k, v (or a cross-attention's k, v: `parts` "kv") Linear layers → our attention `dst`
        ("blocks.{i}.attn") as cfg.qkv_layout says: split, each tensor as stored (dst.q, dst.k, dst.v; no copy);
        fused, stacked into dst.qkv (dst.kv). `bias` defaults to cfg.attn_bias."""
        bias = cfg.attn_bias if bias is None else bias
        if cfg.qkv_layout == "fused":
            self.fused_qkv(srcs, rows, f"{dst}.{parts}", d, bias=bias)
            return
        for src, r, part in zip(srcs, rows, parts, strict=True):
            self.take(src + ".weight", f"{dst}.{part}.weight", (r, d))
            if bias:
                self.take(src + ".bias", f"{dst}.{part}.bias", (r,))

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
