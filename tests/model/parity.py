"""In-memory parity of our converted model against a tiny random transformers model: the largest absolute
difference of every attention pattern, the last hidden states and the logits (all backends through capture)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from attnlab.model import hooks  # noqa: E402
from attnlab.model.checkpoint import load_weights  # noqa: E402
from attnlab.model.transformer import build_model  # noqa: E402

TOL_ATTENTION, TOL_HIDDEN, TOL_LOGITS = 1e-5, 1e-4, 1e-4


def perturbed(model, scale: float = 0.1, seed: int = 0):
    """Every parameter moved off its initial value (LayerNorm 1/0, zero biases) so a missed tensor shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return model.eval()


def ours(cfg, state):
    model = build_model(cfg)
    load_weights(model, state, "test")
    return model.eval()


def max_abs(a, b) -> float:
    return float((torch.as_tensor(a).double() - torch.as_tensor(b).double()).abs().max())


def patterns(run, sites) -> list:
    """Run `run()` under a capture and return each site's pattern [H, q, k] (batch 0) and run's output."""
    with torch.no_grad(), hooks.capture() as cap:
        out = run()
    return [cap[s].pattern() for s in sites], out


def attention_diff(ours_patterns, hf_attentions) -> float:
    assert len(ours_patterns) == len(hf_attentions), (len(ours_patterns), len(hf_attentions))
    return max(max_abs(p, a[0]) for p, a in zip(ours_patterns, hf_attentions))


def seq2seq_diffs(model, hf, src, tgt, backend: str = "eager") -> dict:
    """Encoder–decoder parity: every encoder, decoder and cross-attention pattern, both stacks' last hidden
    states and the logits."""
    cfg = model.cfg
    sites = ([f"encoder.blocks.{i}.attn" for i in range(cfg.n_layers)]
             + [f"decoder.blocks.{i}.attn" for i in range(cfg.dec_layers)]
             + [f"decoder.blocks.{i}.cross_attn" for i in range(cfg.dec_layers)])
    pats, out = patterns(lambda: model(src, tgt, backend=backend), sites)
    with torch.no_grad():
        memory = model.encode(src, backend=backend)
        ref = hf(input_ids=src, decoder_input_ids=tgt, output_attentions=True, output_hidden_states=True)
    n = cfg.n_layers
    return {
        "attention": attention_diff(pats, [*ref.encoder_attentions, *ref.decoder_attentions, *ref.cross_attentions]),
        "hidden": max(max_abs(memory, ref.encoder_last_hidden_state), max_abs(out.hidden, ref.decoder_hidden_states[-1])),
        "logits": max_abs(out.logits, ref.logits),
        "n_sites": len(pats) if len(pats) == n + 2 * cfg.dec_layers else -1,
    }


def greedy_equal(model, hf, src, start: int, n: int = 8) -> bool:
    """Ours (KV cache, cross keys once) and transformers (full recompute) continue [start] identically."""
    from attnlab.model.generate import generate

    prompt = torch.tensor([[start]])
    mine = generate(model, prompt, n, src=src, use_cache=True)
    theirs = prompt
    with torch.no_grad():
        for _ in range(n):
            nxt = hf(input_ids=src, decoder_input_ids=theirs).logits[:, -1].argmax(-1, keepdim=True)  # [1, 1]
            theirs = torch.cat([theirs, nxt], dim=1)
    return bool(torch.equal(mine, theirs))


def saved_state(hf) -> dict:
    """The tensors as `save_pretrained` writes them to model.safetensors (what a downloaded folder holds; the
    on-disk names can differ from the in-memory module's, e.g. DeiT's)."""
    import tempfile

    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        return load_file(f"{d}/model.safetensors")
