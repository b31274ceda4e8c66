"""Larger than memory: a model spread by `device_map="auto"` under a small max_memory, the rest offloaded to disk,
runs exactly as in memory — logits, every attention pattern, an intervention's effect — on the converted path
(our model) and the view path (transformers runs it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnlab.model import hooks
from attnlab.model.dispatch import Placement, parse_max_memory, placement
from attnlab.model.inputs import InputError
from attnlab.model.registry import load

from tests.hf_fixtures import bpe_tokenizer, make_llama
from tests.view.fixtures import make_view_model

TEXT = "the cat sat on the mat because the mat was warm"
LLAMA = dict(num_attention_heads=4, num_key_value_heads=2, hidden_size=64, intermediate_size=128,
             num_hidden_layers=4, max_position_embeddings=64)


def _bytes(lm) -> int:
    return sum(p.numel() * p.element_size() for p in lm.model.parameters())


def _placed(device_map: dict, module: str):
    """Where `module` lives: the entry of the map that is it or holds it."""
    return next(d for k, d in device_map.items() if module == k or module.startswith(k + "."))


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def pair(request, tmp_path_factory):
    """(in memory, offloaded: max_memory cpu = half the weights, the rest on disk)."""
    root = tmp_path_factory.mktemp("dm")
    folder = make_llama(root / "llama", bpe_tokenizer(), "llama", tie_word_embeddings=request.param, **LLAMA)
    ref = load(str(folder))
    lm = load(str(folder), device_map="auto", max_memory={"cpu": _bytes(ref) // 2},
              offload_folder=str(root / "offload"))
    return ref, lm


def test_half_the_blocks_live_on_disk(pair):
    ref, lm = pair
    placed = lm.model.hf_device_map
    assert placed["embed"] == "cpu" and "disk" in placed.values() and lm.device == "cpu"
    assert any(p.device.type == "meta" for p in lm.model.parameters())  # offloaded: not held in memory
    assert lm.dtype == ref.dtype == torch.float32


def test_logits_and_every_pattern_equal_the_in_memory_run(pair):
    ref, lm = pair
    inp = ref.encode(TEXT)
    a, b = ref.forward(inp, backend="eager"), lm.forward(inp, backend="eager")
    assert (a.logits - b.logits).abs().max().item() <= 1e-6
    assert a.capture.sites == b.capture.sites and len(a.capture.sites) == 4
    for s in a.capture.sites:
        pa, pb = a.capture[s].pattern(), b.capture[s].pattern()
        assert pa.shape == pb.shape == (4, len(inp.tokens), len(inp.tokens))
        assert np.abs(pa - pb).max() <= 1e-6
    ra, rb = ref.run(TEXT, backend="sdpa"), lm.run(TEXT, backend="sdpa")  # lazy records: q, k on the host
    for s in ra.records:
        assert np.abs(ra.records[s].pattern() - rb.records[s].pattern()).max() <= 1e-6


def test_an_intervention_on_an_offloaded_block_has_the_same_effect(pair):
    ref, lm = pair
    inp = ref.encode(TEXT)
    site = "blocks.3"
    assert _placed(lm.model.hf_device_map, site) == "disk"
    fn = {f"{site}.attn.hook_pattern": hooks.zero_head(1)}
    base = ref.forward(inp, records=False).logits
    a, b = ref.forward(inp, interventions=fn).logits, lm.forward(inp, interventions=fn).logits
    assert (a - base).abs().max().item() > 1e-3  # the intervention changes the output
    assert (a - b).abs().max().item() <= 1e-6
    replacement = ref.forward(inp, names=f"{site}.attn.hook_z").capture.tensor(f"{site}.attn.hook_z")
    c = lm.forward(inp, interventions={f"{site}.attn.hook_z": hooks.replace_with(replacement * 0.5)}).logits
    d = ref.forward(inp, interventions={f"{site}.attn.hook_z": hooks.replace_with(replacement * 0.5)}).logits
    assert (c - d).abs().max().item() <= 1e-6 and (c - base).abs().max().item() > 1e-3


def test_view_offloaded_to_disk_equals_in_memory(tmp_path):
    folder = make_view_model("gptj", tmp_path / "gptj")
    ref = load(str(folder))
    lm = load(str(folder), device_map="auto", max_memory={"cpu": _bytes(ref) // 2},
              offload_folder=str(tmp_path / "offload"))
    assert "disk" in lm.model.hf_device_map.values()
    a, b = ref.run(TEXT), lm.run(TEXT)
    assert np.abs(a.top_probs - b.top_probs).max() <= 1e-6
    for s in a.records:
        assert np.abs(a.records[s].pattern() - b.records[s].pattern()).max() <= 1e-6


def test_placement_choices_and_refusals(tmp_path):
    assert parse_max_memory("0=20GiB, cpu=60GiB") == {0: "20GiB", "cpu": "60GiB"}
    assert parse_max_memory("") is None and placement() is None
    with pytest.raises(InputError, match="DEVICE=SIZE"):
        parse_max_memory("20GiB")
    with pytest.raises(InputError, match="need --device-map"):
        placement(max_memory={"cpu": "1GiB"})
    with pytest.raises(InputError, match="unknown device map 'everywhere'"):
        Placement("everywhere")
    folder = make_llama(tmp_path / "llama", bpe_tokenizer(), "llama", **LLAMA)
    with pytest.raises(InputError, match="--offload-folder"):
        load(str(folder), device_map="auto", max_memory={"cpu": 400_000})  # about half its 746 kB
    with pytest.raises(InputError, match="no room for even the embeddings"):
        load("random-decoder", device_map="auto", max_memory={"cpu": 1000}, offload_folder=str(tmp_path / "o"))


def test_cli_capture_with_a_device_map_equals_the_in_memory_capture(tmp_path, capsys):
    from attnlab.cli.main import main

    folder = make_llama(tmp_path / "llama", bpe_tokenizer(), "llama", **LLAMA)
    outs = []
    for extra in ([], ["--device-map", "auto", "--device-memory", "cpu=300KB", "--offload-folder",
                       str(tmp_path / "off")]):
        out = tmp_path / f"run{len(outs)}.npz"
        assert main(["capture", "--model", str(folder), "--text", TEXT, "--out", str(out), *extra]) == 0
        outs.append(np.load(out))
    a, b = outs
    keys = [k for k in a.files if "pattern" in k]
    assert keys and sorted(a.files) == sorted(b.files)
    for k in keys:
        assert np.abs(a[k] - b[k]).max() <= 1e-6


@pytest.mark.parametrize("argv, message", [
    (["--device-memory", "cpu=1GiB"], "need --device-map"),
    (["--device-map", "auto", "--device-memory", "lots"], "DEVICE=SIZE"),
    (["--device-map", "everywhere"], "unknown device map 'everywhere'"),
])
def test_cli_placement_mistakes_exit_2_with_one_line(capsys, tmp_path, argv, message):
    from attnlab.cli.main import main

    assert main(["capture", "--model", "random-decoder", "--text", "hi", "--out", str(tmp_path / "c.npz"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_app_passes_the_device_map_through_its_environment(monkeypatch, tmp_path):
    from attnlab.app.run_settings import placement_settings
    from attnlab.cli.main import main

    seen = {}
    monkeypatch.setattr("os.execve", lambda exe, cmd, env: seen.update(env=env))
    monkeypatch.setattr("os.chdir", lambda p: None)
    assert main(["app", "--device-map", "auto", "--device-memory", "0=20GiB,cpu=30GiB", "--offload-folder",
                 str(tmp_path)]) == 0
    env = seen["env"]
    assert (env["ATTNLAB_DEVICE_MAP"], env["ATTNLAB_DEVICE_MEMORY"]) == ("auto", "0=20GiB,cpu=30GiB")
    for k in ("ATTNLAB_DEVICE_MAP", "ATTNLAB_DEVICE_MEMORY", "ATTNLAB_OFFLOAD_FOLDER"):
        monkeypatch.setenv(k, env[k])
    assert placement_settings() == {"device_map": "auto", "max_memory": {0: "20GiB", "cpu": "30GiB"},
                                    "offload_folder": str(tmp_path)}
