"""attnlab model layer: a hooked transformer with exact attention capture (PyTorch only)."""

from model.cache import KVCache
from model.captured import CapturedRun
from model.config import ModelConfig
from model.generate import generate
from model.hooks import capture, intervene, replace_with, zero_head
from model.inputs import InputError, Inputs
from model.loaded import Forward, LoadedModel
from model.masks import MaskSpec
from model.record import AttentionRecord
from model.registry import load
from model.transformer import Decoder, Encoder, EncoderDecoder, build_model

__all__ = [
    "AttentionRecord", "CapturedRun", "Decoder", "Encoder", "EncoderDecoder", "Forward", "InputError", "Inputs",
    "KVCache", "LoadedModel",
    "MaskSpec", "ModelConfig", "build_model", "capture", "generate", "intervene", "load", "replace_with",
    "zero_head",
]
