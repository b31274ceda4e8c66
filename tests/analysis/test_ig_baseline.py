"""Integrated gradients on Llama-3/Mistral-style models, whose tokenizers have no [PAD] (analysis/probes/ig_baseline.py
baseline_token): the baseline is the tokenizer's UNK, else its EOS, so completeness holds within the rule's 1 %
on tiny random llama / mistral / gemma3 / qwen2 checkpoints; ours equals IG computed with plain torch over
transformers' own model; and where only the zero embedding is left, the graded rule (ig_rule) integrates the
norms' 1/√ε blow-up near α = 0 (the even rule missed completeness by 104× on llama, 2e14× on gemma3)."""

import json

import numpy as np
import pytest
import torch
from attnlab.analysis.probes.attributions import integrated_gradients
from attnlab.analysis.probes.ig_baseline import baseline_ids, baseline_name, baseline_token, zero_baseline
from attnlab.analysis.probes.ig_rule import TOLERANCE
from attnlab.model.hf.load import load_hf_folder

from tests import family_grid as G
from tests.hf_fixtures import EOT, word_tokenizer

FAMILIES = {"llama": "llama", "mistral": "mistral", "gemma3": "gemma3_text", "qwen2": "qwen2"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Per family a tiny random checkpoint whose tokenizer names EOT as BOS and EOS and has no [PAD] or UNK (like
    Llama-3's), and a mistral whose word-level tokenizer has an [UNK] (like Mistral's <unk>) but no [PAD]."""
    root = tmp_path_factory.mktemp("ig-baseline")
    out = {name: _make(root / name, mt) for name, mt in FAMILIES.items()}
    unk = _make(root / "mistral-unk", "mistral")
    word_tokenizer(False).save(str(unk / "tokenizer.json"))  # EOT, [UNK] and the corpus's words; the model's 300 rows
    out["mistral-unk"] = unk
    return out


def _make(folder, model_type: str):
    cls, conf = G.TINY[model_type]
    return G.make(folder, model_type, cls, **conf)


def _make_zero(folder):
    """The same checkpoint with a tokenizer naming only a BOS: no [PAD], UNK or EOS, so the zero embedding."""
    (folder / "special_tokens_map.json").write_text(json.dumps({"bos_token": EOT}))
    return folder


@pytest.mark.parametrize("name", list(FAMILIES))
def test_eos_replaces_every_token_and_completeness_holds(folders, name):
    lm = load_hf_folder(folders[name])
    tok = lm.tokenizer
    eot = tok.tok.token_to_id(EOT)
    assert tok.pad_id is None and tok.unk_id is None and tok.eos_id == eot
    assert baseline_token(tok) == eot and not zero_baseline(lm)
    inputs = lm.encode(G.TEXT)
    base = baseline_ids(lm, inputs)["hook_embed"]
    assert base.shape == inputs.ids.shape and base[0].tolist() == [eot] * inputs.ids.shape[1]
    assert (inputs.ids[0] != eot).sum() >= 16  # the text's tokens were replaced, not kept
    ig = integrated_gradients(lm, inputs)
    assert ig.baseline == baseline_name(lm) == "every non-special token replaced by <|endoftext|>"
    assert ig.completeness_error <= TOLERANCE, (name, ig.completeness_error, ig.steps)
    assert abs(ig.total - (ig.logit - ig.baseline_logit)) <= TOLERANCE * abs(ig.logit - ig.baseline_logit)
    assert ig.steps <= 64  # a smooth path: no blow-up near α = 0 left to chase


def test_unk_is_preferred_to_eos(folders):
    lm = load_hf_folder(folders["mistral-unk"])
    tok = lm.tokenizer
    unk, eot = tok.tok.token_to_id("[UNK]"), tok.tok.token_to_id(EOT)
    assert (tok.pad_id, tok.unk_id, tok.eos_id) == (None, unk, eot) and unk != eot
    inputs = lm.encode(f"the cat sat on the zebra mat {EOT} the dog")  # 'zebra' is outside the vocabulary: [UNK]
    ids = inputs.ids[0].tolist()
    assert ids.count(unk) == 1 and ids.count(eot) == 1
    base = baseline_ids(lm, inputs)["hook_embed"][0].tolist()
    assert base == [eot if i == eot else unk for i in ids] and base.count(unk) == len(ids) - 1  # EOS kept
    ig = integrated_gradients(lm, inputs)
    assert ig.baseline == "every non-special token replaced by [UNK]" and ig.completeness_error <= TOLERANCE


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_zero_embedding_is_integrated_by_the_graded_rule(folders, tmp_path, name):
    """No [PAD], UNK or EOS: the zero embedding. The even rule's completeness errors were 104 (llama) and 2.2e14
    (gemma3); graded panels toward α = 0 bring them within the tolerance."""
    import shutil

    lm = load_hf_folder(_make_zero(shutil.copytree(folders[name], tmp_path / name)))
    assert lm.tokenizer.eos_id is None and baseline_token(lm.tokenizer) is None and zero_baseline(lm)
    inputs = lm.encode(G.TEXT)
    assert baseline_ids(lm, inputs)["hook_embed"] is None
    ig = integrated_gradients(lm, inputs)
    assert ig.baseline == "every token's embedding zero" and ig.baseline_logit == pytest.approx(0.0, abs=1e-6)
    assert ig.completeness_error <= TOLERANCE, (name, ig.completeness_error, ig.steps)
    assert ig.rows == ig.steps + 1 and ig.steps <= 512


def _reference_ig(folder, text: str, steps: int = 4000):
    """IG with plain torch over transformers' own model: its tokenizer (tokenizer.json + special_tokens_map.json),
    baseline ids with every non-special token replaced by pad, else unk, else eos; the inputs_embeds path; a uniform
    trapezoid of `steps` intervals. (ids, baseline ids, per-token IG [T], y(e), y(b), target id)."""
    import transformers

    tok = transformers.PreTrainedTokenizerFast.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    ids = torch.tensor([tok(text)["input_ids"]])  # [1, T]
    fill = next(i for i in (tok.pad_token_id, tok.unk_token_id, tok.eos_token_id) if i is not None)
    special = torch.tensor(tok.all_special_ids)
    base = torch.where(torch.isin(ids, special), ids, torch.full_like(ids, fill))  # [1, T]
    emb = model.get_input_embeddings()  # Gemma's scales by √d itself
    e, b = emb(ids).detach(), emb(base).detach()  # [1, T, D]
    with torch.no_grad():
        tid = int(model(inputs_embeds=e).logits[0, -1].argmax())
    alphas = torch.linspace(0, 1, steps + 1)
    w = torch.full((steps + 1,), 1.0 / steps)
    w[0] = w[-1] = 0.5 / steps  # the trapezoid's weights [N + 1]
    grads, ys = torch.zeros_like(e, dtype=torch.float64), []
    for chunk in torch.split(torch.arange(steps + 1), 500):
        z = (b + alphas[chunk].view(-1, 1, 1) * (e - b)).requires_grad_(True)  # [n, T, D]
        y = model(inputs_embeds=z).logits[:, -1, tid]  # [n]
        (g,) = torch.autograd.grad(y.sum(), z)
        grads += (w[chunk].view(-1, 1, 1).double() * g.double()).sum(0, keepdim=True)
        ys.append(y.detach())
    y = torch.cat(ys)
    per_token = ((e - b).double() * grads).sum(-1)[0]  # [1, T, D] -> [T]
    return ids[0], base[0], per_token.numpy(), float(y[-1]), float(y[0]), tid


def test_ours_equals_plain_torch_over_transformers(folders):
    lm = load_hf_folder(folders["llama"])
    ids, base, ref, y_e, y_b, tid = _reference_ig(folders["llama"], G.TEXT)
    inputs = lm.encode(G.TEXT)
    assert inputs.ids[0].tolist() == ids.tolist()
    assert baseline_ids(lm, inputs)["hook_embed"][0].tolist() == base.tolist()
    assert abs(ref.sum() - (y_e - y_b)) <= 1e-3 * abs(y_e - y_b)  # the reference itself is complete
    rise = abs(y_e - y_b)
    ig = integrated_gradients(lm, inputs, -1, tid)  # the adaptive rule: Σ|E| within 1 % of the rise
    assert ig.logit == pytest.approx(y_e, abs=1e-4) and ig.baseline_logit == pytest.approx(y_b, abs=1e-4)
    np.testing.assert_allclose(ig.row, ref, atol=TOLERANCE * rise)  # measured: 0.13 % of the rise at most
    assert int(np.argmax(np.abs(ig.row))) == int(np.argmax(np.abs(ref)))
    fine = integrated_gradients(lm, inputs, -1, tid, steps=512)  # Simpson on 256 even panels
    np.testing.assert_allclose(fine.row, ref, atol=1e-6 * rise)  # measured: 3.5e-8 of the rise
