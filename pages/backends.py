"""Backends (/backends): eager, sdpa and flash on the same input — the same numbers, which kernel ran, what each
costs in time and memory as the text grows, and how a fused run's patterns are recovered exactly."""

import pandas as pd
import streamlit as st
from attnlab.analysis.machinery.backends import device_summary
from attnlab.analysis.machinery.checks import FUSED, TOL_BACKEND
from attnlab.app import mechanics, state
from attnlab.app.columns import column_px, wrapping_columns
from attnlab.app.downloads import downloads
from attnlab.app.figures.grids import delta_grid
from attnlab.app.figures.lines import scaling
from attnlab.app.figures.matrix import matrix_heatmap
from attnlab.app.flash_view import flash_section
from attnlab.app.frame import chart, page, presenting
from attnlab.app.inputs import require
from attnlab.app.url_state import select, slider
from attnlab.app.verdicts import scale_note, verdict_banner, verdict_table
from attnlab.model.captured import GROUP_LABELS

LIVE = {256: "64 … 256", 512: "64 … 512", 1024: "64 … 1024"}
LIVE_GPU = {4096: "256 … 4,096", 16384: "256 … 16,384", 32768: "256 … 32,768"}  # a GPU times long inputs live
THREE_PX = 300  # the three matrices of a head side by side while each gets this width
GPU_ADDS = ("**What a GPU adds** (`attnlab app --device cuda`): the model runs in bfloat16 or float16 and every "
            "fused backend is checked against a float32 eager reference (within 4e-2, and no worse than twice eager "
            "in the same precision); `flash` runs the FlashAttention-2 kernel; and long inputs reach 32,768 tokens "
            "(`attnlab bench --device cuda` measures T = 1k … 32k).")


def fmt_bytes(n: float | None) -> str:
    """A byte count in B, KiB, MiB or GiB; '—' for None."""
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def model_shape(name: str) -> tuple[int, int]:
    """(heads, d_head) of a model, for live timings at its own size."""
    info = state.model_info(name)
    return int(info["heads"]), int(info["d_model"]) // int(info["heads"])

