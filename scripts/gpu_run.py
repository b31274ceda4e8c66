"""The GPU session's checks in one process, written under $OUT (or ./gpu-out): `attnlab check --device cuda` on
every bundled model and one tiny random checkpoint per family (bf16 and fp32), the CUDA benchmark section, and
a profile of the capture paths. Run from the checkout with nothing installed: `python3 scripts/gpu_run.py`.

    python3 scripts/gpu_run.py [check] [bench] [profile] [--lengths 1024,4096,16384,32768]
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
OUT = Path(os.environ.get("OUT", "gpu-out"))
DEVICE = os.environ.get("GPU_RUN_DEVICE", "cuda")  # cpu: a dry run of the check step here


def check_all(out: Path) -> list[dict]:
    """Every bundled model and TINY family in bfloat16 and float32: `attnlab check --json`'s report each."""
    from attnlab.cli.main import main
    from attnlab.model.registry import RANDOM, bundled_names

    from tests.family_grid import TINY, make

    tmp = Path(tempfile.mkdtemp())
    models = [*bundled_names("all"), *RANDOM]
    for family, (cls, conf) in TINY.items():
        try:
            models.append(str(make(tmp / family, family, cls, **conf)))
        except Exception as e:  # noqa: BLE001 — a fixture that cannot be built here is a row, not a stop
            models.append(f"!{family}: {e}")
    only = os.environ.get("GPU_RUN_MODELS")  # a comma-separated subset, by name (a rerun)
    if only:
        models = [m for m in models if Path(m.lstrip("!").split(":")[0]).name in only.split(",")]
    rows = []
    for m in models:
        for dtype in ("bfloat16", "float32"):
            name = Path(m).name if m.startswith("/") else m
            if m.startswith("!"):
                rows.append({"model": m[1:].split(":")[0], "dtype": dtype, "rc": -1, "err": m})
                continue
            buf, err = io.StringIO(), io.StringIO()
            t0 = time.perf_counter()
            try:
                with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
                    rc = main(["check", "--model", m, "--device", DEVICE, "--dtype", dtype, "--json"])
            except Exception:  # noqa: BLE001
                rc, err = -1, io.StringIO(traceback.format_exc())
            report = json.loads(buf.getvalue()) if buf.getvalue().strip().startswith("{") else None
            failed = [c["name"] for c in (report or {}).get("checks", []) if not c["passed"]]
            rows.append({"model": name, "dtype": dtype, "rc": rc, "passed": rc == 0, "failed": failed,
                         "s": round(time.perf_counter() - t0, 1), "err": err.getvalue()[-1500:], "report": report})
            print(f"check {name:<22} {dtype:<9} rc={rc} failed={failed}", flush=True)
    (out / "check-cuda.json").write_text(json.dumps(rows, indent=1))
    return rows


def bench(out: Path, lengths: tuple[int, ...]) -> None:
    """`attnlab bench --device cuda` (3 timed repeats after 1 warm-up) into $OUT."""
    from attnlab.cli.main import main

    rc = main(["bench", "--device", "cuda", "--lengths", ",".join(map(str, lengths)), "--repeats", "3",
               "--warmup", "1", "--out", str(out / "benchmarks-cuda.json"), "--docs", str(out / "benchmarks-cuda.md")])
    print("bench rc", rc, flush=True)


def profile(out: Path, T: int = 4096) -> None:
    """torch.profiler's top operators of one lazy and one eager capture at T on GPT-2-small's shape."""
    import torch
    from attnlab.bench.cuda import GPT2_LONG, _forward
    from attnlab.bench.forward import load_hf_gpt2, load_ours_gpt2, token_ids
    from attnlab.bench.specs import save_gpt2_weights
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    with tempfile.TemporaryDirectory() as tmp:
        spec = {"hf_config": GPT2_LONG, "weights": str(save_gpt2_weights(Path(tmp), config=GPT2_LONG))}
        ours = load_ours_gpt2(spec)[0].to("cuda", torch.bfloat16)
        hf = load_hf_gpt2(spec)[0].to("cuda", torch.bfloat16)
    ids = token_ids(T, GPT2_LONG.get("vocab_size", 50257)).cuda()
    lines = []
    with torch.no_grad():
        for mode in ("fused_flash", "lazy_capture", "eager_capture", "hf_eager_attentions"):
            fn = _forward(mode, ours, hf, ids)
            fn()
            torch.cuda.synchronize()
            with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                fn()
                torch.cuda.synchronize()
            for key in ("self_cpu_time_total", "self_cuda_time_total"):
                lines.append(f"## {mode} T={T} by {key}\n{p.key_averages().table(sort_by=key, row_limit=18)}\n")
    (out / "profile.txt").write_text("\n".join(lines))


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    lengths = (1024, 4096, 16384, 32768)
    if "--lengths" in sys.argv:
        lengths = tuple(int(x) for x in sys.argv[sys.argv.index("--lengths") + 1].split(","))
        args = [a for a in args if not a[0].isdigit()]
    steps = args or ["check", "bench", "profile"]
    for step in steps:
        t0 = time.perf_counter()
        try:
            {"check": lambda: check_all(OUT), "bench": lambda: bench(OUT, lengths), "profile": lambda: profile(OUT)}[step]()
        except Exception:  # noqa: BLE001 — the next step still runs
            traceback.print_exc()
        print(f"== {step} {time.perf_counter() - t0:.0f} s", flush=True)
