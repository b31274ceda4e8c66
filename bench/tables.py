"""A benchmark result as markdown tables: what `attnlab bench` prints and docs/benchmarks.md keeps."""

from __future__ import annotations

from attnlab.analysis.machinery.bench_report import Browser, ClassLoad, Payload, Top
from attnlab.bench.specs import GB, MODES
from attnlab.bench.targets import _row, paired_ratio


def _fmt(v, unit: str = "s") -> str:
    if v is None:
        return "—"
    if unit == "s":
        return f"{v:.3f}" if v < 10 else f"{v:.1f}"
    if unit == "GB":
        return f"{v / GB:.2f}"
    if unit == "MB":
        return f"{v / 1e6:.2f}"
    return f"{v:.2f}"


def _cell(row: dict, key: str, unit: str = "s") -> str:
    if not row:
        return "n/a"
    if "skipped" in row:
        return "skipped"
    if key in row:
        return _fmt(row[key], unit)
    return "error" if ("error" in row or "memory_error" in row) else "—"


def _load(avg) -> str:
    """The 1-minute load average of a loadavg triple, or '?'."""
    return f"{avg[0]:.1f}" if avg else "?"


def browser_markdown(section: dict) -> list[str]:
    """The `browser` section: one row per (page, case); seconds, medians."""
    rows = section[Browser.ROWS]
    names = [n for n in dict.fromkeys(w for r in rows for w in r[Browser.WIDGETS])]
    lines = [f"In chromium (`attnlab bench --browser{' --quick' if section.get(Browser.QUICK) else ''}`): seconds, "
             f"medians of {section[Browser.REPEATS]} (widget: change → Streamlit idle and the chart's data changed "
             "and painted; the first change, which warms the caches, is not counted). `chart …` = the head matrix's "
             "own Plotly buttons, switched in the browser with no server round trip.", "",
             "| page | case | load avg (start → end) | cold first chart | warm first chart | "
             + " | ".join(names) + " |", "|" + "---|" * (len(names) + 5)]
    for r in rows:
        cells = []
        for n in names:
            w = r[Browser.WIDGETS].get(n, {})
            cells.append(_fmt(w[Browser.MEDIAN]) if w.get(Browser.MEDIAN) is not None
                         else "error" if Browser.ERROR in w else "n/a" if w else "—")
        la, lb = r.get(Browser.LOAD_START, [None])[0], (r.get(Browser.LOAD_END) or [None])[0]
        lines.append(f"| {r[Browser.PAGE]} | {r.get(Browser.CASE, '')} | {la} → {lb} | {_fmt(r.get(Browser.COLD))} | "
                     f"{_fmt(r.get(Browser.WARM))} | " + " | ".join(cells) + " |")
    errs = [f"- {r[Browser.PAGE]} ({r.get(Browser.CASE, '')}): {e[:200]}" for r in rows for e in r[Browser.ERRORS]]
    floor = section.get(Browser.FLOOR)
    if floor:
        lines += ["", f"Floor: a Streamlit page with one 20×20 Plotly heatmap and nothing else (bench/floor_page.py, "
                      f"the same server settings) paints its first chart in {_fmt(floor[Browser.WARM])} s (warm, "
                      f"median): the browser loads and starts plotly.js before any chart shows."]
    plain = section.get(Browser.FLOOR_PLAIN)
    if plain:
        lines += ["", f"Streamlit's own floor: the same page with one line of text instead of the chart shows it in "
                      f"{_fmt(plain[Browser.WARM])} s (warm, median): what any Streamlit page costs in this browser "
                      f"before it draws anything."]
    nav = section.get(Browser.NAVIGATION)
    if nav:
        alone = section.get(Browser.NAV_MACHINE)
        when = (f" Measured alone (`attnlab bench --browser --navigation`) on {alone.get('date', '?')}, load "
                f"{_load(alone.get('loadavg_start'))} → {_load(alone.get('loadavg_end'))}." if alone else "")
        lines += ["", f"In-app navigation (`{section.get(Browser.NAV_QUERY, '')}`, one session on a warm server): "
                      "a click on the page's link in the sidebar → its first chart painted (a page without a "
                      f"chart: drawn), seconds.{when}", "", "| page | first visit | revisit |", "|---|---|---|"]
        lines += [f"| {r[Browser.PAGE]}{' (no chart)' if r.get(Browser.SHOWN) == 'plain' else ''} | "
                  f"{_fmt(r.get(Browser.FIRST_VISIT))} | {_fmt(r.get(Browser.REVISIT))} |" for r in nav]
        errs += [f"- navigation to {r[Browser.PAGE]}: {e[:200]}" for r in nav for e in r[Browser.ERRORS]]
    if section.get(Browser.SMOLLM2):
        from attnlab.bench.smollm2_charts import smollm2_markdown

        lines += smollm2_markdown(section[Browser.SMOLLM2])
    return lines + ([""] + errs if errs else []) + [""]


