"""TransformerLens's weight accessors and token helpers on a loaded model (`lm.W_U`, `lm.W_Q`, `lm.to_str_tokens`, …),
in TransformerLens's layouts: W_E [V, D], W_pos [n_ctx, D], W_U [D, V], W_Q/W_K/W_V [L, H, D, d], W_O [L, H, d, D],
b_Q/b_K/b_V [L, H, d], b_O [L, D], W_in/W_gate [L, D, d_mlp], W_out [L, d_mlp, D], b_in [L, d_mlp], b_out [L, D].
Nothing is folded (TransformerLens's `HookedTransformer(cfg)` without fold_ln): W_U is the head's own weight. With
grouped-query attention W_K, W_V, b_K, b_V repeat each k/v head for its query heads (TransformerLens's
GroupedQueryAttention properties); `_W_K`, `_W_V`, `_b_K`, `_b_V` keep the k/v heads [L, Hkv, ...]."""

from __future__ import annotations

import torch
import torch.nn as nn
from attnlab.model.inputs import InputError
from attnlab.model.norms import has_hooks


def tl_stack(lm) -> nn.Module:
    """The one stack (embeddings → blocks → final norm) whose weights and stream TransformerLens's calls read; one
    InputError for a transformers view or an encoder–decoder (two stacks)."""
    if not getattr(lm, "converted", False):
        raise InputError(f"{lm.name} runs in transformers itself (a view): its weights have no TransformerLens layout")
    if lm.arch == "encdec":
        raise InputError(f"{lm.name} is an encoder–decoder: read lm.model.encoder or lm.model.decoder's blocks; "
                         "TransformerLens's single-stack calls need a decoder or an encoder")
    return lm.model


def _per_head(w: torch.Tensor, n: int) -> torch.Tensor:
    return w.view(n, -1, w.shape[-1]).transpose(1, 2)  # [n·d, D] -> [n, d, D] -> [n, D, d]


