"""The logit lens (nostalgebraist 2020): the residual stream before each block and after the last, read through
the model's own final norm and unembedding — what the model would predict if it stopped there."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from attnlab.analysis.probes.readout import answer_id, check_row, row_labels

TOP_K = 5


@dataclass
class Lens:
    model: str
    tokens: list[str]  # the input's token labels, T
    rows: list[str]  # "embed", "L0".."L{n-1}": the stream after layer i (R = n_blocks + 1)
    top_ids: np.ndarray  # [R, T, k] int
    top_tokens: list[list[list[str]]]  # [R][T][k]
    top_probs: np.ndarray  # [R, T, k] float32
    answer: str | None = None
    answer_id: int | None = None
    answer_probs: np.ndarray | None = None  # [R, T] p(answer) per row and position
    answer_ranks: np.ndarray | None = None  # [R, T] 0 = the top token

    def to_json(self, layer: int | None = None) -> dict:
        rows = range(len(self.rows)) if layer is None else [layer]
        out = {"model": self.model, "tokens": self.tokens, "rows": [self.rows[r] for r in rows],
               "top": [[[{"token": t, "id": int(i), "p": round(float(p), 6)}
                         for t, i, p in zip(self.top_tokens[r][q], self.top_ids[r, q], self.top_probs[r, q])]
                        for q in range(len(self.tokens))] for r in rows]}
        if self.answer_probs is not None:
            out["answer"] = {"token": self.answer, "id": self.answer_id,
                             "p_last": [round(float(self.answer_probs[r, -1]), 6) for r in rows],
                             "rank_last": [int(self.answer_ranks[r, -1]) for r in rows]}
        return out


@torch.no_grad()
def rows_logits(lm, inputs, backend: str = "eager"):
    """(the model's readout, resid list of [1, T, D] per row, the model's own logits [1, T, V]) for `inputs`."""
    ro = lm.readout()
    fwd = lm.forward(inputs, backend=backend, names=ro.resid_names, records=False)
    return ro, [fwd.capture.tensor(n) for n in ro.resid_names], fwd.logits


@torch.no_grad()
def logit_lens(lm, text: str, answer: str | None = None, *, src_text: str | None = None, k: int = TOP_K,
               layer: int | None = None, backend: str = "eager") -> Lens:
    """Top-k tokens per (row, position) and, with `answer`, its probability and rank per row. `layer` checks a
    row index (0 = the embeddings, i = after layer i − 1, n_blocks = the final stream)."""
    a = answer_id(lm, answer) if answer is not None else None
    inputs = lm.encode(text, src_text)
    ro, resid, _ = rows_logits(lm, inputs, backend)
    check_row(layer, len(resid), has="the lens has rows")  # rows, not layers: 0 is the embeddings
    tops, probs, ap, ar = [], [], [], []
    for x in resid:  # one row at a time: [1, T, V] in memory, never [R, T, V]
        p = torch.softmax(ro.logits(x)[0].float(), dim=-1)  # [T, V]
        v, i = p.topk(min(k, p.shape[-1]), dim=-1)  # [T, k]
        tops.append(i)
        probs.append(v)
        if a is not None:
            ap.append(p[:, a])
            ar.append((p > p[:, a:a + 1]).sum(-1))
    top_ids = torch.stack(tops).cpu().numpy()
    labels = [[[lm.label(j) for j in row] for row in r] for r in top_ids.tolist()]
    lens = Lens(lm.name, list(inputs.tokens), row_labels(len(resid) - 1), top_ids, labels,
                torch.stack(probs).cpu().numpy())
    if a is not None:
        lens.answer, lens.answer_id = lm.label(a), a
        lens.answer_probs = torch.stack(ap).cpu().numpy()
        lens.answer_ranks = torch.stack(ar).cpu().numpy()
    return lens
