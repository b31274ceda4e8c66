"""`attnlab bench --browser`: Explore's and Heatmaps' first chart on smollm2 (30 layers × 9 heads) beside
lecture-decoder's, each on a preset of at most 64 tokens, in one run on one warm server (issue 32: ≤ 1.5×).

Each round opens every (page, model) once in a fresh browser context, the models interleaved, so a busy
machine slows both alike within a round; the ratio is the median over rounds of smollm2's time / lecture-
decoder's. A first, uncounted round loads the models and fills the server's caches.
"""

from __future__ import annotations

import statistics
import time

from attnlab.analysis.machinery.bench_report import Browser
from attnlab.bench.chromium import errors_on, load_avg, new_page, wait_chart

# (label, URL query, tokens of the preset's text): 14 each, so the two pages draw the same size of rows;
# not the story presets, whose Explore also runs the other model (app/story_view.py). Checked by the tests.
SMOL_CASES = (("lecture-decoder", "model=lecture-decoder&preset=decoder-induction-2", 14),
              ("smollm2", "model=smollm2&preset=smollm2-ioi", 14))
SMOL_PAGES = {"explore": ("explore", "explore-rows"), "heatmaps": ("heatmaps", "mosaic")}  # url path, first chart
RATIO_LIMIT = 1.5


def first_chart(browser, url: str, path: str, query: str, key: str) -> tuple[float, list[str]]:
    """Seconds from navigation to the chart `key` painted, in a fresh context; the page's errors."""
    ctx, page = new_page(browser)
    try:
        t0 = time.perf_counter()
        page.goto(f"{url}/{path}?{query}", wait_until="commit")
        wait_chart(page, key)
        return time.perf_counter() - t0, errors_on(page)
    finally:
        ctx.close()


def smollm2_first_charts(browser, url: str, repeats: int, progress=None) -> dict:
    """{ROWS: per page {PAGE, per case label {WARM (median), WARM_TIMES, QUERY, TOKENS}, RATIO, ERRORS},
    REPEATS, LOAD_START, LOAD_END}."""
    say = progress or (lambda msg: None)
    out = {Browser.ROWS: [], Browser.REPEATS: repeats, Browser.LOAD_START: load_avg()}
    for page_name, (path, key) in SMOL_PAGES.items():
        times, errors = {label: [] for label, _, _ in SMOL_CASES}, []
        for n in range(repeats + 1):  # round 0 warms the server (model load, the page's numbers): not counted
            for label, query, _ in SMOL_CASES:
                dt, errs = first_chart(browser, url, path, query, key)
                errors += [f"{label}: {e[:200]}" for e in errs]
                if n:
                    times[label].append(round(dt, 4))
        row = {Browser.PAGE: page_name, Browser.ERRORS: errors,
               Browser.RATIO: round(statistics.median(s / d for s, d in zip(times["smollm2"],
                                                                           times["lecture-decoder"])), 3)}
        for label, query, tokens in SMOL_CASES:
            row[label] = {Browser.WARM: round(statistics.median(times[label]), 4), Browser.WARM_TIMES: times[label],
                          Browser.QUERY: query, Browser.TOKENS: tokens}
        say(f"{page_name}: smollm2 {row['smollm2'][Browser.WARM]} s, lecture-decoder "
            f"{row['lecture-decoder'][Browser.WARM]} s, ratio {row[Browser.RATIO]}")
        out[Browser.ROWS].append(row)
    out[Browser.LOAD_END] = load_avg()
    return out


def smollm2_markdown(section: dict) -> list[str]:
    """The smollm2 rows of the browser section as a table."""
    if Browser.ERROR in section:
        return ["", f"smollm2 beside lecture-decoder in chromium: failed ({section[Browser.ERROR]})."]
    lines = ["", f"smollm2 beside lecture-decoder in chromium (one warm server, fresh contexts, models interleaved; "
                 f"medians of {section[Browser.REPEATS]}; load {section[Browser.LOAD_START][0]} → "
                 f"{section[Browser.LOAD_END][0]}): navigation → first chart painted, seconds.", "",
             "| page | lecture-decoder | smollm2 | smollm2 / lecture-decoder (median of per-round ratios) | target |",
             "|---|---|---|---|---|"]
    for r in section[Browser.ROWS]:
        d, s = r["lecture-decoder"], r["smollm2"]
        lines.append(f"| {r[Browser.PAGE]} | {d[Browser.WARM]:.2f} ({d[Browser.TOKENS]} tokens) | {s[Browser.WARM]:.2f} "
                     f"({s[Browser.TOKENS]} tokens) | {r[Browser.RATIO]:.2f} | ≤ {RATIO_LIMIT} |")
    lines += [f"- {r[Browser.PAGE]}: {e}" for r in section[Browser.ROWS] for e in r[Browser.ERRORS]]
    return lines


def smollm2_chart_targets(out: dict) -> list[dict]:
    """Per page: smollm2's first chart within RATIO_LIMIT × lecture-decoder's (None: not measured in this run)."""
    from attnlab.analysis.machinery.bench_report import Target, Top

    section = (out.get(Top.BROWSER) or {}).get(Browser.SMOLLM2) or {}
    if not section or Browser.ERROR in section:
        return []
    rows = {r[Browser.PAGE]: r for r in section[Browser.ROWS]}
    t = []
    for page in SMOL_PAGES:
        r = rows.get(page)
        ratio = None if r is None else r[Browser.RATIO]
        note = ("not measured" if r is None else f"medians {r['smollm2'][Browser.WARM]:.2f} s ({r['smollm2'][Browser.TOKENS]} "
                f"tokens) vs {r['lecture-decoder'][Browser.WARM]:.2f} s ({r['lecture-decoder'][Browser.TOKENS]} tokens), "
                f"{section[Browser.REPEATS]} interleaved rounds")
        t.append({Target.NAME: f"smollm2 {page} first chart / lecture-decoder's in chromium (≤ 64 tokens)",
                  Target.TARGET: f"≤ {RATIO_LIMIT}", Target.MEASURED: ratio,
                  Target.PASSED: None if ratio is None else ratio <= RATIO_LIMIT, Target.NOTE: note})
    return t
