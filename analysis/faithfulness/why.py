"""Why last-layer attention and rollout rank as they do on one model: the numbers behind the faithfulness table.

Over the benchmark's cases (analysis.faithfulness.benchmark.make_cases; decoder and encoder: one self-attention stack),
with q the query row, s the answer's source and A_l [H, T, T]:
  head_source [L, H]   mean A_l,h[q, s]: how much each head looks from the query at the source
  lookup               the head with the largest head_source: (layer, head, weight)
  last_layer_source    mean of mean_h A_L[q, s]: what last-layer attention gives the source (head mean)
  rollout_source, rollout_self   mean rollout R[q, s] and R[q, q] (analysis.attention.rollout defaults: residual 0.5,
                       head mean)
  lower_source_self    mean over the layers below the last and their heads of A_l[s, s]: how much the source
                       keeps of itself below the last layer — rollout passes the source's share through these rows
  miss_pick            where rollout's top-1 lands when it misses: the most common position ("position", its
                       token, "count") or offset from the source ("offset"), whichever repeats more;
                       lower_to_pick = mean over those misses and lower layers/heads of A_l[s, pick]
  top1                 hit shares of last-layer attention and rollout on these cases
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from attnlab.analysis.attention.rollout import attention_rollout
from attnlab.analysis.faithfulness.benchmark import clean_patterns, one_stack, top1
from attnlab.analysis.faithfulness.cases import Case, make_cases


def ranking_reasons(lm, cases: list[Case]) -> dict | None:
    """The numbers in the module docstring; None for an encoder–decoder (its rollout runs through cross-attention)."""
    if lm.reads_source or not cases:
        return None
    heads, last, r_src, r_self, lower_self, hits_ll, hits_r, misses = [], [], [], [], [], [], [], []
    for c in cases:
        a = one_stack(clean_patterns(lm, c)).astype(np.float64)  # [L, H, T, T]
        q, s = c.query, c.sources[0]
        r = attention_rollout(a)[q]  # [T]
        ll = a[-1, :, q].mean(0)  # [T]
        heads.append(a[:, :, q, s])  # [L, H]
        last.append(ll[s])
        r_src.append(r[s])
        r_self.append(r[q])
        lower_self.append(a[:-1, :, s, s].mean() if len(a) > 1 else np.nan)
        hits_ll.append(top1(ll, c.candidates) == s)
        pick = top1(r, c.candidates)
        hits_r.append(pick == s)
        if pick != s:
            misses.append((pick, s, c.inputs.tokens[pick], a[:-1, :, s, pick].mean() if len(a) > 1 else np.nan))
    head_source = np.mean(heads, axis=0)  # [L, H]
    layer, head = np.unravel_index(int(np.argmax(head_source)), head_source.shape)
    return {"n": len(cases), "layers": int(head_source.shape[0]), "heads": int(head_source.shape[1]),
            "head_source": head_source.tolist(),
            "lookup": {"layer": int(layer), "head": int(head), "weight": float(head_source[layer, head])},
            "last_layer_source": float(np.mean(last)), "rollout_source": float(np.mean(r_src)),
            "rollout_self": float(np.mean(r_self)), "lower_source_self": float(np.nanmean(lower_self)),
            "top1": {"last_layer": float(np.mean(hits_ll)), "rollout": float(np.mean(hits_r))},
            "misses": len(misses), "miss_pick": _miss_pick(misses)}


def _miss_pick(misses: list[tuple]) -> dict | None:
    if not misses:
        return None
    (pos, n_pos), = Counter(m[0] for m in misses).most_common(1)
    (off, n_off), = Counter(m[0] - m[1] for m in misses).most_common(1)
    if n_pos >= n_off:
        chosen = [m for m in misses if m[0] == pos]
        out = {"position": int(pos), "token": chosen[0][2], "count": n_pos}
    else:
        chosen = [m for m in misses if m[0] - m[1] == off]
        out = {"offset": int(off), "count": n_off}
    return {**out, "lower_to_pick": float(np.nanmean([m[3] for m in chosen]))}


def explain(reasons: dict, methods: dict[str, dict], labels: dict[str, str]) -> list[str]:
    """Plain sentences from `ranking_reasons` and the benchmark's {method: {"top1"}} (shown with `labels`)."""
    r, lk = reasons, reasons["lookup"]
    order = sorted(methods, key=lambda m: -methods[m]["top1"])
    out = ["Ranking on these examples: " + ", ".join(f"{labels.get(m, m)} {methods[m]['top1']:.0%}" for m in order)
           + "."]
    last = lk["layer"] == r["layers"] - 1
    out.append(f"The lookup head is layer {lk['layer']} head {lk['head']}: from the answer's query row it puts "
               f"{lk['weight']:.2f} of its weight on the source token on average"
               + ("" if last else " — below the last layer, where last-layer attention does not look")
               + f". Last-layer attention averages the last layer's {r['heads']} heads and gives the source "
               f"{r['last_layer_source']:.2f}"
               + (" (the other heads dilute the lookup head)" if last and r['last_layer_source'] < lk['weight'] - 0.05
                  else "")
               + f"; its top token is the source in {r['top1']['last_layer']:.0%} of the examples.")
    why = (f"Rollout mixes every layer's head mean half with the identity (the residual stream) and multiplies the "
           f"layers: its row puts {r['rollout_source']:.2f} on the source and {r['rollout_self']:.2f} on the query "
           f"itself. It credits the source only as far as the source's own row keeps it in the "
           f"{r['layers'] - 1} layers below, where the source puts {r['lower_source_self']:.2f} of its attention "
           f"on itself")
    p = r["miss_pick"]
    if p is not None and 3 * p["count"] >= r["misses"]:
        where = (f"position {p['position']} ({p['token']})" if "position" in p else
                 f"the token {abs(p['offset'])} {'before' if p['offset'] < 0 else 'after'} the source")
        why += (f" and {p['lower_to_pick']:.2f} on {where}, where rollout's top token lands in {p['count']} "
                f"of its {r['misses']} misses")
    out.append(why + f". Its top token is the source in {r['top1']['rollout']:.0%} of the examples.")
    return out


def reasons_for(lm, n: int, seed: int = 0) -> dict | None:
    """ranking_reasons over the benchmark's own cases for (n, seed)."""
    return ranking_reasons(lm, make_cases(lm, n, seed))
