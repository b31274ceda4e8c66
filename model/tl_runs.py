"""TransformerLens's entry points on a loaded model: `lm(tokens, return_type=...)`, `lm.run_with_cache(text)` →
(logits, ActivationCache), `lm.run_with_hooks(text, fwd_hooks=[(name, fn)])`, `to_tokens`; and what they accept as
input (a text, texts of one length, Inputs, token ids)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from attnlab.model.activation_cache import ActivationCache, tl_interventions
from attnlab.model.inputs import InputError, Inputs, check_tokens
from attnlab.model.stack import split_hook_names

RETURN_TYPES = ("logits", "loss", "both", None)  # TransformerLens's return_type


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


def lm_cross_entropy_loss(logits: torch.Tensor, ids: torch.Tensor, per_token: bool = False) -> torch.Tensor:
    """TransformerLens's next-token loss: −log p(token t + 1 | tokens ≤ t) from logits [B, T, V] and ids [B, T],
    [B, T − 1] per token, else its mean (a scalar)."""
    log_probs = F.log_softmax(logits.float(), dim=-1)  # [B, T, V]
    nll = -log_probs[:, :-1].gather(-1, ids[:, 1:, None].to(logits.device))[..., 0]  # [B, T - 1]
    return nll if per_token else nll.mean()


class TransformerLensRuns:
    """LoadedModel's TransformerLens-style entry points (needs `forward`, `model`, `cfg`, `encode`, `label`)."""

    def __call__(self, input, return_type: str | None = "logits", loss_per_token: bool = False):
        """TransformerLens's model(input): the logits [B, T, V], the next-token loss (return_type "loss": its mean, or
        [B, T − 1] with loss_per_token), both as (logits, loss), or None; input as run_with_cache takes it."""
        inputs = as_inputs(self, input)
        self._check_return(return_type, inputs)
        logits = self.forward(inputs, records=False).logits
        return self._returned(logits, inputs, return_type, loss_per_token)

    def _check_return(self, return_type, inputs: Inputs) -> None:
        """One InputError for a return_type this model cannot give, before any forward."""
        if return_type not in RETURN_TYPES:
            raise InputError(f"return_type {return_type!r}: choose one of {', '.join(map(repr, RETURN_TYPES))}")
        if return_type in ("loss", "both"):
            if not self.predicts_next_token or not self.has_logits:
                raise InputError(f"return_type {return_type!r} is the next-token loss of a decoder language model; "
                                 f"{self.name} is {self.a_kind}" + (" without a prediction head"
                                                                     if self.predicts_next_token else ""))
            if inputs.ids.shape[1] < 2:
                raise InputError(f"return_type {return_type!r}: the next-token loss needs at least 2 tokens, not "
                                 f"{inputs.ids.shape[1]}")

    @staticmethod
    def _returned(logits, inputs: Inputs, return_type, loss_per_token: bool):
        if return_type is None:
            return None
        if return_type == "logits":
            return logits
        loss = lm_cross_entropy_loss(logits, inputs.ids, loss_per_token)
        return loss if return_type == "loss" else (logits, loss)

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

    def run_with_hooks(self, text_or_inputs, fwd_hooks=(), *, backend: str = "eager", return_type: str | None = "logits",
                       grad: bool = False, split_inputs: bool = False, loss_per_token: bool = False):
        """The logits [B, T, V] of one forward with TransformerLens hook functions: fwd_hooks [(name, fn)], name a
        full or short name (get_act_name) or a filter on full names, fn(activation, hook) returning the new value
        or None after changing it in place. `grad`: the run carries gradients (the logits, and what a hook keeps).
        `split_inputs`: as run_with_cache's (a patch of head h's q input changes that head's query only).
        `return_type`, `loss_per_token`: as lm(input, ...) returns."""
        inputs = as_inputs(self, text_or_inputs)
        self._check_return(return_type, inputs)
        known = self.model.hook_names() + (split_hook_names(self.model) if split_inputs else [])
        iv = tl_interventions(list(fwd_hooks), known, self.cfg.positional == "rope")
        logits = self.forward(inputs, backend=backend, interventions=iv, records=False, grad=grad,
                              split_inputs=split_inputs).logits
        return self._returned(logits, inputs, return_type, loss_per_token)
