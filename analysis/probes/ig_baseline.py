"""The baseline b of integrated gradients' path b + α(e − b) (analysis/probes/embed_path.py): which token stands for
every non-special token (the tokenizer's [PAD], else its UNK, else its EOS), its ids and embedding, and its name."""

from __future__ import annotations

import torch


def baseline_token(tok) -> int | None:
    """The one id that stands for every non-special token in the baseline: the tokenizer's [PAD], else its UNK, else
    its EOS (what transformers users set as pad on Llama-3 or Mistral, whose tokenizers have no [PAD]); None when it
    has none of these (or no tokenizer): the zero embedding."""
    if tok is None:
        return None
    return next((i for i in (tok.pad_id, getattr(tok, "unk_id", None), tok.eos_id) if i is not None), None)


def _tokenizers(lm) -> dict[str, object]:
    """Per hook of a text model, the tokenizer that reads its tokens."""
    if lm.reads_source:
        return {"encoder.hook_embed": lm.src_tokenizer or lm.tokenizer, "decoder.hook_embed": lm.tokenizer}
    return {"hook_embed": lm.tokenizer}


def baseline_ids(lm, inputs) -> dict[str, torch.Tensor | None]:
    """Per hook, the token ids of the baseline [1, T]: every token that is not special (BOS, EOS, PAD, MASK, and
    the tokenizer's own such as [CLS] and [SEP]: tokenizer.special_ids) replaced by baseline_token; None = the zero
    embedding (a ViT's patches, or a tokenizer without [PAD], UNK and EOS)."""
    def base(ids, tok):
        fill = baseline_token(tok)
        if fill is None:
            return None
        special = torch.tensor(sorted(tok.special_ids), dtype=ids.dtype)
        return torch.where(torch.isin(ids, special), ids, torch.full_like(ids, fill))

    if lm.reads_image:
        return {"hook_embed": None}
    toks = _tokenizers(lm)
    if lm.reads_source:
        return {"encoder.hook_embed": base(inputs.src_ids[:1], toks["encoder.hook_embed"]),
                "decoder.hook_embed": base(inputs.ids[:1], toks["decoder.hook_embed"])}
    return {"hook_embed": base(inputs.ids[:1], toks["hook_embed"])}


def zero_baseline(lm) -> bool:
    """True when some text embedding's baseline is the zero embedding (its tokenizer has no [PAD], UNK or EOS): a
    stream of zeros, which a norm without an additive position divides by √ε near α = 0 (ig_rule grades its panels
    there). A ViT's zero patches keep [CLS] and their positions: False."""
    return not lm.reads_image and any(baseline_token(t) is None for t in _tokenizers(lm).values())


def baseline_embedding(lm, e: torch.Tensor, ids: torch.Tensor | None, emb: torch.nn.Module) -> torch.Tensor:
    """b [1, ...] for the input embedding e [1, ...]: a ViT's [CLS] (and DeiT's distillation token) kept and every
    patch zero; the zero embedding (ids None); else the baseline ids' token embeddings, scaled as hook_embed is
    (Gemma's √d_model)."""
    if lm.reads_image:
        kept = 1 + bool(lm.cfg.distill_token)  # [CLS] (, DIST) lead the tokens
        return torch.cat([e[:, :kept], torch.zeros_like(e[:, kept:])], dim=1)
    if ids is None:
        return torch.zeros_like(e)
    return (emb.tok.weight[ids.to(e.device)] * getattr(emb, "scale", 1.0)).detach().to(e.dtype)


REPLACED = "every non-special token replaced by "  # baseline_name's words before the token


def baseline_name(lm) -> str:
    """The baseline in words, as shown beside integrated gradients: the token that replaced the others as the
    tokenizer writes it (unescaped: a page escapes it), e.g. "every non-special token replaced by <|end_of_text|>"."""
    if lm.reads_image:
        return "every patch's embedding zero"
    toks = _tokenizers(lm)
    said = {n: None if (i := baseline_token(t)) is None else t.label(i) for n, t in toks.items()}
    if all(v is None for v in said.values()):
        return "every token's embedding zero"
    shown = {n: "the zero embedding" if v is None else v for n, v in said.items()}
    if len(set(shown.values())) == 1:
        return REPLACED + next(iter(shown.values()))
    return REPLACED + f"{shown['decoder.hook_embed']} (target), {shown['encoder.hook_embed']} (source)"
