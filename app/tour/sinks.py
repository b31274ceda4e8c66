"""Tour step beyond the lecture: attention sinks — most heads of a real model put most of their weight on the first
token, whose residual stream is huge while its value is small (SmolLM2-135M; lecture-decoder when it is missing)."""

from __future__ import annotations

import numpy as np
from attnlab.analysis.probes.sinks import SINK_SHARE
from attnlab.app import state
from attnlab.app.figures.sinks import share_grid
from attnlab.app.tour.core import View, box, fit, pct
from attnlab.app.tour.look import DECODER
from attnlab.model.gguf.smollm2 import NAME as SMOL
from attnlab.model.gguf.smollm2 import smollm2_file


def sinks(present: bool) -> View:
    """Attention sinks: each head's share on the first token, the sink heads, and the first token's norms."""
    name = SMOL if smollm2_file() is not None else DECODER
    r = state.sink_report(name)
    n_layers, n_heads = r.share.shape
    layer, head = (int(i) for i in np.unravel_index(int(np.argmax(r.share)), r.share.shape))
    n_sinks = int((r.share >= SINK_SHARE).sum())
    late = slice(n_layers // 2, None)  # the second half of the layers, where the first token's stream is largest
    resid_first, resid_rest = float(r.norms["resid_first"][late].mean()), float(r.norms["resid_rest"][late].mean())
    value_ratio = float(np.median(r.norms["value_first"] / r.norms["value_rest"]))
    fig = share_grid(r.share, SINK_SHARE, present=present, compact=True,
                     title=f"{name}: each head's mean weight on the first token ({r.n_texts} texts)")
    box(fig, head, head, layer, layer, "")
    numbers = {"model": name, "texts": r.n_texts, "sink_heads": n_sinks, "heads": int(r.share.size), "layer": layer,
               "head": head, "share": float(r.share[layer, head]), "resid_first": resid_first,
               "resid_rest": resid_rest, "value_ratio": value_ratio}
    text = (f"Over {r.n_texts} texts, **{n_sinks} of {r.share.size}** heads of {name} put at least "
            f"{pct(SINK_SHARE)} of their weight on the first token, whatever it is; head **{layer}.{head}** puts "
            f"**{pct(r.share[layer, head])}** there. In the second half of the layers the first token's residual "
            f"stream has norm **{resid_first:,.0f}** against **{resid_rest:,.0f}** for the others, while its value is "
            f"**{value_ratio:.2f}×** theirs (median over layers): a head with nothing to read parks its weight on "
            "the sink and adds almost nothing. Drop the first tokens from a sliding window and perplexity jumps "
            "(StreamingLLM); the Sinks page runs that test.")
    return View(fit(fig, present), text, numbers, f"head {layer}.{head}: the strongest sink", {"sinks_model": name})
