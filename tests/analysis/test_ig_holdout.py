"""Integrated gradients on checkpoints the baseline tests never saw: a sentencepiece Unigram tokenizer with <unk> and no
[PAD] (its UNK is an index the `tokenizers` binding does not name), a Llama-2-style folder naming LlamaTokenizer (whose
rebuilt BPE has no unk; the folder names <unk>), a tokenizer whose [PAD] is its EOS, encoder–decoders with
a longer source or a longer target (both baselines), and DeiT's distillation token. Each against IG computed with plain
torch over transformers' own model (inputs_embeds; the tokenizer transformers builds; a fine trapezoid)."""

import json

import numpy as np
import pytest
import torch
from attnlab.analysis.probes.attributions import integrated_gradients
from attnlab.analysis.probes.ig_baseline import baseline_ids
from attnlab.analysis.probes.ig_rule import TOLERANCE
from attnlab.model.hf.load import load_hf_folder

from tests import family_grid as G
from tests.hf_fixtures import CORPUS

TEXT = "the cat sat on the zebra mat Q"  # 'z', 'Q' …: pieces and <unk> for the Unigram below


def _unigram(specials: list[str]):
    """A sentencepiece-style Unigram (Metaspace) trained on the corpus, '<s> $A' added; <unk> is its unk."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.UnigramTrainer(vocab_size=60, special_tokens=specials, unk_token="<unk>",
                                                            show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def _byte_fallback_bpe():
    """A Llama-2-style sentencepiece BPE: '▁' for spaces, byte fallback, <unk> <s> </s>, '<s> $A' added."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"],
                                                        show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def _llama(folder, tok, specials: dict):
    folder.mkdir(parents=True, exist_ok=True)
    ids = {f"{k}_token_id": tok.token_to_id(v) for k, v in specials.items() if k in ("bos", "eos", "pad")}
    conf = {**G.TINY["llama"][1], "vocab_size": tok.get_vocab_size(), **ids}
    G.hf_model("llama", "LlamaForCausalLM", **conf).save_pretrained(folder, safe_serialization=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "special_tokens_map.json").write_text(json.dumps({f"{k}_token": v for k, v in specials.items()}))
    return folder


def _reference(folder, text: str, src: str | None = None, steps: int = 1000):
    """Plain-torch IG over transformers' model: ({side: ids}, {side: baseline ids}, {side: per-token IG}, y(e), y(b),
    target id); sides "t" (target / the text) and "s" (source). Baseline: every token not special (named or added as
    special) replaced by pad, else unk, else eos."""
    import transformers

    named = (folder / "tokenizer_config.json").is_file()  # a class of its own (LlamaTokenizer): transformers builds it
    tok = (transformers.AutoTokenizer if named else transformers.PreTrainedTokenizerFast).from_pretrained(folder)
    fill = next(i for i in (tok.pad_token_id, tok.unk_token_id, tok.eos_token_id) if i is not None)
    special = torch.tensor(sorted(set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items()
                                                              if t.special} - {tok.unk_token_id}))
    kw = dict(dtype=torch.float32, attn_implementation="eager")
    if src is None:
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, **kw).eval()
        sides = {"t": torch.tensor([tok(text)["input_ids"]])}  # [1, T]
        def run(z):
            return model(inputs_embeds=z["t"]).logits[:, -1]
    else:
        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, **kw).eval()
        start = model.config.decoder_start_token_id
        sides = {"s": torch.tensor([tok(src)["input_ids"]]),  # [1, S]
                 "t": torch.tensor([[start] + tok(text, add_special_tokens=False)["input_ids"]])}  # [1, T]
        def run(z):
            return model(inputs_embeds=z["s"], decoder_inputs_embeds=z["t"]).logits[:, -1]
    bases = {k: torch.where(torch.isin(v, special), v, torch.full_like(v, fill)) for k, v in sides.items()}
    emb = model.get_input_embeddings()
    e = {k: emb(v).detach() for k, v in sides.items()}  # [1, *, D]
    b = {k: emb(v).detach() for k, v in bases.items()}
    with torch.no_grad():
        tid = int(run(e)[0].argmax())
    alphas = torch.linspace(0, 1, steps + 1)
    w = torch.full((steps + 1,), 1.0 / steps)
    w[0] = w[-1] = 0.5 / steps  # the trapezoid's weights [N + 1]
    grads, ys = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in e.items()}, []
    for chunk in torch.split(torch.arange(steps + 1), 250):
        z = {k: (b[k] + alphas[chunk].view(-1, 1, 1) * (e[k] - b[k])).requires_grad_(True) for k in e}  # [n, *, D]
        y = run(z)[:, tid]  # [n]
        for k, g in zip(z, torch.autograd.grad(y.sum(), list(z.values()))):
            grads[k] += (w[chunk].view(-1, 1, 1).double() * g.double()).sum(0, keepdim=True)
        ys.append(y.detach())
    y = torch.cat(ys)
    rows = {k: ((e[k] - b[k]).double() * grads[k]).sum(-1)[0].numpy() for k in e}  # [1, *, D] -> [*]
    return ({k: v[0].tolist() for k, v in sides.items()}, {k: v[0].tolist() for k, v in bases.items()}, rows,
            float(y[-1]), float(y[0]), tid)


