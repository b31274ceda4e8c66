"""What a folder must hold for a transformers view, and the transformers class that runs it.

Never `trust_remote_code`: a config with auto_map is refused before transformers reads it. Safetensors only:
a folder with pickle weights alone is refused without opening them. Only classes transformers itself ships
(named by config.json's `architectures`, else picked by the config's kind) are built.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.families import FAMILIES
from attnlab.model.hf.cache import count_params
from attnlab.model.memory import FIT_SHARE, available_bytes, fmt_gb

SLACK = 1.05  # a config may describe at most this many times the parameters the weights hold (tied copies aside)
PICKLE_HINT = "convert the weights to model.safetensors on a machine you trust"
HEADS = {"decoder": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "encoder": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
         "encdec": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"}  # the head a kind runs with, by model_type
READS = {  # what a model reads that a view (text in) cannot give it → transformers' task mappings that say so
    "audio": ("SPEECH_SEQ_2_SEQ", "CTC", "AUDIO_CLASSIFICATION", "AUDIO_FRAME_CLASSIFICATION", "AUDIO_XVECTOR"),
    "images and text together": ("IMAGE_TEXT_TO_TEXT", "MULTIMODAL_LM", "VISION_2_SEQ", "VISUAL_QUESTION_ANSWERING",
                                 "VIDEO_CLASSIFICATION"),
    "images": ("IMAGE", "IMAGE_CLASSIFICATION", "OBJECT_DETECTION", "IMAGE_SEGMENTATION", "SEMANTIC_SEGMENTATION",
               "DEPTH_ESTIMATION", "MASKED_IMAGE_MODELING", "BACKBONE"),
}
SUB_CONFIGS = {"audio_config": "audio", "vision_config": "images and text together"}  # a multimodal config's parts


def check_view_folder(folder: Path, hf: dict) -> None:
    """Refuse (CheckpointError, one line) repository code, models that do not read text (refuse_unreadable) and
    folders without safetensors weights."""
    if hf.get("auto_map") or hf.get("trust_remote_code"):
        raise CheckpointError(f"{folder}: config.json asks for the checkpoint's own Python code (auto_map); "
                              "attnlab never runs code shipped with a checkpoint")
    refuse_unreadable(folder, hf)
    if (folder / "model.safetensors").is_file():
        return
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError, UnicodeDecodeError):
            raise CheckpointError(f"{index} is not a valid safetensors index") from None
        bad = [s for s in shards if Path(str(s)).name != s or not str(s).endswith(".safetensors")
               or not (folder / s).is_file()]
        if bad:
            raise CheckpointError(f"{index} names {sorted(map(str, bad))[0]!r}, not a safetensors file in the folder")
        return
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
    if pickles:
        raise CheckpointError(f"{folder} has only {pickles[0]}, a pickle file; it is not loaded because unpickling "
                              f"can run arbitrary code ({PICKLE_HINT})")
    raise CheckpointError(f"{folder} has no model.safetensors")


def refuse_unreadable(folder: Path, hf: dict) -> None:
    """Refuse (CheckpointError, one line, from config.json alone: before transformers or any weight reads it) a
    model that reads audio, images, or images with text: a view feeds token ids only. A config that names a
    text head (…ForCausalLM, …ForMaskedLM, a seq2seq LM: token ids in) stays."""
    from transformers.models.auto import (
        modeling_auto as auto,  # transformers' task tables, read only when asked
    )

    def model_types(tasks) -> set:
        return set().union(*(getattr(auto, f"MODEL_FOR_{t}_MAPPING_NAMES", {}) for t in tasks))

    mt, archs = hf.get("model_type"), [a for a in hf.get("architectures") or [] if isinstance(a, str)]
    reads = next((kind for kind, tasks in READS.items() if mt in model_types(tasks)), None)
    reads = reads or next((kind for key, kind in SUB_CONFIGS.items() if isinstance(hf.get(key), dict)), None)
    text_heads = {c for h in HEADS.values() for c in getattr(auto, h).values() if isinstance(c, str)}
    if reads is None or any(a in text_heads for a in archs):
        return
    images = ", ".join(f for f, row in FAMILIES.items() if row.image_prep is not None)
    named = f" ({', '.join(archs)})" if archs else ""
    raise CheckpointError(f"{folder}: model_type {mt!r}{named} reads {reads}; attnlab runs models that read text, "
                          f"and images through its converted vision families only ({images}), so it is not loaded")


def kind_of(config) -> str:
    """'encdec', 'decoder' (causal self-attention) or 'encoder' (bidirectional), from the transformers config."""
    from transformers.models.auto import modeling_auto as auto

    if getattr(config, "is_encoder_decoder", False):
        return "encdec"
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs) or getattr(config, "is_decoder", False):
        return "decoder"
    mt = config.model_type
    causal, masked = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    return "decoder" if mt in causal and mt not in masked else "encoder"


def model_class(config, kind: str):
    """The transformers class to run: the first of config.architectures that transformers has for this config's
    model_type, else the kind's head (causal LM, masked LM, seq2seq LM), else the bare model."""
    import transformers
    from transformers.models.auto import modeling_auto as auto

    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if isinstance(cls, type) and getattr(cls, "config_class", None) is type(config):  # the config's own class
            return cls
    head = getattr(auto, HEADS[kind]).get(config.model_type)
    cls = getattr(transformers, head, None) if isinstance(head, str) else None
    return cls if cls is not None else transformers.AutoModel


def stored_params(folder: Path) -> int | None:
    """Parameters in the folder's safetensors files (their headers), or None when one cannot be read."""
    files = sorted(folder.glob("*.safetensors"))
    counts = [count_params(f) for f in files]
    return None if not files or any(c is None for c in counts) else sum(counts)


def stored_size(folder: Path, n: int) -> int:
    """Bytes per parameter as stored (the safetensors files' size over their parameters), 4 when unknown."""
    stored = stored_params(folder)
    files = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    return max(1, min(4, round(files / stored))) if stored else 4


def check_size(folder: Path, cls, config, dtype: torch.dtype | None = None, placed: bool = False) -> int:
    """The parameters `cls(config)` has, counted without memory (on the meta device). Refuses (CheckpointError)
    a config that describes a bigger model than the weights hold (transformers would fill the rest with random
    numbers) or one whose weights in `dtype` (None: as stored, at most float32) would not fit in the free
    memory (unless a device map places them: `placed`)."""
    with torch.device("meta"):
        n = sum(p.numel() for p in cls(config).parameters())
    stored = stored_params(folder)
    if stored is not None and n > stored * SLACK + 10_000:
        raise CheckpointError(f"{folder}: config.json describes {n:,} parameters of {cls.__name__} but the weights "
                              f"hold {stored:,}: they do not match model_type {config.model_type!r}")
    size = (dtype.itemsize if dtype is not None else stored_size(folder, n)) * n
    free = available_bytes()
    if not placed and free is not None and size > free * FIT_SHARE:
        raise CheckpointError(f"{folder}: {n:,} parameters need {fmt_gb(size)}; this machine has "
                              f"{fmt_gb(free)} free")
    return n
