"""Tiny GGUF files (llama, qwen2, qwen3, GQA, fifteen tensor types) → our model, equal to transformers holding the
dequantised weights; the converted folder is cached and reused; dequantisation checked against the formulas."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from attnlab.model.gguf import cache, read_gguf  # noqa: E402
from attnlab.model.gguf.dequant import dequantize, permute, unpermute  # noqa: E402
from attnlab.model.parity import TOL_ATTENTION, TOL_LOGITS, compare_models  # noqa: E402
from gguf.constants import GGMLQuantizationType as Q  # noqa: E402

import attnlab as al  # noqa: E402
from tests import gguf_fixtures as G  # noqa: E402

TEXT = "the cat sat on the mat because the mat was warm"
SHAPES = {
    # name: (family, tensor types by role, config)
    "llama-gqa2-q4_0-q8_0": ("llama", {"embed": Q.Q8_0, "attn": Q.Q4_0, "mlp": Q.Q4_1, "head": Q.F16},
                             dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)),
    "llama-mqa-tied-bf16": ("llama", {"embed": Q.BF16, "attn": Q.F16, "mlp": Q.Q8_0},
                            dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                                 num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=True)),
    "qwen2-gqa2-kquants": ("qwen2", {"embed": Q.Q6_K, "attn": Q.Q4_K, "mlp": Q.Q5_K, "head": Q.Q6_K},
                           dict(hidden_size=256, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
                                rms_norm_eps=1e-5)),
    # llama.cpp's other standard types; Q5_0/Q5_1 are what Q4_K_M/Q5_K_M files hold where rows are not 256 wide
    "llama-q5_0-q5_1-q2_k-q3_k": ("llama", {"embed": Q.Q5_1, "attn": Q.Q5_0, "mlp": Q.Q3_K, "head": Q.Q2_K},
                                  dict(hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                       tie_word_embeddings=False)),
    "qwen2-iq4_nl-iq4_xs": ("qwen2", {"embed": Q.IQ4_NL, "attn": Q.IQ4_XS, "mlp": Q.IQ4_NL, "head": Q.IQ4_XS},
                            dict(hidden_size=256, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)),
    # Qwen3: q/k RMSNorms; a head size of its own (128 as every Qwen3: transformers' GGUF loader assumes it)
    "qwen3-hd128-q8_0": ("qwen3", {"embed": Q.Q8_0, "attn": Q.Q8_0, "mlp": Q.Q4_0},
                         dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
                              num_key_value_heads=1, head_dim=128, max_position_embeddings=64,
                              tie_word_embeddings=True)),
    "qwen3-hd16-untied": ("qwen3", {"attn": Q.F16},
                          dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                               tie_word_embeddings=False)),
}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ATTNLAB_GGUF_CACHE", str(tmp_path_factory.getbasetemp() / "gguf-cache"))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    return {n: G.write_gguf(root / f"{n}.gguf", fam, types, **cfg) for n, (fam, types, cfg) in SHAPES.items()}


@pytest.mark.parametrize("name", list(SHAPES))
def test_equal_to_dequantised_reference(files, name):
    path, hf, tok = files[name]
    family, types, conf = SHAPES[name]
    lm = al.load(str(path))
    assert lm.family == family and lm.cfg.kv_heads == conf["num_key_value_heads"]
    assert lm.cfg.n_layers == conf["num_hidden_layers"] and lm.cfg.tie_embeddings == conf["tie_word_embeddings"]
    stored = {t.qtype for t in read_gguf(path).tensors.values()}
    assert stored == {Q.F32, *types.values()}
    inputs = lm.encode(TEXT)
    assert inputs.ids[0].tolist() == tok.encode(TEXT).ids  # the tokenizer rebuilt from the metadata
    for backend in ("eager", "sdpa"):
        report = compare_models(lm, hf, inputs, backend=backend, greedy_tokens=8)
        assert report["max_abs_logits"] <= TOL_LOGITS, report
        assert report["max_abs_attention"] <= TOL_ATTENTION, report
        assert report["greedy_equal"] is True
    run = lm.run(TEXT)
    rec = run["blocks.0.attn"]
    assert rec.pattern().shape == (conf["num_attention_heads"], len(inputs.ids[0]), len(inputs.ids[0]))
    np.testing.assert_allclose(rec.pattern().sum(-1), 1.0, atol=1e-5)


def test_unpermuted_rows_matter(files):
    """Loading the llama file without undoing llama.cpp's permutation would change the logits (the test can fail)."""
    path, hf, _ = files["llama-gqa2-q4_0-q8_0"]
    g = read_gguf(path)
    q = dequantize(g, g.tensors["blk.0.attn_q.weight"])  # as stored: permuted
    ref = hf.model.layers[0].self_attn.q_proj.weight.detach().numpy()
    np.testing.assert_array_equal(unpermute(q, 4), ref)
    assert not np.array_equal(q, ref)
    np.testing.assert_array_equal(permute(unpermute(q, 4), 4), q)


