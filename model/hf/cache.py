"""The models attnlab can load that are already in the local Hugging Face cache — offline and read-only.

The hub cache (huggingface_hub's layout) holds one folder per repository:

    {root}/models--{org}--{name}/refs/main             the commit hash `main` pointed to when downloaded
    {root}/models--{org}--{name}/snapshots/{rev}/...   files, as symlinks into ../../blobs/{hash}
    {root}/models--{org}--{name}/blobs/{hash}          the bytes

An entry is listed when its snapshot (refs/main's, else the only one) has a config.json that names a model_type
and does not ask for the checkpoint's own code (a family we convert runs "converted", any other as a
"transformers view", model/view), and
safetensors weights (model.safetensors, or model.safetensors.index.json and every shard it names). Pickle-only
entries are not listed (the loader refuses them). Nothing is downloaded, written or unpickled; a file is
read only when its real path lies inside the cache root (a blob symlink is allowed, a link that escapes the
root or dangles is not), and any unreadable or odd entry is skipped, never raised.

n_params is counted from the safetensors headers (the JSON before the tensors: every tensor's shape), so it
is exact for the stored tensors (a tied embedding is stored once) and reads a few kilobytes per file.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

from attnlab.model.families import FAMILIES
from attnlab.model.families.family import names_task_model

PREFIX = "models--"
MAX_HEADER = 100 * 2**20  # bytes of safetensors header read at most (real headers are kilobytes)
MAX_JSON = 20 * 2**20  # bytes of config.json / index read at most
REV = re.compile(r"^[0-9A-Za-z._-]{1,100}$")  # a revision folder name (a commit hash in practice)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")


@dataclass(frozen=True)
class CachedModel:
    """One supported model in the cache."""

    repo_id: str  # "org/name" (or "name" for the few repositories without an organisation)
    folder: Path  # the snapshot folder: what registry.load / load_hf_folder reads
    revision: str  # the snapshot's folder name (a commit hash)
    family: str  # config.json's model_type: gpt2 | bert | llama | … (converted), or any other (a view)
    n_params: int | None  # parameters in the safetensors files (None when a header cannot be read)
    size_bytes: int  # bytes on disk of the snapshot's files (each blob once)
    has_tokenizer: bool  # tokenizer.json, vocab.txt or vocab.json present (the loader needs one)
    mode: str = "converted"  # how it runs: "converted" (our model) or "transformers view"

    def to_dict(self) -> dict:
        return asdict(self) | {"folder": str(self.folder)}


def has_converter(cfg: dict) -> bool:
    """True when config.json's model_type is a family converted into our model (model/families FAMILIES) and
    it is no task model (…ForSequenceClassification and the like) of a family without an encoder's reading of
    one, nor a config its row sends to transformers (T5EncoderModel; model/families/family.py); any other runs
    as a transformers view (model/view). The one place that decides."""
    row = FAMILIES.get(cfg.get("model_type"))
    if row is None or (row.runs_in_transformers is not None and row.runs_in_transformers(cfg)):
        return False
    return row.encoder_of_task_models or not names_task_model(cfg)


def cache_root() -> Path:
    """HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE (older name), else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def list_cached(root: str | Path | None = None) -> list[CachedModel]:
    """Every supported model in the cache at `root` (default cache_root()), sorted by repo id."""
    root_real = _real_root(root)
    if root_real is None:
        return []
    out = []
    try:
        entries = sorted(root_real.iterdir())
    except OSError:
        return []
    for entry in entries:
        repo_id = repo_id_of(entry.name)
        if repo_id is None:
            continue
        try:
            rec = _inspect(entry, repo_id, root_real)
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            rec = None  # an odd entry is skipped, never raised
        if rec is not None:
            out.append(rec)
    return sorted(out, key=lambda r: r.repo_id)


def resolve_cached(repo_id: str, root: str | Path | None = None) -> Path | None:
    """The snapshot folder of a supported cached `repo_id` (refs/main's, else the only one), or None."""
    root_real = _real_root(root)
    if root_real is None or repo_id_of(folder_name(repo_id)) != repo_id:
        return None
    try:
        rec = _inspect(root_real / folder_name(repo_id), repo_id, root_real)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    return None if rec is None else rec.folder


def folder_name(repo_id: str) -> str:
    """'org/name' → 'models--org--name' (huggingface_hub's repo_folder_name for a model)."""
    return PREFIX + repo_id.replace("/", "--")


def repo_id_of(name: str) -> str | None:
    """'models--org--name' → 'org/name'; None for anything else (datasets, spaces, lock files, odd names)."""
    if not name.startswith(PREFIX):
        return None
    parts = name[len(PREFIX):].split("--")
    if not 1 <= len(parts) <= 2 or not all(p and REV.match(p) for p in parts):
        return None
    return "/".join(parts)


