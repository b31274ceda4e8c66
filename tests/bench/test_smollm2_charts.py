"""bench/smollm2_charts.py: its presets are what it says (≤ 64 tokens, counted by each model's tokenizer), and a
section renders as its table and targets."""

from urllib.parse import parse_qs

from attnlab.analysis.machinery.bench_report import Browser, Target, Top
from attnlab.app.presets import presets
from attnlab.bench.smollm2_charts import SMOL_CASES, SMOL_PAGES, smollm2_chart_targets, smollm2_markdown
from attnlab.bench.tables import browser_markdown
from attnlab.model.registry import load


def test_cases_are_presets_of_at_most_64_tokens():
    for label, query, tokens in SMOL_CASES:
        q = {k: v[0] for k, v in parse_qs(query).items()}
        assert q["model"] == label
        p = next(p for p in presets(label) if p.id == q["preset"])
        assert load(label).encode(p.text).ids.shape[1] == tokens <= 64


def test_section_renders_its_ratio_and_targets():
    rows = [{Browser.PAGE: page, Browser.ERRORS: [], Browser.RATIO: r,
             "lecture-decoder": {Browser.WARM: 0.8, Browser.TOKENS: 14},
             "smollm2": {Browser.WARM: 0.8 * r, Browser.TOKENS: 14}} for page, r in zip(SMOL_PAGES, (1.2, 1.7))]
    section = {Browser.ROWS: rows, Browser.REPEATS: 5, Browser.LOAD_START: [2.0], Browser.LOAD_END: [3.0]}
    table = smollm2_markdown(section)
    assert "| explore | 0.80 (14 tokens) | 0.96 (14 tokens) | 1.20 | ≤ 1.5 |" in table
    assert "| heatmaps | 0.80 (14 tokens) | 1.36 (14 tokens) | 1.70 | ≤ 1.5 |" in table
    out = {Top.BROWSER: {Browser.ROWS: [], Browser.REPEATS: 5, Browser.SMOLLM2: section}}
    assert [(t[Target.MEASURED], t[Target.PASSED]) for t in smollm2_chart_targets(out)] == [(1.2, True), (1.7, False)]
    assert "| explore | 0.80 (14 tokens)" in "\n".join(browser_markdown(out[Top.BROWSER]))
    assert smollm2_chart_targets({Top.BROWSER: {Browser.SMOLLM2: {Browser.ERROR: "TimeoutError"}}}) == []
    assert "failed (TimeoutError)" in smollm2_markdown({Browser.ERROR: "TimeoutError"})[1]
