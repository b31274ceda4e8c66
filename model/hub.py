"""Hub ids: what a download would fetch (files and sizes, before anything is written), and the download itself
into the standard Hugging Face cache (model/hf/cache.py lists it), one at a time.

Only config, safetensors and tokenizer files are fetched (WANTED): never a pickle, never the repository's Python
code. A repository whose config asks for its own code (auto_map), or whose weights are pickles only, is refused
before its weights are fetched. A download that stops half-way leaves no usable snapshot: the weights come
last, and refs/{revision} (what the cache listing follows) is written only when every file is in. Every failure
is one InputError line.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnlab.model.hf.cache import cache_root, folder_name
from attnlab.model.inputs import InputError
from attnlab.model.memory import FIT_SHARE, available_bytes, fmt_gb

WANTED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json", "vocab.json", "vocab.txt", "merges.txt", "added_tokens.json",
          "preprocessor_config.json", "model.safetensors.index.json")
PICKLES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
DISK_MARGIN = 512 * 2**20  # bytes left free on the cache's disk after a download
TIMEOUT_S = 10.0  # for the repository listing
_LOCK = threading.Lock()  # one download at a time in this process


@dataclass(frozen=True)
class Plan:
    """What `pull` would fetch: the files (name → bytes) of one commit."""

    repo_id: str
    revision: str  # as asked ("main" by default)
    commit: str  # the commit it resolved to
    files: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.files.values())

    @property
    def weights(self) -> int:
        return sum(n for f, n in self.files.items() if f.endswith(".safetensors"))

    @property
    def folder(self) -> Path:
        """The snapshot folder the files land in."""
        return cache_root() / folder_name(self.repo_id) / "snapshots" / self.commit


def wanted(name: str) -> bool:
    """True for the files a pull fetches: top-level config, tokenizer and safetensors files."""
    return "/" not in name and (name in WANTED or name.endswith(".safetensors"))


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set: the hub is never asked."""
    return any(os.environ.get(v, "0").strip().lower() not in ("", "0", "false", "no", "off")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def not_cached(repo_id: str, why: str) -> InputError:
    """The one line for a hub id that is not in the cache and cannot be fetched now."""
    return InputError(f"unknown model {repo_id!r}: not in the local Hugging Face cache ({cache_root()}), and {why}; "
                      f"`attnlab pull {repo_id}` downloads it where the hub can be reached (`attnlab models` lists "
                      "the others; a model folder works too)")


def plan(repo_id: str, revision: str | None = None) -> Plan:
    """The files a pull of `repo_id` at `revision` would fetch and their sizes (one listing request)."""
    if offline():
        raise not_cached(repo_id, "HF_HUB_OFFLINE is set")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    rev = revision or "main"
    try:
        info = HfApi(endpoint=endpoint()).model_info(repo_id, revision=rev, files_metadata=True, timeout=TIMEOUT_S)
    except RevisionNotFoundError:
        raise InputError(f"{repo_id!r} has no revision {rev!r} on the Hugging Face hub") from None
    except RepositoryNotFoundError:
        raise InputError(f"unknown model {repo_id!r}: not a model attnlab knows (`attnlab models`), a model folder, in "
                         "the local Hugging Face cache or on the hub") from None
    except HfHubHTTPError as e:
        code = getattr(getattr(e, "response", None), "status_code", "?")
        raise not_cached(repo_id, f"the hub answered HTTP {code}") from None
    except Exception as e:  # noqa: BLE001 — no network, DNS, a timeout, a proxy: one line
        raise not_cached(repo_id, f"the hub cannot be reached ({type(e).__name__})") from None
    files = {s.rfilename: s.size for s in info.siblings or []}
    if "config.json" not in files:
        raise InputError(f"{repo_id} has no config.json: not a transformers model")
    if not any(f.endswith(".safetensors") and "/" not in f for f in files):
        pickles = sorted(f for f in files if f.endswith(PICKLES))
        raise InputError(f"{repo_id} has only pickle weights ({pickles[0]}); attnlab loads safetensors only, because "
                         "unpickling can run arbitrary code" if pickles else f"{repo_id} has no safetensors weights")
    chosen = {f: n for f, n in files.items() if wanted(f)}
    unknown = sorted(f for f, n in chosen.items() if not isinstance(n, int) or n < 0)
    if unknown:
        raise InputError(f"the hub gave no size for {repo_id}/{unknown[0]}; nothing is downloaded")
    return Plan(repo_id, rev, info.sha, chosen)


def check_room(p: Plan, max_bytes: int | None = None, available: int | None = None) -> None:
    """Refuse (InputError) a plan above `max_bytes`, above the free disk of the cache, or whose weights would
    not fit in the free memory (`available`, default model.memory.available_bytes())."""
    if max_bytes is not None and p.total > max_bytes:
        raise InputError(f"{p.repo_id} is {fmt_gb(p.total)}; this server downloads at most {fmt_gb(max_bytes)}")
    root = cache_root()
    probe = next((q for q in (root, *root.parents) if q.exists()), Path("/"))
    free = shutil.disk_usage(probe).free
    if p.total + DISK_MARGIN > free:
        raise InputError(f"{p.repo_id} is {fmt_gb(p.total)}; the disk of {root} has {fmt_gb(free)} free")
    mem = available_bytes() if available is None else available
    if mem is not None and p.weights > mem * FIT_SHARE:
        raise InputError(f"{p.repo_id}'s weights are {fmt_gb(p.weights)}; this machine has {fmt_gb(mem)} of free "
                         "memory to load them into")


def pull(repo_id: str, revision: str | None = None, *, max_bytes: int | None = None, progress: bool = True,
         on_file: Callable[[int, int, str, int], None] | None = None, wait: float | None = None) -> Path:
    """Download config, tokenizer and safetensors files of `repo_id` into the Hugging Face cache; the snapshot
    folder. One pull at a time: waiting for another at most `wait` seconds (None: as long as it takes);
    `on_file(i, n, name, bytes)` is called before each file."""
    if not _LOCK.acquire(timeout=-1 if wait is None else wait):
        raise InputError(f"another model is downloading; retry {repo_id} when it is done")
    try:
        p = plan(repo_id, revision)
        check_room(p, max_bytes)
        order = sorted(p.files, key=lambda f: (f.endswith(".safetensors"), f != "config.json", f))  # weights last
        for i, name in enumerate(order):
            if on_file is not None:
                on_file(i, len(order), name, p.files[name])
            _fetch(p, name, progress)
            if name == "config.json":
                _check_config(p)
        _write_ref(p)
        return p.folder
    finally:
        _LOCK.release()


def endpoint() -> str:
    """HF_ENDPOINT at call time (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _fetch(p: Plan, name: str, progress: bool) -> None:
    from huggingface_hub import hf_hub_download

    try:
        hf_hub_download(p.repo_id, name, revision=p.commit, cache_dir=str(cache_root()), endpoint=endpoint(),
                        tqdm_class=None if progress else _silent_tqdm())
    except Exception as e:  # noqa: BLE001 — a cut connection, a size mismatch, a full disk: one line
        raise InputError(f"the download of {p.repo_id}/{name} stopped ({type(e).__name__}); nothing half-written "
                         f"is used: run `attnlab pull {p.repo_id}` again") from None


def _check_config(p: Plan) -> None:
    try:
        cfg = json.loads((p.folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise InputError(f"{p.repo_id}/config.json is not valid JSON; nothing more is downloaded") from None
    if not isinstance(cfg, dict) or cfg.get("auto_map") or cfg.get("trust_remote_code"):
        raise InputError(f"{p.repo_id}'s config.json asks for the repository's own Python code (auto_map); attnlab "
                         "never runs code shipped with a checkpoint, so its weights are not downloaded")


def _write_ref(p: Plan) -> None:
    """refs/{revision} → commit, written last and atomically (the cache listing follows refs/main)."""
    if p.revision == p.commit:
        return
    refs = cache_root() / folder_name(p.repo_id) / "refs"
    target = refs / p.revision
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(p.commit, encoding="utf-8")
    os.replace(tmp, target)


def _silent_tqdm():
    from tqdm.auto import tqdm

    class Silent(tqdm):
        def __init__(self, *a, **k):
            super().__init__(*a, **(k | {"disable": True}))

    return Silent
