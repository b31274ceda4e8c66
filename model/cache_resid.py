"""ActivationCache's residual-stream calls, TransformerLens's signatures and semantics: the stream accumulated layer by
layer (`accumulated_resid`), split into what each sub-layer, head or neuron wrote (`decompose_resid`,
`get_full_resid_decomposition`, `stack_neuron_results`), read through a norm with its cached scale frozen
(`apply_ln_to_stack`) and along a token's unembedding (`logit_attrs`).

apply_ln_to_stack centres the stack (LayerNorm only) and divides it by the CACHED hook_scale of the norm that reads
that stream (ln1 of `layer`, ln2 with mlp_input, ln_final at layer None / -1 / n_layers): the norm made linear, its
weight and bias not applied (TransformerLens folds them into the next weights; here logit_attrs applies the final
norm's weight, through lm.tokens_to_residual_directions). The sums these calls split hold on pre-norm and parallel
stacks whose input is token (+ position) embeddings; elsewhere they are refused in one line."""

from __future__ import annotations

import numpy as np
import torch
from attnlab.model.inputs import InputError
from attnlab.model.tl_weights import tl_stack

NEURON_CELLS = 2**28  # the most numbers a neuron-by-neuron stack may hold (1 GiB in float32)


def tl_slice(x: torch.Tensor, s, dim: int, what: str = "pos_slice") -> torch.Tensor:
    """TransformerLens's Slice on axis `dim`: None (all), an int (the axis goes), a slice, a tuple (slice(*t)), a list,
    array or tensor of indices (or a bool mask), or TransformerLens's own Slice object; an index outside the axis is
    one InputError naming `what` (the argument) and the axis' length."""
    if s is None:
        return x
    if hasattr(s, "apply") and hasattr(s, "slice"):
        return s.apply(x, dim=dim)
    if isinstance(s, tuple):
        s = slice(*s)
    elif isinstance(s, (list, np.ndarray, torch.Tensor)):
        s = torch.as_tensor(np.asarray(s) if isinstance(s, list) else s, device=x.device)
    elif not isinstance(s, (int, slice)):
        raise InputError(f"a slice is None, an int, a slice, a tuple or a list of indices, not {type(s).__name__}")
    index = [slice(None)] * x.dim()
    index[dim] = s
    try:
        return x[tuple(index)]
    except IndexError:
        n = x.shape[dim]
        shown = s.tolist() if isinstance(s, torch.Tensor) and s.numel() <= 8 else s
        raise InputError(f"{what} {shown!r} is outside the {n} entries there (indices -{n}..{n - 1})") from None


