"""The Rollout page in chromium: on lecture-encdec with markup in the source, the context-mixing rows on both sides and
their matrices are drawn, token labels stay text, no tick labels overlap, no traceback; on a decoder whose tokenizer
has no [PAD] (a sentencepiece Unigram with <unk>), the integrated-gradients caption names <unk> as a code span."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.analysis.test_ig_holdout import _llama, _unigram
from tests.e2e.conftest import EXC
from tests.e2e.label_boxes import label_report
from tests.e2e.st_server import streamlit_server
from tests.e2e.test_browser_mech import open_page
from tests.e2e.test_page_labels import drawn

TICKS_JS = """key => { const f = document.querySelector(`.st-key-fig-${key} .js-plotly-plot`);
  return [[...f.querySelectorAll('.ytick text')].map(e => e.textContent),
          [...f.querySelectorAll('.xtick text')].map(e => e.textContent)]; }"""
MIXING = ("attention norm", "value zeroing")


@pytest.fixture(scope="module")
def served(browser, tmp_path_factory):
    """A server whose allowed model folders hold a Unigram decoder without [PAD] (tests/analysis/test_ig_holdout)."""
    root = tmp_path_factory.mktemp("roots")
    folder = _llama(root / "unigram", _unigram(["<unk>", "<s>", "</s>"]), {"bos": "<s>", "eos": "</s>", "unk": "<unk>"})
    with streamlit_server(root / "server.log", env={"ATTNLAB_MODEL_ROOTS": str(root)}) as srv:
        yield srv["url"], folder


def _open(browser, url: str):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    ctx.set_default_timeout(90_000)
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    open_page(page, url)
    drawn(page, True)
    return ctx, page


def test_encdec_mixing_rows_and_matrices(browser, served):
    url, _ = served
    src = "the big <b>red</b> dog sees a cat ."
    ctx, page = _open(browser, f"{url}/rollout?model=lecture-encdec&src={quote(src)}&text={quote('ka vasko roda')}")
    try:
        assert page.locator(EXC).count() == 0 and page.errors == []
        (tgt_rows, tgt_x), (src_rows, src_x) = (page.evaluate(TICKS_JS, k) for k in ("methods", "methods-src"))
        assert set(MIXING) <= set(tgt_rows) and set(MIXING) <= set(src_rows)
        assert tgt_x == ["[BOS]", "ka", "vasko", "roda"] and ["<", "b", ">", "red", "<", "/", "b", ">"] == src_x[3:11]
        assert page.locator(".stMain b").count() == 0  # the source's <b> stayed text
        options = page.locator(".st-key-rollout_matrix").inner_text()
        for m in MIXING:
            assert f"{m} (layer 2)" in options and f"{m} (source side, layer 2)" in options
        report = label_report(page)
        assert {r["key"] for r in report} >= {"methods", "methods-src", "matrix"}
        assert [(r["key"], r["pairs"], r["cut"]) for r in report if r["pairs"] or r["cut"]] == []
    finally:
        ctx.close()


def test_ig_caption_names_unk_without_pad(browser, served):
    url, folder = served
    ctx, page = _open(browser, f"{url}/rollout?model={quote(str(folder))}&text={quote('the cat sat on the mat')}")
    try:
        assert page.locator(EXC).count() == 0 and page.errors == []
        caption = page.locator('[data-testid="stCaptionContainer"]').filter(has_text="Integrated gradients (")
        assert "Baseline: every non-special token replaced by <unk>;" in caption.inner_text()
        assert caption.locator("code").all_inner_texts() == ["<unk>"]
    finally:
        ctx.close()
