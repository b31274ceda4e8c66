"""A Qwen2-0.5B-shaped model (random weights, built here) is usable on a 24 GB CPU machine: it loads, runs 256
tokens with capture, and equals transformers. Slow (minutes): run with `pytest -m slow`; times print with -s."""

from __future__ import annotations

import json
import resource
import time

import pytest
import torch
from attnlab.model.hf.load import load_hf_folder

from tests.hf_fixtures import EOT, bpe_tokenizer, quiet_transformers

pytestmark = pytest.mark.slow

QWEN2_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6,
                 rms_norm_eps=1e-6, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    quiet_transformers()
    out = tmp_path_factory.mktemp("qwen2-0.5b-shape")
    tok = bpe_tokenizer()
    torch.manual_seed(0)
    conf = Qwen2Config(**QWEN2_05B, bos_token_id=tok.token_to_id(EOT), eos_token_id=tok.token_to_id(EOT))
    Qwen2ForCausalLM(conf).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "special_tokens_map.json").write_text(json.dumps({"bos_token": EOT, "eos_token": EOT}))
    return out


def test_qwen2_half_billion_loads_runs_256_tokens_and_equals_transformers(folder):
    from transformers import Qwen2ForCausalLM

    t0 = time.perf_counter()
    lm = load_hf_folder(folder)
    load_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in lm.model.parameters())
    assert 490e6 < n_params < 500e6 and lm.cfg.n_kv_heads == 2 and lm.cfg.n_heads == 14
    words = "the cat sat on the mat because the mat was warm . " * 40
    inputs = lm.encode(words)
    inputs = type(inputs)(inputs.ids[:, :256], inputs.tokens[:256])  # exactly 256 tokens
    t0 = time.perf_counter()
    run = lm.run(inputs=inputs, backend="sdpa")
    forward_s = time.perf_counter() - t0
    rec = run["blocks.23.attn"]
    assert rec.pattern(head=13).shape == (256, 256) and rec.n_kv_heads == 2 and rec.kv_head(13) == 1
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"\nQWEN2-0.5B-SHAPE params {n_params / 1e6:.1f} M; load {load_s:.1f} s; forward+capture at 256 tokens "
          f"{forward_s:.2f} s; peak RSS {peak_gb:.2f} GB")
    hf = Qwen2ForCausalLM.from_pretrained(folder, attn_implementation="eager", local_files_only=True,
                                          use_safetensors=True, dtype=torch.float32).eval()
    ids = inputs.ids[:, :32]
    with torch.no_grad():
        ours = lm.forward(type(inputs)(ids, inputs.tokens[:32]), records=False).logits
        theirs = hf(ids).logits
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
    assert float((ours - theirs).abs().max()) <= 1e-3  # 24 layers in float32
