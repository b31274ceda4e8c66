"""TransformerLens-style access to one run's hook tensors: the ActivationCache that `lm.run_with_cache(text)` returns
(model/tl_runs.py runs it), TransformerLens hook functions as interventions, and `get_act_name`'s short names
("pattern", 3)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from attnlab.model.cache_batch import BatchAxis
from attnlab.model.cache_resid import ResidualStream, tl_slice
from attnlab.model.inputs import InputError

_ATTN = ("k", "v", "q", "z", "rot_k", "rot_q", "result", "pattern", "attn_scores")
_MLP = ("pre", "post", "mid", "pre_linear")
_LAYER_TYPES = {"a": "attn", "m": "mlp", "b": "", "block": "", "blocks": "", "attention": "attn"}
_ALIASES = {"attn": "pattern", "attn_logits": "attn_scores", "key": "k", "query": "q", "value": "v",
            "mlp_pre": "pre", "mlp_mid": "mid", "mlp_post": "post"}


def get_act_name(name: str, layer: int | None = None, layer_type: str | None = None) -> str:
    """A full hook name from TransformerLens's short form (its `utils.get_act_name` rules): ("pattern", 3) →
    'blocks.3.attn.hook_pattern', ("resid_pre", 2) → 'blocks.2.hook_resid_pre', "k6" → 'blocks.6.attn.hook_k',
    ("normalized",) → 'ln_final.hook_normalized'; a full name comes back as it is."""
    if ("." in name or name.startswith("hook_")) and layer is None and layer_type is None:
        return name
    match = re.match(r"([a-z]+)(\d+)([a-z]?.*)", name)
    if match is not None:
        name, layer, layer_type = match.groups(0)
    name = _ALIASES.get(name, name)
    full = f"blocks.{layer}." if layer is not None else ""
    if name in _ATTN:
        layer_type = "attn"
    elif name in _MLP:
        layer_type = "mlp"
    elif layer_type in _LAYER_TYPES:
        layer_type = _LAYER_TYPES[layer_type]
    full += (f"{layer_type}." if layer_type else "") + f"hook_{name}"
    return f"ln_final.{full}" if name in ("scale", "normalized") and layer is None else full


def tl_alias(name: str, rotary: bool) -> str:
    """This model's name for a TransformerLens hook name it holds under another: hook_rot_q / hook_rot_k (q, k after
    QK-norm and RoPE) are hook_q / hook_k, which fire there (with RoPE only); blocks.{l}.hook_q_input (and k, v:
    split inputs) is blocks.{l}.attn.hook_q_input. Any other name comes back as it is."""
    for r in ("q", "k"):
        if rotary and name.endswith(f"attn.hook_rot_{r}"):
            return name[:-len(f"rot_{r}")] + r
    split = re.fullmatch(r"(.*blocks\.\d+\.)(hook_[qkv]_input)", name)
    return f"{split[1]}attn.{split[2]}" if split else name


class NotCached(InputError, KeyError):
    """A hook name or layer this cache does not hold: one line (an InputError), and a KeyError as a mapping's."""

    __str__ = BaseException.__str__  # the message itself, not KeyError's quoted repr


