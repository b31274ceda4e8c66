"""Issue 19 in Debian's chromium: the head matrix switches heads and layers in the browser (the page then follows:
issue 31) and shows exactly the captured numbers; the browser benchmark's quick mode and a quick class (5 sessions, 60 s)
run without errors. Times are the benchmark's business (`attnlab bench --browser` / `--class`): here only
errors, mixed results and data are asserted."""

from __future__ import annotations

import re

import numpy as np
from attnlab.bench.browser import measure_page, run_browser
from attnlab.bench.chromium import WATCH_RUN_JS, frames, wait_chart
from attnlab.bench.classload import run_class
from attnlab.bench.widgets import chart_button
from attnlab.model.registry import load

from tests.app.conftest import z_of
from tests.e2e.conftest import EXC

TEXT = "Ada sat on the mat"
VISIBLE_JS = """() => { const el = document.querySelector('.st-key-fig-head .js-plotly-plot');
  const i = el.data.findIndex(t => t.visible === true || t.visible === undefined);
  const z = el.data[i].z;  // as sent (a base64 spec) or, once plotly decoded it, arrays
  const out = z.bdata ? {spec: z} : {rows: Array.from(z, r => Array.from(r, v => v === null ? NaN : v))};
  return {...out, index: i, head: el.layout.meta.heads[i], title: el.layout.title.text}; }"""


def visible(page) -> dict:
    out = page.evaluate(VISIBLE_JS)
    out["title"] = re.sub(r"</?b>", "", out["title"])  # Streamlit's theme draws titles bold
    if "spec" in out:
        out["z"] = z_of({"z": out["spec"]})
    else:
        out["z"] = np.array([[np.nan if v is None else v for v in r] for r in out["rows"]], dtype=np.float64)
    return out


def test_chart_buttons_switch_in_the_browser_with_the_captured_numbers(st_app, page):
    page.goto(f"{st_app['url']}/heatmaps?model=random-decoder&text={TEXT.replace(' ', '%20')}&layer=1&head=0")
    wait_chart(page, "head")
    lm = load("random-decoder")
    run = lm.capture(lm.encode(TEXT))
    stack, mask = run.matrices("self"), run.mask_of("self")  # [L, H, q, k], [q, k]
    first = visible(page)
    assert first["head"] == [1, 0] and first["title"] == "layer 1, head 0"
    for menu, value, want in (("head", 1, [1, 1]), ("layer", 0, [0, 1]), ("head", 0, [0, 0]), ("head", 3, [0, 3])):
        chart_button(page, "head", menu, value)
        frames(page)  # two frames: the browser has switched, whatever the run the press starts is doing
        got = visible(page)
        assert got["head"] == want and got["title"] == f"layer {want[0]}, head {want[1]}"
        expect = np.where(mask, stack[want[0], want[1]], np.nan)
        assert np.allclose(got["z"], expect, atol=1e-6, equal_nan=True)
    wait_chart(page, "head")
    assert visible(page)["head"] == [0, 3]  # the runs the presses started left the browser's switch as it was
    assert "head=3" in page.url and "layer=0" in page.url  # and the page follows the last press (app.chart_link)
    assert page.locator(EXC).count() == 0 and page.errors == []


def test_browser_benchmark_quick_mode_runs_without_errors(browser):
    out = run_browser(quick=True, repeats=2, browser=browser)
    (row,) = out["rows"]
    assert row["errors"] == [], row["errors"]
    assert row["page"] == "heatmaps" and row["warm_first_chart_s"] > 0
    assert row["widgets"]["head"]["median_s"] > 0 and len(row["widgets"]["head"]["times_s"]) == 3
    nav = out["navigation"]  # quick mode walks two pages of the sidebar, twice
    assert [r["page"] for r in nav] == ["Heatmaps", "KV cache"], nav
    assert all(r["errors"] == [] and r["shown"] == "chart" and r["first_visit_s"] > 0 and r["revisit_s"] > 0
               for r in nav), nav


def test_a_chart_button_the_chart_lacks_is_a_note_not_an_error(browser, st_app):
    """Masks' panels on the story preset switch heads in the browser but not layers (one layer's heads fill the
    byte budget): the benchmark notes that, it measures the head buttons."""
    row = measure_page(browser, st_app["url"], "masks", "model=lecture-decoder", ["chart head", "chart layer"], 1,
                       None, lambda msg: None)
    assert row["errors"] == [], row["errors"]
    assert row["widgets"]["chart layer"] == {"note": "the chart has no layer buttons at this size"}
    assert row["widgets"]["chart head"]["median_s"] > 0


def test_a_quick_class_sees_only_its_own_tokens(browser):
    out = run_class(5, 60, browser=browser)
    assert out["errors"] == 0 and out["mixed"] == 0, out["notes"]
    assert out["steps"] >= 10 and out["p95_s"] is not None
    assert len(out["rss_mb"]) >= 3  # the server's memory was sampled


PANELS_JS = """() => { const el = document.querySelector('.st-key-fig-panels .js-plotly-plot');
  return {title: el.layout.title.text, shown: el.data.filter(t => t.visible === true).map(t => [t.name,
    t.z.bdata ? {spec: t.z} : {rows: Array.from(t.z, r => Array.from(r, v => v === null ? NaN : v))}])}; }"""


def test_masks_panels_switch_together_in_the_browser_with_the_captured_numbers(st_app, page):
    page.goto(f"{st_app['url']}/masks?model=random-decoder&text={TEXT.replace(' ', '%20')}&layer=0&head=0")
    wait_chart(page, "panels")
    lm = load("random-decoder")
    inp = lm.encode(TEXT)
    runs = {"A": lm.capture(inp), "B": lm.capture(inp, mask=("bidirectional",))}  # the decoder's default B
    page.evaluate(WATCH_RUN_JS)
    for menu, value, (lyr, h) in (("head", 2, (0, 2)), ("layer", 1, (1, 2)), ("head", 0, (1, 0))):
        chart_button(page, "panels", menu, value)
        frames(page)
        got = page.evaluate(PANELS_JS)
        assert re.sub(r"</?b>", "", got["title"]) == f"layer {lyr}, head {h}"
        shown = {name.split(" · ")[0]: z_of({"z": z["spec"]}) if "spec" in z else
                 np.array([[np.nan if v is None else v for v in r] for r in z["rows"]], dtype=np.float64)
                 for name, z in got["shown"]}
        assert len(shown) == len(got["shown"]) == 6  # one trace per panel
        for label, run in runs.items():
            rec = run.records[run.sites("self")[lyr]]
            m = rec.mask_for()
            assert np.allclose(shown[f"{label}: attention weights"], np.where(m, rec.pattern(h), np.nan),
                               atol=1e-6, equal_nan=True)
            assert np.allclose(shown[f"{label}: scores with −∞ where masked"],
                               np.where(m, rec.scores(h), np.nan), atol=1e-5, equal_nan=True)
            assert (~np.isnan(shown[f"{label}: mask (grey = hidden)"]) == m).all()
    assert page.evaluate("() => window.__ran") is False  # no server round trip
    assert "head=0" in page.url and "layer=0" in page.url
    assert page.locator(EXC).count() == 0 and page.errors == []