with page("Backends", "Do eager, sdpa and flash compute the same attention — and what does each cost?", icon="⚙"):
    inp = require(("internals",), "compares our attention backends (eager, sdpa, flash)")
    present = presenting()
    dev = device_summary()

    # -- what runs here ---------------------------------------------------------------------------------
    if dev["cuda"]:
        st.info(f"**This machine has a CUDA GPU ({dev['device']}).** `flash` pins PyTorch's "
                "SDPBackend.FLASH_ATTENTION: the FlashAttention-2 kernel, in fp16/bf16. `sdpa` lets PyTorch choose "
                "(flash, memory-efficient or math). The kernel column below says which one actually ran.", icon=":material/memory:")
    else:
        st.info("**This machine has no CUDA GPU.** `flash` here runs **PyTorch's fused CPU kernel** — the flash "
                "algorithm (tiles of queries and keys, an online softmax that rescales as it goes, no T×T matrix) in "
                "float32 on the CPU, not the FlashAttention-2 GPU kernel. On a CUDA GPU the same backend pins "
                "SDPBackend.FLASH_ATTENTION: the FlashAttention-2 kernel, in fp16/bf16. Every record states the kernel "
                "that actually ran (the *kernel* column below).", icon=":material/developer_board:")
        st.markdown(GPU_ADDS)
    st.markdown("**eager** computes softmax(QKᵀ/√d + mask)·V step by step and keeps the T×T weights; **sdpa** and "
                "**flash** call `F.scaled_dot_product_attention`, one fused kernel that never materialises them. "
                "Same maths, different order of floating-point operations: results agree to about 1e-6.")

    # -- 1. agreement ---------------------------------------------------------------------------------------
    st.subheader("Same input, three backends — the same numbers as `attnlab check`")
    checked = {b: mechanics.backend_check(inp.model, inp.text, inp.src, b) for b in FUSED}  # one run each
    rows = [r for c in checked.values() for r in c.rows]
    verdict_table(rows)
    scale_note(rows, mechanics.output_scale(inp.model, inp.text, inp.src))
    reps = {b: c.detail for b, c in checked.items()}
    rules = reps["sdpa"].get("rules")  # a 16-bit run: judged against the float32 eager reference
    tol = rules["backend"] if rules else TOL_BACKEND
    verdict_banner(all(r["passed"] for r in rows),
                   (f"In {rules['dtype']}, sdpa and flash match the float32 eager reference: every pattern within "
                    f"{tol:g}, outputs within {tol:g}·max(1, max|logits|) and no worse than "
                    f"{rules['backend_vs_eager_factor']:g}× eager in {rules['dtype']}.") if rules else
                   (f"sdpa and flash match eager: every pattern within {TOL_BACKEND:g}, logits and hidden states "
                    f"within {TOL_BACKEND:g}·max(1, max|logits|)."),
                   "A fused backend differs from eager beyond the tolerance.")
    sites = list(reps["sdpa"]["per_site"])
    z = [[reps[b]["per_site"][s] for b in FUSED] for s in sites]
    left, right = st.columns([3, 2], gap="medium")
    with left:
        chart(delta_grid(z, sites, ["sdpa vs eager: pattern", "flash vs eager: pattern"], tol,
                         title=f"Max |Δ pattern| per layer (tolerance {tol:g})", present=present),
              key="be-grid", name="backend-deltas", width=column_px([3, 2], present, "medium")[0])
    with right:
        summary = pd.DataFrame([{"backend": b, "max |Δ logits|": reps[b]["max_abs_logits"],
                                 "max |Δ hidden|": reps[b]["max_abs_hidden"], "max |Δ pattern|": reps[b]["max_abs_pattern"]}
                                for b in FUSED])
        st.dataframe(summary, hide_index=True, column_config={
            c: st.column_config.NumberColumn(c, format="%.2e") for c in summary.columns if c.startswith("max")})
        kernels = "; ".join(f"{b}: {', '.join(reps[b]['kernels'])}" for b in FUSED)
        st.caption(f"Kernels that ran — {kernels}. Tolerance {tol:g} for patterns and {tol:g} relative to "
                   "the largest logit for outputs (float32 on the CPU keeps about 7 digits). The pattern of a "
                   "fused run is recomputed from its q and k (see the end of the page).")

    # -- 2. cost ---------------------------------------------------------------------------------------------
    st.subheader("Time and memory as the text grows")
    heads, d_head = model_shape(inp.model)
    device, dtype = state.run_settings()
    sizes = LIVE_GPU if device == "cuda" else LIVE
    top = select("Live sizes T", list(sizes), "be_max", 4096 if device == "cuda" else 512,
                 format_func=sizes.get, horizontal=True,
                 help="Measured now, on this machine, for one attention call; larger sizes come from the benchmark.")
    steps = (256, 1024, 2048, 4096, 8192, 16384, 32768) if device == "cuda" else (64, 128, 256, 512, 1024)
    lengths = tuple(t for t in steps if t <= top)
    live = mechanics.attention_timings(lengths, heads, d_head, device=device, dtype=dtype)
    chart(scaling(live, title=f"Live: one causal attention call, {heads} heads × d_head {d_head}",
                  present=present), key="be-live", name="backend-live")
    live_df = pd.DataFrame(live)
    where = (f"on the GPU in {dtype} (CUDA events; memory: the allocator's peak)" if device == "cuda" else
             "on one CPU thread (memory: peak bytes of the tensors alive during the call, PyTorch profiler)")
    runs = sorted({r["runs"] for r in live})
    st.caption(f"Measured just now on this machine, {where}, best time of "
               f"{runs[0] if len(runs) == 1 else f'{runs[0]}–{runs[-1]}'} calls per point (other users' "
               "requests wait meanwhile). eager stores the scores and weights, a few "
               "H×T×T matrices, so its memory grows as T²; the fused kernels keep only O(T·d) tiles and the output. "
               "On a CPU at these sizes the time gap is small; on a GPU, flash is typically 2–4× faster.")
    bench = mechanics.benchmark_results()
    if bench is None:
        st.info("No benchmark results yet (`docs/benchmarks.json`): run `attnlab bench --json --out "
                "docs/benchmarks.json` for the large sizes (up to 4,096 tokens). Only the live numbers above are "
                "shown.", icon=":material/info:")
    else:
        machine = bench.get("machine")
        machine = machine if isinstance(machine, str) else ", ".join(
            str(machine[k]) for k in ("cpu", "cpus", "torch") if k in machine) if isinstance(machine, dict) else ""
        st.markdown(f"**From the benchmark** (`{bench.get('path') or 'docs/benchmarks.md'}`): whole-model forward "
                    "passes at long inputs, peak memory above the loaded model" + (f" — {machine}" if machine else ""))
        if bench["rows"]:
            brow = [r for r in bench["rows"] if r.get("peak_mb") is not None or r.get("median_s") is not None]
            chart(scaling(brow, series_key="series", time_key="median_s", time_unit="s", mem_key="peak_mb",
                          mem_scale=1.0, theory=False, present=present, title="Benchmark: time and peak memory "
                          "per mode"), key="be-bench", name="backend-bench")
            st.dataframe(pd.DataFrame(brow).drop(columns="series"), hide_index=True)
        elif bench.get("markdown"):
            with st.expander("docs/benchmarks.md", expanded=True):
                st.markdown(bench["markdown"])
        else:
            st.warning("The benchmark file has a layout this page does not read; see docs/benchmarks.md.")

    # -- 3. patterns from a fused run -------------------------------------------------------------------------
    fused = inp.backend if inp.backend != "eager" else "sdpa"
    st.subheader(f"How the page still shows every weight after a fused ({fused}) run")
    st.markdown("A fused kernel returns only the output. During the run each attention site therefore keeps its "
                "**q and k** (O(T·d) numbers per head) instead of the weights (O(T²)). When a page asks for a head "
                "or a window, the scores scale·q·kᵀ (+ bias) are recomputed exactly, the mask applied, and the softmax "
                "taken over whole rows — the same numbers eager would have stored.")
    rec = pd.DataFrame(mechanics.pattern_recovery(inp.model, inp.text, inp.src, fused))
    at_t = f"{int(rec['at_T'].iloc[0]):,}"
    rec["kept (q, k)"] = rec["kept_bytes"].map(fmt_bytes)
    rec["full weights"] = rec["pattern_bytes"].map(fmt_bytes)
    rec[f"kept at T = {at_t}"] = rec["kept_bytes_at"].map(fmt_bytes)
    rec[f"weights at T = {at_t}"] = rec["pattern_bytes_at"].map(fmt_bytes)
    st.dataframe(rec[["site", "kernel", "lazy", "kept (q, k)", "full weights", f"kept at T = {at_t}",
                      f"weights at T = {at_t}", "max_abs_pattern"]], hide_index=True,
                 column_config={"max_abs_pattern": st.column_config.NumberColumn("max |Δ| recomputed vs eager",
                                                                                 format="%.2e"),
                                "lazy": st.column_config.CheckboxColumn("recomputed")})
    cap_e = state.capture(inp.model, inp.text, inp.src, "eager")
    cap_f = state.capture(inp.model, inp.text, inp.src, fused)
    groups = cap_f.groups()
    c1, c2, c3 = st.columns(3)
    group = select("Attention", list(groups), "be_group", None, where=c1, show=len(groups) > 1,
                   format_func=GROUP_LABELS.get)
    layer = slider("Layer", 0, len(groups[group]) - 1, "be_layer", 0, where=c2)
    head = slider("Head", 0, cap_f.n_heads - 1, "be_head", 0, where=c3)
    site = groups[group][layer]
    qt, kt = cap_f.group_tokens(group)
    mask = cap_f.mask_of(group)
    recomputed, stored = cap_f.records[site].pattern(head), cap_e.records[site].pattern(head)
    side = dict(mask=mask, present=present, height=560, max_ticks=40)  # the same size, every token up to 40
    a, b, c = wrapping_columns(3, "be-three", THREE_PX)  # one under the other on a projector
    at = column_px(3, present, min_width=THREE_PX)[0]
    with a:
        chart(matrix_heatmap(recomputed, qt, kt, title=f"{fused}: recomputed from q, k", zrange=(0.0, 1.0), **side),
              key="be-recomputed", name="recomputed", width=at)
    with b:
        chart(matrix_heatmap(stored, qt, kt, title="eager: stored weights", zrange=(0.0, 1.0), **side),
              key="be-eager", name="eager", width=at)
    with c:
        d = recomputed - stored
        lim = max(float(abs(d).max()), TOL_BACKEND)
        chart(matrix_heatmap(d, qt, kt, kind="diff", zrange=(-lim, lim), value_name="Δ",
                             title=f"difference (max |Δ| {abs(d).max():.1e})", **side),
              key="be-diff", name="diff", width=at)
    st.caption(f"{site}, head {head}: kernel {cap_f.records[site].kernel}. Long inputs stay cheap: a capture that "
               "would exceed a few million weights keeps q and k only, and large matrices are pooled for display.")

    flash_section(inp, present)  # topic 11: the tiled computation, step by step

    downloads("backends", csv=live_df,
              json_obj={"model": inp.model, "text": inp.text, "src_text": inp.src, "device": dev, "checks": rows,
                        "reports": reps, "live": live, "benchmark": bench, "recovery": rec.to_dict("records")})
