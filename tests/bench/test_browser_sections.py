"""The `browser` and `class_load` sections of the bench JSON: the reader accepts them, the tables show them."""

from __future__ import annotations

import json

from attnlab.analysis.machinery.bench_report import SCHEMA, Browser, ClassLoad, Top, read_browser
from attnlab.bench.classload import rss_slope
from attnlab.bench.tables import browser_markdown, class_markdown, markdown

ROW = {Browser.PAGE: "heatmaps", Browser.CASE: "lecture-decoder", Browser.QUERY: "model=lecture-decoder",
       Browser.COLD: 9.5, Browser.WARM: 1.25, Browser.LOAD_START: [1.5, 1, 1], Browser.LOAD_END: [2.0, 1, 1],
       Browser.WIDGETS: {"head": {Browser.MEDIAN: 0.62, Browser.TIMES: [0.9, 0.6, 0.62, 0.7]},
                         "chart head": {Browser.MEDIAN: 0.08, Browser.TIMES: [0.1, 0.08, 0.07, 0.09]},
                         "query token": {Browser.ERROR: "TimeoutError: …"}},
       Browser.ERRORS: ["query token: TimeoutError"]}
SECTION = {Browser.ROWS: [ROW], Browser.REPEATS: 3, Browser.QUICK: False, Browser.WALL: 60.0}
CLASS = {ClassLoad.SESSIONS: 5, ClassLoad.SECONDS: 90.2, ClassLoad.ACTIVE: 61.0, ClassLoad.STEPS: 40,
         ClassLoad.ERRORS: 0, ClassLoad.MIXED: 0, ClassLoad.P50: 1.2, ClassLoad.P95: 2.5,
         ClassLoad.RSS: [[0, 500], [5, 510]], ClassLoad.RSS_SLOPE: 0.4, ClassLoad.LOAD: [[1.0, 1, 1], [3.0, 1, 1]],
         ClassLoad.NOTES: []}


def test_browser_table_has_one_row_per_case_and_says_what_failed():
    lines = browser_markdown(SECTION)
    header = next(x for x in lines if x.startswith("| page |"))
    assert header.split(" | ")[-3:] == ["head", "chart head", "query token |"]
    (row,) = [x for x in lines if x.startswith("| heatmaps |")]
    assert row == "| heatmaps | lecture-decoder | 1.5 → 2.0 | 9.500 | 1.250 | 0.620 | 0.080 | error |"
    assert "- heatmaps (lecture-decoder): query token: TimeoutError" in lines


def test_class_table():
    (row,) = [x for x in class_markdown(CLASS) if x.startswith("| 5 |")]
    assert row == "| 5 | 90.2 | 40 | 0 | 0 | 1.200 | 2.500 | 0.40 | 1.0 → 3.0 |"


def test_reader_takes_the_sections_and_refuses_other_files(tmp_path):
    p = tmp_path / "b.json"
    p.write_text(json.dumps({Top.SCHEMA: SCHEMA, Top.BROWSER: SECTION, Top.CLASS: CLASS}))
    got = read_browser(p)
    assert got[Top.BROWSER][Browser.ROWS][0][Browser.WARM] == 1.25 and got[Top.CLASS][ClassLoad.P95] == 2.5
    assert markdown({Top.BROWSER: SECTION, Top.CLASS: CLASS}).count("| heatmaps |") == 1
    p.write_text(json.dumps({Top.SCHEMA: "other/1", Top.BROWSER: SECTION}))
    assert read_browser(p) is None
    p.write_text(json.dumps({Top.SCHEMA: SCHEMA, Top.BROWSER: {Browser.ROWS: [{"page": 3}]}}))
    assert read_browser(p) is None
    assert read_browser(tmp_path / "missing.json") is None


def test_rss_slope_after_warm_up():
    rss = [[t * 5.0, 400.0 + (100 if t < 4 else 0) + 0.5 * t] for t in range(12)]  # a drop, then 6 MB/min
    assert abs(rss_slope(rss) - 6.0) < 1e-9
    assert rss_slope(rss[:3]) is None


WS_RUN = {ClassLoad.SESSIONS: 30, ClassLoad.N_REPLICAS: 1, ClassLoad.SECONDS: 608.5, ClassLoad.ACTIVE: 604.2,
          ClassLoad.STEPS: 6029, ClassLoad.ERRORS: 0, ClassLoad.MIXED: 0, ClassLoad.P50: 0.059, ClassLoad.P95: 0.24,
          ClassLoad.BY_STEP: {"head": {"n": 1197, "p50_s": 0.058, "p95_s": 1.25}},
          ClassLoad.RSS: [[0.1, 75.5], [600.2, 442.7]], ClassLoad.RSS_SLOPE: 0.68,
          ClassLoad.LOAD: [[2.82, 1, 1], [0.79, 1, 1]], ClassLoad.NOTES: ["Ada text: an error"]}


def test_ws_class_table_and_floor_line():
    from attnlab.bench.tables import ws_class_markdown

    lines = ws_class_markdown([WS_RUN])
    (row,) = [x for x in lines if x.startswith("| 30 |")]
    assert row == ("| 30 | 1 | 608.5 | 6029 | 0 | 0 | 0.059 | 0.240 | — | — | — | 1.250 | — | 75.5 → 442.7 | 0.68 | "
                   "2.82 → 0.79 |")
    assert "- 30 sessions, 1 replicas: Ada text: an error" in lines
    floor = browser_markdown(SECTION | {Browser.FLOOR: {Browser.WARM: 2.7123, Browser.WARM_TIMES: [3.0, 2.7]},
                                        Browser.FLOOR_PLAIN: {Browser.WARM: 1.6712, Browser.WARM_TIMES: [1.9, 1.7]}})
    assert any("paints its first chart in 2.712 s" in x for x in floor)
    assert any("one line of text instead of the chart shows it in 1.671 s" in x for x in floor)


