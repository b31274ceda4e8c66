"""`attnlab bench --browser --navigation`: the in-app walk measured alone and merged into the browser section."""

from __future__ import annotations

import json

from .conftest import _need_browser


def test_navigation_alone_is_merged_into_the_browser_section(tmp_path, capsys):
    _need_browser()
    from attnlab.cli.main import main

    out = tmp_path / "bench.json"
    row = {"page": "heatmaps", "case": "lecture-decoder", "warm_first_chart_s": 1.25, "errors": [],
           "widgets": {"head": {"median_s": 0.5, "times_s": [0.7, 0.5]}}}
    kept = {"rows": [row], "repeats": 5,
            "floor": {"warm_first_chart_s": 0.5}, "navigation": [{"page": "Masks", "first_visit_s": 9.0}]}
    out.write_text(json.dumps({"browser": kept, "other": 1}))
    assert main(["bench", "--browser", "--navigation", "--quick", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    section = got["browser"]
    assert got["other"] == 1 and section["rows"] == kept["rows"] and section["floor"] == kept["floor"]
    nav = section["navigation"]  # the old walk replaced by the quick one: two pages, twice
    assert [r["page"] for r in nav] == ["Heatmaps", "KV cache"], nav
    assert all(r["errors"] == [] and r["shown"] == "chart" and r["first_visit_s"] > 0 and r["revisit_s"] > 0
               for r in nav), nav
    assert section["navigation_query"] == "model=lecture-decoder"
    machine = section["navigation_machine"]
    assert len(machine["loadavg_start"]) == 3 and len(machine["loadavg_end"]) == 3 and machine["date"]
    printed = capsys.readouterr().out
    assert "Measured alone (`attnlab bench --browser --navigation`)" in printed and "| KV cache |" in printed
