"""Attention sinks: how much of each head's attention lands on the first token, over a set of texts, and what the
first token's keys, values, head outputs and residual stream look like next to the other tokens'.

share[l, h]  the weight head h of layer l puts on key 0, averaged over the query rows 1..T−1 of a text (row 0 sees
             only key 0 in a decoder: it would count 1 whatever the head does, so it is left out), then over the
             texts (each text counts once).
sink head    share ≥ SINK_SHARE (0.3); the sink rate of a layer is the fraction of its heads that are sink heads.
norms        per layer, the first token against the mean of the others (each averaged over heads, then texts):
             ‖k‖ and ‖v‖ per key/value head; the head's output from that key, ‖α_i0·v_0‖ for the first token
             against ‖Σ_{j≥1} α_ij·v_j‖ from all the others together (rows i ≥ 1, before the output projection);
             and ‖x‖ of the residual stream after the layer at that position (massive activations).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch
from attnlab.model.inputs import InputError
from attnlab.model.lecture.samples import load_samples

from attnlab.data import data_folder

SINK_SHARE = 0.3
NORMS = ("key", "value", "out", "resid")  # each as <name>_first and <name>_rest, float64 [L]
TEXTS_FILE = "sinks.json"


def sink_data() -> dict:
    """sample_texts/sinks.json: the short English texts ('texts') and the long one for the window test ('long')."""
    return json.loads((data_folder("sample_texts") / TEXTS_FILE).read_text(encoding="utf-8"))


def sink_texts(lm) -> list[str]:
    """The texts the shares are averaged over: a bundled lecture model's samples (its vocabulary is the lecture's);
    otherwise the short texts of sinks.json and the model's own measured presets (sample_texts/<name>.json)."""
    if lm.name.startswith("lecture-"):
        got = [s.text for s in load_samples(lm.name) if s.text]
        if got:
            return got
    texts = [t["text"] for t in sink_data()["texts"]]
    own = data_folder("sample_texts") / f"{lm.name}.json"
    if own.is_file():
        texts += [s["text"] for s in json.loads(own.read_text(encoding="utf-8"))["samples"]]
    return texts


def first_token_share(pattern: np.ndarray) -> np.ndarray:
    """[H]: each head's mean weight on key 0 over the query rows 1..T−1 of one pattern [H, T, T]."""
    if pattern.shape[-2] < 2:
        raise InputError("a text of one token has no query after the first; sinks need at least two tokens")
    return pattern[:, 1:, 0].mean(axis=1)


@dataclass(frozen=True)
class SinkReport:
    model: str
    n_texts: int
    tokens: int  # over all texts
    share: np.ndarray  # float64 [L, H]
    norms: dict[str, np.ndarray] | None  # '<NORMS>_first', '<NORMS>_rest' -> float64 [L]; None on a view
    note: str | None = None  # what the model could not measure, in one line

    @property
    def per_layer(self) -> np.ndarray:
        """float64 [L]: the share on the first token, averaged over the layer's heads."""
        return self.share.mean(axis=1)

    @property
    def sink_rate(self) -> np.ndarray:
        """float64 [L]: the fraction of each layer's heads that are sink heads."""
        return (self.share >= SINK_SHARE).mean(axis=1)

    @property
    def sink_heads(self) -> list[dict]:
        """{'layer', 'head', 'share'} of every head with share ≥ SINK_SHARE, layer by layer."""
        return [{"layer": int(layer), "head": int(h), "share": float(self.share[layer, h])}
                for layer, h in zip(*np.nonzero(self.share >= SINK_SHARE))]

    def to_json(self) -> dict:
        norms = None if self.norms is None else {k: v.tolist() for k, v in self.norms.items()}
        return {"model": self.model, "texts": self.n_texts, "tokens": self.tokens, "threshold": SINK_SHARE,
                "per_layer": self.per_layer.tolist(), "sink_rate": self.sink_rate.tolist(),
                "share": self.share.tolist(), "sink_heads": self.sink_heads, "norms": norms}


