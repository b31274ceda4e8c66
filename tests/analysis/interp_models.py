"""Models of the interpretability tests: the bundled lecture decoder's retrieval story and a tiny Llama-shaped
random model (RMSNorm, RoPE, SwiGLU, grouped-query attention)."""

import torch
from attnlab.model.config import ModelConfig
from attnlab.model.loaded import LoadedModel
from attnlab.model.tokenizer import ByteTokenizer
from attnlab.model.transformer import build_model

STORY = ("fenna is twelve . fenna has a parrot . garo is seven . garo owns a rabbit . hildo is sixteen . "
         "hildo has a turtle . what pet does garo have ?")
CORRUPT = STORY.replace("does garo", "does hildo")


def tiny_llama() -> LoadedModel:
    cfg = ModelConfig(arch="decoder", vocab_size=260, d_model=48, n_heads=6, n_kv_heads=2, n_layers=3, max_len=64,
                      positional="rope", mlp="swiglu", norm_type="rmsnorm", bias=False)
    torch.manual_seed(7)
    return LoadedModel("tiny-llama", build_model(cfg).eval(), ByteTokenizer(add_bos=True), cfg, "random")