def _compare(folder, text: str, src: str | None = None) -> dict:
    """ours vs _reference: ids and baseline ids equal, y(e) and y(b) within 1e-5, the adaptive rule within the
    tolerance of the rise and 512 even steps within 1e-5 of it (the trapezoid's own error); the baseline ids."""
    lm = load_hf_folder(folder)
    inputs = lm.encode(text, src) if src is not None else lm.encode(text)
    ids, bases, ref, y_e, y_b, tid = _reference(folder, text, src)
    ours = baseline_ids(lm, inputs)
    side = {"t": "decoder.hook_embed" if src is not None else "hook_embed", "s": "encoder.hook_embed"}
    assert inputs.ids[0].tolist() == ids["t"]
    assert src is None or inputs.src_ids[0].tolist() == ids["s"]
    assert {k: ours[side[k]][0].tolist() for k in ids} == bases
    rise = abs(y_e - y_b)
    for steps, tol in ((None, TOLERANCE), (512, 1e-5)):
        ig = integrated_gradients(lm, inputs, -1, tid, steps=steps)
        assert ig.logit == pytest.approx(y_e, abs=1e-5) and ig.baseline_logit == pytest.approx(y_b, abs=1e-5)
        assert ig.completeness_error <= TOLERANCE
        np.testing.assert_allclose(ig.row, ref["t"], atol=tol * rise)
        if src is not None:
            np.testing.assert_allclose(ig.source_row, ref["s"], atol=tol * rise)
    return bases


def test_unigram_unk_is_found_and_replaces_the_words(tmp_path):
    """A Unigram's <unk> (no [PAD]): the baseline token, and an <unk> in the text is a word, not kept. Before: unk_id
    None, so </s> replaced the words and the text's <unk>s stayed (|ours − ref| 9.8 % of the rise)."""
    tok = _unigram(["<unk>", "<s>", "</s>"])
    folder = _llama(tmp_path / "unigram", tok, {"bos": "<s>", "eos": "</s>", "unk": "<unk>"})
    lm = load_hf_folder(folder)
    unk, bos, eos = (tok.token_to_id(t) for t in ("<unk>", "<s>", "</s>"))
    assert lm.tokenizer.unk_id == unk and lm.tokenizer.special_ids == {bos, eos}
    ids = lm.encode(TEXT).ids[0].tolist()
    assert ids.count(unk) >= 2  # 'Q' and other unseen characters
    bases = _compare(folder, TEXT)
    assert bases["t"] == [bos] + [unk] * (len(ids) - 1)


