"""A GGUF file converted once into a Hugging Face folder, cached by the file's SHA-256, then loaded like one.

    {cache}/{sha256[:32]}-v{FORMAT}/config.json, model.safetensors (float32, HF names; written dequantised tensor
                                    by tensor, then read into the dtype asked), tokenizer.json,
                                    tokenizer_config.json, gguf.json (where it came from, its tensor types)

The folder is written under a temporary name, loaded once to prove it builds, and only then renamed into
place, so an interrupted or refused conversion leaves nothing a later load would read. The cache is
ATTNLAB_GGUF_CACHE, else ~/.cache/attnlab/gguf.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from attnlab.model.checkpoint import CheckpointError
from attnlab.model.gguf.convert import gguf_names, hf_config, hf_tensors, model_type
from attnlab.model.gguf.dequant import check_types
from attnlab.model.gguf.reader import GGUFError, GGUFFile, read_gguf
from attnlab.model.gguf.tokenizer import build_tokenizer
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.loaded import LoadedModel
from attnlab.model.weights import save_streamed

FORMAT = 4  # bump when the converted folder's layout or contents change
CHUNK = 4 * 2**20


def cache_root() -> Path:
    env = os.environ.get("ATTNLAB_GGUF_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "attnlab" / "gguf"


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def cached_folder(path: str | Path) -> tuple[Path, str]:
    """(the cache folder this file converts into, its SHA-256); the folder may not exist yet."""
    path = Path(path)
    try:
        digest = file_hash(path)
    except OSError as e:
        raise GGUFError(f"{path.name}: cannot read the file ({e.strerror or e})") from None
    return cache_root() / f"{digest[:32]}-v{FORMAT}", digest


def load_gguf(path: str | Path, name: str | None = None, source: str | None = None, **kw) -> LoadedModel:
    """A GGUF file → LoadedModel, converting it into the cache on first use; `kw` (dtype, placement) as
    model.hf.load.load_hf_folder takes them."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise GGUFError(f"{path} does not exist or is not a file; give a .gguf file")
    folder, digest = cached_folder(path)
    name, source = name or str(path), source or str(path)
    if (folder / "gguf.json").is_file():
        lm = load_hf_folder(folder, name=name, source=source, **kw)
    else:
        lm = convert(path, folder, digest, name, source, **kw)
    lm.card.update(_card(folder), gguf_path=str(path))
    return lm


def convert(path: Path, folder: Path, digest: str, name: str, source: str, **kw) -> LoadedModel:
    """Dequantise `path` into `folder` (temp folder, checked by loading it, then renamed into place)."""
    g = read_gguf(path)
    model_type(g)
    check_types(g)
    cfg = hf_config(g)
    tok, tok_config = build_tokenizer(g)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        write_folder(g, cfg, tok, tok_config, digest, tmp)
        try:
            load_hf_folder(tmp, name=name, source=source)  # refuses (one line) what our converter cannot build
        except GGUFError:
            raise
        except CheckpointError as e:  # said of the file the user gave, not of the temporary folder
            raise GGUFError(f"{path.name}: {about_file(str(e), tmp)}") from None
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished first: its folder holds the same conversion
            shutil.rmtree(tmp, ignore_errors=True)
        return load_hf_folder(folder, name=name, source=source, **kw)  # mapped from, and reloaded from, its place
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def about_file(message: str, tmp: Path) -> str:
    """A refusal of the converted folder, told of the GGUF file: no temporary path, its metadata for config.json."""
    for where in (f"{tmp}/", f"{tmp}: ", str(tmp)):
        message = message.replace(where, "")
    message = gguf_names(message)
    for ours, theirs in (("the checkpoint", "the file"), ("its config.json", "its metadata"),
                         ("config.json", "its metadata"), ("its tokenizer.json", "its tokenizer"),
                         ("tokenizer.json", "its tokenizer")):
        message = message.replace(ours, theirs)
    return message


def write_folder(g: GGUFFile, cfg: dict, tok, tok_config: dict, digest: str, out: Path) -> None:
    save_streamed(hf_tensors(g, cfg), out / "model.safetensors", metadata={"format": "pt"})  # one tensor at a time
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")
    general = {k: v for k, v in g.metadata.items() if k.startswith("general.") and isinstance(v, (str, int, float))}
    info = {"file": g.path.name, "sha256": digest, "bytes": g.size, "gguf_version": g.version,
            "architecture": g.architecture, "tensor_types": dict(Counter(t.qtype.name for t in g.tensors.values())),
            "general": general, "format": FORMAT}
    (out / "gguf.json").write_text(json.dumps(info, indent=2) + "\n")  # written last: marks a whole folder


def _card(folder: Path) -> dict:
    """The card fields of a converted file (gguf.json), prefixed 'gguf_'."""
    try:
        info = json.loads((folder / "gguf.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return {"gguf_file": info.get("file"), "gguf_sha256": info.get("sha256"), "gguf_bytes": info.get("bytes"),
            "gguf_tensor_types": info.get("tensor_types"), "gguf_general": info.get("general")}