def class_markdown(c: dict) -> list[str]:
    """The `class_load` section in one table."""
    la = c.get(ClassLoad.LOAD) or [[None], [None]]
    return ["A class at once in chromium (`attnlab bench --class --clients browser`): concurrent browser contexts "
            "on this machine and one server, each changing widgets with its own text; the browsers' rendering shares "
            "the server's cores.", "",
            "| sessions | seconds | steps | errors | mixed results | p50 widget → own chart, s | p95, s | "
            "server RSS slope after warm-up, MB/min | load avg (start → end) |", "|---|---|---|---|---|---|---|---|---|",
            f"| {c[ClassLoad.SESSIONS]} | {c[ClassLoad.SECONDS]} | {c[ClassLoad.STEPS]} | {c[ClassLoad.ERRORS]} | "
            f"{c[ClassLoad.MIXED]} | {_fmt(c.get(ClassLoad.P50))} | {_fmt(c.get(ClassLoad.P95))} | "
            f"{_fmt(c.get(ClassLoad.RSS_SLOPE), 'x')} | {la[0][0]} → {la[-1][0]} |", ""] + [
            f"- {n}" for n in c.get(ClassLoad.NOTES, [])] + [""]


def ws_class_markdown(runs: list) -> list[str]:
    """The `class_load_ws` runs: one row each, with the p95 of every step."""
    steps = ("text", "page", "layer", "head", "back")
    lines = ["A class at once, server side (`attnlab bench --class`, websocket clients): each session speaks "
             "Streamlit's websocket protocol, so the server's cores are the server's; a step is timed from the "
             "widget change sent to the run's last message received. Steps: text (a new text on Explore), page "
             "(open Heatmaps), layer and head (the close-up's buttons, a fragment run), back (Explore).", "",
             "| sessions | replicas | seconds | steps | errors | mixed results | p50, s | p95, s | "
             + " | ".join(f"p95 {k}, s" for k in steps) + " | server RSS (start → end), MB | RSS slope after "
             "warm-up, MB/min | load avg (start → end) |", "|---" * (12 + len(steps)) + "|"]
    notes = []
    for c in runs:
        la, rss, by = c.get(ClassLoad.LOAD) or [[None], [None]], c.get(ClassLoad.RSS) or [], c.get(ClassLoad.BY_STEP, {})
        lines.append(
            f"| {c[ClassLoad.SESSIONS]} | {c.get(ClassLoad.N_REPLICAS, 1)} | {c[ClassLoad.SECONDS]} | "
            f"{c[ClassLoad.STEPS]} | {c[ClassLoad.ERRORS]} | {c[ClassLoad.MIXED]} | {_fmt(c.get(ClassLoad.P50))} | "
            f"{_fmt(c.get(ClassLoad.P95))} | " + " | ".join(_fmt((by.get(k) or {}).get("p95_s")) for k in steps)
            + f" | {rss[0][1] if rss else '—'} → {rss[-1][1] if rss else '—'} | "
            f"{_fmt(c.get(ClassLoad.RSS_SLOPE), 'x')} | {la[0][0]} → {la[-1][0]} |")
        notes += [f"- {c[ClassLoad.SESSIONS]} sessions, {c.get(ClassLoad.N_REPLICAS, 1)} replicas: {n}"
                  for n in c.get(ClassLoad.NOTES, [])]
    return lines + [""] + notes + ([""] if notes else [])