def layer_norms(k: torch.Tensor, v: torch.Tensor, z: torch.Tensor, pattern: torch.Tensor,
                resid: torch.Tensor) -> dict[str, float]:
    """One layer of one text: k, v [Hkv, T, d]; z [H, T, d]; pattern [H, T, T]; resid [T, D] (after the layer)."""
    group = pattern.shape[0] // v.shape[0]
    kn, vn, rn = k.norm(dim=-1), v.norm(dim=-1), resid.norm(dim=-1)  # [Hkv, T], [Hkv, T], [T]
    v0 = v[:, 0].repeat_interleave(group, dim=0)  # [Hkv, d] -> [H, d]: each query head's first value
    a0 = pattern[:, 1:, 0]  # [H, T−1]
    rest = z[:, 1:] - a0[..., None] * v0[:, None]  # [H, T−1, d]: Σ_{j≥1} α_ij·v_j
    return {"key_first": kn[:, 0].mean(), "key_rest": kn[:, 1:].mean(),
            "value_first": vn[:, 0].mean(), "value_rest": vn[:, 1:].mean(),
            "out_first": (a0 * v0.norm(dim=-1)[:, None]).mean(), "out_rest": rest.norm(dim=-1).mean(),
            "resid_first": rn[0], "resid_rest": rn[1:].mean()}


def text_measures(lm, text: str) -> tuple[np.ndarray, dict[str, np.ndarray] | None, int]:
    """(share [L, H], norms name -> [L] or None, tokens) of one text."""
    inp = lm.encode(text)
    T = inp.ids.shape[1]
    if not lm.capabilities.internals:
        run = lm.run(inputs=inp)
        return np.stack([first_token_share(p) for p in run.matrices("self").astype(np.float64)]), None, T
    fwd = lm.forward(inp, names=["*.attn.hook_k", "*.attn.hook_v", "*.attn.hook_z", "*.attn.hook_pattern",
                                 "*.hook_resid_post"], records=False)
    t = {n: x[0].double() for n, x in ((n, fwd.capture.tensor(n)) for n in fwd.capture.tensors)}
    layers = range(lm.cfg.n_layers)
    pats = [t[f"blocks.{i}.attn.hook_pattern"] for i in layers]
    share = np.stack([first_token_share(p.cpu().numpy()) for p in pats])
    heads_first = {n: x.transpose(0, 1) for n, x in t.items() if n.endswith(("hook_k", "hook_v", "hook_z"))}  # [T, H, d] -> [H, T, d]
    per = [layer_norms(heads_first[f"blocks.{i}.attn.hook_k"], heads_first[f"blocks.{i}.attn.hook_v"],
                       heads_first[f"blocks.{i}.attn.hook_z"], pats[i], t[f"blocks.{i}.hook_resid_post"]) for i in layers]
    return share, {k: np.array([float(p[k]) for p in per]) for k in per[0]}, T


def measure_sinks(lm, texts: list[str] | None = None) -> SinkReport:
    """Shares on the first token (and, on a converted model, the norms) averaged over `texts` (default: sink_texts)."""
    if lm.reads_source or lm.reads_image:
        raise InputError(f"{lm.name} is {lm.a_kind}: "
                         "sinks are measured on one stack of self-attention over a text (a decoder or an encoder)")
    texts = [lm.first_tokens(t) for t in sink_texts(lm)] if texts is None else texts  # defaults fit the context
    if not texts:
        raise InputError("no texts to measure sinks on")
    got = [text_measures(lm, t) for t in texts]
    share = np.mean([g[0] for g in got], axis=0)
    norms = None if got[0][1] is None else {k: np.mean([g[1][k] for g in got], axis=0) for k in got[0][1]}
    note = None if norms is not None else (f"{lm.name} runs as a transformers view: attention weights only, no keys, "
                                           "values or residual stream (the norms need a converted family)")
    return SinkReport(lm.name, len(texts), sum(g[2] for g in got), share, norms, note)
