"""`attnlab bench --real-size`: refuses unknown shapes in one line; the full section (slow) measures ours and
transformers side by side on a ~100 M Llama and renders into the benchmark JSON and markdown."""

from __future__ import annotations

import json

import pytest
from attnlab.analysis.machinery.bench_report import Top
from attnlab.bench.tables import real_size_lines
from attnlab.cli.main import main


def test_unknown_shape_exits_2_with_one_line(capsys, tmp_path):
    assert main(["bench", "--real-size", "--shapes", "llama-70b", "--out", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown shape 'llama-70b'" in err and "llama-3.2-1b" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_real_size_section_side_by_side(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["bench", "--real-size", "--shapes", "llama-100m", "--checkpoints", str(tmp_path / "ck"),
                 "--repeats", "1", "--out", str(out)]) == 0
    section = json.loads(out.read_text())[Top.REAL_SIZE]["llama-100m"]
    for who in ("attnlab", "transformers"):
        load, cap = section[who]["load"], section[who]["capture"]
        assert load["n_params"] == 99_496_704 and load["weight_bytes"] == 2 * 99_496_704
        assert 0 < load["peak_bytes"] and 0 < load["held_bytes"] and load["seconds"] > 0
        assert {"T128", "T512", "pattern_s"} <= set(cap) and cap["T512"]["forward_s"] > 0
    assert section["attnlab"]["load"]["peak_bytes"] <= 1.25 * section["attnlab"]["load"]["weight_bytes"]
    assert set(section["pages"]) == {"explore", "heatmaps"} and all(p["bytes"] for p in section["pages"].values())
    lines = "\n".join(real_size_lines({Top.REAL_SIZE: {"llama-100m": section}}))
    assert "| llama-100m | attnlab |" in lines and "| llama-100m | transformers |" in lines