def test_llama2_tokenizer_class_keeps_its_unk(tmp_path):
    """tokenizer_config.json names LlamaTokenizer (as Llama-2's does): transformers rebuilds the BPE with byte
    fallback and no unk of its own, but its tokenizer's unk_token is <unk>. Before: unk_id None, </s> replaced the
    words (18 % of the rise off plain torch); now the named <unk> (3e-3 adaptive, 3e-8 at 512 steps)."""
    tok = _byte_fallback_bpe()
    folder = _llama(tmp_path / "llama2", tok, {"bos": "<s>", "eos": "</s>", "unk": "<unk>"})
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
        "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None, "legacy": False}))
    lm = load_hf_folder(folder)
    unk, bos = tok.token_to_id("<unk>"), tok.token_to_id("<s>")
    assert lm.tokenizer.unk_id == unk and lm.tokenizer.pad_id is None
    bases = _compare(folder, "the cat sat on the zebra mat")
    assert bases["t"] == [bos] + [unk] * (len(bases["t"]) - 1)


def test_pad_equal_to_eos_is_preferred_to_unk(tmp_path):
    """[PAD] = </s> (a common fine-tune setting) wins over <unk>; the text's </s> and <s> are kept."""
    tok = _unigram(["<unk>", "<s>", "</s>"])
    folder = _llama(tmp_path / "pad-eos", tok, {"bos": "<s>", "eos": "</s>", "pad": "</s>", "unk": "<unk>"})
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    bases = _compare(folder, "the cat sat </s> the dog")
    assert bases["t"][0] == bos and set(bases["t"][1:]) == {eos}


@pytest.mark.parametrize("model_type", ["t5", "bart"])
@pytest.mark.parametrize("longer", ["source", "target"])
def test_encoder_decoder_source_and_target_match_plain_torch(tmp_path, model_type, longer):
    """Both embeddings along the path: the source's [CLS]/[SEP] and the target's start token kept, the rest [PAD]."""
    cls, conf = G.TINY[model_type]
    folder = G.make(tmp_path / model_type, model_type, cls, **conf)
    long, short = "the cat sat on the mat because the mat was warm", "the dog"
    src, tgt = (long, short) if longer == "source" else (short, long)
    bases = _compare(folder, tgt, src)
    pad, cls_, sep = 0, 2, 3  # word_tokenizer(True): [PAD] [UNK] [CLS] [SEP] …
    assert bases["s"] == [cls_] + [pad] * (len(bases["s"]) - 2) + [sep]
    assert bases["t"] == [sep if model_type == "bart" else pad] + [pad] * (len(bases["t"]) - 1)


def test_deit_keeps_its_distillation_token(tmp_path):
    """DeiT's [CLS] and DIST are kept, every patch zero: both score 0 and y(b) is transformers' logit with the patch
    embeddings zeroed. Before: DIST was zeroed too (y(b) off by 1.5e-2, DIST scored −1.1e-2)."""
    import transformers

    cls, conf = G.TINY["deit"]
    folder = G.make(tmp_path / "deit", "deit", cls, **conf)
    lm = load_hf_folder(folder)
    x = lm.encode_image((np.random.default_rng(0).random((16, 16, 3)) * 255).astype(np.uint8))
    model = getattr(transformers, cls).from_pretrained(folder, attn_implementation="eager").eval()
    patches = model.deit.embeddings.patch_embeddings
    hook = patches.register_forward_hook(lambda m, i, o: torch.zeros_like(o))  # [1, N, D] zeros
    with torch.no_grad():
        y_zero = model(pixel_values=x.pixels).logits[0]  # [classes]
    hook.remove()
    ig = integrated_gradients(lm, x, 0)
    assert ig.row[:2].tolist() == [0.0, 0.0] and ig.row.shape == (2 + 16,)
    assert ig.baseline_logit == pytest.approx(float(y_zero[ig.target_id]), abs=1e-5)
    assert ig.completeness_error <= TOLERANCE
