"""The worked examples' notes written from the measurement on screen (the Logit lens and Activation patching pages,
the tour): every number is the one just computed, so a retrained model cannot leave a stale note behind."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from attnlab.analysis.probes.dla import DLA
    from attnlab.analysis.probes.lens import Lens
    from attnlab.analysis.probes.patching import Patching

CARRIES = 0.9  # a patched stream cell "carries" the difference when it restores this share
NAMED = 0.1  # heads named in the patching note: restoring at least this share, or pushing back by it


def _span(layers: list[int]) -> str:
    if not layers:
        return "no layer"
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}–{layers[-1]}"


def patch_note(p: Patching) -> str:
    """Where the logit difference sits (the residual stream) and which heads restore or oppose it."""
    diff = next((i for i, (a, b) in enumerate(zip(p.clean, p.corrupt)) if a != b), None)
    last = len(p.clean) - 1
    text = (f"Measured now: logit({p.answer}) − logit({p.wrong}) is {p.ld_clean:+.2f} on the clean story and "
            f"{p.ld_corrupt:+.2f} with '{p.clean[diff] if diff is not None else '?'}' swapped for "
            f"'{p.corrupt[diff] if diff is not None else '?'}'.")
    if diff is not None:
        at_name = [int(i) for i in np.flatnonzero(p.resid[:, diff] >= CARRIES)]
        at_last = [int(i) for i in np.flatnonzero(p.resid[:, last] >= CARRIES)]
        text += (f" The residual stream carries the difference at '{p.clean[diff]}' (position {diff}) entering "
                 f"{_span(at_name)}, and at the last position ('{p.clean[last]}') entering {_span(at_last)}.")
    order = np.argsort(-p.heads, axis=None)
    helps = [(int(i), int(h)) for i, h in zip(*np.unravel_index(order, p.heads.shape)) if p.heads[i, h] >= NAMED]
    hurts = [(int(i), int(h)) for i, h in zip(*np.unravel_index(order[::-1], p.heads.shape)) if p.heads[i, h] <= -NAMED]
    if helps:
        (i, h), rest = helps[0], helps[1:]
        text += f" Heads: layer {i} head {h} restores {100 * p.heads[i, h]:.0f} %, the most"
        text += ("; then " + ", ".join(f"layer {a} head {b} {100 * p.heads[a, b]:.0f} %" for a, b in rest)) if rest \
            else ""
        text += "."
    if hurts:
        text += (" Working against the answer: " + ", ".join(f"layer {a} head {b} ({100 * p.heads[a, b]:.0f} %)"
                                                             for a, b in hurts) + ".")
    return text + " A head can matter without being where the attention map looks hardest, and the other way round."


def lens_note(lens: Lens, d: DLA) -> str:
    """When the answer appears in the stream (the lens at the last position) and who writes it (direct attribution)."""
    probs, ranks = lens.answer_probs[:, -1], lens.answer_ranks[:, -1]
    top = [r for r, k in zip(lens.rows, ranks) if k == 0]
    per_row = ", ".join(f"{r} {v:.3f}" for r, v in zip(lens.rows, probs))
    parts = [(f"layer {i} head {h}", float(v)) for (i, h), v in np.ndenumerate(d.heads)]
    parts += [(f"layer {i} MLP", float(v)) for i, v in enumerate(d.mlps)]
    parts.sort(key=lambda kv: -kv[1])
    what = f"{d.answer} − {d.wrong}" if d.wrong else d.answer
    text = (f"Measured now at the last position ('{lens.tokens[-1]}'): p({lens.answer}) after each row is {per_row}"
            f" (rank {int(ranks[0])} after the embeddings); "
            + (f"it is the top token from {top[0]} on." if top else "it never becomes the top token.")
            + f" Direct attribution of {what} ({d.logit:.2f}): the largest writers are "
            + ", ".join(f"{n} ({v:+.2f})" for n, v in parts[:3]))
    low = parts[-1]
    if low[1] < 0:
        text += f"; {low[0]} pushes back ({low[1]:+.2f})"
    return text + ". A head that moves information for later heads can score near zero here: patching finds it."
