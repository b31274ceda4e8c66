"""Pages on the converted encoder, encoder–decoder and vision families: T5 and BART on the Cross-attention and
Generate pages (and every page an encoder–decoder has), T5's score steps (no scaling, the relative-position bias)
on Score scales, RoBERTa and ALBERT on the encoder pages; those and DeiT and CLIP in the notebook views."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.app.notebook import VIEWS, show
from attnlab.model import registry

from tests import family_grid as G
from tests.app.conftest import ok, open_page, specs

pytest.importorskip("transformers")

SRC, TGT = "the cat sat on the mat", "the dog"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("enc-pages")


def _folder(root, mt: str) -> str:
    cls, conf = G.TINY[mt]
    return str(root / mt if (root / mt).is_dir() else G.make(root / mt, mt, cls, **conf))


@pytest.fixture
def folders(root, monkeypatch):
    monkeypatch.setenv("ATTNLAB_MODEL_ROOTS", str(root))  # the app loads folders under its allowed roots only
    return {mt: _folder(root, mt) for mt in ("t5", "bart", "roberta", "albert")}


ENCDEC_PAGES = ("cross_attention", "generate", "heatmaps", "scores", "rollout", "heads", "kv_cache", "backends")
ENCODER_PAGES = ("heatmaps", "masks", "scores", "rollout", "heads", "backends", "explore", "permutation")


@pytest.mark.parametrize("mt", ["t5", "bart"])
def test_encoder_decoder_pages_render(folders, mt):
    at = open_page("cross_attention", model=folders[mt], text=TGT, src=SRC)
    ok(at)
    assert not any("this page alone uses" in i.value for i in at.info)  # the session's own model, not a stand-in
    failed = []
    for page in ENCDEC_PAGES[1:]:
        at.switch_page(f"{page}.py").run()
        if at.exception or at.error or not specs(at):
            failed.append((page, [e.message for e in at.exception][:1], [e.value for e in at.error][:1]))
    assert not failed, failed


def test_generate_page_continues_t5_as_the_model_does(folders):
    at = open_page("generate", model=folders["t5"], text="", src=SRC)
    ok(at)
    lm = registry.load(folders["t5"])
    ids, _ = lm.generate("", 5, src_text=SRC, stop_at_eos=False)
    assert ids[0] == lm.tokenizer.start_id  # T5's decoder starts from its pad token
    assert not any("this page alone uses" in i.value for i in at.info)


def test_score_scales_shows_t5s_steps(folders):
    at = open_page("scores", model=folders["t5"], text=TGT, src=SRC)  # cross-attention first: no position bias
    ok(at)
    steps = next(d.value for d in at.dataframe if "step" in d.value.columns)
    assert [s.split(" ")[0] for s in steps["step"]] == ["q·kᵀ", "×"] and "(1)" in steps["step"].iloc[1]
    for group in ("encoder", "decoder"):  # self-attention: q·kᵀ, × 1 (T5 does not scale), + the bucketed bias
        at = open_page("scores", model=folders["t5"], text=TGT, src=SRC, group=group)
        ok(at)
        steps = next(d.value for d in at.dataframe if "step" in d.value.columns)
        assert [s.split(" ")[0] for s in steps["step"]] == ["q·kᵀ", "×", "+"]
        assert "(1)" in steps["step"].iloc[1] and "bias" in steps["step"].iloc[2]
        assert not np.allclose(steps["max"].iloc[1], steps["max"].iloc[2])  # the bias moved the scores


@pytest.mark.parametrize("mt", ["roberta", "albert"])
def test_encoder_pages_render(folders, mt):
    at = open_page("heatmaps", model=folders[mt], text=G.TEXT)
    ok(at)
    failed = []
    for page in ENCODER_PAGES[1:]:
        at.switch_page(f"{page}.py").run()
        if at.exception or at.error or not specs(at):
            failed.append((page, [e.message for e in at.exception][:1], [e.value for e in at.error][:1]))
    assert not failed, failed


@pytest.mark.parametrize("mt", ["t5", "bart", "roberta", "albert", "deit", "clip"])
def test_notebook_views(root, mt):
    lm = registry.load(_folder(root, mt))
    if lm.reads_image:
        run = lm.run(inputs=lm.encode_image(np.full((16, 16, 3), 90, np.uint8)))
    else:
        run = lm.run(TGT, SRC) if lm.arch == "encdec" else lm.run(G.TEXT)
    for view in VIEWS:
        fig = show(run, view)
        assert fig.data, (mt, view)
