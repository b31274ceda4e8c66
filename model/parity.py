"""Parity: ours against `transformers` on the same token ids (an image model: the same pixels): hidden states,
logits, every attention pattern and (decoders) a greedy continuation; a mixture of experts' router logits too.
fp32, CPU; `transformers` runs its eager attention, as the class the family's row names (model/families).
`compare_hf` also tokenizes the text (prepares the image) on each side separately (model/parity_inputs.py):
our ids against transformers' own tokenizer's, our pixels against the checkpoint's image processor's."""

from __future__ import annotations

import numpy as np
import torch
from attnlab.model.families import FAMILIES
from attnlab.model.families.family import names_task_model
from attnlab.model.inputs import InputError, Inputs
from attnlab.model.parity_inputs import TOL_PIXELS, pixel_report, token_report
from attnlab.model.registry import load

TOL_HIDDEN = 1e-4  # last hidden states, absolute
TOL_LOGITS = 1e-4
TOL_ATTENTION = 1e-5  # every attention weight
GREEDY_TOKENS = 20
PROBE_SIZE = (45, 61)  # (H, W) of the probe image compare_hf prepares on both sides
DEFAULT_TEXT = "The cat sat on the mat because the mat was warm."


def compare_hf(folder_or_name: str, text: str | None = None, *, pair: str | None = None,
               backend: str = "eager", greedy_tokens: int = GREEDY_TOKENS) -> dict:
    """Load `folder_or_name` both ways and compare. Raises InputError for a model that is not a
    Hugging Face checkpoint, CheckpointError for a bad folder. Both sides in float32, whatever the checkpoint
    stores (a bfloat16 folder too)."""
    lm = load(folder_or_name, dtype=torch.float32)
    hf = load_transformers(lm)
    if lm.reads_image:
        image = probe_image(PROBE_SIZE)  # not square, not the model's size: the resize and crop matter
        inputs = lm.encode_image(image)
        report = compare_models(lm, hf, inputs, backend=backend)
        return report | pixel_report(inputs.pixels.numpy(), lm.card["folder"], image)
    text = text if text is not None else DEFAULT_TEXT
    # an encoder–decoder reads the text as its source; its target is the decoder's start token
    inputs = lm.encode("", text) if lm.arch == "encdec" else lm.encode(text, pair=pair)
    ours = (inputs.src_ids if lm.arch == "encdec" else inputs.ids)[0].tolist()
    tokens = token_report(ours, lm.card["folder"], text, pair)
    return compare_models(lm, hf, inputs, backend=backend, greedy_tokens=greedy_tokens) | tokens


def load_transformers(lm):
    """The same checkpoint through `transformers` (eager attention, fp32, local files only)."""
    folder = lm.card.get("folder")
    if folder is not None and not lm.converted:  # a transformers view: transformers itself runs it
        archs = ", ".join(lm.card["architectures"]) or lm.family
        why = (f"model_type {lm.family!r} has no converter" if lm.family not in FAMILIES
               else f"{archs} is a task model" if names_task_model(lm.card)
               else f"{archs} is not what the {lm.family} converter reads")
        raise InputError(f"{lm.name} runs as a transformers view ({why}): "
                         "transformers itself computes its attention, so there is nothing to compare")
    if folder is None or lm.family not in FAMILIES:
        raise InputError(f"{lm.name} is not a Hugging Face checkpoint ({', '.join(FAMILIES)} family); "
                         "nothing to compare with")
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    name = FAMILIES[lm.family].transformers_class(lm.cfg)
    try:
        model = getattr(transformers, name).from_pretrained(folder, attn_implementation="eager", local_files_only=True,
                                                            use_safetensors=True, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001 — transformers' own refusal, in its first line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InputError(f"transformers cannot load {folder} as {name} ({type(e).__name__}: {first}), so there is "
                         "nothing to compare with") from None
    return model.eval()


def probe_image(size: tuple[int, int], seed: int = 0) -> np.ndarray:
    """A seeded uint8 [H, W, 3] image: smooth colour ramps plus noise (what a ViT comparison reads)."""
    h, w = size
    y, x = np.mgrid[0:h, 0:w] / max(h, w)  # [H, W] each
    noise = np.random.default_rng(seed).integers(0, 64, (h, w, 3))
    return np.clip(np.stack([x * 255, y * 255, (1 - x) * 160], -1) + noise, 0, 255).astype(np.uint8)