class ActivationCache(ResidualStream, BatchAxis):
    """The hook tensors of one run by full name, each with its batch axis (TransformerLens's layouts). Indexed by
    full name or TransformerLens's short keys: cache["pattern", 3], cache["z", 1, "attn"], cache["resid_pre", -1]
    (a negative layer counts from the end). `model`: the LoadedModel that ran (its weights and norms), which the
    residual-stream calls (model/cache_resid.py) and compute_head_results read."""

    def __init__(self, tensors: dict[str, torch.Tensor], n_layers: int, model=None):
        self.cache_dict, self.n_layers, self.model = tensors, n_layers, model
        self.has_batch_dim = True  # False after remove_batch_dim (model/cache_batch.py)

    def name(self, key) -> str:
        """The full hook name of `key` (a name, a short name, or a (name, layer[, layer_type]) tuple)."""
        rotary = getattr(getattr(self.model, "cfg", None), "positional", None) == "rope"
        if isinstance(key, str):
            return key if key in self.cache_dict else tl_alias(get_act_name(key), rotary)
        if not isinstance(key, tuple) or not key or not isinstance(key[0], str):
            raise NotCached(f"{key!r}: index the cache by a hook name or a (name, layer[, layer_type]) tuple")
        name, *rest = key
        if rest and rest[0] is not None:
            rest[0] = self.layer(rest[0])
        return tl_alias(get_act_name(name, *rest), rotary)

    def layer(self, i: int) -> int:
        """Block index `i`, a negative one counted from the end; NotCached naming the range when that is before the
        first block (one past the last names a hook this cache does not hold)."""
        if i < -self.n_layers:
            raise NotCached(f"layer {i} is outside this model's {self.n_layers} layers "
                           f"({-self.n_layers}..{self.n_layers - 1})")
        return i + self.n_layers if i < 0 else i

    def __getitem__(self, key) -> torch.Tensor:
        name = self.name(key)
        if name not in self.cache_dict:
            split = "; split inputs: run_with_cache(..., split_inputs=True)" if name.endswith(("_input", "mlp_in")) else ""
            raise NotCached(f"{name} is not in this cache ({len(self.cache_dict)} hooks; see cache.keys(){split})")
        return self.cache_dict[name]

    def __contains__(self, key) -> bool:
        try:
            return self.name(key) in self.cache_dict
        except KeyError:
            return False

    def keys(self):
        return self.cache_dict.keys()

    def values(self):
        return self.cache_dict.values()

    def items(self):
        return self.cache_dict.items()

    def __iter__(self) -> Iterator[str]:
        return iter(self.cache_dict)

    def __len__(self) -> int:
        return len(self.cache_dict)

    def compute_head_results(self) -> None:
        """Each layer's hook_result [B, T, H, D] from its hook_z and W_O, where the cache lacks it (kept in the
        cache, as TransformerLens's)."""
        W_O = None
        for i in range(self.n_layers):
            name = get_act_name("result", i)
            if name not in self.cache_dict:
                if W_O is None:
                    self._stack()  # one line for a cache without a model (or of a transformers view)
                    W_O = self.model.W_O  # [L, H, d, D]
                z = self["z", i]  # [B, T, H, d]
                self.cache_dict[name] = torch.einsum("bthd,hde->bthe", z, W_O[i].to(z.dtype))  # [B, T, H, D]

    def stack_head_results(self, layer: int = -1, return_labels: bool = False, incl_remainder: bool = False,
                           pos_slice=None, apply_ln: bool = False):
        """Every head's output in the layers before `layer` (-1, None or n_layers: every layer; 0: none, an empty
        stack), [layers·heads, batch, (pos,) d_model] in (layer, head) order ("L{l}H{h}"), from hook_result (computed
        from hook_z where absent); incl_remainder: the rest of the stream entering `layer` ("remainder"); apply_ln:
        through the norm reading `layer`. Refused where the heads' outputs are not parts of the stream (_summed)."""
        self._summed()
        n = self._layer(layer)
        stacked, labels = self._head_stack(n, pos_slice)
        if incl_remainder:
            stream = self["resid_post", n - 1] if n else self["resid_pre", 0]  # [B, T, D]
            rest = tl_slice(stream, pos_slice, -2) - stacked.sum(0)  # [B, (T,) D]
            stacked, labels = torch.cat([stacked, rest[None]]), labels + ["remainder"]
        if apply_ln:
            stacked = self.apply_ln_to_stack(stacked, n, pos_slice=pos_slice)
        return (stacked, labels) if return_labels else stacked

    def _head_stack(self, n: int, pos_slice) -> tuple[torch.Tensor, list[str]]:
        """The heads of layers 0..n-1, [n·H, B, (T,) D], and their labels (n = 0: an empty stack)."""
        if n == 0:  # shaped like the first stream (or, in a cache without it, like head 0's output)
            like = self["resid_pre", 0] if ("resid_pre", 0) in self else self._head_stack(1, None)[0][0]  # [B, T, D]
            like = tl_slice(like, pos_slice, -2)
            return like.new_zeros(0, *like.shape), []
        if any(get_act_name("result", i) not in self.cache_dict for i in range(n)):
            self.compute_head_results()
        parts, labels = [], []
        for i in range(n):
            r = tl_slice(self["result", i], pos_slice, -3)  # [B, (T,) H, D]
            parts.append(r.movedim(-2, 0))  # [B, (T,) H, D] -> [H, B, (T,) D]
            labels += [f"L{i}H{h}" for h in range(r.shape[-2])]
        return torch.cat(parts), labels  # [n·H, B, (T,) D]

    def stack_activation(self, activation_name: str, layer: int = -1, sublayer_type: str | None = None):
        """One activation of each layer before `layer` (-1 or None: every layer) stacked, [layers, ...]:
        stack_activation("scale", -1, "ln1") is every ln1.hook_scale."""
        n = self.n_layers if layer is None or layer == -1 else layer
        if not isinstance(n, int) or not 1 <= n <= self.n_layers:
            raise InputError(f"layer {layer}: the layers before it are stacked; choose 1..{self.n_layers} or -1")
        return torch.stack([self[(activation_name, i, sublayer_type)] for i in range(n)])


@dataclass(frozen=True)
class HookPoint:
    """What a TransformerLens hook function receives beside the activation: the hook's name and layer."""

    name: str

    def layer(self) -> int:
        """The block index of the hook ('blocks.3.attn.hook_z' → 3)."""
        if "blocks." not in self.name:
            raise ValueError(f"{self.name} is not in a block: it has no layer")
        return int(self.name.split("blocks.")[1].split(".")[0])


TLHook = Callable[[torch.Tensor, HookPoint], torch.Tensor | None]


def tl_interventions(fwd_hooks: list[tuple[str | Callable[[str], bool], TLHook]], hook_names: list[str],
                     rotary: bool = False) -> dict:
    """Our interventions {full name: f(x, name)} from TransformerLens's fwd_hooks [(name or filter, fn(x, hook))]; a
    hook function may change x in place and return None. Several on one name run in order; TransformerLens's names
    for hooks held under another name are read as ours (tl_alias; `rotary`: the model has RoPE)."""
    chain: dict[str, list[TLHook]] = {}
    for pair in fwd_hooks:
        key, fn = pair if isinstance(pair, (tuple, list)) and len(pair) == 2 else (None, None)
        if not (isinstance(key, str) or callable(key)) or not callable(fn):
            what = f"name {key!r}" if fn is not None and callable(fn) else f"{type(pair).__name__} {pair!r}"[:80]
            raise InputError(f"fwd_hooks holds (name, function) pairs, name a hook name (get_act_name('z', 0)) or a "
                             f"filter on names; not {what}")
        names = [n for n in hook_names if key(n)] if callable(key) else [tl_alias(get_act_name(key), rotary)]
        for n in names:  # a name that is no hook: LoadedModel.forward refuses it
            chain.setdefault(n, []).append(fn)

    def run(fns):
        def fn(x: torch.Tensor, name: str) -> torch.Tensor:
            for f in fns:
                out = f(x, HookPoint(name))
                x = x if out is None else out
            return x
        return fn

    return {n: run(fns) for n, fns in chain.items()}
