"""Hostile .gguf files: one line each (a CheckpointError / InputError), quickly, and nothing cached."""

from __future__ import annotations

import os
import struct
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.model.checkpoint import CheckpointError  # noqa: E402
from attnlab.model.gguf import read_gguf  # noqa: E402
from gguf import GGUFWriter  # noqa: E402
from gguf.constants import GGMLQuantizationType as Q  # noqa: E402

import attnlab as al  # noqa: E402
from tests import gguf_fixtures as G  # noqa: E402

CONF = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=32, tie_word_embeddings=True)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("ATTNLAB_GGUF_CACHE", str(d))
    return d


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path, _, _ = G.write_gguf(tmp_path_factory.mktemp("good") / "good.gguf", "llama", {"attn": Q.Q8_0}, **CONF)
    return path


def _refused(path, cache_dir, *words) -> str:
    t = time.perf_counter()
    with pytest.raises(CheckpointError) as e:
        al.load(str(path))
    assert time.perf_counter() - t < 10  # bounded: nothing huge was allocated or looped over
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 400, msg
    for w in words:
        assert w in msg, msg
    assert not cache_dir.exists() or list(cache_dir.iterdir()) == []  # nothing cached, no temp folder left
    return msg


def _header(kv: bytes = b"", n_kv: int = 0, tensors: bytes = b"", n_tensors: int = 0, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + kv + tensors


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def test_the_good_file_loads(good, cache_dir):
    lm = al.load(str(good))
    assert lm.cfg.kv_heads == 2 and len(list(cache_dir.iterdir())) == 1


@pytest.mark.parametrize("cut", [10, 200, 3000, -100])
def test_truncated(good, tmp_path, cache_dir, cut):
    data = good.read_bytes()
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(data[:cut] if cut > 0 else data[:cut])
    assert read_gguf(good).tensors  # the whole file is fine
    msg = _refused(bad, cache_dir, "cut.gguf")
    assert "truncated" in msg or "too short" in msg


def test_not_gguf(tmp_path, cache_dir):
    bad = tmp_path / "notes.gguf"
    bad.write_text("These are my lecture notes, not a model.\n" * 20)
    _refused(bad, cache_dir, "notes.gguf is not a GGUF file")


def test_unknown_architecture(tmp_path, cache_dir):
    path = tmp_path / "gpt2.gguf"
    w = GGUFWriter(str(path), "gpt2")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.ones((8, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _refused(path, cache_dir, "architecture 'gpt2' is not supported", "llama")


def test_unsupported_quant_type(good, tmp_path, cache_dir):
    """A Q8_1 tensor (a real type we do not dequantise: llama.cpp's activation type) named with its type."""
    path = tmp_path / "q8_1.gguf"
    g = read_gguf(good)
    w = GGUFWriter(str(path), "llama")
    for k, v in g.metadata.items():  # copy the metadata of the good file
        if k.startswith(("llama.", "tokenizer.")):
            w.add_key_value(k, v.tolist() if isinstance(v, np.ndarray) else v, _vtype(v), _sub(v))
    from attnlab.model.gguf.dequant import dequantize

    for name, info in g.tensors.items():
        a = dequantize(g, info)
        if name.endswith("ffn_up.weight"):
            w.add_tensor(name, np.zeros((a.shape[0], a.shape[1] // 32 * 40), np.uint8), raw_dtype=Q.Q8_1)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _refused(path, cache_dir, "'blk.0.ffn_up.weight' is Q8_1", "Q4_K")


def _vtype(v):
    from gguf.constants import GGUFValueType as T

    return (T.ARRAY if isinstance(v, (list, np.ndarray)) else T.BOOL if isinstance(v, bool) else T.STRING
            if isinstance(v, str) else T.FLOAT32 if isinstance(v, float) else T.UINT32)


def _sub(v):
    from gguf.constants import GGUFValueType as T

    if isinstance(v, np.ndarray):
        return T.INT32
    if isinstance(v, list):
        return T.STRING
    return None


def test_unknown_type_id(tmp_path, cache_dir):
    kv = _s("general.architecture") + struct.pack("<I", 8) + _s("llama")
    t = _s("token_embd.weight") + struct.pack("<IQQIQ", 2, 32, 8, 99, 0)
    bad = tmp_path / "t99.gguf"
    bad.write_bytes(_header(kv, 1, t, 1) + bytes(64))
    _refused(bad, cache_dir, "ggml type 99")


@pytest.mark.parametrize("dims,what", [((32, 2**40), "runs past the end"), ((32, 2**62), "runs past the end"),
                                       ((33, 8), "not whole Q8_0 blocks")])
def test_tensor_larger_than_file(tmp_path, cache_dir, dims, what):
    kv = _s("general.architecture") + struct.pack("<I", 8) + _s("llama")
    t = _s("token_embd.weight") + struct.pack("<IQQIQ", 2, *dims, int(Q.Q8_0), 0)
    bad = tmp_path / "huge.gguf"
    bad.write_bytes(_header(kv, 1, t, 1) + bytes(4096))
    _refused(bad, cache_dir, what)


@pytest.mark.parametrize("make,what", [
    (lambda: _header(struct.pack("<Q", 2**62) + b"x" * 64, 1), "claims 4611686018427387904 bytes"),
    (lambda: _header(_s("k") + struct.pack("<IIQ", 9, 4, 2**61), 1), "claims 2305843009213693952 entries"),
    (lambda: _header(_s("k") + struct.pack("<IIQ", 9, 8, 10**6) + bytes(100), 1), "claims 1000000 entries"),
    (lambda: _header(_s("k") + struct.pack("<I", 8) + struct.pack("<Q", 10**6) + b"ab", 1), "past the end"),
    (lambda: _header(b"", 2**40), "claims 1099511627776 metadata entries"),
    (lambda: _header(b"", 0, b"", 2**50), "claims 1125899906842624 tensors"),
    (lambda: _header(_s("k") + struct.pack("<I", 77) + bytes(8), 1), "value type 77"),
    (lambda: _header(version=1), "version 1 is not supported"),
])
def test_absurd_metadata_lengths(tmp_path, cache_dir, make, what):
    bad = tmp_path / "absurd.gguf"
    bad.write_bytes(make() + bytes(32))
    _refused(bad, cache_dir, what)


def test_cli_one_line(tmp_path, cache_dir, capsys):
    bad = tmp_path / "notes.gguf"
    bad.write_text("not a model " * 10)
    assert main(["capture", "--model", str(bad), "--text", "hi", "--out", str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnlab: error:") and "not a GGUF file" in err and "\n" not in err
    assert main(["capture", "--model", str(tmp_path / "missing.gguf"), "--text", "hi",
                 "--out", str(tmp_path / "o.npz")]) == 2
    assert "missing.gguf does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("metadata,what", [
    ({"llama.rope.scaling.factor": 4.0}, "llama.rope.scaling.factor=4 scales RoPE linearly"),  # llama.cpp: linear
    ({"llama.rope.scale_linear": 2.0}, "llama.rope.scale_linear=2 scales RoPE linearly"),  # the older key
    ({"llama.rope.scaling.type": "yarn"}, "RoPE scaling (yarn) is not supported"),
    ({"llama.rope.freq_base": "ten thousand"}, "llama.rope.freq_base='ten thousand' is not one positive number"),
    ({"llama.attention.layer_norm_rms_epsilon": "tiny"},
     "llama.attention.layer_norm_rms_epsilon='tiny' is not one positive number"),
    ({"llama.attention.key_length": "8"}, "llama.attention.key_length='8' is not one positive integer"),
    ({"llama.vocab_size": "many"}, "llama.vocab_size='many' is not one positive integer"),
])
def test_metadata_we_would_read_differently(tmp_path, cache_dir, metadata, what):
    """Values llama.cpp reads (or that are no value at all) that our plain-RoPE model would silently ignore."""
    path = G.write_gguf(tmp_path / "meta.gguf", "llama", {}, metadata=metadata, **CONF)[0]
    _refused(path, cache_dir, f"meta.gguf: {what}")


def test_rope_factor_with_type_none_is_plain_rope(tmp_path, cache_dir):
    """llama.cpp never scales when rope.scaling.type is "none", whatever the factor: the file loads, unscaled."""
    path, ref, _ = G.write_gguf(tmp_path / "none.gguf", "llama", {}, **CONF, metadata={
        "llama.rope.scaling.type": "none", "llama.rope.scaling.factor": 4.0})
    lm = al.load(str(path))
    inputs = lm.encode("the cat sat on the mat")
    with torch.no_grad():
        want = ref(inputs.ids).logits
    assert torch.allclose(lm.forward(inputs).logits, want, atol=1e-5, rtol=0)


def test_bias_refusal_speaks_of_the_file(tmp_path, cache_dir):
    """q/k/v biases without o's: said of the file's metadata once ("its its metadata" before)."""
    path = G.write_gguf(tmp_path / "bias.gguf", "llama", {}, attention_bias=True, skip=("attn_output.bias",),
                        **CONF)[0]
    msg = _refused(path, cache_dir, "bias.gguf: llama: the file has attention biases (blk.0.attn_q.bias …)")
    assert "but its metadata does not ask for them" in msg and "its its" not in msg


@pytest.mark.parametrize("kind,extra,metadata,what", [
    ("gpt2", {}, {"tokenizer.ggml.merges": None}, "no tokenizer.ggml.merges in its metadata; a byte-level"),
    ("llama", {}, {"tokenizer.ggml.scores": None}, "no tokenizer.ggml.scores (nor merges) in its metadata"),
    ("gpt2", {"add_bos_token": True}, {"tokenizer.ggml.bos_token_id": 99999},
     "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id=99999 is not one of its 300 tokens"),
])
def test_tokenizer_metadata_refused_in_words(tmp_path, cache_dir, kind, extra, metadata, what):
    """Was "cannot build its tokenizer ('scores')" (a KeyError's text), or a BOS asked for and silently left out."""
    path = G.write_gguf(tmp_path / "tok.gguf", "llama", {}, tokenizer=kind, tokenizer_extra=extra, metadata=metadata,
                        **CONF)[0]
    _refused(path, cache_dir, f"tok.gguf: {what}")


@pytest.mark.parametrize("kw,what", [
    (dict(metadata={"llama.block_count": 3}), "llama.block_count=3 but its tensors are for 1 blocks (0–0)"),
    (dict(skip=("blk.0.ffn_down.weight",)), "the file lacks blk.0.ffn_down.weight (its tensors do not match its meta"),
    (dict(skip=("output_norm.weight",)), "the file lacks output_norm.weight"),
    (dict(n_embeddings=320, metadata={"llama.vocab_size": None}), "token_embd.weight has shape (320, 32), its metadata"),
])
def test_tensors_against_metadata_in_the_files_words(tmp_path, cache_dir, kw, what):
    """Said in the file's tensor names (blk.0.ffn_down), not in the converted folder's (layers.0.mlp.down_proj)."""
    path = G.write_gguf(tmp_path / "t.gguf", "llama", {}, **kw, **CONF)[0]
    msg = _refused(path, cache_dir, "t.gguf: ", what)
    assert "layers." not in msg and "config" not in msg and "checkpoint" not in msg
