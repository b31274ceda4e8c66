"""model/weights.py: a safetensors file written one tensor at a time reads back exactly, and a GGUF file (cached
dequantised, in float32) loads straight into bfloat16 with no float32 copy kept."""

from __future__ import annotations

import numpy as np
import torch
from attnlab.model.registry import load
from attnlab.model.weights import read_tensors, save_streamed, stored_dtype, weight_files
from safetensors import safe_open
from safetensors.numpy import load_file

from tests import gguf_fixtures as G
from tests.model.test_gguf import SHAPES


def test_streamed_file_reads_back_exactly(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"a.weight": rng.standard_normal((5, 7)).astype(np.float32), "b": np.arange(6, dtype=np.int64),
              "c.half": rng.standard_normal((3,)).astype(np.float16)}
    path = tmp_path / "model.safetensors"
    save_streamed(iter(arrays.items()), path, metadata={"format": "pt"})
    back = load_file(str(path))
    assert sorted(back) == sorted(arrays) and not (tmp_path / "model.safetensors.data").exists()
    for k, v in arrays.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)
    with safe_open(str(path), "pt") as f:
        assert f.metadata() == {"format": "pt"}
    files = weight_files(tmp_path)
    assert stored_dtype(files) == torch.float32  # 35 float32 elements outweigh 3 float16 ones
    t = read_tensors(files, torch.bfloat16)
    assert t["a.weight"].dtype == torch.bfloat16 and t["b"].dtype == torch.int64  # integers keep their type
    assert torch.equal(t["a.weight"], torch.from_numpy(arrays["a.weight"]).bfloat16())


def test_gguf_loads_straight_into_bfloat16(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_GGUF_CACHE", str(tmp_path / "cache"))
    family, types, conf = next(iter(SHAPES.values()))
    path, _, _ = G.write_gguf(tmp_path / "m.gguf", family, types, **conf)
    bf16 = load(str(path), dtype=torch.bfloat16)  # converts into the cache, then reads it into bf16
    fp32 = load(str(path))  # the cached folder, as stored
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16
    for (n, a), (m, b) in zip(fp32.model.named_parameters(), bf16.model.named_parameters()):
        assert n == m and b.dtype == torch.bfloat16 and torch.equal(a.bfloat16(), b)
    ref = bf16.reference_model()  # float32 from the cache folder (not the temporary one): the dequantised values
    for a, b in zip(fp32.model.parameters(), ref.model.parameters()):
        assert torch.equal(a, b)


def test_each_tensor_maps_its_own_bytes_and_releases_them(tmp_path):
    import gc
    import json

    import pytest
    from attnlab.model.weights import CheckpointError
    from safetensors.torch import save_file

    def maps() -> int:
        with open("/proc/self/maps") as f:
            return sum(str(tmp_path) in line for line in f)

    state = {"a": torch.arange(12.0).view(3, 4), "n": torch.arange(5), "e": torch.empty(0, 4), "h": torch.ones(7).half()}
    save_file(state, str(tmp_path / "s1.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {k: "s1.safetensors" for k in state}}))
    got = read_tensors(weight_files(tmp_path), torch.bfloat16, matrices_as_stored=True)
    assert list(got) == list(state) and maps() == 2  # "a" and "n" mapped ("h" cast, "e" empty)
    assert torch.equal(got["a"], state["a"]) and got["a"].dtype == torch.float32  # a matrix as stored
    assert torch.equal(got["n"], state["n"]) and got["h"].dtype == torch.bfloat16 and got["e"].shape == (0, 4)
    del got
    gc.collect()
    assert maps() == 0  # every mapping gone with its tensor
    index.write_text(json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}}))
    with pytest.raises(CheckpointError, match=r"s1\.safetensors has no tensor b \(the folder's index names it"):
        read_tensors(weight_files(tmp_path))
