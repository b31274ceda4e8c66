"""Topic 11 on the Backends page: flash attention's tiled computation on one real head, step by step
(analysis.machinery.flash_tiling): blocks, the online softmax's running max and sum, the output checked against the full
softmax, memory per tile against T², and what a GPU adds."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st
from attnlab.app import mechanics, state
from attnlab.app.columns import column_px, wrapping_columns
from attnlab.app.figures.tiling import running_stats, tile_grid
from attnlab.app.frame import chart, guard
from attnlab.app.url_state import index, select, slider
from attnlab.app.verdicts import verdict_banner

TOL_TILED = 1e-6  # tiled vs full softmax output (float64 both)
TOL_MODEL = 1e-4  # tiled (float64) vs the model's own float32 output of the head
PAIR_PX = 440  # the tiles and the running statistics side by side while each gets this width
# the longest text the walk runs on: (512 / 4)² = 16,384 tiles at the smallest blocks (4,096 tokens made 262,144: a
# 5 MB figure and 18 s of tiling for a grid no one can read)
WALK_TOKENS = 512


def flash_section(inp, present: bool) -> None:
    """The section, drawn where it is called; any error shown as a message."""
    st.subheader("Inside flash attention: the tiled computation, one tile at a time")
    st.markdown("Flash attention never writes the T×T matrix. It cuts the queries into blocks and streams the "
                "keys and values past each block, keeping per query row only a **running maximum m**, a **running "
                "sum l** of exp(score − m) and a running weighted sum of values. When a tile brings a larger "
                "maximum, the old sums are **rescaled by exp(m_old − m_new)** before the tile's own terms are "
                "added (the *online softmax*). After the last tile, output = weighted sum / l: exactly softmax·V.")
    with guard():
        cap = inp.capture()
        group = cap.target_group
        sites = cap.groups()[group]
        c1, c2, c3, c4 = st.columns(4)
        layer = slider("Layer", 0, len(sites) - 1, "fl_layer", len(sites) - 1, where=c1)
        head = slider("Head", 0, cap.n_heads - 1, "fl_head", 0, where=c2)
        bq = select("Query block", (4, 8, 16, 32), "fl_bq", 8, where=c3, horizontal=True)
        bk = select("Key/value block", (4, 8, 16, 32), "fl_bk", 8, where=c4, horizontal=True)
        n = len(cap.group_tokens(group)[0])
        text = inp.text if n <= WALK_TOKENS else state.first_tokens(inp.model, inp.text, False, WALK_TOKENS)
        tiling, z = mechanics.flash_tiling(inp.model, text, inp.src, sites[layer], head, bq, bk)
        if text != inp.text:
            tiles = math.ceil(n / bq) * math.ceil(n / bk)
            st.caption(f"The walk runs on the text's first {tiling.T:,} tokens, which the model reads on their own "
                       f"here: all {n:,} would make {tiles:,} tiles at these blocks. The algorithm is the same at "
                       "every length.")
        nq = -(-tiling.T // bq)
        c1, c2 = st.columns(2)
        qb = index("Query block", nq, "fl_qblock", nq - 1, where=c1)
        mine = tiling.steps_of(qb)
        step = slider("Tile of this block", 1, len(mine), "fl_step", len(mine), where=c2,
                      help="Key/value blocks arrive left to right; fully masked ones are skipped.") - 1 \
            if len(mine) > 1 else 0
        left, right = wrapping_columns(2, "fl-pair", PAIR_PX)  # one under the other on a projector
        at = column_px(2, present, min_width=PAIR_PX)[0]
        with left:
            chart(tile_grid(tiling, qb, step, present), key="fl-grid", name="flash-tiles", width=at)
        r0, r1 = mine[step].rows
        row = r1 - 1  # the block's last row: it sees the most keys
        with right:
            chart(running_stats(tiling, qb, row, step, present), key="fl-stats", name="flash-running", width=at)
        s = mine[step]
        st.dataframe(pd.DataFrame({"query row": range(r0, r1), "tile max": s.block_max, "m before": s.m_before,
                                   "m after": s.m_after, "rescale exp(m before − m after)": s.rescale,
                                   "l before": s.l_before, "l after": s.l_after}),
                     hide_index=True, column_config={c: st.column_config.NumberColumn(format="%.4g") for c in
                                                     ("tile max", "m before", "m after",
                                                      "rescale exp(m before − m after)", "l before", "l after")})
        st.caption(f"{sites[layer]}, head {head}: tile {step + 1} of {len(mine)} for query rows {r0}–{r1 - 1} "
                   f"brings keys {s.cols[0]}–{s.cols[1] - 1}. −inf: no visible key yet; a rescale of 0 is a row's "
                   "first visible tile (nothing to rescale).")
        diff_full, diff_model = tiling.max_abs_diff, float(abs(tiling.output - z).max())
        verdict_banner(diff_full <= TOL_TILED and diff_model <= TOL_MODEL,
                       f"The tiled output equals the full softmax's within {TOL_TILED:g} (max |Δ| {diff_full:.1e}) "
                       f"and the model's own output of this head within {TOL_MODEL:g} (max |Δ| {diff_model:.1e}, "
                       "float32).",
                       f"The tiled output differs: max |Δ| {diff_full:.1e} from the full softmax, {diff_model:.1e} "
                       "from the model.")
        T, S = tiling.T, tiling.S
        st.markdown(
            f"**Memory.** At most one tile of scores is alive: {bq}×{bk} = **{tiling.tile_cells:,}** numbers, "
            f"plus m, l and the weighted sum per row ({bq}·(2 + {tiling.d_head}) numbers). The full matrix "
            f"here is {T}×{S} = **{tiling.full_cells:,}** numbers per head; at T = 4,096 it is 16,777,216, "
            f"the tile still {tiling.tile_cells:,}. {len(tiling.skipped)} of "
            f"{len(tiling.skipped) + len(tiling.steps)} tiles lie wholly above the causal diagonal and are "
            "never computed." if tiling.skipped else
            f"**Memory.** At most one tile of scores is alive: {bq}×{bk} = **{tiling.tile_cells:,}** numbers; the "
            f"full matrix is {T}×{S} = **{tiling.full_cells:,}** per head.")
    st.markdown(
        "**What a GPU adds.** The point of tiling is where the numbers live. A GPU's on-chip **SRAM** (shared "
        "memory, a few hundred kB per streaming multiprocessor) is an order of magnitude faster than its "
        "**HBM** (the gigabytes of main GPU memory). Standard attention writes the T×T scores and weights to "
        "HBM and reads them back; flash attention loads a q block and each k/v tile into SRAM, does the "
        "matrix products, the online softmax and the weighted sum there, and writes only the output, so HBM "
        "traffic grows with T·d instead of T². For training, the **backward pass recomputes** each tile's "
        "scores from q, k and the saved per-row m and l instead of storing the weights: more arithmetic, far "
        "less memory traffic, and still exact. On this CPU the fused kernel (the `flash` backend) gives the "
        "same numbers; the speed-up needs the GPU's memory hierarchy.")
