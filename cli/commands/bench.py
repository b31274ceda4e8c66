"""`attnlab bench`: time and peak memory of each capture mode, lazy-capture costs on long inputs, and
the Plotly payload of each app page, against the issue's targets. Prints a table; writes JSON.

    attnlab bench [--quick] [--json] [--out FILE] [--docs docs/benchmarks.md]

The measurements live in analysis.bench (each job in its own process); this command adds the page
payloads, which need Plotly and the app's figure builders.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

PAGES = ("explore", "heatmaps", "masks", "scores", "rollout", "heads", "backends", "kv_cache", "long_input")
NOT_MEASURED = {
    "cross_attention": "encoder–decoder only (the benchmark models are decoders)",
    "positions": "position tables of the model (P × d), not attention over the text",
    "step_by_step": "a fixed toy example, independent of T",
}
SCORE_POINTS_LIMIT = 30_000_000  # score_boxes sends every visible score; above this it is extrapolated


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark capture modes, long inputs and page payloads")
    p.add_argument("--quick", action="store_true", help="T = 128 and 1024 only")
    p.add_argument("--json", action="store_true", help="write JSON (to --out, else to stdout with the table on stderr)")
    p.add_argument("--out", default=None, help="JSON file to write (implies --json)")
    p.add_argument("--docs", default=None, help="also rewrite this markdown file (docs/benchmarks.md) with the table")
    p.add_argument("--lengths", default=None, help="comma-separated sequence lengths (default 128,512,1024,2048,4096)")
    p.add_argument("--models", default="gpt2-small,lecture-decoder", help="comma-separated: gpt2-small, lecture-decoder")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per mode (median reported; default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up rounds (default 1)")
    p.add_argument("--max-mem-gb", type=float, default=None,
                   help="skip modes predicted to need more than this above the model (default: half the free memory)")
    p.add_argument("--no-payload", action="store_true", help="skip the page payload measurement")
    p.add_argument("--render", default=None, metavar="JSON",
                   help="measure nothing: re-render the table (and --docs) from a saved JSON, re-judging the targets")
    p.set_defaults(run=run)


def run(args) -> int:
    from app.cli import UsageError

    if args.render:
        return render(args)
    try:
        lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else None
    except ValueError:
        raise UsageError(f"--lengths must be comma-separated integers, got {args.lengths!r}") from None
    if lengths is not None and any(t < 2 for t in lengths):
        raise UsageError("every length must be ≥ 2")
    if args.repeats < 5:
        print(f"attnlab bench: note: --repeats {args.repeats} < 5 (the issue asks for medians of ≥ 5)", file=sys.stderr)
    models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    unknown = [m for m in models if m not in ("gpt2-small", "lecture-decoder")]
    if unknown:
        raise UsageError(f"unknown benchmark model {unknown[0]!r}; use gpt2-small and/or lecture-decoder")
    want_json = args.json or args.out is not None
    to_stdout = want_json and args.out is None

    from analysis.bench import markdown, run_benchmark
    from analysis.bench.runner import QUICK_LENGTHS, evaluate_targets

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    out = run_benchmark(quick=args.quick, lengths=lengths, models=models, repeats=args.repeats, warmup=args.warmup,
                        max_mem_gb=args.max_mem_gb, progress=say)
    if not args.no_payload:
        Ts = out["settings"]["lengths"] or list(QUICK_LENGTHS)
        say("page payloads")
        out["payload"], out["payload_note"] = page_payloads(Ts, progress=say)
        out["targets"] = evaluate_targets(out)
    out["regenerate"] = regenerate_command(args)
    for r in out["results"]:  # the Backends page reads peak_mb (MiB above the loaded model)
        if "peak_above_baseline_bytes" in r:
            r["peak_mb"] = round(r["peak_above_baseline_bytes"] / 2**20, 1)
    table = markdown(out)
    print(table, file=sys.stderr if to_stdout else sys.stdout)
    if want_json:
        text = json.dumps(out, indent=1, allow_nan=False)
        if args.out:
            try:
                Path(args.out).write_text(text + "\n", encoding="utf-8")
            except OSError as e:
                raise UsageError(f"cannot write {args.out}: {e.strerror}") from None
            say(f"wrote {args.out}")
        else:
            print(text)
    if args.docs:
        write_docs(Path(args.docs), table, out["regenerate"])
        say(f"wrote {args.docs}")
    return 0


def render(args) -> int:
    """Print the table of a saved run (targets re-judged) and rewrite --docs from it."""
    from analysis.bench import evaluate_targets, markdown
    from app.cli import UsageError

    try:
        out = json.loads(Path(args.render).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {args.render}: {e}") from None
    out["targets"] = evaluate_targets(out)
    table = markdown(out)
    print(table)
    if args.docs:
        regen = out.get("regenerate") or "attnlab bench --json --out docs/benchmarks.json --docs docs/benchmarks.md"
        write_docs(Path(args.docs), table, regen)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return 0


def regenerate_command(args) -> str:
    parts = ["attnlab bench"]
    if args.quick:
        parts.append("--quick")
    parts += ["--json", f"--out {args.out or 'docs/benchmarks.json'}", f"--docs {args.docs or 'docs/benchmarks.md'}"]
    if args.lengths:
        parts.append(f"--lengths {args.lengths}")
    if args.repeats != 5:
        parts.append(f"--repeats {args.repeats}")
    if args.max_mem_gb:
        parts.append(f"--max-mem-gb {args.max_mem_gb:g}")
    return " ".join(parts)


def write_docs(path: Path, table: str, regenerate: str) -> None:
    text = (
        "# Benchmarks\n\n"
        "Generated by `attnlab bench` (analysis/bench, app/commands/bench.py). Regenerate with:\n\n"
        f"```\n{regenerate}\n```\n\n"
        "(`--quick`: T = 128 and 1024 only. `attnlab bench --render docs/benchmarks.json --docs docs/benchmarks.md` "
        "re-renders this page from the saved JSON without measuring.)\n\n"
        "What is measured:\n\n"
        "- **Forward time**: one whole-model forward (logits included) per mode; each (model, T) runs in one fresh "
        "process with its modes interleaved round by round, median of the rounds after the warm-up. "
        "`fused`: our model, SDPA, no capture. `lazy_capture`: the same with `model.hooks.capture()` active "
        "(each site keeps q and k). `eager_capture`: our eager backend, every score and pattern materialised. "
        "`hf_eager_attentions` / `hf_sdpa`: transformers' GPT2LMHeadModel with the same weights, eager with "
        "`output_attentions=True`, and SDPA without.\n"
        "- **Peak memory**: each (model, T, mode) in a process of its own: the kernel's resident-set high-water "
        "mark (VmHWM, reset after the model is loaded) during one forward with its output held, minus the resident "
        "set with the model loaded. Modes predicted not to fit the memory budget are skipped and say so.\n"
        "- **From a lazy capture**: one head's full pattern through `AttentionRecord.pattern` (numpy) and through "
        "`model.longinput` (torch, blocks of rows); one head's pooled 512×512 overview "
        "(`analysis.longinput.overview`, rows recomputed a slab at a time and pooled as they come); "
        "the rollout row of the last query (`analysis.longinput.rollout_query`, streamed layer by layer).\n"
        "- **Payload**: `len(plotly.io.to_json(fig))` summed over the figures a page draws, built with the app's "
        "figure builders from a synthetic GPT-2-small-shaped capture (random q and k with peaked softmax rows, "
        "which compress worse than real attention).\n\n"
        "Reading the numbers: the timings come from a shared machine (the load average at the start and end of the "
        "run is printed below); compare the ratios, which pair the modes within each round, rather than absolute "
        "seconds. Every raw time is in the JSON.\n\n"
        "## Latest results\n\n" + table
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# -- page payloads ---------------------------------------------------------------------------------------------
def synthetic_records(T: int, layers: int = 12, heads: int = 12, d_head: int = 64, seed: int = 0):
    """GPT-2-small-shaped lazy records: random q, k with scaled scores of std ≈ 2.6 (peaked rows)."""
    import numpy as np

    from model.record import AttentionRecord

    rng = np.random.default_rng(seed)
    mask = np.tri(T, dtype=bool)[None]
    out = []
    for i in range(layers):
        q = (rng.standard_normal((1, heads, T, d_head), dtype=np.float32) * 1.6).astype(np.float32)
        k = (rng.standard_normal((1, heads, T, d_head), dtype=np.float32) * 1.6).astype(np.float32)
        out.append(AttentionRecord(f"blocks.{i}.attn", "decoder", i, "self", "sdpa", "synthetic", d_head ** -0.5,
                                   0, q, k, mask))
    return out


def _tokens(T: int) -> list[str]:
    words = ("The", " cat", " sat", " on", " the", " mat", " because", " it", " was", " warm", ".", " A", " <b>",
             " &", " token", "izer")
    return [words[i % len(words)] for i in range(T)]


def page_figures(page: str, T: int, recs, tokens) -> list:
    """The figures `page` draws for a T-token capture, built with the app's builders (as the page calls them)."""
    import numpy as np

    from analysis.longinput import overview
    from app import figures as F
    from model.longinput import full_pattern

    L, H = len(recs), recs[0].n_heads
    rec = recs[-1]
    mask = rec.mask_for()
    q = T - 1
    P = full_pattern(rec, 0)[0]  # [T, T] one head
    grid = np.random.default_rng(1).random((L, H))
    rows = {f"layer {i}": _row_mean(recs[i], q) for i in range(L)}
    if page == "explore":
        return [F.method_rows(rows, tokens, title=f"Where does token {q} look? Head mean per layer")]
    if page == "heatmaps":
        side = max(2, int(np.sqrt(F.MOSAIC_CELLS / (L * H))))  # what mosaic pools each head to
        pooled, edges = [], None
        for r in recs:
            m, edges, _ = overview(r, None, side, "max")  # [H, n, n]: every head of the layer at once
            pooled.append(m)
        labels = [tokens[a] if b - a == 1 else f"{a}–{b - 1}" for a, b in zip(edges[:-1], edges[1:])]
        zq = (max(0, q - 32), q + 1)
        return [F.mosaic(np.array(pooled), labels, labels, kind="pattern", title="self-attention — weights",
                         layer_labels=[f"layer {i}" for i in range(L)]),
                F.matrix_heatmap(P, tokens, tokens, mask=mask, title=f"layer {L - 1}, head 0", mark=(q, None)),
                F.head_view(P[None], tokens, tokens, q, [0], title=f"Head view: token {q} → keys"),
                F.matrix_heatmap(P[zq[0]:zq[1], :64], tokens, tokens, mask=mask[zq[0]:zq[1], :64],
                                 title="zoom", q_offset=zq[0], k_offset=0, max_side=10**6)]
    if page == "masks":
        window = np.tri(T, dtype=bool) & ~np.tri(T, k=-4, dtype=bool)
        rec_b = _with_mask(rec, window)
        Pb = full_pattern(rec_b, 0)[0]
        figs = []
        for m, r, p in ((mask, rec, P), (window, rec_b, Pb)):
            figs += [F.matrix_heatmap(np.ones(m.shape, np.float32), tokens, tokens, mask=m, zrange=(0, 1), title="mask"),
                     F.matrix_heatmap(r.masked_scores(0), tokens, tokens, kind="scores", title="masked scores"),
                     F.matrix_heatmap(p, tokens, tokens, mask=m, title="weights")]
        figs += [F.matrix_heatmap(Pb - P, tokens, tokens, mask=mask | window, kind="diff", title="B − A"),
                 F.grid_heatmap(grid, [f"layer {i}" for i in range(L)], [f"head {h}" for h in range(H)],
                                diverging=False, title="max |Δ weight| per head"),
                 F.token_bars(np.random.default_rng(2).random(T), tokens, title="row sums", name="row sum")]
        return figs
    if page == "scores":
        taus = np.round(np.geomspace(0.1, 10, 13), 3)
        return [F.score_boxes(rec.scores(), mask, name="scaled score", title="scaled scores per head"),
                F.matrix_heatmap(P, tokens, tokens, mask=mask, zrange=(0, 1), title="softmax(QKᵀ/√d_k / τ)"),
                F.lines(taus, {"with 1/√d_k": list(taus), "without": list(taus)}, title="entropy", log_x=True)]
    if page == "rollout":
        method = {k: rows[f"layer {L - 1}"] for k in ("last-layer attention", "rollout", "flow", "gradient relevance")}
        return [F.method_rows(method, tokens, title=f"Which tokens matter for token {q}?"),
                F.matrix_heatmap(P, tokens, tokens, kind="pattern", title="rollout: row = output, column = input")]
    if page == "heads":
        names = [f"layer {i}" for i in range(L)]
        return [F.grid_heatmap(grid, names, [f"head {h}" for h in range(H)], diverging=False, title="induction"),
                F.grid_heatmap(grid - 0.5, names, [f"head {h}" for h in range(H)], title="Δp when one head is zeroed")]
    if page == "long_input":
        from analysis.longinput import exact_window
        from app import figures_long as FL
        from app.longinput import MAX_WINDOW, OVERVIEW_CELLS

        pooled, qe, ke = overview(rec, 0, OVERVIEW_CELLS, "max")
        side = min(MAX_WINDOW, T)
        values, wmask = exact_window(rec, 0, T - side, T, T - side, T)  # the largest window, on the diagonal
        return [FL.overview_heatmap(pooled, qe, ke, how="max", title="overview"),
                FL.window_heatmap(values, wmask, tokens, T - side, T - side, title="window")]
    if page in ("backends", "kv_cache"):
        d = (P - full_pattern(rec, 0)[0]).astype(np.float32)
        return [F.matrix_heatmap(P, tokens, tokens, mask=mask, title="recomputed"),
                F.matrix_heatmap(P, tokens, tokens, mask=mask, title="stored"),
                F.matrix_heatmap(d, tokens, tokens, mask=mask, kind="diff", zrange=(-1e-5, 1e-5), title="difference")]
    raise ValueError(f"unknown page {page!r}")


