"""The one count of label trouble on a page, shared by the tour's and the pages' label tests: for every Plotly
chart, the pairs of tick labels whose boxes (getBoundingClientRect, page px) overlap by more than 1 px², and the
titles cut (the title's box outside its chart's box, or past the window's left or right edge)."""

from __future__ import annotations

MIN_AREA = 1.0  # px²: boxes that share less than this do not overlap (anti-aliased edges)

LABELS_JS = """minArea => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const area = (a, b) => Math.max(0, Math.min(a[2], b[2]) - Math.max(a[0], b[0]))
                       * Math.max(0, Math.min(a[3], b[3]) - Math.max(a[1], b[1]));
  const W = window.innerWidth;
  return [...document.querySelectorAll('.js-plotly-plot')].map((fig, n) => {
    const holder = fig.closest('[class*="st-key-fig-"]');
    const key = holder ? [...holder.classList].find(c => c.startsWith('st-key-fig-')).slice(11) : `#${n}`;
    const ticks = [...fig.querySelectorAll('.xtick text, .ytick text')]
      .filter(e => e.textContent.trim()).map(e => [e.textContent, box(e)])
      .filter(([, b]) => b[2] > b[0] && b[3] > b[1]);
    const pairs = [];
    for (let i = 0; i < ticks.length; i++) for (let j = i + 1; j < ticks.length; j++)
      if (area(ticks[i][1], ticks[j][1]) > minArea) pairs.push([ticks[i][0], ticks[j][0]]);
    const outer = box(fig.querySelector('.main-svg') || fig);
    const cut = [...fig.querySelectorAll('.gtitle')].filter(e => e.textContent.trim()).map(e => [e.textContent, box(e)])
      .filter(([, b]) => b[2] > b[0] && (b[0] < outer[0] - 1 || b[2] > outer[2] + 1 || b[1] < outer[1] - 1
                                         || b[3] > outer[3] + 1 || b[0] < -1 || b[2] > W + 1)).map(([t]) => t);
    return {key, width: Math.round(outer[2] - outer[0]), ticks: ticks.length, pairs, cut};
  });
}"""


def label_report(page) -> list[dict]:
    """One row per Plotly chart on the page: {key (frame.chart's key), width (px), ticks (labels drawn), pairs
    (overlapping tick labels' texts), cut (titles cut)}."""
    return page.evaluate(LABELS_JS, MIN_AREA)


def troubles(page) -> dict:
    """{chart key: (overlapping pairs, titles cut, first pairs)} for each chart with any: empty when all is well."""
    return {r["key"]: (len(r["pairs"]), r["cut"], r["pairs"][:3]) for r in label_report(page)
            if r["pairs"] or r["cut"]}
