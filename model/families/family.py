"""One row of the family table (model/families/__init__.py): how a Hugging Face model_type becomes our model."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.model.config import ModelConfig
from attnlab.model.families.common import State

# transformers' task models: a head over the base model's last hidden states (…ForSequenceClassification: a label,
# …ForQuestionAnswering: an answer span) instead of the family's language-model head
TASK_CLASSES = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering", "ForMultipleChoice")
TASK_HEAD_WEIGHTS = ("pre_classifier.", "classifier.", "qa_outputs.")  # an encoder's task heads' tensors


def names_task_model(hf: dict) -> bool:
    """True when config.json's `architectures` names a task model (TASK_CLASSES)."""
    return any(isinstance(a, str) and a.endswith(TASK_CLASSES) for a in hf.get("architectures") or [])


def bare_untied(hf: dict) -> bool:
    """A decoder saved as its bare base model (LlamaModel, MistralModel: architectures names no head) with untied
    embeddings (tie_word_embeddings false or left out, these families' default): it has no LM head to convert."""
    archs = [a for a in hf.get("architectures") or [] if isinstance(a, str)]
    bare = bool(archs) and all(a.endswith("Model") and not a.endswith("LMHeadModel") for a in archs)
    return bare and not hf.get("tie_word_embeddings", False)


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
    # an encoder reads a task model (TASK_CLASSES) as its encoder, the head's tensors (TASK_HEAD_WEIGHTS) dropped:
    # every attention is the encoder's. A decoder or encoder–decoder would lose its LM head: transformers runs it
    encoder_of_task_models: bool = False
    # a config of this model_type the family does not convert, run as a transformers view instead (T5EncoderModel)
    runs_in_transformers: Callable[[dict], bool] | None = None

    @property
    def reads_image(self) -> bool:
        return self.image_prep is not None

    def describe(self) -> str:
        return f"{self.model_type} ({self.summary})"


def fixed(name: str) -> Callable[[ModelConfig], str]:
    """A transformers class that does not depend on the config."""
    return lambda cfg: name