def _row_mean(rec, q: int):
    from model.longinput import pattern_rows

    return pattern_rows(rec, None, q, q + 1).numpy()[:, 0].mean(0)  # head mean of query row q: [K]


def _with_mask(rec, mask):
    from dataclasses import replace

    return replace(rec, mask=mask[None])


def page_payloads(lengths, progress=None) -> tuple[list[dict], str]:
    """[{page, T, bytes, figures}] for every page that draws T-sized figures, and a note on the rest."""
    import plotly.io as pio

    out = []
    for T in lengths:
        recs, tokens = synthetic_records(T), _tokens(T)
        for page in PAGES:
            if progress:
                progress(f"payload: {page} at T={T}")
            points = recs[0].n_heads * T * (T + 1) // 2
            if page == "scores" and points > SCORE_POINTS_LIMIT:
                prev = next((p for p in reversed(out) if p["page"] == "scores" and not p.get("estimated")), None)
                if prev is not None:
                    scale = T * (T + 1) / (prev["T"] * (prev["T"] + 1))
                    out.append({"page": page, "T": T, "bytes": int(prev["bytes"] * scale), "estimated": True,
                                "note": f"not built: score_boxes would send {points:,} points; bytes extrapolated "
                                        f"from T={prev['T']} by the number of visible scores"})
                continue
            t = time.perf_counter()
            try:
                figs = page_figures(page, T, recs, tokens)
                sizes = [len(pio.to_json(f)) for f in figs]
            except Exception as e:  # noqa: BLE001 — a builder changed under us: report, do not stop the run
                out.append({"page": page, "T": T, "bytes": None, "error": f"{type(e).__name__}: {e}"[:300]})
                continue
            out.append({"page": page, "T": T, "bytes": int(sum(sizes)), "figures": sizes,
                        "build_s": round(time.perf_counter() - t, 3)})
    out = [p for p in out if p["bytes"] is not None] + [p for p in out if p["bytes"] is None]
    note = ("Pages not measured: " + "; ".join(f"{k} ({v})" for k, v in NOT_MEASURED.items()) + ". Figures are "
            "built as each page calls the builders in app/figures.py; the heatmaps mosaic is fed heads pre-pooled by "
            "analysis.longinput.overview to the size mosaic pools them to, and the rollout matrix is drawn "
            "with a pattern of the same shape.")
    return out, note