def test_view_targets_judge_the_browser_and_class_sections():
    from attnlab.bench.view_targets import view_targets

    masks = {Browser.PAGE: "masks", Browser.CASE: "lecture-decoder", Browser.WARM: 5.2,
             Browser.WIDGETS: {"layer": {Browser.MEDIAN: 1.9}, "head": {Browser.MEDIAN: 1.5},
                               "preset": {Browser.MEDIAN: 0.9}}}
    long = {Browser.PAGE: "heatmaps", Browser.CASE: "random-long-decoder T=512", Browser.WARM: 0.8,
            Browser.WIDGETS: {"head": {Browser.MEDIAN: 1.4}, "chart head": {Browser.MEDIAN: 0.14},
                              "chart layer": {Browser.MEDIAN: 0.13}}}
    out = {Top.BROWSER: SECTION | {Browser.ROWS: [ROW, masks, long], Browser.FLOOR: {Browser.WARM: 2.7},
                                   Browser.FLOOR_PLAIN: {Browser.WARM: 1.65}},
           Top.CLASS_WS: [WS_RUN | {ClassLoad.N_REPLICAS: 2, ClassLoad.BY_STEP: {"head": {"p95_s": 0.1}}}, WS_RUN]}
    got = {t["name"]: (t["measured"], t["passed"], t["note"]) for t in view_targets(out)}
    # heatmaps switches with its chart buttons (0.08 s); masks has only the widgets (1.9 s)
    assert got["head or layer switch in chromium at T ≤ 128"] == (1.9, False, "slowest: masks (widgets)")
    assert got["head or layer switch in chromium at T = 512"] == (0.14, True, "slowest: heatmaps (chart buttons)")
    assert got["any other widget in chromium"][:2] == (0.9, True)  # the failed query token has no median
    assert got["warm first chart in chromium"] == (5.2, False, "slowest: masks (lecture-decoder); floor (one Plotly "
                                                               "chart alone) 2.70 s; Streamlit's floor (one "
                                                               "line of text) 1.65 s")
    # the one-server run is judged, not the easier two-replica one
    assert got["head switch p95 under 30 sessions"][:2] == (1.25, False)
    assert got["any step p95 under 30 sessions"][:2] == (0.24, True)
    assert got["errors + mixed results under 30 sessions"][:2] == (0, True)
    assert got["server memory after warm-up under 30 sessions"][:2] == (0.68, True)
    assert all(t["passed"] is None for t in view_targets({}))


NAV = [{Browser.PAGE: "Heatmaps", Browser.FIRST_VISIT: 0.8, Browser.REVISIT: 0.4, Browser.SHOWN: "chart",
        Browser.ERRORS: []},
       {Browser.PAGE: "Rollout & attribution", Browser.FIRST_VISIT: 2.3, Browser.REVISIT: 0.9,
        Browser.SHOWN: "chart", Browser.ERRORS: ["revisit_s: TimeoutError: x"]}]


def test_navigation_table_and_target():
    from attnlab.bench.view_targets import view_targets

    section = SECTION | {Browser.NAVIGATION: NAV, Browser.NAV_QUERY: "model=lecture-decoder"}
    lines = browser_markdown(section)
    assert "| Heatmaps | 0.800 | 0.400 |" in lines and "| Rollout & attribution | 2.300 | 0.900 |" in lines
    assert "- navigation to Rollout & attribution: revisit_s: TimeoutError: x" in lines
    (t,) = [t for t in view_targets({Top.BROWSER: section}) if t["name"].startswith("sidebar click")]
    assert t["measured"] == 2.3 and t["passed"] is False and t["note"] == "slowest: Rollout & attribution"
    (t,) = [t for t in view_targets({Top.BROWSER: SECTION}) if t["name"].startswith("sidebar click")]
    assert t["measured"] is None and t["passed"] is None
    alone = section | {Browser.NAV_MACHINE: {"date": "2026-11-26T03:00:00+00:00", "loadavg_start": [0.31, 0, 0],
                                             "loadavg_end": [1.26, 0, 0]}}
    assert any(line.endswith("Measured alone (`attnlab bench --browser --navigation`) on 2026-11-26T03:00:00+00:00, "
                             "load 0.3 → 1.3.") for line in browser_markdown(alone))
    assert not any("Measured alone" in line for line in lines)


def test_the_tour_is_judged_on_its_slowest_cached_next_and_kept_out_of_other_widgets():
    from attnlab.bench.view_targets import view_targets

    tour = {Browser.PAGE: "tour", Browser.CASE: "lecture-decoder", Browser.WARM: 1.1, Browser.WIDGETS: {
        "next step, first visit": {Browser.MEDIAN: 2.0, Browser.TIMES: [2.0, 3.5, 1.0]},
        "next step, cached": {Browser.MEDIAN: 0.9, Browser.TIMES: [0.9, 1.4, 0.7]}}}
    got = {t["name"]: t for t in view_targets({Top.BROWSER: {Browser.ROWS: [ROW, tour]}})}
    t = got["tour: Next → the step's chart (every step)"]
    assert (t["measured"], t["passed"]) == (1.4, True) and "slowest 3.50 s" in t["note"]
    assert got["any other widget in chromium"]["measured"] is None  # the tour's walks are not "other widgets"
    tour[Browser.WIDGETS]["next step, cached"][Browser.TIMES] = [0.9, 1.6]
    again = {t["name"]: t for t in view_targets({Top.BROWSER: {Browser.ROWS: [tour]}})}
    assert again["tour: Next → the step's chart (every step)"]["passed"] is False