class ResidualStream:
    """The residual-stream methods of ActivationCache (needs `model`, `n_layers`, `cache_dict`, `__getitem__`)."""

    # -- what the model must be ------------------------------------------------------------------------------
    def _stack(self):
        if self.model is None:
            raise InputError("this cache has no model: make it with lm.run_with_cache (ActivationCache(..., model=lm))")
        return tl_stack(self.model)

    def _summed(self):
        """The stack, when its stream is a sum of embeddings and sub-layer outputs; else one InputError."""
        stack, name = self._stack(), self.model.name
        if self.model.arch == "vit":
            raise InputError(f"{name} is a vision transformer: its stream starts from image patches, not token "
                             "embeddings; decompose_resid needs a decoder or an encoder")
        emb = stack.embed
        if not (isinstance(emb.norm, torch.nn.Identity) and isinstance(emb.project, torch.nn.Identity)
                and emb.types is None):
            raise InputError(f"{name}'s embeddings are normed, projected or typed before block 0: hook_embed "
                             "(+ hook_pos_embed) is not the stream there, so it does not split into them")
        if not all(b.splits for b in stack.blocks):
            raise InputError(f"{name} is {self.model.cfg.norm}-norm: its stream is not the sum of the sub-layers' "
                             "outputs; the decompositions need a pre-norm or parallel model")
        return stack

    def _layer(self, layer) -> int:
        """None and -1 → n_layers (the stream the unembedding reads); else 0..n_layers."""
        n = self.n_layers
        layer = n if layer is None or layer == -1 else layer
        if not isinstance(layer, int) or not 0 <= layer <= n:
            raise InputError(f"layer {layer}: choose 0..{n} (the input of that block; {n}, -1 or None: the final "
                             "stream)")
        return layer

    def _mlp_input(self, layer: int, mlp_input: bool) -> bool:
        """Does the MLP input of `layer` include its attention output? (not in a parallel block: both read the
        block's input); mlp_input at the final stream is refused."""
        if mlp_input and layer == self.n_layers:
            raise InputError(f"mlp_input: layer {layer} is the final stream, which no MLP reads; choose 0.."
                             f"{self.n_layers - 1}")
        return mlp_input and not self._stack().blocks[layer].parallel

    # -- the norms' cached scales ------------------------------------------------------------------------------
    def apply_ln_to_stack(self, residual_stack: torch.Tensor, layer: int | None = None, mlp_input: bool = False,
                          pos_slice=None, batch_slice=None, has_batch_dim: bool = True,
                          recompute_ln: bool = False) -> torch.Tensor:
        """residual_stack [n, (batch,) (pos,) D], pos_slice already applied, as the input of `layer`'s ln1 (ln2 with
        mlp_input; ln_final at None / -1 / n_layers): centred (LayerNorm) and divided by that norm's cached
        hook_scale, sliced by pos_slice and batch_slice (the stack too on its axis 1 when has_batch_dim).
        `recompute_ln` at the final stream: ln_final itself (its own scale, weight and bias) on each component."""
        layer = self._layer(layer)
        if has_batch_dim:
            residual_stack = tl_slice(residual_stack, batch_slice, 1, "batch_slice")
        norm, key = self._reader(layer, mlp_input)
        if recompute_ln and layer == self.n_layers:
            return norm(residual_stack)
        x = residual_stack - residual_stack.mean(-1, keepdim=True) if norm.centres else residual_stack
        scale = tl_slice(tl_slice(self._scale(key), pos_slice, -2), batch_slice, 0, "batch_slice")  # -> [(b,) (t,) 1]
        return x / scale

    def _scale(self, key: str) -> torch.Tensor:
        """The cached hook_scale `key` [B, T, 1]; one InputError naming it for a cache made without it (names=)."""
        if key not in self.cache_dict:
            raise InputError(f"the norm's frozen scale is {key}, which this cache does not hold: keep it "
                             f"(run_with_cache(..., names=[..., {key!r}]))")
        return self.cache_dict[key]

    def _reader(self, layer: int, mlp_input: bool):
        """(the norm that reads the stream entering `layer` (its MLP with mlp_input), its hook_scale's name)."""
        stack = self._stack()
        if layer == self.n_layers:
            norm, key = stack.ln_f, "ln_final.hook_scale"
        else:
            blk = stack.blocks[layer]
            tl = blk.norm_names.get("ln_mlp" if mlp_input else "ln_attn")
            norm, key = getattr(blk, "ln_mlp" if mlp_input else "ln_attn"), f"{blk.site}.{tl}.hook_scale"
            if tl is None:
                raise InputError(f"block {layer} reads its stream without a norm before it ({self.model.cfg.norm}-"
                                 "norm): it has no scale to apply")
        if not hasattr(norm, "centres"):
            raise InputError(f"{self.model.name} has no final norm ({self.model.cfg.norm}-norm): no scale to apply")
        return norm, key

    def logit_attrs(self, residual_stack: torch.Tensor, tokens, incorrect_tokens=None, pos_slice=None,
                    batch_slice=None, has_batch_dim: bool = True) -> torch.Tensor:
        """Each component's direct contribution [n, ...] to the logit of `tokens` (minus `incorrect_tokens`'): the
        component through ln_final's frozen scale (apply_ln_to_stack) · lm.tokens_to_residual_directions (W_U[:, t]
        times ln_final's weight, centred under LayerNorm). Summed over the components of the whole stream it is the
        logit minus b_U[t] and ln_final's bias · W_U[:, t] (analysis.probes.dla counts those as norm_bias)."""
        self._stack()
        lm = self.model
        directions = lm.tokens_to_residual_directions(tokens)  # [(b,) (t,) D]
        if incorrect_tokens is not None:
            shapes = [torch.as_tensor(t).shape if not isinstance(t, str) else () for t in (tokens, incorrect_tokens)]
            if shapes[0] != shapes[1]:
                raise InputError(f"tokens and incorrect_tokens need one shape, not {tuple(shapes[0])} and "
                                 f"{tuple(shapes[1])}")
            directions = directions - lm.tokens_to_residual_directions(incorrect_tokens)
        scaled = self.apply_ln_to_stack(residual_stack, -1, pos_slice=pos_slice, batch_slice=batch_slice,
                                        has_batch_dim=has_batch_dim)  # [n, (b,) (t,) D]
        try:
            fits = directions.dim() < scaled.dim() and torch.broadcast_shapes(scaled.shape, directions.shape)
        except RuntimeError:
            fits = False
        if not fits:
            raise InputError(f"tokens of shape {tuple(directions.shape[:-1])} do not fit the stack's (batch, pos) "
                             f"axes {tuple(scaled.shape[1:-1])}: one token per row, or [batch, pos]")
        return (scaled * directions).sum(-1)

    # -- the stream, accumulated and decomposed --------------------------------------------------------------
    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False, apply_ln: bool = False,
                          pos_slice=None, mlp_input: bool = False, return_labels: bool = False):
        """The stream entering each block up to `layer` [n, B, (T,) D] ("0_pre", …, "final_post" at n_layers;
        "{l}_mid" after each block's attention with incl_mid, and at `layer` with mlp_input). apply_ln: through
        the norm that reads `layer`'s stream with its cached scale; at the final stream ln_final recomputed on each
        (the logit lens: times W_U plus b_U, each row's logits)."""
        layer, n = self._layer(layer), self.n_layers
        blocks = self._stack().blocks
        parts, labels = [], []
        for i in range(layer + 1):
            if i == n:
                parts.append(self["resid_post", n - 1])
                labels.append("final_post")
                continue
            parts.append(self["resid_pre", i])
            labels.append(f"{i}_pre")
            if (incl_mid and i < layer) or (mlp_input and i == layer):
                if blocks[i].parallel and incl_mid and i < layer:
                    raise InputError(f"block {i} is parallel (attention and MLP read its input): it has no "
                                     "hook_resid_mid; incl_mid=False")
                if not blocks[i].parallel:  # a parallel MLP reads the block's input, already here
                    parts.append(self["resid_mid", i])
                    labels.append(f"{i}_mid")
        stacked = torch.stack([tl_slice(p, pos_slice, -2) for p in parts])  # [n, B, (T,) D]
        if apply_ln:
            stacked = self.apply_ln_to_stack(stacked, layer, mlp_input=mlp_input, pos_slice=pos_slice,
                                             recompute_ln=layer == n)
        return (stacked, labels) if return_labels else stacked

    def decompose_resid(self, layer: int | None = None, mlp_input: bool = False, mode: str = "all",
                        apply_ln: bool = False, pos_slice=None, incl_embeds: bool = True, return_labels: bool = False):
        """The stream entering `layer` (its MLP with mlp_input) split into "embed", "pos_embed" and each earlier
        "{l}_attn_out", "{l}_mlp_out" (mode "attn" / "mlp": one kind only) [n, B, (T,) D]; the rows sum to
        hook_resid_pre (resid_mid with mlp_input, resid_post of the last block at n_layers)."""
        self._summed()
        layer = self._layer(layer)
        if mode not in ("all", "attn", "mlp"):
            raise InputError(f"mode {mode!r}: choose 'all', 'attn' or 'mlp'")
        attn, mlp = mode != "mlp", mode != "attn"
        names = []
        if incl_embeds:
            names += [(k, n) for k, n in (("embed", "hook_embed"), ("pos_embed", "hook_pos_embed")) if n in self]
        for i in range(layer):
            names += [(f"{i}_attn_out", ("attn_out", i))] * attn + [(f"{i}_mlp_out", ("mlp_out", i))] * mlp
        if self._mlp_input(layer, mlp_input) and attn:
            names.append((f"{layer}_attn_out", ("attn_out", layer)))
        if not names:
            raise InputError(f"layer {layer}, mode {mode!r}, incl_embeds={incl_embeds}: nothing to stack")
        stacked = torch.stack([tl_slice(self[key], pos_slice, -2) for _, key in names])  # [n, B, (T,) D]
        if apply_ln:
            stacked = self.apply_ln_to_stack(stacked, layer, mlp_input=mlp_input, pos_slice=pos_slice)
        return (stacked, [label for label, _ in names]) if return_labels else stacked

    def stack_neuron_results(self, layer: int, pos_slice=None, neuron_slice=None, return_labels: bool = False,
                             incl_remainder: bool = False, apply_ln: bool = False, project_output_onto=None,
                             mlp_input: bool = False):
        """Each MLP neuron's write into the stream in the layers before `layer`: hook_post[..., n] · W_out[l, n]
        [L·n, B, (T,) D] labelled "L{l}N{n}" (no b_out); incl_remainder: the rest of resid_post ("remainder").
        project_output_onto p [D] or [D, k]: each write · p ([L·n, B, (T,)] or [..., k]) without the [.., D] rows
        (with apply_ln: the frozen-scale norm of `layer`'s ln1, ln2 with mlp_input, folded in). Refused beyond
        NEURON_CELLS numbers (a pos_slice or a neuron_slice makes it smaller)."""
        self._summed()
        layer = self._layer(layer)
        p, squeeze = _projection(project_output_onto)
        W_out = self.model.W_out  # [L, d_mlp, D]
        ids = tl_slice(torch.arange(W_out.shape[1]), neuron_slice, 0, "neuron_slice").reshape(-1)  # kept, [n]
        folded = apply_ln and p is not None  # LN_s(a·w)·p = (a / s)·((w − mean w)·p): no [.., n, D] tensor
        norm, key = self._reader(layer, mlp_input and layer < self.n_layers) if folded else (None, None)
        parts = []
        for i in range(layer):
            acts = tl_slice(self["post", i, "mlp"], pos_slice, -2)[..., ids.to(W_out.device)]  # [B, (T,) n]
            w = W_out[i, ids]  # [n, D]
            if folded:
                acts = acts / tl_slice(self._scale(key), pos_slice, -2)  # [B, (T,) n] / [B, (T,) 1]
                w = w - w.mean(-1, keepdim=True) if norm.centres else w
            w = w if p is None else w @ p.to(w.dtype)  # [n, D] @ [D, k] -> [n, k]
            cells = acts.numel() * w.shape[-1] * layer
            if cells > NEURON_CELLS:
                raise InputError(f"{layer} layers' neurons over these positions are {cells:,} numbers (more than "
                                 f"{NEURON_CELLS:,}): take a pos_slice or a neuron_slice, or expand_neurons=False")
            parts.append(acts[..., None] * w)  # [B, (T,) n, 1] * [n, D|k] -> [B, (T,) n, D|k]
        labels = [f"L{i}N{n}" for i in range(layer) for n in ids.tolist()]
        like = tl_slice(self["resid_pre", 0], pos_slice, -2)
        empty = like.new_zeros(0, *like.shape[:-1], like.shape[-1] if p is None else p.shape[1])  # layer 0
        stacked = torch.cat(parts, -2).movedim(-2, 0) if parts else empty  # [L·n, B, (T,) D|k]
        if incl_remainder:
            rest = tl_slice(self["resid_post", layer - 1] if layer else self["resid_pre", 0], pos_slice, -2)
            rest = self.apply_ln_to_stack(rest[None], layer, mlp_input, pos_slice)[0] if folded else rest
            rest = rest if p is None else rest @ p.to(rest.dtype)  # [B, (T,) D] -> [B, (T,) k]
            stacked, labels = torch.cat([stacked, (rest - stacked.sum(0))[None]]), labels + ["remainder"]
        if apply_ln and not folded:
            stacked = self.apply_ln_to_stack(stacked, layer, mlp_input, pos_slice)
        stacked = stacked.squeeze(-1) if squeeze else stacked
        return (stacked, labels) if return_labels else stacked

    def get_full_resid_decomposition(self, layer: int | None = None, mlp_input: bool = False,
                                     expand_neurons: bool = True, apply_ln: bool = False, pos_slice=None,
                                     return_labels: bool = False, project_output_onto=None):
        """The stream entering `layer` (its MLP with mlp_input) as every head's result ("L{l}H{h}"), every neuron's
        ("L{l}N{n}"; with expand_neurons=False each MLP's output, "{l}_mlp_out"), "embed", "pos_embed" and "bias" (Σ
        b_O, and b_out when neurons are expanded) [n, B, (T,) D]; the rows sum to the stream. project_output_onto p
        [D] or [D, k]: each row · p (after apply_ln), the neurons' without their [.., D] rows."""
        self._summed()
        layer = self._layer(layer)
        p, squeeze = _projection(project_output_onto)

        def finish(x: torch.Tensor) -> torch.Tensor:  # [n, B, (T,) D] -> [n, B, (T,) k] row by row, when projecting
            if p is None:
                return x
            x = self.apply_ln_to_stack(x, layer, mlp_input, pos_slice) if apply_ln else x
            return x @ p.to(x.dtype)

        heads, labels = self._head_stack(layer + self._mlp_input(layer, mlp_input), pos_slice)
        parts = [finish(heads)]
        if layer > 0 and expand_neurons:
            mlps, more = self.stack_neuron_results(layer, pos_slice=pos_slice, return_labels=True, mlp_input=mlp_input,
                                                   apply_ln=apply_ln and p is not None, project_output_onto=p)
            parts, labels = parts + [mlps], labels + more
        elif layer > 0:
            mlps, more = self.decompose_resid(layer, mlp_input, mode="mlp", pos_slice=pos_slice, incl_embeds=False,
                                              return_labels=True)
            parts, labels = parts + [finish(mlps)], labels + more
        for label, name in (("embed", "hook_embed"), ("pos_embed", "hook_pos_embed")):
            if name in self:
                parts, labels = parts + [finish(tl_slice(self[name], pos_slice, -2)[None])], labels + [label]
        like = tl_slice(self["resid_pre", 0], pos_slice, -2)
        bias = self.model.accumulated_bias(layer, mlp_input, include_mlp_biases=expand_neurons)
        parts.append(finish(bias.to(like.dtype).expand(1, *like.shape)))  # [D] -> [1, B, (T,) D]
        stacked = torch.cat(parts)
        if apply_ln and p is None:
            stacked = self.apply_ln_to_stack(stacked, layer, mlp_input=mlp_input, pos_slice=pos_slice)
        stacked = stacked.squeeze(-1) if squeeze else stacked
        return (stacked, labels + ["bias"]) if return_labels else stacked


def _projection(p) -> tuple[torch.Tensor | None, bool]:
    """project_output_onto as [D, k] (a [D] vector as [D, 1]) and whether to drop that last axis again."""
    if p is None:
        return None, False
    p = torch.as_tensor(p)
    if p.dim() not in (1, 2):
        raise InputError(f"project_output_onto is [d_model] or [d_model, k], not shape {tuple(p.shape)}")
    return (p[:, None], True) if p.dim() == 1 else (p, False)
