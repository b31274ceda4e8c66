"""The per-layer parts of context mixing (analysis.probes.context_mixing, encdec_mixing), for any attention site —
self-attention over its own tokens or cross-attention over an encoder's: the attention norms of every site, read
inside one forward, and one site's value-zeroing distances from reruns of its block."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from attnlab.analysis.probes.pass_size import give_back


@torch.no_grad()
def site_norms(lm, inputs, sites: list, interventions: dict | None = None) -> dict[str, np.ndarray]:
    """{site: N [Q, K]} float64 for each attention module in `sites` (its queries Q, its keys K: the encoder's
    tokens for a cross-attention), of one run under `interventions` ({hook name: fn}). Each site's norms are taken
    inside the forward from its values and pattern (after any intervention on them): one pattern held at a time."""
    given, values, out, reads = dict(interventions or {}), {}, {}, {}
    for m in sites:
        def keep_v(v, name, m=m):  # [1, K, Hkv, d]
            values[m.site] = v[0].double()

        def read_pattern(a, name, m=m):  # [1, H, Q, K]
            out[m.site] = layer_norms(m, values.pop(m.site), a[0].double())

        reads[f"{m.site}.hook_v"], reads[f"{m.site}.hook_pattern"] = keep_v, read_pattern
    lm.forward(inputs, interventions={n: then(given.get(n), fn) for n, fn in reads.items()} | {
        n: fn for n, fn in given.items() if n not in reads}, records=False)
    return out


def layer_norms(m, v: torch.Tensor, a: torch.Tensor) -> np.ndarray:
    """‖Σ_h α_h[i, j] v_h(x_j) W_O^h‖ [Q, K] of attention module m from its values v [K, Hkv, d] and pattern a
    [H, Q, K] (float64)."""
    v = v.repeat_interleave(m.group, dim=1)  # [K, Hkv, d] -> [K, H, d]: query head h reads k/v head h // group
    w = m.out.weight.double().view(-1, m.n_heads, m.d_head)  # [D, H·d] -> [D, H, d]
    fv = torch.einsum("jhd,ehd->jhe", v, w)  # [K, H, D]: what each head writes for each token's value
    gram = torch.einsum("jhe,jge->jhg", fv, fv)  # [K, H, H]
    per_key = a.permute(2, 1, 0)  # [H, i, j] -> [j, i, H]: each key's weights from every query
    n2 = (torch.bmm(per_key, gram) * per_key).sum(-1)  # [j, i]: Σ_h Σ_g α_h ⟨f_h, f_g⟩ α_g, one matmul per key
    return n2.T.clamp_min(0).sqrt().cpu().numpy()  # [i, j]


def then(first, read):
    """An intervention that applies `first` (None: none), then reads the result with `read` (which returns None)."""
    if first is None:
        return lambda x, name: read(x, name)

    def both(x, name):
        out = first(x, name)
        x = x if out is None else out
        read(x, name)
        return x

    return both


@torch.no_grad()
def zeroed_distances(run: Callable[[int, dict], torch.Tensor], site: str, n_keys: int, per: int,
                     given: dict | None = None) -> np.ndarray:
    """1 − cos(y_i, y_i^¬j) [Q, K], float64: y = run(n, interventions), the output [n, Q, D] of one block run on n
    copies of its input; row 0 is clean, row 1 + r has key js[r]'s value zeroed in every head at `site`
    (SITE.hook_v, [n, K, Hkv, d]), `per` keys per run. An intervention in `given` on that value acts before the
    zeroing. A query whose output stays equal bit for bit (a key it cannot see) gets 0, not the cosine's rounding."""
    given = dict(given or {})
    first = given.get(f"{site}.hook_v")
    z = None
    for start in range(0, n_keys, per):
        js = list(range(start, min(start + per, n_keys)))

        def zero(v, name, js=js):
            v = v.clone() if first is None else applied(first, v, name)  # [1 + n, K, Hkv, d]
            v[torch.arange(1, len(js) + 1), torch.tensor(js)] = 0  # row 1 + r: key js[r]'s value zeroed
            return v

        y = run(1 + len(js), {**given, f"{site}.hook_v": zero})  # [1 + n, Q, D]
        d = 1 - F.cosine_similarity(y[1:].double(), y[:1].double(), dim=-1)  # [n, Q]: row r, query i
        d[(y[1:] == y[:1]).all(-1)] = 0
        if z is None:
            z = np.zeros((y.shape[1], n_keys))
        z[:, js] = d.T.cpu().numpy()  # [n, Q] -> [Q, n]: column j of every query row
        give_back()
    return z


def applied(fn, v: torch.Tensor, name: str) -> torch.Tensor:
    """A copy of v after an intervention fn (which may change its argument in place and return None)."""
    v = v.clone()
    out = fn(v, name)
    return (v if out is None else out).clone()
