"""Tour steps on how attention is computed: query–key–value (one row of the story's answer head), the scaled
dot product (the softmax with and without 1/√d_k), masks (the lecture's quiz) and permutation equivariance."""

from __future__ import annotations

import numpy as np
from attnlab.analysis.attention.masks import zero_after_softmax_vs_neg_inf
from attnlab.analysis.attention.scores import counterfactual_softmax
from attnlab.analysis.attention.stepwise import QUIZ_SCORES, attention_steps
from attnlab.analysis.machinery.permutation import QUANTITIES
from attnlab.app import mechanics, state
from attnlab.app.figures.grids import delta_grid, number_grid
from attnlab.app.figures.lines import lines
from attnlab.app.figures.vectors import outline_row, qkv_strips
from attnlab.app.tour.core import HEIGHT, MARK, View, box, fit, note, pct, tok
from attnlab.app.tour.look import DECODER, story
from attnlab.model.masks import CAUSAL, mask_array

MIXES = 0.9  # the q/k/v step shows a head whose largest weight is under this (its output mixes values)
TAUS = np.round(np.geomspace(0.1, 10, 13), 3)  # the Score scales page's temperatures
PERM_TEXT, PERM_TOLERANCE = "the cat sat on the mat", 1e-5  # the Permutation page's default text and tolerance
SETTING_WORDS = {"none": "no positions", "none + causal mask": "a causal mask", "learned": "learned positions",
                 "sinusoidal": "sinusoidal positions", "rope": "RoPE", "alibi": "ALiBi"}  # the page's settings in words


def mixing_head(stack: np.ndarray, q: int, src: int) -> tuple[int, int]:
    """The head whose row q puts most weight on `src` while no key takes over MIXES of it (its output is a visible
    mix of value vectors); the head with most weight on `src` when every head is that sharp."""
    row = stack[:, :, q]  # [L, H, k]
    on = np.where(row.max(-1) < MIXES, row[..., src], -1.0)  # [L, H]
    if on.max() < 0:
        on = row[..., src]
    layer, head = np.unravel_index(int(np.argmax(on)), on.shape)
    return int(layer), int(head)


def query_key_value(present: bool) -> View:
    """Topic 2: the story's answer row as vectors — q against every key k_j, the scaled scores, their softmax α,
    the values v_j and the output Σ α_j v_j, which equals the model's own output of the head."""
    p, cap, stack, q, src = story(DECODER, "decoder-story-1")
    layer, head = mixing_head(stack, q, src)
    hv = mechanics.head_vectors(DECODER, p.text, p.src_text, cap.sites(next(iter(cap.groups())))[layer], head, q)
    n, d = hv.k.shape
    first, second = (int(i) for i in np.argsort(hv.weights)[::-1][:2])  # rows of the two heaviest keys
    t1, t2 = (int(hv.keys[i]) for i in (first, second))
    fig = qkv_strips(hv, cap.tokens, present=present, height=HEIGHT[present],
                     title=f"Token {q}, head {layer}.{head}: q, keys, values, output")
    outline_row(fig, first, MARK)  # the heaviest key's k, α and v; the output under V
    numbers = {"layer": layer, "head": head, "query": q, "keys": n, "d_head": d, "top": t1, "second": t2,
               "score": float(hv.scores[first]), "score_second": float(hv.scores[second]),
               "weight": float(hv.weights[first]), "weight_second": float(hv.weights[second]),
               "max_abs_vs_model": hv.max_abs_vs_model}
    text = (f"Each token offers a key k and a value v, and asks with a query q: three learned projections of the same "
            f"vector (q and k rotated by RoPE). Token {q}'s query in head {layer}.{head} (top strip, d_head = {d}) "
            f"meets the {n} keys it may see: q·k/√{d} is **{hv.scores[first]:.2f}** for token {t1} "
            f"{tok(cap.tokens[t1])} and **{hv.scores[second]:.2f}** for token {t2} {tok(cap.tokens[t2])}, and the "
            f"softmax makes them α = **{hv.weights[first]:.3f}** and **{hv.weights[second]:.3f}**. The output "
            f"Σ α_j v_j (bottom strip) is that mix of value rows; it equals the model's own output of the head to "
            f"**{hv.max_abs_vs_model:.1e}**.")
    params = {"model": DECODER, "preset": p.id, "layer": layer, "head": head, "query": q}
    return View(fit(fig, present), text, numbers, f"the boxed rows: key {t1}, its α and its value; under them the "
                "output", params)


def scaled_dot_product(present: bool) -> View:
    """Topic 3: mean row entropy with and without 1/√d_k as the temperature changes, at layer 0 head 0."""
    p, cap, stack, q, src = story(DECODER, "decoder-retrieval-2")
    rec = cap.records[cap.sites(next(iter(cap.groups())))[0]]
    mask, bias = rec.mask_for(), None if rec.bias is None else rec.bias[0]
    raw, live = rec.raw_qk(0), rec.mask_for().any(-1)
    sweep = {"with 1/√d_k": [], "without": []}
    for t in TAUS:
        c = counterfactual_softmax(raw, rec.scale, tau=float(t), mask=mask, bias=bias)
        sweep["with 1/√d_k"].append(float(c.scaled_entropy[live].mean()))
        sweep["without"].append(float(c.unscaled_entropy[live].mean()))
    cf = counterfactual_softmax(raw, rec.scale, tau=1.0, mask=mask, bias=bias)
    sat_scaled = float((cf.scaled.max(-1)[live] > 0.9).mean())
    sat_raw = float((cf.unscaled.max(-1)[live] > 0.9).mean())
    d_k = round(1 / rec.scale**2)
    e1, e0 = float(cf.scaled_entropy[live].mean()), float(cf.unscaled_entropy[live].mean())
    fig = lines(TAUS, sweep, title="Layer 0, head 0: mean row entropy (nats) vs temperature", xlabel="τ (log)",
                ylabel="entropy", present=present, log_x=True, vline=1.0)
    note(fig, 0.0, e0, f"τ = 1 without: {e0:.2f} nats")  # a log axis places annotations at log10(τ): τ = 1
    numbers = {"d_k": d_k, "entropy_scaled": e1, "entropy_unscaled": e0, "saturated_scaled": sat_scaled,
               "saturated_unscaled": sat_raw}
    text = (f"Dot products of d_k = {d_k} dimensions grow like √d_k ≈ {np.sqrt(d_k):.1f}. With the factor the rows "
            f"keep a mean entropy of **{e1:.2f}** nats and {pct(sat_scaled)} of them put over 0.9 on one key; "
            f"without it the entropy drops to **{e0:.2f}** and {pct(sat_raw)} of the rows saturate — nearly one-hot, "
            "so almost no gradient reaches the other keys.")
    params = {"model": DECODER, "preset": p.id, "layer": 0, "head": 0}
    return View(fit(fig, present), text, numbers, "the curve without 1/√d_k at τ = 1", params)


