"""The models a benchmark job runs and one forward of each mode: our model (registry or GPT-2 weights
converted by model.families.gpt2) and transformers' GPT2LMHeadModel with the same weights."""

from __future__ import annotations

import torch

OUR_MODES = ("fused", "eager_capture", "lazy_capture")
HF_MODES = ("hf_eager_attentions", "hf_sdpa")


def hf_gpt2_config(spec: dict):
    from transformers import GPT2Config

    return GPT2Config(**spec["hf_config"])


def load_ours_gpt2(spec: dict):
    """Our model with the saved transformers GPT-2 weights, converted by model.families.gpt2."""
    from attnlab.model.checkpoint import load_weights
    from attnlab.model.families.gpt2 import convert_gpt2, gpt2_config
    from attnlab.model.transformer import build_model
    from safetensors.torch import load_file

    cfg = gpt2_config(dict(spec["hf_config"]))  # GPT2Config's defaults match gpt2_config's; no transformers import
    with torch.device("meta"):  # no random init: every weight is loaded below
        model = build_model(cfg)
    model = model.to_empty(device="cpu")
    if cfg.tie_embeddings:
        model.lm_head.weight = model.embed.tok.weight  # to_empty unties shared parameters
    hf_state = load_file(spec["weights"])
    load_weights(model, convert_gpt2(hf_state, cfg), spec["weights"])
    return model.eval(), cfg.vocab_size


def load_hf_gpt2(spec: dict):
    """transformers' GPT2LMHeadModel with the saved weights. Its attention function is read from
    config._attn_implementation at every call, so one model serves both hf_* modes."""
    from safetensors.torch import load_file
    from transformers import GPT2LMHeadModel

    with torch.device("meta"):
        model = GPT2LMHeadModel(hf_gpt2_config(spec))
    model = model.to_empty(device="cpu")
    model.tie_weights()
    missing, unexpected = model.load_state_dict(load_file(spec["weights"]), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"GPT-2 weights do not fit: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.eval(), model.config.vocab_size


def load_registry(spec: dict):
    from attnlab.model.registry import load

    lm = load(spec["name"])
    return lm.model.eval(), lm.cfg.vocab_size


def forward_fn(mode: str, ours, hf, ids):
    """A callable running one forward of `mode` and returning what the mode keeps."""
    from attnlab.model import hooks

    if mode == "fused":
        return lambda: ours(ids, backend="sdpa").logits
    if mode in ("eager_capture", "lazy_capture"):
        backend = "eager" if mode == "eager_capture" else "sdpa"

        def run():
            with hooks.capture() as cap:
                out = ours(ids, backend=backend)
            return out.logits, cap

        return run
    if mode in HF_MODES:
        attn, want = ("eager", True) if mode == "hf_eager_attentions" else ("sdpa", False)

        def run_hf():
            hf.config._attn_implementation = attn
            out = hf(ids, use_cache=False, output_attentions=want)
            if want and (out.attentions is None or len(out.attentions) != hf.config.n_layer):
                raise RuntimeError("transformers returned no attentions")
            return out

        return run_hf
    raise ValueError(f"unknown mode {mode!r}")


def load_models(spec: dict, modes) -> tuple:
    """(ours, hf, vocab): our model for our modes, transformers' GPT-2 for the hf_* modes."""
    ours = hf = None
    vocab = None
    if any(m in OUR_MODES or m == "hooks" for m in modes):
        ours, vocab = load_registry(spec) if spec["source"] == "registry" else load_ours_gpt2(spec)
    if any(m in HF_MODES for m in modes):
        hf, vocab = load_hf_gpt2(spec)
    return ours, hf, vocab


def token_ids(T: int, vocab: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, T), generator=g)
