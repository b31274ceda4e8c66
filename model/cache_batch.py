"""ActivationCache's batch-axis and per-neuron calls with TransformerLens's signatures: `remove_batch_dim` (a cache of
one text read without its batch axis, as `run_with_cache(..., remove_batch_dim=True)` gives), `apply_slice_to_batch_dim`,
`get_neuron_results` and `to`. The residual-stream calls (model/cache_resid.py) index positions from the end, so they
read a cache without its batch axis alike, their outputs then without it too."""

from __future__ import annotations

import torch
from attnlab.model.cache_resid import _projection, tl_slice
from attnlab.model.inputs import InputError


class BatchAxis:
    """The batch-axis methods of ActivationCache (needs `cache_dict`, `n_layers`, `model`, `has_batch_dim`,
    `__getitem__`)."""

    def _batch_size(self) -> int:
        sizes = {t.shape[0] for t in self.cache_dict.values() if t.dim() > 0}
        return max(sizes) if sizes else 1  # a [1, ...] tensor (hook_mask) broadcasts over the batch

    def remove_batch_dim(self):
        """This cache with the batch axis of every tensor removed (one text only; TransformerLens's in-place
        change, returning the cache); a second call changes nothing."""
        if not self.has_batch_dim:
            return self
        if (b := self._batch_size()) != 1:
            raise InputError(f"remove_batch_dim: this cache holds {b} texts; keep one first "
                             "(cache.apply_slice_to_batch_dim(i))")
        self.cache_dict = {k: t[0] if t.dim() > 0 else t for k, t in self.cache_dict.items()}  # [1, ...] -> [...]
        self.has_batch_dim = False
        return self

    def apply_slice_to_batch_dim(self, batch_slice):
        """A new cache of the texts `batch_slice` keeps (an int: that text, without the batch axis; a slice, a list or
        a tensor of indices: those texts); tensors broadcast over the batch ([1, ...]) are kept as they are."""
        if not self.has_batch_dim:
            raise InputError("apply_slice_to_batch_dim: this cache has no batch axis (remove_batch_dim was called)")
        b = self._batch_size()
        kept = {k: tl_slice(t, batch_slice, 0, "batch_slice") if t.dim() > 0 and t.shape[0] == b else t
                for k, t in self.cache_dict.items()}
        out = type(self)(kept, self.n_layers, model=self.model)
        out.has_batch_dim = not isinstance(batch_slice, int)
        return out

    def get_neuron_results(self, layer: int, neuron_slice=None, pos_slice=None, project_output_onto=None):
        """What each MLP neuron of `layer` wrote into the stream, hook_post[..., n] · W_out[layer, n]:
        [B, (T,) n, D] (no b_out); project_output_onto p [D] or [D, k]: each write · p, [B, (T,) n] or
        [B, (T,) n, k], without the [..., n, D] tensor."""
        self._summed()
        post = tl_slice(self["post", layer, "mlp"], pos_slice, -2)  # [B, (T,) d_mlp]
        W_out = self.model.W_out[layer]  # [d_mlp, D]
        ids = tl_slice(torch.arange(W_out.shape[0]), neuron_slice, 0, "neuron_slice").reshape(-1)  # [n]
        p, squeeze = _projection(project_output_onto)
        w = W_out[ids] if p is None else W_out[ids] @ p.to(W_out.dtype)  # [n, D] or [n, D] @ [D, k] -> [n, k]
        out = post[..., ids.to(post.device), None] * w.to(post.dtype)  # [B, (T,) n, 1] * [n, D|k] -> [B, (T,) n, D|k]
        return out.squeeze(-1) if squeeze else out

    def to(self, device):
        """This cache with every tensor on `device` (the model stays where it is)."""
        self.cache_dict = {k: t.to(device) for k, t in self.cache_dict.items()}
        return self