def masks(present: bool) -> View:
    """Topic 4: the lecture's quiz — a causal mask set to −∞ before the softmax; α₂,₂ and the row sums."""
    mask = mask_array(CAUSAL, 4)  # [4, 4] True = may attend
    s = attention_steps(scores=QUIZ_SCORES, mask=mask)
    w = s.weights  # [4, 4]
    after = zero_after_softmax_vs_neg_inf(QUIZ_SCORES, mask).zero_after.sum(-1)  # [4]: rows zeroed after softmax
    labels_q, labels_k = [f"q{i + 1}" for i in range(4)], [f"k{j + 1}" for j in range(4)]
    fig = number_grid(w, labels_q, labels_k, kind="weights", present=present, mark=(1, 1),
                      title="Softmax of each row after the causal mask: α")
    n = len(mask)
    stairs = " ".join(f"L {i + 0.5},{i + 0.5} L {i + 1.5},{i + 0.5}" for i in range(n - 1))  # under the masked cells
    fig.add_shape(type="path", path=f"M {n - 0.5},-0.5 L 0.5,-0.5 {stairs} Z", name="tour-look",
                  line={"color": "#ff7f0e", "width": 3, "dash": "dot"}, fillcolor="rgba(255,127,14,0.15)")
    fig.add_annotation(x=n - 1.5, y=0.5, text="masked: −∞ before softmax", showarrow=False,
                       font={"color": "#ff7f0e", "size": 14}, name="tour-look")
    above = w[~mask]
    numbers = {"alpha_22": float(w[1, 1]), "row_sums": w.sum(-1).tolist(), "masked_max": float(np.abs(above).max()),
               "masked_cells": int((~mask).sum()), "zero_after_min": float(after.min())}
    text = (f"Scaled scores row 2 = [1, 1, −1, 0]; the causal mask hides keys 3 and 4, so α₂,₂ = e¹/(e¹+e¹) = "
            f"**{w[1, 1]:.2f}**. Masking before the softmax leaves the {int((~mask).sum())} cells above the diagonal "
            f"at exactly {np.abs(above).max():.0f} and every row summing to **{w.sum(-1).min():.3f}**; zeroing them "
            f"after the softmax instead leaves a row summing to only **{after.min():.3f}**.")
    params = {"sbs_mode": "scores", "sbs_mask": "causal", "sbs_T": 4, "sbs_dk": 1}
    return View(fit(fig, present), text, numbers, "cell (2, 2) and the masked triangle", params)


def permutation(present: bool) -> View:
    """Topic 5: shuffle the tokens; without positions every quantity is shuffled the same way."""
    study = state.permutation_study("random-encoder", PERM_TEXT, None, 0)
    table = study.table()  # [setting, quantity]
    cols = list(QUANTITIES)
    fig = delta_grid(table, study.settings, cols, PERM_TOLERANCE, present=present,
                     title="max |original − un-shuffled| per setting and quantity")
    row = study.settings.index("none")
    box(fig, 0, table.shape[1] - 1, row, row, "")
    learned = study.settings.index("learned")
    kept = [s for s, r in zip(study.settings, table) if r.max() <= PERM_TOLERANCE]
    broken = [SETTING_WORDS.get(s, s) for s in study.settings if s not in kept]
    numbers = {"tokens": len(study.tokens), "none_max": float(table[row].max()),
               "learned_weights": float(table[learned, cols.index("weights")]), "perm": list(study.perm),
               "equivariant": kept}
    only = " and ".join(SETTING_WORDS.get(s, s) for s in kept) or "none of them"
    text = (f"Shuffle the {len(study.tokens)} tokens of “{PERM_TEXT}” and un-shuffle the results. Without positions "
            f"q, k, v, scores, weights and outputs all come back to within **{table[row].max():.1e}** — float32 "
            f"rounding: self-attention sees a set. With learned positions the weights differ by "
            f"**{table[learned, cols.index('weights')]:.1e}**. Of the {len(study.settings)} settings, every quantity "
            f"comes back within {PERM_TOLERANCE:.0e} only with {only}; "
            f"{', '.join(broken[:-1]) + ' and ' if len(broken) > 1 else ''}{broken[-1] if broken else 'nothing'} "
            "break the symmetry.")
    params = {"perm_text": PERM_TEXT, "perm_tok": "random-encoder", "perm_mode": "random", "perm_seed": 0,
              "perm_set": "none", "perm_q": "weights"}
    return View(fit(fig, present), text, numbers, "the row without positions: all zeros up to rounding", params)
