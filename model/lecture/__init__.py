"""Lecture models' corpus, tokenizer and samples: generated tasks whose answers have known sources."""

from .corpus import (
    MODELS,
    TASK_OBJECTIVES,
    TASKS,
    decoder_examples,
    encdec_examples,
    encoder_examples,
    generate,
    model_examples,
    model_stream,
    split_of,
    stream,
    vocabulary,
)
from .tasks_base import BOS, EOS, MASK, MAX_LEN, PAD, SEP, SPECIAL_TOKENS, UNK, Example

__all__ = [
    "BOS", "EOS", "MASK", "MAX_LEN", "MODELS", "PAD", "SEP", "SPECIAL_TOKENS", "TASKS", "TASK_OBJECTIVES", "UNK",
    "Example", "decoder_examples", "encdec_examples", "encoder_examples", "generate", "model_examples",
    "model_stream", "split_of", "stream", "vocabulary",
]
