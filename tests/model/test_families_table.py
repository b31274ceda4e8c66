"""The family table (model/families): every row converts a tiny random checkpoint of its family, consuming every
tensor (a stray one is refused by name) into a model that loads strictly; the refusal lists every family."""

from __future__ import annotations

import json
import re

import pytest
import torch
from attnlab.model.checkpoint import CheckpointError, load_weights, read_config
from attnlab.model.families import FAMILIES, supported_families
from attnlab.model.hf.load import load_hf_folder, read_weights
from attnlab.model.transformer import build_model

from tests import family_grid as G

pytest.importorskip("transformers")


def test_every_row_has_a_tiny_shape():
    assert set(G.TINY) == set(FAMILIES)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {mt: G.make(root / mt, mt, cls, **conf) for mt, (cls, conf) in G.TINY.items()}


@pytest.mark.parametrize("model_type", list(G.TINY))
def test_row_consumes_every_tensor(folders, model_type):
    row = FAMILIES[model_type]
    hf, state = read_config(folders[model_type]), read_weights(folders[model_type])
    cfg = row.config(hf, list(state))
    ours = row.convert(state, cfg)
    model = build_model(cfg)
    load_weights(model, ours, model_type)  # every parameter of ours filled, nothing unknown
    # Nothing is silently dropped: one more tensor of the family's own layout is refused by name.
    stray = next(iter(state)).rsplit(".", 1)[0] + ".stray.weight"
    with pytest.raises(CheckpointError, match=r"unexpected weights .*stray\.weight"):
        row.convert({**state, stray: torch.zeros(2)}, cfg)
    lm = load_hf_folder(folders[model_type])
    assert lm.family == model_type and lm.reads_image == row.reads_image


@pytest.mark.parametrize("model_type", list(G.TINY))
def test_separate_qkv_are_used_as_stored(folders, model_type):
    """A checkpoint that stores q, k and v apart keeps them apart (cfg.qkv_layout "split"): every attention
    projection of ours is the file's own tensor (its storage, no copy into a fused weight). One that stores them
    fused stays fused (GPT-2's transposed Conv1D, GPT-NeoX's per-head rows need their copy) or is split into
    views of the stored tensor (Phi-3)."""
    row = FAMILIES[model_type]
    state = read_weights(folders[model_type])
    cfg = row.config(read_config(folders[model_type]), list(state))
    ours = row.convert(state, cfg)
    spans = [(t.data_ptr(), t.data_ptr() + t.nbytes) for t in state.values()]
    apart = [k for k in ours if re.search(r"attn\.[qkv]\.weight$", k)]
    fused = [k for k in ours if k.endswith(("attn.qkv.weight", "attn.kv.weight"))]
    if any(re.search(r"(q_proj|query|q_lin|Attention\.q)\.weight$", k) for k in state):
        assert cfg.qkv_layout == "split" and not fused and len(apart) >= 3 * cfg.n_layers, (fused, len(apart))
        assert all(ours[k].data_ptr() in {a for a, _ in spans} for k in apart)
    elif cfg.qkv_layout == "split":
        assert not fused and all(any(a <= ours[k].data_ptr() < b for a, b in spans) for k in apart)
    else:
        assert fused and not apart


@pytest.mark.parametrize("model_type", list(G.TINY))
def test_row_parity_eager(folders, model_type):
    """Each row against its transformers class on the tiny shape (the families' own tests run the full grid)."""
    if FAMILIES[model_type].reads_image:
        from attnlab.model.parity import compare_hf, within_tolerance

        assert within_tolerance(compare_hf(str(folders[model_type])))
        return
    G.assert_parity(G.parity(folders[model_type], backends=("eager",)))


def test_refusal_lists_every_family(tmp_path, capsys):
    from attnlab.cli.main import main

    folder = tmp_path / "no-family"  # a model_type without a converter runs as a transformers view (model/view)
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": None}))
    with pytest.raises(CheckpointError) as e:
        load_hf_folder(folder)
    assert str(e.value).endswith(f"supported families: {supported_families()}")
    assert main(["compare-hf", "--model", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith(", ".join(FAMILIES)) and all(mt in err for mt in FAMILIES)


def test_docs_read_the_table(capsys):
    from pathlib import Path

    from attnlab.cli.main import main

    assert main(["families"]) == 0
    out = capsys.readouterr().out
    assert (Path(__file__).parents[2] / "docs" / "families.md").read_text() == out  # regenerate: attnlab families
    assert [line.split("`")[1] for line in out.splitlines() if line.startswith("| `")] == list(FAMILIES)
