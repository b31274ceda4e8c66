"""Log axes label every tick with its whole number: no bare minor-tick digits on a projector."""

from __future__ import annotations

from attnlab.app.figures.lines import scaling
from attnlab.app.figures.style import log_ticks


def test_log_ticks_are_whole_numbers():
    t = log_ticks([0.003, 0.04])
    assert t["tickvals"] == [0.002, 0.005, 0.01, 0.02, 0.05] and t["ticktext"] == ["0.002", "0.005", "0.01", "0.02", "0.05"]
    t = log_ticks([128, 512, 4096])
    assert t["ticktext"] == ["100", "200", "500", "1k", "2k", "5k"]
    t = log_ticks([1e-6, 1.0])  # six decades: powers of ten only
    assert t["tickvals"] == [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0] and log_ticks([None, 0]) == {}


def test_scaling_axes_carry_labelled_ticks():
    rows = [{"backend": b, "T": T, "ms": T * f / 100, "peak_bytes": T * T * 4.0} for b, f in (("eager", 2), ("flash", 1))
            for T in (128, 256, 512, 1024)]
    fig = scaling(rows, title="t").to_dict()["layout"]
    assert fig["xaxis"]["ticktext"] == ["100", "200", "500", "1k"] and "dtick" not in fig["xaxis"]
    assert fig["yaxis"]["tickmode"] == "array" and all(t[0] != "." for t in fig["yaxis"]["ticktext"])
    assert fig["yaxis2"]["ticktext"] == ["0.05", "0.1", "0.2", "0.5", "1", "2", "5"]  # 0.0625 … 4 MiB: the panel's own ticks
