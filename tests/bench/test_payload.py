"""The payload benchmark measures the real pages: each page script run through AppTest, its Plotly JSON summed."""

import json
from pathlib import Path

import numpy as np
import pytest
from attnlab.bench.payload import (
    MODEL,
    NOT_MEASURED,
    PAGES,
    page_payload,
    page_payloads,
    page_text,
    run_script,
    sent_bytes,
)
from attnlab.model.registry import load
from streamlit import config
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _apptest_config():
    config.set_option("runner.enforceSerializableSessionState", False)  # as tests/app/conftest.py


def apptest_run(page: str, **query) -> AppTest:
    """The page run as the app tests run it: its own AppTest, the inputs as URL query parameters."""
    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=300)
    for k, v in query.items():
        at.query_params[k] = str(v)
    return at.run()


def test_every_page_is_measured_or_says_why_not():
    from attnlab.app.navigation import PAGES as NAV

    pages = {p.stem for p in (ROOT / "pages").glob("[!_]*.py")}
    assert set(PAGES) | set(NOT_MEASURED) == pages and not set(PAGES) & set(NOT_MEASURED)
    assert list(PAGES) == [f[:-3] for f, *_ in NAV if f[:-3] not in NOT_MEASURED]  # read from the navigation
    assert set(NOT_MEASURED) <= pages  # no reason kept for a page that is gone


@pytest.mark.parametrize("T", [2, 64, 300])
def test_page_text_is_T_tokens(T):
    text = page_text(T)
    assert len(load(MODEL).encode(text).tokens) == T and text == text.strip()
    with pytest.raises(ValueError, match="context"):
        page_text(5000)


def test_payload_of_a_page_is_the_json_its_apptest_run_sends():
    T = 64
    text = page_text(T)
    row = page_payload("heatmaps", T, text=text)
    at = apptest_run("heatmaps", model=MODEL, text=text)
    assert not at.exception and not at.error
    specs = [el.proto.spec for el in at.get("plotly_chart")]
    sizes = [len(s.encode("utf-8")) for s in specs]
    assert len(specs) >= 3  # the mosaic, one head, the head view
    assert row["page"] == "heatmaps" and row["T"] == T and row["model"] == MODEL
    assert row["figures"] == sizes and row["bytes"] == sum(sizes) and "error" not in row
    mosaic = json.loads(specs[0])  # the page drew this text: T tokens on the axes of the head's matrix
    assert mosaic["data"][0]["type"] == "heatmap"
    head = next(json.loads(s) for s in specs if "head 0" in json.loads(s)["layout"]["title"]["text"])
    assert len(head["layout"]["xaxis"]["ticktext"]) <= T and head["layout"]["xaxis"]["ticktext"][0] == "[BOS]"


def test_long_input_page_reads_its_own_text_box():
    T = 300
    row = page_payload("long_input", T)
    at = AppTest.from_file(str(ROOT / "pages" / "long_input.py"), default_timeout=300)
    at.session_state["long_text"] = page_text(T)
    at.query_params["long_model"] = MODEL
    at.run()
    specs = [el.proto.spec for el in at.get("plotly_chart")]
    assert json.loads(specs[0])["layout"]["title"]["text"] == f"layer 1, head 0: all {T} tokens"
    assert row["figures"] == [len(s.encode("utf-8")) for s in specs] and row["bytes"] == sum(row["figures"])


def test_page_payloads_rows_and_failures():
    rows, note = page_payloads([16], pages=("scores", "heads"))
    assert [(r["page"], r["T"]) for r in rows] == [("scores", 16), ("heads", 16)]
    assert all(r["bytes"] == sum(r["figures"]) > 0 for r in rows)
    assert "AppTest" in note and "cross_attention" in note
    rows, _ = page_payloads([5000, 8], pages=("heads",))  # over the context: an error row, the rest measured
    assert [(r["page"], r["T"], r["bytes"] is None) for r in rows] == [("heads", 8, False), ("heads", 5000, True)]
    assert "context of 4096 tokens" in rows[1]["error"]
    bad = page_payload("explore", 16, model="no such model", text="abc")  # not a name, a folder or a hub id
    assert bad["bytes"] is None and bad["error"].startswith("Unknown model 'no such model'; known: lecture-decoder")


def test_images_are_counted_with_the_charts(tmp_path):
    script = tmp_path / "page.py"
    script.write_text(
        "import numpy as np\nimport plotly.graph_objects as go\nimport streamlit as st\n"
        "st.plotly_chart(go.Figure(go.Heatmap(z=np.arange(12.0).reshape(3, 4))))\n"
        "st.image(np.full((8, 5, 3), 200, dtype=np.uint8))\n", encoding="utf-8")
    at, media = run_script(script)
    figures, images = sent_bytes(at, media)
    (spec,) = [el.proto.spec for el in at.get("plotly_chart")]
    assert figures == [len(spec.encode("utf-8"))]
    assert len(images) == 1 and images[0] == next(iter(media.values()))
    assert 50 < images[0] < 2000  # a small encoded image, not its URL
    assert np.isclose(sum(figures), len(spec))  # plotly's JSON is ASCII here


def test_vision_is_measured_with_its_own_model():
    from attnlab.analysis.machinery.bench_report import Payload
    from attnlab.model.registry import model_choices

    if "lecture-vit" not in model_choices(kind="image"):
        pytest.skip("lecture-vit not bundled")
    row = page_payload("vision", 16)
    assert row[Payload.MODEL] == "lecture-vit" and Payload.ERROR not in row, row
    at = apptest_run("vision", vit_model="lecture-vit")
    assert row[Payload.BYTES] == sum(len(el.proto.spec.encode("utf-8")) for el in at.get("plotly_chart"))
    assert 20_000 < row[Payload.BYTES] < 2_000_000