# -- one entry -------------------------------------------------------------------------------------------------
def _real_root(root) -> Path | None:
    try:
        real = Path(root if root is not None else cache_root()).expanduser().resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    return real if real.is_dir() else None


def _inside(path: Path, root_real: Path) -> Path | None:
    """The real path of `path` when it exists and lies inside the cache root, else None (dangling or escaping)."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, dangling, a symlink loop
        return None
    return real if real == root_real or root_real in real.parents else None


def _snapshot(repo_dir: Path, root_real: Path) -> Path | None:
    """refs/main's snapshot when it exists, else the only snapshot; None when neither (or several, no ref)."""
    snaps_dir = repo_dir / "snapshots"
    if _inside(repo_dir, root_real) is None or _inside(snaps_dir, root_real) is None:
        return None
    ref = _inside(repo_dir / "refs" / "main", root_real)
    if ref is not None and ref.is_file() and ref.stat().st_size <= 1024:
        rev = ref.read_text(encoding="utf-8", errors="replace").strip()
        if REV.match(rev) and (snaps_dir / rev).is_dir():
            return snaps_dir / rev
    snaps = [p for p in snaps_dir.iterdir() if REV.match(p.name) and p.is_dir()]
    return snaps[0] if len(snaps) == 1 else None


def _inspect(repo_dir: Path, repo_id: str, root_real: Path) -> CachedModel | None:
    snap = _snapshot(repo_dir, root_real)
    if snap is None or _inside(snap, root_real) is None:
        return None
    cfg = _read_json(snap / "config.json", root_real)
    if not isinstance(cfg, dict):
        return None
    family = cfg.get("model_type")
    if not isinstance(family, str) or not REV.match(family) or cfg.get("auto_map") or cfg.get("trust_remote_code"):
        return None
    weights = _weight_files(snap, root_real)
    if not weights:
        return None  # no safetensors (pickle-only, or a shard missing / escaping)
    counts = [_count_params(w) for w in weights]
    n_params = None if any(c is None for c in counts) else sum(counts)
    return CachedModel(repo_id, snap, snap.name, family, n_params, _size(snap, root_real),
                       any(_inside(snap / f, root_real) is not None for f in TOKENIZER_FILES),
                       "converted" if has_converter(cfg) else "transformers view")


def _read_json(path: Path, root_real: Path):
    real = _inside(path, root_real)
    if real is None or not real.is_file() or real.stat().st_size > MAX_JSON:
        return None
    try:
        return json.loads(real.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _weight_files(snap: Path, root_real: Path) -> list[Path]:
    """Real paths of the safetensors weights: the single file, else every shard of the index; [] if any fails."""
    single = _inside(snap / "model.safetensors", root_real)
    if single is not None and single.is_file():
        return [single]
    index = _read_json(snap / "model.safetensors.index.json", root_real)
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict) or not index["weight_map"]:
        return []
    out = []
    for name in sorted({str(v) for v in index["weight_map"].values()}):
        if Path(name).name != name or not name.endswith(".safetensors"):
            return []
        real = _inside(snap / name, root_real)
        if real is None or not real.is_file():
            return []
        out.append(real)
    return out


def read_header(path: Path) -> dict | None:
    """A safetensors file's header: 8 bytes (little-endian length n), then n bytes of JSON
    {name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}. None when unreadable or odd."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                return None
            (n,) = struct.unpack("<Q", head)
            if not 2 <= n <= MAX_HEADER:
                return None
            header = json.loads(f.read(n).decode("utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return header if isinstance(header, dict) else None


def count_params(path: Path) -> int | None:
    """Parameters in one safetensors file (the shapes in its header), or None when it cannot be read."""
    return _count_params(path)


def _count_params(path: Path) -> int | None:
    """Parameters in one safetensors file: the product of every tensor's shape in its header."""
    header = read_header(path)
    if header is None:
        return None
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape = info.get("shape") if isinstance(info, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            return None
        size = 1
        for d in shape:
            size *= d
        total += size
    return total


def _size(snap: Path, root_real: Path) -> int:
    """Bytes of the snapshot's files whose real path lies inside the root, each blob counted once."""
    seen, total = set(), 0
    for folder, _, files in os.walk(snap, followlinks=False):  # a linked folder is never entered
        for name in files:
            real = _inside(Path(folder) / name, root_real)
            if real is not None and real.is_file() and real not in seen:
                seen.add(real)
                total += real.stat().st_size
    return total
