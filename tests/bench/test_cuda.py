"""attnlab.bench.cuda's pure parts with fake timings: rows, the targets' judgement and the tables (the GPU
measurement itself runs only with `attnlab bench --device cuda` on a CUDA machine)."""

from __future__ import annotations

from attnlab.bench.cuda import CUDA_LENGTHS, CUDA_MODES, LONGEST_T, judge_targets, markdown, result_row


def fake_rows(lazy_scale: float = 1.1, skip_lazy_at_longest: bool = False) -> list[dict]:
    rows = []
    for T in CUDA_LENGTHS:
        for i, mode in enumerate(CUDA_MODES):
            if mode in ("eager_capture", "hf_eager_attentions") and T > 8192:
                rows.append(result_row(mode, T, skipped="needs ~300 GB, 70 GB free"))
                continue
            if mode == "lazy_capture" and T == LONGEST_T and skip_lazy_at_longest:
                rows.append(result_row(mode, T, skipped="out of GPU memory"))
                continue
            # ms: fused_flash T/1000, lazy_capture lazy_scale × that (round by round), the others (1 + i) × that
            base = T / 1000 * (lazy_scale if mode == "lazy_capture" else 1 + i)
            times = [base * f for f in (1.0, 1.02, 0.98, 1.01, 0.99)]
            rows.append(result_row(mode, T, times, peak_bytes=T * 1_000_000))
    return rows


def test_result_row_median_and_skips():
    r = result_row("fused_flash", 1024, [3.0, 1.0, 2.0, 5.0, 4.0], peak_bytes=7)
    assert r == {"mode": "fused_flash", "T": 1024, "median_ms": 3.0, "times_ms": [3.0, 1.0, 2.0, 5.0, 4.0],
                 "peak_bytes": 7}
    assert result_row("eager_capture", 32768, skipped="out of GPU memory") == {
        "mode": "eager_capture", "T": 32768, "skipped": "out of GPU memory"}


def test_targets_pass_with_a_small_lazy_overhead():
    t = judge_targets(fake_rows(1.03), overview_s=0.4)
    assert [x["name"] for x in t] == ["lazy_capture / fused_flash at every T",
                                      f"pooled 512×512 overview of one head at T={LONGEST_T}"]
    assert t[0]["measured"] == 1.03 and t[0]["passed"] is True and t[0]["note"].startswith("T=1024: 1.030")
    assert (t[1]["measured"], t[1]["passed"]) == (0.4, True)


def test_targets_fail_when_lazy_is_slow_or_the_overview_is():
    t = judge_targets(fake_rows(1.1, skip_lazy_at_longest=True), overview_s=1.7)
    assert t[0]["measured"] == 1.1 and t[0]["passed"] is False
    assert f"T={LONGEST_T}" not in t[0]["note"]  # lazy did not run there: no ratio
    assert (t[1]["measured"], t[1]["passed"]) == (1.7, False)


def test_targets_not_measured():
    t = judge_targets([result_row("fused_flash", 1024, [1.0])])
    assert [x["passed"] for x in t] == [None, None] and t[0]["measured"] is None


def test_markdown_tables():
    rows = fake_rows(1.03)
    out = {"device": "NVIDIA H100", "dtype": "bfloat16", "torch": "2.x", "repeats": 5, "warmup": 2, "rows": rows,
           "targets": judge_targets(rows, 0.4)}
    md = markdown(out)
    assert md.startswith("CUDA: NVIDIA H100, bfloat16, torch 2.x; medians of 5 CUDA-event timings after 2 warm-up.")
    assert "| T | fused_flash | lazy_capture | eager_capture | hf_eager_attentions | hf_sdpa |" in md
    lines = md.splitlines()
    t32k = [line for line in lines if line.startswith("| 32,768 |")]
    assert len(t32k) == 2  # one row in the time table, one in the memory table
    assert t32k[0] == "| 32,768 | 32.8 | 33.8 | skipped | skipped | 163.8 |"
    assert t32k[1] == "| 32,768 | 32.77 | 32.77 | skipped | skipped | 32.77 |"
    assert "| lazy_capture / fused_flash at every T | ≤ 1.05 | 1.03 | yes |" in md
