"""Readable at a distance: side-by-side matrices are drawn the same size (each with its colour bar) and label
every token of a short text."""

from __future__ import annotations

from tests.app.conftest import ok, open_page, specs

TEXT = "fenna is twelve . fenna has a parrot . garo is seven . garo owns a rabbit . what pet does garo have ?"


def _triple(at, prefix: str) -> list[dict]:
    return [s for s in specs(at) if (s["layout"].get("title", {}).get("text") or "").startswith(prefix)]


def test_kv_cache_matrices_same_size_every_query_labelled():
    at = open_page("kv_cache", model="lecture-decoder", text=TEXT)
    ok(at)
    figs = [s for s in specs(at) if s["layout"].get("title", {}).get("text", "").startswith(
        ("stitched from", "one uncached pass", "difference (max"))]
    assert len(figs) == 3
    assert len({f["layout"]["height"] for f in figs}) == 1
    assert all(t.get("showscale", True) is not False for f in figs for t in f["data"] if t["type"] == "heatmap")
    n = len(figs[1]["layout"]["yaxis"]["ticktext"])
    assert n == len(TEXT.split()) + 1  # [BOS] and every word: no label skipped


def test_kv_cache_matrices_label_every_query_of_the_default_text():
    """The default sample (64 tokens): every query row of the three matrices labelled, the three the same size."""
    at = open_page("kv_cache", model="lecture-decoder")
    ok(at)
    figs = [s for s in specs(at) if s["layout"].get("title", {}).get("text", "").startswith(
        ("stitched from", "one uncached pass", "difference (max"))]
    T = len(figs[0]["layout"]["yaxis"]["ticktext"])
    assert T == 64 and all(f["layout"]["yaxis"]["ticktext"] == figs[0]["layout"]["yaxis"]["ticktext"] for f in figs)
    assert len({(f["layout"]["height"], f["layout"]["margin"]["l"], f["layout"]["margin"]["r"]) for f in figs}) == 1
    assert figs[0]["layout"]["height"] >= 15 * T  # room for each label
