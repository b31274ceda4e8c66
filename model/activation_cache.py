"""TransformerLens-style access to one run's hook tensors: `lm.run_with_cache(text)` → (logits, ActivationCache),
`lm.run_with_hooks(text, fwd_hooks=[(name, fn)])` → logits, and `get_act_name`'s short names ("pattern", 3)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from attnlab.model.cache_batch import BatchAxis
from attnlab.model.cache_resid import ResidualStream, tl_slice
from attnlab.model.inputs import InputError, Inputs, check_tokens
from attnlab.model.stack import split_hook_names

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


def _token_ids(lm, x: torch.Tensor) -> torch.Tensor:
    """Token ids [B, T] (long) from a tensor [T] or [B, T] of integers, each a row of the vocabulary and at most the
    model's context long; else one InputError."""
    if x.dim() not in (1, 2) or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise InputError(f"token ids are integers [batch, pos] or [pos], not {x.dtype} of shape {tuple(x.shape)}")
    ids = (x[None] if x.dim() == 1 else x).long()  # [T] -> [1, T]
    check_tokens(ids.shape[1], lm.context, "input")
    low, high = int(ids.min()), int(ids.max())  # one read of the caller's tensor, before any forward
    if low < 0 or high >= lm.cfg.vocab_size:
        bad = low if low < 0 else high
        raise InputError(f"token id {bad} is outside this model's vocabulary (0 to {lm.cfg.vocab_size - 1})")
    return ids


def as_inputs(lm, x) -> Inputs:
    """Inputs from a text, a list of texts of one length (a batch), ready Inputs, or token ids [B, T] / [T]."""
    if isinstance(x, Inputs):
        return x
    if isinstance(x, (str, list, tuple)) and lm.reads_source:
        raise InputError(f"{lm.name} is an encoder–decoder: pass its inputs as lm.encode(target_text, src_text)")
    if isinstance(x, str):
        return lm.encode(x)
    if isinstance(x, torch.Tensor):
        ids = _token_ids(lm, x)
        return Inputs(ids, [lm.label(i) for i in ids[0].tolist()])
    if isinstance(x, (list, tuple)) and x and all(isinstance(t, str) for t in x):
        rows = [lm.encode(t) for t in x]
        if len({r.ids.shape[1] for r in rows}) != 1:
            raise InputError(f"a batch of texts needs one length; these are {[r.ids.shape[1] for r in rows]} tokens")
        types = None if rows[0].type_ids is None else torch.cat([r.type_ids for r in rows])  # [B, T]
        return Inputs(torch.cat([r.ids for r in rows]), rows[0].tokens, type_ids=types)  # [B, T]
    raise InputError("run_with_cache and run_with_hooks take a text, a list of texts, Inputs or token ids")


class TransformerLensRuns:
    """LoadedModel's TransformerLens-style entry points (needs `forward`, `model`, `cfg`, `encode`, `label`)."""

    def to_tokens(self, text_or_texts, prepend_bos: bool | None = None) -> torch.Tensor:
        """Token ids [batch, pos] of a text or a list of texts of one length (TransformerLens's model.to_tokens).
        prepend_bos None: as the model's tokenizer encodes (run_with_cache reads the same); True / False: with / without
        one BOS id first (TransformerLens's default is True; a model without a BOS token refuses True in one line)."""
        ids = as_inputs(self, text_or_texts).ids  # [B, T]
        if prepend_bos is None:
            return ids
        bos = self.tokenizer.bos_id
        if bos is None:
            if prepend_bos:
                raise InputError(f"{self.name}'s tokenizer has no BOS token to prepend; prepend_bos=None or False")
            return ids
        has = ids.shape[1] > 0 and bool((ids[:, 0] == bos).all())
        if prepend_bos and not has:
            return torch.cat([torch.full_like(ids[:, :1], bos), ids], 1)  # [B, 1 + T]
        return ids[:, 1:] if has and not prepend_bos else ids

    def run_with_cache(self, text_or_inputs, names=None, *, backend: str = "eager", grad: bool = False,
                       split_inputs: bool = False, remove_batch_dim: bool = False, names_filter=None):
        """(logits [B, T, V], ActivationCache) of one forward; `names` (globs, a list, or a filter on full names)
        chooses the hooks kept, default every one. Keeping a hook never changes the logits. `grad`: the logits and
        the kept tensors carry gradients (torch.autograd.grad(metric, cache[name])). `split_inputs`: each head's
        q/k/v input and each MLP's input is a hook of its own (TransformerLens's use_split_qkv_input and
        use_hook_mlp_in), attn.hook_q_input [B, T, H, D] (its blocks.{l}.hook_q_input), blocks.{l}.hook_mlp_in.
        `remove_batch_dim`: one text's cache without the batch axis (the logits keep theirs, as TransformerLens's).
        `names_filter`: TransformerLens's name for `names`."""
        if names_filter is not None:
            if names is not None:
                raise InputError("run_with_cache: give names or names_filter (TransformerLens's name for it), not both")
            names = names_filter
        fwd = self.forward(as_inputs(self, text_or_inputs), backend=backend, names="*" if names is None else names,
                           records=False, grad=grad, split_inputs=split_inputs)
        tensors = {n: ts[-1] for n, ts in fwd.capture.tensors.items()}
        cache = ActivationCache(tensors, self.cfg.n_layers, model=self)
        return fwd.logits, cache.remove_batch_dim() if remove_batch_dim else cache

    def run_with_hooks(self, text_or_inputs, fwd_hooks=(), *, backend: str = "eager", return_type: str = "logits",
                       grad: bool = False, split_inputs: bool = False):
        """The logits [B, T, V] of one forward with TransformerLens hook functions: fwd_hooks [(name, fn)], name a
        full or short name (get_act_name) or a filter on full names, fn(activation, hook) returning the new value
        or None after changing it in place. `grad`: the run carries gradients (the logits, and what a hook keeps).
        `split_inputs`: as run_with_cache's (a patch of head h's q input changes that head's query only)."""
        if return_type != "logits":
            raise InputError(f"return_type {return_type!r}: run_with_hooks returns logits here")
        known = self.model.hook_names() + (split_hook_names(self.model) if split_inputs else [])
        iv = tl_interventions(list(fwd_hooks), known, self.cfg.positional == "rope")
        return self.forward(as_inputs(self, text_or_inputs), backend=backend, interventions=iv, records=False,
                            grad=grad, split_inputs=split_inputs).logits