def test_converted_once_then_cached(files, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_GGUF_CACHE", str(tmp_path / "c"))
    path, _, _ = files["llama-mqa-tied-bf16"]
    first = al.load(str(path))
    folders = [p for p in (tmp_path / "c").iterdir()]
    assert len(folders) == 1 and not folders[0].name.startswith(".")  # no temporary folder left behind
    folder, digest = cache.cached_folder(path)
    assert folders[0] == folder and first.card["gguf_sha256"] == digest
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "gguf.json", "model.safetensors",
                                                         "tokenizer.json", "tokenizer_config.json"]
    assert first.card["gguf_tensor_types"] == {"F32": 7, "BF16": 1, "F16": 12, "Q8_0": 9}
    monkeypatch.setattr(cache, "convert", lambda *a, **k: pytest.fail("converted twice"))
    second = al.load(str(path))
    inputs = first.encode(TEXT)
    assert torch.equal(first.forward(inputs).logits, second.forward(inputs).logits)
    assert second.card["folder"] == str(folder)


def test_q8_0_q4_0_q4_1_q5_0_q5_1_iq4_nl_formulas():
    """Six types against their definitions (ggml-quants.c), not against gguf.quants itself."""
    rng = np.random.default_rng(1)
    w = rng.normal(size=(3, 64)).astype(np.float32)
    for qtype in (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
        raw, deq = G.encode(w, qtype, rng)
        blocks = raw.reshape(-1, G.GGML_QUANT_SIZES[qtype][1])  # [blocks, bytes]
        d = blocks[:, :2].copy().view(np.float16).astype(np.float32)  # [blocks, 1]
        if qtype == Q.Q8_0:
            want = d * blocks[:, 2:].view(np.int8).astype(np.float32)
        elif qtype in (Q.Q5_0, Q.Q5_1):  # [d, (m,) qh: 32 high bits, qs: 16 bytes of low nibbles]
            at = 4 if qtype == Q.Q5_1 else 2
            qh = blocks[:, at:at + 4].copy().view(np.uint32)  # [blocks, 1]
            qs = blocks[:, at + 4:]
            high = (qh >> np.arange(32, dtype=np.uint32)) & 1  # [blocks, 32]: bit j is value j's fifth bit
            q = (np.concatenate([qs & 15, qs >> 4], axis=1) | (high << 4)).astype(np.float32)  # [blocks, 32]
            want = d * (q - 16) if qtype == Q.Q5_0 else d * q + blocks[:, 2:4].copy().view(np.float16)
        else:
            qs = blocks[:, 4 if qtype == Q.Q4_1 else 2:]
            nib = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float32)  # [blocks, 32]: low nibbles first
            want = d * (nib - 8) if qtype == Q.Q4_0 else d * nib + blocks[:, 2:4].copy().view(np.float16)
        np.testing.assert_allclose(deq.reshape(-1, 32), want, rtol=0, atol=1e-6)
        assert np.abs(deq - w).max() < (0.02 if qtype == Q.Q8_0 else 0.35)  # close to what was quantised
    raw, deq = G.encode(w, Q.IQ4_NL, rng)  # random blocks: [d, 16 bytes of nibbles indexing 16 fixed levels]
    blocks = raw.reshape(-1, 18)  # [blocks, bytes]
    levels = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)
    nib = np.concatenate([blocks[:, 2:] & 15, blocks[:, 2:] >> 4], axis=1)  # [blocks, 32]
    np.testing.assert_allclose(deq.reshape(-1, 32), blocks[:, :2].copy().view(np.float16) * levels[nib], atol=1e-6)


@pytest.mark.parametrize("name", ["llama-gqa2-q4_0-q8_0", "qwen2-gqa2-kquants", "qwen3-hd128-q8_0",
                                  "llama-q5_0-q5_1-q2_k-q3_k", "qwen2-iq4_nl-iq4_xs"])
def test_equal_to_transformers_gguf_loader(files, name):
    """transformers reads the same file with its own GGUF loader (its own dequantisation and q/k un-permutation)."""
    from attnlab.model.gguf.compare import load_transformers_gguf

    lm = al.load(str(files[name][0]))
    report = compare_models(lm, load_transformers_gguf(lm), lm.encode(TEXT), backend="sdpa", greedy_tokens=8)
    assert report["max_abs_logits"] <= TOL_LOGITS and report["max_abs_attention"] <= TOL_ATTENTION, report
    assert report["greedy_equal"] is True
