"""`attnlab bench` (the CPU run) writes over the file it was given only what it measured: the sections that other
commands measured and merged in (browser, class, real sizes, costs) stay, in the JSON and on the markdown page."""

from __future__ import annotations

import json
from pathlib import Path

from attnlab.analysis.machinery.bench_report import Top
from attnlab.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CHECKED_IN = json.loads((ROOT / "docs" / "benchmarks.json").read_text(encoding="utf-8"))


def test_a_plain_run_keeps_the_sections_it_did_not_measure(tmp_path, monkeypatch, capsys):
    """The documented regenerate command dropped docs/benchmarks.json's browser, class and real-size sections (and
    their tables and targets) because the plain run wrote its own measurements alone."""
    import attnlab.bench.report

    fresh = {k: v for k, v in CHECKED_IN.items() if k not in Top.MERGED}
    fresh[Top.MACHINE] = fresh[Top.MACHINE] | {"date": "2031-01-01T00:00:00+00:00"}  # this run's, not the saved one's
    fresh[Top.TARGETS] = []
    monkeypatch.setattr(attnlab.bench.report, "measure", lambda **kw: json.loads(json.dumps(fresh)))
    out, docs = tmp_path / "b.json", tmp_path / "b.md"
    out.write_text(json.dumps(CHECKED_IN), encoding="utf-8")
    assert main(["bench", "--no-payload", "--out", str(out), "--docs", str(docs)]) == 0
    capsys.readouterr()
    got = json.loads(out.read_text(encoding="utf-8"))
    assert got[Top.MACHINE]["date"] == "2031-01-01T00:00:00+00:00"
    kept = [k for k in Top.MERGED if k in CHECKED_IN]
    assert {Top.REAL_SIZE, Top.BROWSER, Top.CLASS_WS} <= set(kept)
    assert all(got[k] == CHECKED_IN[k] for k in kept)
    names = {t["name"] for t in got[Top.TARGETS]}  # judged again: the browser and class targets read those sections
    assert "head or layer switch in chromium at T ≤ 128" in names and "lazy_capture / fused at T=1024" in names
    page = docs.read_text(encoding="utf-8")
    shapes = list(CHECKED_IN[Top.REAL_SIZE])
    assert shapes and all(f"| {s} | attnlab |" in page and f"| {s} | transformers |" in page for s in shapes)
    assert "2031-01-01" in page


def test_a_run_without_a_saved_file_writes_its_own_measurements(tmp_path, monkeypatch, capsys):
    import attnlab.bench.report

    fresh = {k: v for k, v in CHECKED_IN.items() if k not in Top.MERGED}
    monkeypatch.setattr(attnlab.bench.report, "measure", lambda **kw: json.loads(json.dumps(fresh)))
    out = tmp_path / "b.json"
    assert main(["bench", "--no-payload", "--out", str(out)]) == 0
    capsys.readouterr()
    got = json.loads(out.read_text(encoding="utf-8"))
    assert not set(Top.MERGED) & set(got) and got[Top.RESULTS] == CHECKED_IN[Top.RESULTS]


def test_a_saved_file_that_is_not_json_stops_the_run_before_it_measures(tmp_path, monkeypatch, capsys):
    import attnlab.bench.report

    def measured(**kw):
        raise AssertionError("measured before reading the file it merges into")

    monkeypatch.setattr(attnlab.bench.report, "measure", measured)
    out = tmp_path / "b.json"
    out.write_text("{half a file", encoding="utf-8")
    assert main(["bench", "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"attnlab: error: {out} is not JSON; move it away or pass another --out\n"
    assert out.read_text(encoding="utf-8") == "{half a file"
