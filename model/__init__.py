"""attnlab model layer: a hooked transformer with exact attention capture (PyTorch only)."""

from attnlab.model.activation_cache import ActivationCache, get_act_name
from attnlab.model.cache import KVCache
from attnlab.model.captured import CapturedRun
from attnlab.model.config import ModelConfig
from attnlab.model.generate import generate
from attnlab.model.hooks import capture, intervene, replace_with, zero_head
from attnlab.model.inputs import InputError, Inputs
from attnlab.model.loaded import Forward, LoadedModel
from attnlab.model.masks import MaskSpec
from attnlab.model.record import AttentionRecord
from attnlab.model.registry import load
from attnlab.model.transformer import Decoder, Encoder, EncoderDecoder, build_model

# isort: split
# after the loaders: model.budget reads model.memory, and adds the memory check of every forward pass
from attnlab.model import budget  # noqa: F401

__all__ = [
    "ActivationCache", "AttentionRecord", "CapturedRun", "Decoder", "Encoder", "EncoderDecoder", "Forward",
    "InputError", "Inputs", "KVCache", "LoadedModel", "MaskSpec", "ModelConfig", "build_model", "capture", "generate",
    "get_act_name", "intervene", "load", "replace_with", "zero_head",
]