def _max_abs(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


@torch.no_grad()
def compare_models(lm, hf, inputs, *, backend: str = "eager", greedy_tokens: int = GREEDY_TOKENS) -> dict:
    """Both models on `inputs` (one sequence, no padding)."""
    if lm.arch == "encdec":
        return compare_encdec(lm, hf, inputs, backend=backend, greedy_tokens=greedy_tokens)
    run = lm.forward(inputs, backend=backend)
    if lm.reads_image:  # ViT, DeiT: the base model's output after its final LayerNorm, and the classifier's logits
        base = next((getattr(hf, a) for a in ("vit", "deit") if hasattr(hf, a)), hf)
        out = base(pixel_values=inputs.pixels, output_attentions=True, interpolate_pos_encoding=False)
        hf_hidden = out.last_hidden_state
        if hasattr(base, "post_layernorm"):  # CLIP: our final norm is its post_layernorm, on every token
            hf_hidden = base.post_layernorm(hf_hidden)
        if lm.cfg.n_classes:
            out.logits = hf(pixel_values=inputs.pixels).logits
    else:
        kw = {"token_type_ids": inputs.type_ids} if inputs.type_ids is not None else {}
        if run.capture.routers:  # Mixtral: the router logits of every layer too
            kw["output_router_logits"] = True
        out = hf(inputs.ids, output_attentions=True, output_hidden_states=True, **kw)
        hf_hidden = out.hidden_states[-1]  # GPT-2, Llama …: after the final norm; BERT: the last layer's output
    n_layers = len(out.attentions)
    if n_layers != lm.cfg.n_layers:
        raise AssertionError(f"transformers returned {n_layers} attention layers, ours has {lm.cfg.n_layers}")
    attention = max(_max_abs(run.capture[f"blocks.{i}.attn"].pattern(), a[0].numpy())
                    for i, a in enumerate(out.attentions))
    logits = None
    if run.logits is not None:
        logits = _max_abs(run.logits.numpy(), out.logits.numpy())
    routers = None
    if run.capture.routers:
        routers = max(_max_abs(run.capture.routers[f"blocks.{i}.mlp"][0].logits[0], r.reshape(-1, r.shape[-1]).numpy())
                      for i, r in enumerate(out.router_logits))  # HF: [B·T, E] per layer
    greedy = None
    if lm.arch == "decoder":
        greedy = greedy_equal(lm, hf, inputs.ids, greedy_tokens, backend)
    report = {"max_abs_logits": logits, "max_abs_hidden": _max_abs(run.hidden.numpy(), hf_hidden.numpy()),
              "max_abs_attention": attention, "greedy_equal": greedy, "n_layers": lm.cfg.n_layers,
              "n_heads": lm.cfg.n_heads}
    if routers is not None:  # a mixture of experts (Mixtral)
        report["max_abs_router_logits"] = routers
    return report


@torch.no_grad()
def compare_encdec(lm, hf, inputs, *, backend: str = "eager", greedy_tokens: int = GREEDY_TOKENS) -> dict:
    """An encoder–decoder (T5, BART, Marian) on inputs.src_ids → inputs.ids: every encoder, decoder and
    cross-attention pattern, both stacks' last hidden states, the logits, and a greedy continuation."""
    run = lm.forward(inputs, backend=backend)
    out = hf(input_ids=inputs.src_ids, decoder_input_ids=inputs.ids, output_attentions=True,
             output_hidden_states=True)
    cfg = lm.cfg
    pairs = [(f"encoder.blocks.{i}.attn", a) for i, a in enumerate(out.encoder_attentions)]
    pairs += [(f"decoder.blocks.{i}.attn", a) for i, a in enumerate(out.decoder_attentions)]
    pairs += [(f"decoder.blocks.{i}.cross_attn", a) for i, a in enumerate(out.cross_attentions)]
    if len(pairs) != cfg.n_layers + 2 * cfg.dec_layers:
        raise AssertionError(f"transformers returned {len(pairs)} attention sites, ours has "
                             f"{cfg.n_layers + 2 * cfg.dec_layers}")
    memory = lm.model.encode(inputs.src_ids, backend=backend)
    hidden = max(_max_abs(memory.numpy(), out.encoder_last_hidden_state.numpy()),
                 _max_abs(run.hidden.numpy(), out.decoder_hidden_states[-1].numpy()))
    n = min(greedy_tokens, cfg.max_len - inputs.ids.shape[1])
    ours = torch.tensor([lm.generate("", n, inputs=inputs, use_cache=True, backend=backend, stop_at_eos=False)[0]])
    theirs = inputs.ids
    for _ in range(n):
        nxt = hf(input_ids=inputs.src_ids, decoder_input_ids=theirs).logits[:, -1].argmax(-1, keepdim=True)  # [1, 1]
        theirs = torch.cat([theirs, nxt], dim=1)
    return {"max_abs_logits": _max_abs(run.logits.numpy(), out.logits.numpy()), "max_abs_hidden": hidden,
            "max_abs_attention": max(_max_abs(run.capture[s].pattern(), a[0].numpy()) for s, a in pairs),
            "greedy_equal": bool(torch.equal(ours, theirs)), "n_layers": [cfg.n_layers, cfg.dec_layers],
            "n_heads": cfg.n_heads}


def greedy_equal(lm, hf, ids: torch.Tensor, n: int = GREEDY_TOKENS, backend: str = "eager") -> bool:
    """Ours (with the KV cache) and transformers (full recompute) continue `ids` identically for
    `n` tokens, or as many as the context leaves room for."""
    n = min(n, lm.cfg.max_len - ids.shape[1])
    ours = torch.tensor([lm.generate("", n, inputs=Inputs(ids, []), use_cache=True, backend=backend,
                                      stop_at_eos=False)[0]])
    theirs = ids
    for _ in range(n):
        nxt = hf(theirs).logits[:, -1].argmax(-1, keepdim=True)  # [1, 1]
        theirs = torch.cat([theirs, nxt], dim=1)
    return bool(torch.equal(ours, theirs))


def within_tolerance(report: dict) -> bool:
    ok = report["max_abs_hidden"] <= TOL_HIDDEN and report["max_abs_attention"] <= TOL_ATTENTION
    if report["max_abs_logits"] is not None:
        ok = ok and report["max_abs_logits"] <= TOL_LOGITS
    if report.get("max_abs_router_logits") is not None:
        ok = ok and report["max_abs_router_logits"] <= TOL_LOGITS
    if report.get("max_abs_pixels") is not None:
        ok = ok and report["max_abs_pixels"] <= TOL_PIXELS
    return ok and report["greedy_equal"] is not False and report.get("tokens_equal") is not False
