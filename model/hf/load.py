"""Load a Hugging Face folder (or a hub id, when online) into a LoadedModel.

Safetensors only: a `pytorch_model.bin` is a pickle and unpickling can run arbitrary code, so it is
refused with instructions, never opened. `trust_remote_code` is never set: the families in model/families
(FAMILIES) load through our own code; any other runs as a transformers view (model/view), transformers' own
classes only.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from attnlab.model import hub, view
from attnlab.model.checkpoint import CheckpointError, read_config
from attnlab.model.config import ModelConfig
from attnlab.model.families import FAMILIES
from attnlab.model.families.common import State
from attnlab.model.hf.cache import has_converter
from attnlab.model.hf.reading import model_family, read_tokenizer
from attnlab.model.hf.target import TargetTokenizer
from attnlab.model.loaded import LoadedModel
from attnlab.model.transformer import build_model
from attnlab.model.weights import assign_weights, meta_parameters, read_tensors, stored_dtype, weight_files

PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.bin", "model.pt", "model.pth", "model.ckpt")
CONVERT_HINT = (
    "convert it once on a machine you trust: `python -c \"from transformers import AutoModel; "
    "AutoModel.from_pretrained('FOLDER').save_pretrained('FOLDER', safe_serialization=True)\"` "
    "(or use the hub's safetensors conversion)")


def load_hf_folder(folder: str | Path, name: str | None = None, source: str | None = None,
                   dtype: torch.dtype | None = None, placement=None) -> LoadedModel:
    """A local Hugging Face folder (config.json, model.safetensors, tokenizer files) → LoadedModel, its weights
    read straight into `dtype` (None: the checkpoint's own); `placement` (model.dispatch.Placement) spreads it
    over devices, CPU memory and disk."""
    folder = check_folder(folder)
    hf = read_config(folder)
    if hf.get("model_type") and not has_converter(hf):  # no converter: transformers runs it (a view)
        return view.load_view(folder, hf, name, source, dtype=dtype, placement=placement)
    family = model_family(hf, folder)
    dtype = dtype or stored_dtype(weight_files(folder)) or torch.float32
    # a placement casts each matrix as it places it (a weight bound for disk is cast on its way there), so a
    # dtype-changing offload never holds the whole model converted; vectors are cast first (converters compute on
    # some: Gemma's 1 + w)
    later = placement is not None
    model, cfg = build_converted(family, hf, read_weights(folder, dtype, matrices_as_stored=later), str(folder),
                                 None if later else dtype)
    reload = functools.partial(_reload, folder, family, hf)  # the checks' float32 reference, built when asked
    card = {"folder": str(folder), "model_type": hf.get("model_type"), "architectures": hf.get("architectures") or []}
    prep = FAMILIES[family].image_prep
    if prep is not None:  # no tokenizer: the image preprocessing instead
        return LoadedModel(name or str(folder), model, None, cfg, source or str(folder), family=family, card=card,
                           image=prep(folder, hf, cfg), reload=reload).placed(placement, dtype)
    tok = read_tokenizer(folder, family, cfg)
    if cfg.arch == "encdec":  # T5, BART, Marian: the source as tokenized, the target from decoder_start_token_id
        start = hf.get("decoder_start_token_id")
        if start is None:
            raise CheckpointError(f"{folder}: config.json lacks decoder_start_token_id (an encoder–decoder needs it)")
        try:
            target = TargetTokenizer(tok, int(start))
        except ValueError as e:
            raise CheckpointError(f"{folder}: {e}") from None
        return LoadedModel(name or str(folder), model, target, cfg, source or str(folder), family=family, card=card,
                           src_tokenizer=tok, reload=reload).placed(placement, dtype)
    return LoadedModel(name or str(folder), model, tok, cfg, source or str(folder), family=family, card=card,
                       reload=reload).placed(placement, dtype)


def _reload(folder: Path, family: str, hf: dict, dtype: torch.dtype) -> torch.nn.Module:
    """The converted module again, from the folder's files, in `dtype`."""
    return build_converted(family, hf, read_weights(folder, dtype), str(folder), dtype)[0]


def load_hub(repo_id: str, revision: str | None = None, max_bytes: int | None = None,
             dtype: torch.dtype | None = None, placement=None) -> LoadedModel:
    """Download config, safetensors and tokenizer files of a hub model (model/hub.py), then load the folder."""
    return load_hf_folder(hub.pull(repo_id, revision, max_bytes=max_bytes), name=repo_id, source=f"hub:{repo_id}",
                          dtype=dtype, placement=placement)


# -- steps ----------------------------------------------------------------------------------------------
def check_folder(folder: str | Path) -> Path:
    folder = Path(folder).expanduser()
    if not folder.exists():
        raise CheckpointError(f"{folder} does not exist; give a model folder with config.json and model.safetensors")
    if not folder.is_dir():
        raise CheckpointError(
            f"{folder} is a file, not a folder; give the folder that holds config.json, model.safetensors "
            "and the tokenizer files")
    return folder


def read_weights(folder: Path, dtype: torch.dtype | None = None,
                 matrices_as_stored: bool = False) -> dict[str, torch.Tensor]:
    """model.safetensors (or its shards), each tensor mapped from the file and, when floating, in `dtype`
    (None: as stored; tensors of 2+ dims as stored with `matrices_as_stored`); refuse pickle checkpoints without
    opening them."""
    files = weight_files(folder)
    if files:
        return read_tensors(files, dtype, matrices_as_stored=matrices_as_stored)
    pickles = [p for p in PICKLES if (folder / p).is_file()] + sorted(p.name for p in folder.glob("*.bin"))
    if pickles:
        raise CheckpointError(
            f"{folder} has only {sorted(set(pickles))[0]}, a pickle file; it is not loaded because unpickling "
            f"can run arbitrary code. Use model.safetensors instead: {CONVERT_HINT.replace('FOLDER', str(folder))}")
    raise CheckpointError(f"{folder} has no model.safetensors")


def build_converted(family: str, hf: dict, state: State, where: str,
                    dtype: torch.dtype | None = None) -> tuple[torch.nn.Module, ModelConfig]:
    """The family's config and converted weights in our model (eval mode): built with its parameters on the
    meta device, then given the converted tensors themselves (no copy). `state` is emptied: a tensor the
    converter derives a new one from is released as soon as the model holds its result."""
    row = FAMILIES[family]
    cfg = row.config(hf, list(state))
    converted = row.convert(state, cfg)
    state.clear()
    with meta_parameters():
        model = build_model(cfg)
    return assign_weights(model, converted, where, dtype), cfg
