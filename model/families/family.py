"""One row of the family table (model/families/__init__.py): how a Hugging Face model_type becomes our model."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.model.config import ModelConfig
from attnlab.model.families.common import State


@dataclass(frozen=True)
class Family:
    """One Hugging Face model_type."""

    model_type: str  # config.json's model_type, e.g. "llama"
    summary: str  # what it covers, e.g. "Llama, TinyLlama, SmolLM and other LlamaForCausalLM checkpoints"
    # (config.json dict, the checkpoint's tensor names or None when unknown) → ModelConfig; CheckpointError if not ours
    config: Callable[[dict, Collection[str] | None], ModelConfig]
    convert: Callable[[State, ModelConfig], State]  # HF state dict → ours (CheckpointError on any odd tensor)
    transformers_class: Callable[[ModelConfig], str]  # the transformers class parity loads for this config
    specials: dict[str, str] = field(default_factory=dict)  # default bos/eos/pad/mask token strings
    # an image model: (folder, config.json dict, cfg) → ImagePrep from preprocessor_config.json; None = a tokenizer
    image_prep: Callable[[Path, dict, ModelConfig], object] | None = None

    @property
    def reads_image(self) -> bool:
        return self.image_prep is not None

    def describe(self) -> str:
        return f"{self.model_type} ({self.summary})"


def fixed(name: str) -> Callable[[ModelConfig], str]:
    """A transformers class that does not depend on the config."""
    return lambda cfg: name
