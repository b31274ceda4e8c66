"""How much memory a model needs to run one text with capture, and whether that fits — before loading it.

estimate_bytes(cfg, T, dtype) adds up, in bytes (GB below means 10⁹ bytes):

    weights   = P · b                       P parameters (exact: the model built on the meta device, tied
                                            weights once), b = bytes per element of `dtype`
    qk        = S · T · (D + Hkv·d) · 4     every record keeps q [H, T, d] and k [Hkv, T, d] in float32;
                                            S attention sites (L self; encoder–decoder: L + 2·Ldec), D = H·d
    patterns  = S · H · T² · 4              eager capture only: every site's pattern, float32 [H, T, T]
    work      = 2 · H · T² · b  (eager)     the site being computed: scores and pattern in the model's dtype
              = 4 · T · D · b   (fused)     (fused: SDPA never materialises T², only a few [T, D] buffers)
              + 4 · T · max(D, F) · b       the residual stream, q/k/v and the MLP's hidden [T, F]
    masks     = G · T²                      one bool [T, T] mask per group of sites, shared by its layers
    logits    = T · V · (b + 8)             logits in the model's dtype, their float32 softmax and a copy

    activations = qk + patterns + work + masks + logits;   total = weights + activations

T counts the tokens of the longest text (an encoder–decoder: source and target both taken as T, an upper
bound). Loading reads the weights straight into `dtype`, tensor by tensor (model/weights.py), with no float32
copy: `load_peak` = LOAD_SLACK · P · b bounds what loading touches (the weights, plus the tensors a
converter derives, such as GPT-2's transposed weights, for a moment; measured 1.03× on a bf16 Llama, tests/model/
test_load_memory.py).

check_fits refuses (model.inputs.InputError, one line) when total > FIT_SHARE × the memory available now.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch
from attnlab.model.checkpoint import CheckpointError, read_config
from attnlab.model.config import BACKENDS, ModelConfig
from attnlab.model.device import dtype_name
from attnlab.model.families import FAMILIES
from attnlab.model.hf.cache import read_header
from attnlab.model.hf.reading import model_family
from attnlab.model.inputs import InputError
from attnlab.model.transformer import build_model
from attnlab.model.weights import NoRandomInit

GB = 1e9
LOAD_SLACK = 1.25  # the most loading may touch, as a multiple of the weights in the dtype loaded
FIT_SHARE = 0.9  # use at most this share of the free memory (the interpreter, Streamlit and plots need some)
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
          "float64": torch.float64}


def as_dtype(dtype) -> torch.dtype:
    """A torch dtype from a torch dtype or a name ('float32', 'bf16', 'torch.float16', …)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).removeprefix("torch.").lower()
    if name not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}; choose float32, bfloat16 or float16")
    return DTYPES[name]


@functools.lru_cache(maxsize=64)
def n_params(cfg: ModelConfig) -> int:
    """Exact parameter count: the model built on the meta device (no memory), tied weights counted once."""
    with torch.device("meta"), NoRandomInit():  # no fills either: even on meta they cost seconds at first
        model = build_model(cfg)
    return sum(p.numel() for p in model.parameters())


def n_sites(cfg: ModelConfig) -> tuple[int, int]:
    """(attention sites, groups of sites): decoder/encoder L sites in 1 group; encoder–decoder L + 2·Ldec in 3."""
    if cfg.arch == "encdec":
        return cfg.n_layers + 2 * cfg.dec_layers, 3
    return cfg.n_layers, 1


def estimate_bytes(cfg: ModelConfig, n_tokens: int, dtype=torch.float32, backend: str = "eager") -> dict:
    """Bytes to hold the weights and run one `n_tokens`-token text with capture (the module docstring has
    the formula). Keys: n_params, weights, qk, patterns, work, masks, logits, activations, total, load_peak,
    and the inputs (n_tokens, dtype, backend)."""
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}; choose {', '.join(BACKENDS)}")
    t, b = int(n_tokens), as_dtype(dtype).itemsize
    p = n_params(cfg)
    sites, groups = n_sites(cfg)
    h, d, hkv, dm = cfg.n_heads, cfg.d_head, cfg.kv_heads, cfg.d_model
    eager = backend == "eager"
    parts = {
        "qk": sites * t * (cfg.d_attn + hkv * d) * 4,
        "patterns": sites * h * t * t * 4 if eager else 0,
        "work": (2 * h * t * t * b if eager else 4 * t * dm * b) + 4 * t * max(dm, cfg.hidden) * b,
        "masks": groups * t * t,
        "logits": t * cfg.vocab_size * (b + 8) if cfg.output_head_kind != "none" or cfg.arch == "encdec" else 0,
    }
    activations = sum(parts.values())
    weights = p * b
    return {"n_params": p, "weights": weights, **parts, "activations": activations, "total": weights + activations,
            "load_peak": int(LOAD_SLACK * weights), "n_tokens": t, "dtype": dtype_name(as_dtype(dtype)), "backend": backend}


