"""Pages on converted families: Positions shows a Llama 3 model's own scaled RoPE frequencies; Score scales shows
Gemma 2's steps from q·kᵀ to the soft-capped score; the Heatmaps page renders each decoder family."""

from __future__ import annotations

import numpy as np
import pytest

from tests import family_grid as G
from tests.app.conftest import arr, ok, open_page, specs, titled
from tests.model.test_families_decoders import GRID

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("pages")


@pytest.fixture
def folders(root, monkeypatch):
    monkeypatch.setenv("ATTNLAB_MODEL_ROOTS", str(root))  # the app loads folders under its allowed roots only
    names = ("llama-llama3-rope", "gemma2-alternating-capped")
    return {n: str(root / n if (root / n).is_dir() else G.make(root / n, GRID[n][0], GRID[n][1], **GRID[n][2]))
            for n in names}


def test_positions_shows_scaled_rope_frequencies(folders):
    at = open_page("positions", model=folders["llama-llama3-rope"])
    ok(at)
    assert at.query_params["pos_scheme"] == "rope"
    fig = titled(at, "wavelength of each rotating pair")
    lines = {t["name"]: arr(t["y"]) for t in fig["data"]}
    used, plain = lines["wavelength used (tokens)"], lines["without scaling"]
    np.testing.assert_allclose(used / plain, [1.0, used[1] / plain[1], 8.0, 8.0], rtol=1e-5)
    assert 1.0 < used[1] / plain[1] < 8.0  # the blended band
    assert any("Llama 3 scaling" in c.value for c in at.caption)


def test_score_scales_shows_each_step(folders):
    at = open_page("scores", model=folders["gemma2-alternating-capped"], text=G.TEXT)
    ok(at)
    steps = next(d.value for d in at.dataframe if "step" in d.value.columns)
    assert [s.split(" ")[0] for s in steps["step"]] == ["q·kᵀ", "×", "soft-cap"]
    assert steps["max"].iloc[-1] <= 2.0 and steps["min"].iloc[-1] >= -2.0
    assert any("soft-caps its scores" in c.value for c in at.caption)


DECODER_PAGES = ("heatmaps", "masks", "scores", "rollout", "heads", "block", "step_by_step", "kv_cache", "generate",
                 "backends", "explore", "permutation", "positions")


def test_every_decoder_page_renders_gemma2(folders):
    """Gemma 2: head_dim ≠ d_model/heads, soft-capped scores, sandwich norms, alternating windows."""
    at = open_page(None, model=folders["gemma2-alternating-capped"], text=G.TEXT)
    ok(at)
    failed = []
    for page in DECODER_PAGES:
        at.switch_page(f"../pages/{page}.py").run()
        if at.exception or at.error or not specs(at):
            failed.append((page, [e.message for e in at.exception][:1], [e.value for e in at.error][:1]))
    assert not failed, failed


@pytest.mark.parametrize("model_type", ["qwen3", "gemma2", "phi", "gpt_neox", "opt"])
def test_notebook_views(tmp_path, model_type):
    """Each notebook view of a converted family draws its attention: the heads view holds the record's patterns."""
    from attnlab.app.notebook import VIEWS, show
    from attnlab.model.hf.load import load_hf_folder

    cls, conf = G.TINY[model_type]
    lm = load_hf_folder(G.make(tmp_path / model_type, model_type, cls, **conf))
    run = lm.run(G.TEXT)
    for view in VIEWS:
        fig = show(run, view)
        assert fig.data, (model_type, view)
    rec = run.records[f"blocks.{lm.cfg.n_layers - 1}.attn"]
    z = np.asarray(show(run, "head", head=1).data[0].z, dtype=np.float64)
    np.testing.assert_allclose(np.nan_to_num(z), np.where(rec.mask_for(), rec.pattern(1), 0), atol=1e-6)


def test_every_decoder_page_renders_opt_350m_layout(root, monkeypatch):
    """OPT-350m's projected embeddings (d_embed 16 → d_model 32, post-LN): every decoder page, the logit lens and
    the sinks page."""
    from tests.model.test_family_options import GRID as OPTIONS

    monkeypatch.setenv("ATTNLAB_MODEL_ROOTS", str(root))
    mt, cls, conf = OPTIONS["opt-350m-projected"]
    folder = str(G.make(root / "opt-350m-projected", mt, cls, **conf))
    at = open_page(None, model=folder, text=G.TEXT)
    ok(at)
    failed = []
    for page in (*DECODER_PAGES, "lens", "sinks"):
        at.switch_page(f"../pages/{page}.py").run()
        if at.exception or at.error or not specs(at):
            failed.append((page, [e.message for e in at.exception][:1], [e.value for e in at.error][:1]))
    assert not failed, failed