def real_size_lines(out: dict) -> list[str]:
    """The real-size section (`attnlab bench --real-size`), when the results hold one."""
    if not out.get(Top.REAL_SIZE):
        return []
    from attnlab.bench.real_size import ABOUT
    from attnlab.bench.real_size import markdown as real_size_markdown

    return ["### Real sizes: ours beside transformers, bf16", "", ABOUT, "",
            real_size_markdown(out[Top.REAL_SIZE]), ""]


def markdown(out: dict) -> str:
    """The results as markdown tables (what `attnlab bench` prints and docs/benchmarks.md keeps)."""
    from attnlab.bench.costs import COSTS, costs_markdown
    from attnlab.bench.hostile import HOSTILE
    from attnlab.bench.hostile_table import hostile_markdown

    if Top.MODELS not in out:  # only the browser sections (a file written by --browser / --class alone)
        lines = browser_markdown(out[Top.BROWSER]) if out.get(Top.BROWSER) else []
        lines += class_markdown(out[Top.CLASS]) if out.get(Top.CLASS) else []
        lines += costs_markdown(out[COSTS]) if out.get(COSTS) else []
        lines += ws_class_markdown(out[Top.CLASS_WS]) if out.get(Top.CLASS_WS) else []
        lines += hostile_markdown(out[HOSTILE]) if out.get(HOSTILE) else []
        return "\n".join(lines + real_size_lines(out)) + "\n"
    m = out["machine"]
    lines = [f"Machine: {m['cpu']}, {m['usable_cores']} cores, torch {m['torch']} ({m['torch_threads']} threads), "
             f"transformers {m['transformers']}, {m['date']}; load average {m['loadavg_start'][0]:.1f} at the start, "
             f"{m.get('loadavg_end', [float('nan')])[0]:.1f} at the end. Medians of {out['settings']['repeats']} "
             f"after {out['settings']['warmup']} warm-up.", ""]
    for name, info in out["models"].items():
        c = info["cfg"]
        lines += [f"### {name}: {c['layers']} layers × {c['heads']} heads, d_model {c['d_model']}, vocab {c['vocab']}, "
                  f"context {c['context']}", "", info["about"] + (f". {info['note']}" if info.get("note") else ""), ""]
        modes = [x for x in MODES if x in info["modes"]]
        hdr = "| T | " + " | ".join(modes) + " | lazy/fused | eager/hf_eager |"
        lines += ["Forward time, seconds (median; ratios: median of the per-round ratios):", "", hdr,
                  "|" + "---|" * (len(modes) + 3)]
        for T in info["lengths"]:
            rows = {x: _row(out, name, T, x) for x in modes}
            lz, fu = rows.get("lazy_capture", {}), rows.get("fused", {})
            ea, he = rows.get("eager_capture", {}), rows.get("hf_eager_attentions", {})
            r1, r2 = (_fmt(paired_ratio(a, b), "x") for a, b in ((lz, fu), (ea, he)))
            lines.append(f"| {T} | " + " | ".join(_cell(rows[x], "time_s") for x in modes) + f" | {r1} | {r2} |")
        lines += ["", "Peak memory above the loaded model, GB (one forward, output held):", "",
                  "| T | " + " | ".join(modes) + " | lazy − fused |", "|" + "---|" * (len(modes) + 2)]
        for T in info["lengths"]:
            rows = {x: _row(out, name, T, x) for x in modes}
            lz, fu = rows.get("lazy_capture", {}), rows.get("fused", {})
            d = (f"{(lz['peak_rss_bytes'] - fu['peak_rss_bytes']) / GB:.2f}"
                 if "peak_rss_bytes" in lz and "peak_rss_bytes" in fu else "—")
            lines.append(f"| {T} | " + " | ".join(_cell(rows[x], "peak_above_baseline_bytes", "GB") for x in modes)
                         + f" | {d} |")
        lazy = [x for x in out["lazy"] if x["model"] == name]
        if lazy:
            lines += ["", "From a lazy capture (seconds; middle layer, middle head; rollout of the last query):", "",
                      "| T | one head's pattern (record) | same, torch blocks | pooled 512² overview | "
                      "rollout of one query | q/k kept, GB | held by records, GB |", "|---|---|---|---|---|---|---|"]
            for x in lazy:
                lines.append(f"| {x['T']} | {_fmt(x['head_pattern_s'])} | {_fmt(x['head_pattern_blocks_s'])} | "
                             f"{_fmt(x['overview_s'])} | {_fmt(x['rollout_s'])} | {_fmt(x['lazy_bytes'], 'GB')} | "
                             f"{_fmt(x['lazy_resident_bytes'], 'GB')} |")
        skipped = [r for r in out["results"] if r["model"] == name and ("skipped" in r or "error" in r
                                                                          or "memory_error" in r)]
        if skipped:
            lines += [""] + [f"- T={r['T']} {r['mode']}: " + (r.get("skipped") or r.get("error") or r["memory_error"])
                             for r in skipped]
        lines.append("")
    for s in out.get("skipped_models", []):
        lines += [f"- {s['name']}: {s['note']}", ""]
    hk = out.get("hooks")
    if hk and "ratio" in hk:
        lines += [f"Hook points when off: fused forward at T={hk['T']} ({hk['model']}) {hk['off_s']:.4f} s with the "
                  f"ContextVar check vs {hk['patched_s']:.4f} s with `hooks.active` patched to `lambda: None`: "
                  f"hook_overhead_ratio = {hk['ratio']:.3f} (median of {len(hk['off_times_s'])} paired ratios; "
                  f"ratio of the medians {hk['ratio_of_medians']:.3f}). Directly: `hooks.active()` costs "
                  f"{hk['active_call_ns']:.0f} ns against {hk['lambda_call_ns']:.0f} ns for `lambda: None`, called once "
                  f"per site ({hk['sites']} sites), i.e. a ratio of {hk['implied_ratio']:.7f}.", ""]
    payload = out.get(Top.PAYLOAD)
    if payload:
        pages = sorted({Payload.label(p) for p in payload})
        Ts = sorted({p[Payload.T] for p in payload})
        lines += ["Payload per page, MB (the Plotly JSON of every chart the page sends, summed; images added):", "",
                  "| page | " + " | ".join(f"T={T}" for T in Ts) + " |", "|" + "---|" * (len(Ts) + 1)]
        for pg in pages:
            cells = []
            for T in Ts:
                p = next((p for p in payload if Payload.label(p) == pg and p[Payload.T] == T), None)
                cells.append("—" if p is None else "error" if p.get(Payload.BYTES) is None
                             else _fmt(p[Payload.BYTES], "MB") + (" (est.)" if p.get(Payload.ESTIMATED) else ""))
            lines.append(f"| {pg} | " + " | ".join(cells) + " |")
        failed = [p for p in payload if p.get(Payload.BYTES) is None]
        lines += [""] + [f"- {Payload.label(p)} at T={p[Payload.T]}: {p.get(Payload.ERROR, 'no result')}"
                         for p in failed] if failed else []
        if out.get(Top.PAYLOAD_NOTE):
            lines += ["", out[Top.PAYLOAD_NOTE]]
        lines.append("")
    if out.get(Top.BROWSER):
        lines += browser_markdown(out[Top.BROWSER])
    if out.get(Top.BROWSER_BASELINE):
        base = out[Top.BROWSER_BASELINE]
        lines += [f"Before (commit {base.get('commit', '?')}, the same benchmark; for comparison):", ""]
        lines += browser_markdown(base)
    if out.get(Top.CLASS):
        lines += class_markdown(out[Top.CLASS])
    if out.get(Top.CLASS_WS):
        lines += ws_class_markdown(out[Top.CLASS_WS])
    if out.get(HOSTILE):
        lines += hostile_markdown(out[HOSTILE])
    lines += real_size_lines(out)
    if out.get(COSTS):
        lines += costs_markdown(out[COSTS])
    lines += ["Targets:", "", "| target | limit | measured | result | note |", "|---|---|---|---|---|"]
    for t in out.get("targets", []):
        res = {True: "PASS", False: "MISS", None: "not measured"}[t["passed"]]
        lines.append(f"| {t['name']} | {t['target']} | {t['measured'] if t['measured'] is not None else '—'} | "
                     f"{res} | {t['note']} |")
    return "\n".join(lines) + "\n"