def _bias(b: torch.Tensor | None, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """A bias in `shape`, zeros where the layer has none (TransformerLens keeps zero biases)."""
    return torch.zeros(shape, dtype=like.dtype, device=like.device) if b is None else b.view(shape)


class TransformerLensWeights:
    """LoadedModel's TransformerLens weight properties and token helpers (needs `model`, `cfg`, `tokenizer`,
    `readout`, `to_tokens`)."""

    # -- embeddings and unembedding -----------------------------------------------------------------------
    @property
    def W_E(self) -> torch.Tensor:
        """The token embeddings [V, D] as the run adds them, times any embedding scale (Gemma's √D), so that
        W_E[ids] is hook_embed (TransformerLens's conversion scales it the same way); W_U stays the head's own."""
        emb = tl_stack(self).embed
        return emb.tok.weight * emb.scale if emb.scale != 1.0 else emb.tok.weight

    @property
    def W_pos(self) -> torch.Tensor:
        """The learned position embeddings [n_ctx, D] (row p: position p; an offset table, OPT's, starts at row 0)."""
        emb = tl_stack(self).embed
        if getattr(emb, "positional", None) != "learned":
            raise InputError(f"{self.name} has {self.cfg.positional} positions, not a learned table: it has no W_pos")
        return emb.pos.weight[emb.offset:emb.offset + self.cfg.max_len]

    @property
    def W_U(self) -> torch.Tensor:
        """The unembedding [D, V]: the final normed stream's map to logits (the head's weight, transposed; OPT-350m:
        through its projection back to the embeddings' width), before any logit soft cap."""
        stack, head = self.readout(need_linear=True)
        u = head.weight  # [V, E]
        out = getattr(stack, "project_out", None)
        u = u if out is None else u @ out.weight  # [V, E] @ [E, D] -> [V, D]
        scale = getattr(stack, "logit_scale", 1.0)
        return (u * scale if scale != 1.0 else u).T  # [V, D] -> [D, V]

    @property
    def b_U(self) -> torch.Tensor:
        """The unembedding's bias [V] (zeros without one)."""
        head = self.readout(need_linear=True).head
        return _bias(head.bias, (head.weight.shape[0],), head.weight)

    # -- attention, stacked over layers -----------------------------------------------------------------------
    def _attn(self, part: int, repeat: bool) -> torch.Tensor:
        out = []
        for blk in tl_stack(self).blocks:
            a = blk.attn
            w = _per_head(a.qkv_weights()[0][part], a.n_heads if part == 0 else a.n_kv_heads)  # [n, D, d]
            out.append(w.repeat_interleave(a.group, dim=0) if repeat and part else w)  # [Hkv, D, d] -> [H, D, d]
        return torch.stack(out)

    def _attn_bias(self, part: int, repeat: bool) -> torch.Tensor:
        out = []
        for blk in tl_stack(self).blocks:
            a = blk.attn
            n = a.n_heads if part == 0 else a.n_kv_heads
            b = _bias(a.qkv_weights()[1][part], (n, a.d_head), a.out.weight)  # [n·d] -> [n, d]
            out.append(b.repeat_interleave(a.group, dim=0) if repeat and part else b)
        return torch.stack(out)

    W_Q = property(lambda self: self._attn(0, True), doc="The query weights [L, H, D, d].")
    W_K = property(lambda self: self._attn(1, True), doc="The key weights [L, H, D, d] (k/v heads repeated).")
    W_V = property(lambda self: self._attn(2, True), doc="The value weights [L, H, D, d] (k/v heads repeated).")
    _W_K = property(lambda self: self._attn(1, False), doc="The key weights [L, Hkv, D, d] of the k/v heads.")
    _W_V = property(lambda self: self._attn(2, False), doc="The value weights [L, Hkv, D, d] of the k/v heads.")
    b_Q = property(lambda self: self._attn_bias(0, True), doc="The query biases [L, H, d].")
    b_K = property(lambda self: self._attn_bias(1, True), doc="The key biases [L, H, d] (k/v heads repeated).")
    b_V = property(lambda self: self._attn_bias(2, True), doc="The value biases [L, H, d] (k/v heads repeated).")
    _b_K = property(lambda self: self._attn_bias(1, False), doc="The key biases [L, Hkv, d].")
    _b_V = property(lambda self: self._attn_bias(2, False), doc="The value biases [L, Hkv, d].")

    @property
    def W_O(self) -> torch.Tensor:
        """The output weights [L, H, d, D]: head h's z [d] times W_O[l, h] is its share of hook_attn_out."""
        return torch.stack([b.attn.out.weight.T.reshape(b.attn.n_heads, b.attn.d_head, -1)  # [D, H·d] -> [H, d, D]
                            for b in tl_stack(self).blocks])

    @property
    def b_O(self) -> torch.Tensor:
        """The output biases [L, D] (zeros without)."""
        return torch.stack([_bias(b.attn.out.bias, (b.attn.out.out_features,), b.attn.out.weight)
                            for b in tl_stack(self).blocks])

    # -- MLPs ----------------------------------------------------------------------------------------------
    def _mlps(self) -> list[nn.Module]:
        mlps = [b.mlp for b in tl_stack(self).blocks]
        if not hasattr(mlps[0], "up"):
            raise InputError(f"{self.name}'s MLPs are a mixture of experts: they have no single W_in/W_out")
        return mlps

    W_in = property(lambda self: torch.stack([m.up.weight.T for m in self._mlps()]),
                    doc="The MLP input weights [L, D, d_mlp] (a gated MLP's linear branch, hook_pre_linear).")
    W_out = property(lambda self: torch.stack([m.down.weight.T for m in self._mlps()]),
                     doc="The MLP output weights [L, d_mlp, D]: neuron n of hook_post writes W_out[l, n].")
    b_in = property(lambda self: torch.stack([_bias(m.up.bias, (m.up.out_features,), m.up.weight)
                                              for m in self._mlps()]), doc="The MLP input biases [L, d_mlp].")
    b_out = property(lambda self: torch.stack([_bias(m.down.bias, (m.down.out_features,), m.down.weight)
                                               for m in self._mlps()]), doc="The MLP output biases [L, D].")

    @property
    def W_gate(self) -> torch.Tensor | None:
        """A gated MLP's gate weights [L, D, d_mlp] (hook_pre); None for a plain MLP."""
        mlps = self._mlps()
        return torch.stack([m.gate.weight.T for m in mlps]) if hasattr(mlps[0], "gate") else None

    def accumulated_bias(self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True) -> torch.Tensor:
        """Σ of the output biases b_O (and b_out) of the layers before `layer` (0..n_layers) [D]; `mlp_input`: and
        layer's b_O (the MLP's input; not in a parallel block, whose MLP reads the block's input)."""
        blocks = tl_stack(self).blocks
        if not 0 <= layer <= len(blocks) or (mlp_input and layer == len(blocks)):
            raise InputError(f"layer {layer}: choose 0..{len(blocks) - (1 if mlp_input else 0)}")
        b_o, total = self.b_O, torch.zeros_like(self.b_O[0])
        b_out = self.b_out if include_mlp_biases and layer else None
        for i in range(layer):
            total = total + b_o[i] + (b_out[i] if b_out is not None else 0)
        return total + b_o[layer] if mlp_input and not blocks[layer].parallel else total

    # -- tokens --------------------------------------------------------------------------------------------
    def to_str_tokens(self, text_or_ids, prepend_bos: bool | None = None) -> list[str] | list[list[str]]:
        """Each token of a text (as to_tokens(text, prepend_bos) splits it) or of ids [T] / [1, T] as its own
        decoded string; a list of texts gives one list each."""
        if isinstance(text_or_ids, (list, tuple)) and text_or_ids and isinstance(text_or_ids[0], str):
            return [self.to_str_tokens(t, prepend_bos) for t in text_or_ids]
        text = isinstance(text_or_ids, str)
        ids = self.to_tokens(text_or_ids, prepend_bos)[0] if text else torch.as_tensor(text_or_ids)
        ids = ids.squeeze()  # [1, T] -> [T]
        if ids.dim() > 1:
            raise InputError(f"to_str_tokens takes one text or ids [pos] / [1, pos], not shape {tuple(ids.shape)}")
        return [self._token_str(int(i)) for i in ids.reshape(-1).tolist()]

    def _token_str(self, i: int) -> str:
        s = self.tokenizer.decode([i])
        return s if s else self.tokenizer.label(i)  # a special id the byte tokenizer's decode drops: its name

    def to_string(self, ids) -> str | list[str]:
        """The text of ids [T] (a string) or [B, T] (one string per row)."""
        ids = torch.as_tensor(ids)
        if ids.dim() == 2:
            return [self.tokenizer.decode(row) for row in ids.tolist()]
        if ids.dim() > 2:
            raise InputError(f"to_string takes ids [pos] or [batch, pos], not shape {tuple(ids.shape)}")
        return self.tokenizer.decode(ids.reshape(-1).tolist())

    def to_single_token(self, text: str) -> int:
        """The id of a text that is exactly one token; else one InputError."""
        i = self.single_token_id(text)
        if i is None:
            raise InputError(f"{text!r} is not a single token of {self.name} (to_str_tokens shows how it splits)")
        return i

    def to_single_str_token(self, int_token: int) -> str:
        """The string of one token id (TransformerLens's: to_str_tokens of that id); else one InputError."""
        V = self.cfg.vocab_size
        if isinstance(int_token, bool) or not isinstance(int_token, int) or not 0 <= int_token < V:
            raise InputError(f"to_single_str_token takes one token id, an int in 0..{V - 1}; got {int_token!r}")
        return self._token_str(int_token)

    def tokens_to_residual_directions(self, tokens) -> torch.Tensor:
        """The residual direction each token's logit reads after the final norm's scale: W_U[:, t] times the final
        norm's weight, centred under LayerNorm (TransformerLens's with fold_ln, its from_pretrained default), [D],
        [T, D] or [B, T, D] for a token (id or single-token text), ids [T] or [B, T]. (the stream through
        apply_ln_to_stack) · direction + the final norm's bias · W_U[:, t] + b_U[t] is the logit."""
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)
        W_U = self.W_U
        t = torch.as_tensor(tokens, device=W_U.device)
        if t.is_floating_point() or t.numel() == 0:
            raise InputError(f"tokens are integer ids, not {t.dtype} of shape {tuple(t.shape)}")
        if int(t.min()) < 0 or int(t.max()) >= W_U.shape[1]:
            bad = int(t.min()) if int(t.min()) < 0 else int(t.max())
            raise InputError(f"token id {bad} is outside this model's vocabulary (0 to {W_U.shape[1] - 1})")
        t = t.reshape(()) if t.numel() == 1 else t  # one token: [D], as TransformerLens
        ln = tl_stack(self).ln_f
        u = W_U.T[t.long()]  # [..., D]
        if not has_hooks(ln):
            return u
        u = u if ln.weight is None else u * ln.weight
        return u - u.mean(-1, keepdim=True) if ln.centres else u  # LayerNorm's output has mean 0: TL centres too