# -- what is free -------------------------------------------------------------------------------------------------
def available_bytes(device: str | None = None, *, meminfo: str | Path = "/proc/meminfo",
                    cgroup: str | Path = "/sys/fs/cgroup") -> int | None:
    """Memory free for a model now, or None when it cannot be read. CUDA: the device's free memory. CPU:
    MemAvailable from /proc/meminfo, lowered to the cgroup's limit − usage (v2 memory.max/current, or v1
    memory.limit_in_bytes/usage_in_bytes) when a container limit is lower."""
    if device is not None and str(device).startswith("cuda"):
        if not torch.cuda.is_available():
            return None
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    found = [v for v in (_meminfo_available(Path(meminfo)), _cgroup_free(Path(cgroup))) if v is not None]
    return min(found) if found else None


def _meminfo_available(path: Path) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                value, *unit = line.split(":", 1)[1].split()
                return int(value) * (1024 if unit and unit[0].lower() == "kb" else 1)
    except (OSError, ValueError):
        return None
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) or junk: None


def _cgroup_free(root: Path) -> int | None:
    for limit_name, usage_name in (("memory.max", "memory.current"),  # cgroup v2
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):  # v1
        limit = _read_int(root / limit_name)
        if limit is None or limit >= 2**60:  # v1 reports "no limit" as a huge number
            continue
        usage = _read_int(root / usage_name) or 0
        return max(0, limit - usage)
    return None


# -- the refusal --------------------------------------------------------------------------------------------------
def check_fits(cfg: ModelConfig, n_tokens: int, dtype=torch.float32, *, available: int | None = None,
               backend: str = "eager", device: str | None = None, weights_loaded: bool = False) -> dict:
    """The estimate when it fits in FIT_SHARE of `available` bytes (default: available_bytes(device));
    else InputError with one line saying what it needs, what is free and what would help. Unknown free
    memory (no /proc) is not a refusal.

    weights_loaded=True (a model already in memory, before a run): only the activations must fit in what is
    free; the weights already held count back in when a hint weighs reloading in bfloat16."""
    est = estimate_bytes(cfg, n_tokens, dtype, backend)
    free = available if available is not None else available_bytes(device)
    held = est["weights"] if weights_loaded else 0
    limit = FIT_SHARE * free + held if free is not None else None
    if limit is None or est["total"] <= limit:
        return est
    half = as_dtype(dtype).itemsize > 2  # would bfloat16 halve it?

    def fits(dt, be) -> bool:
        return estimate_bytes(cfg, n_tokens, dt, be)["total"] <= limit

    hints = []
    if half and fits(torch.bfloat16, backend):
        hints.append("load it in bfloat16")
    if backend == "eager" and fits(dtype, "sdpa"):
        hints.append("use the sdpa backend")
    if not hints and half and backend == "eager" and fits(torch.bfloat16, "sdpa"):
        hints.append("load it in bfloat16 with the sdpa backend")
    if est["weights"] <= limit:  # the weights fit: fewer tokens will too
        hints.append("shorten the text")
    elif not hints:  # nothing above runs this text
        bf16_weights = half and est["weights"] / as_dtype(dtype).itemsize * 2 <= limit
        hints.append("load it in bfloat16 and shorten the text" if bf16_weights else "pick a smaller model")
    what = (f"running this model on {n_tokens:,} tokens needs about {fmt_gb(est['activations'])} more "
            f"({est['dtype']}, {backend})" if weights_loaded else
            f"this model needs about {fmt_gb(est['total'])} at {n_tokens:,} tokens in {est['dtype']}")
    raise InputError(f"{what} but only {fmt_gb(free)} is free; "
                     f"{', '.join(hints[:-1]) + ' or ' if len(hints) > 1 else ''}{hints[-1]}")


def folder_config(folder: str | Path) -> ModelConfig:
    """The ModelConfig a model folder loads as, from its config.json alone (no weights read): an attnlab
    folder's own config, or a Hugging Face family's converted one (BERT's MLM head decided from the tensor
    names in the safetensors header or index). Raises CheckpointError as the loader would."""
    folder = Path(folder)
    meta = read_config(folder)
    if "attnlab" in meta:
        try:
            return ModelConfig.from_dict(meta["attnlab"])
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{folder}/config.json: {e}") from None
    return FAMILIES[model_family(meta, folder)].config(meta, tensor_names(folder))


def tensor_names(folder: Path) -> list[str] | None:
    """The tensor names of a folder's safetensors weights (the header of model.safetensors, or the index's
    weight_map), without reading any tensor; None when neither can be read."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            return list(json.loads(index.read_text())["weight_map"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
    header = read_header(folder / "model.safetensors")
    return None if header is None else [k for k in header if k != "__metadata__"]


def check_folder_fits(folder: str | Path, n_tokens: int, dtype=torch.float32, **kw) -> dict:
    """check_fits for a model folder before loading it (folder_config, then check_fits)."""
    return check_fits(folder_config(folder), n_tokens, dtype, **kw)


def fmt_gb(n: float) -> str:
    """Bytes as '1.98 GB' (10⁹ bytes), or MB below a tenth of a GB."""
    return f"{n / GB:.2f} GB" if n >= 0.1 * GB else f"{n / 1e6:.0f} MB"
