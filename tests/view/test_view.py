"""A transformers view of families attnlab does not convert: its attention is transformers' own, exactly."""

from __future__ import annotations

import json
import pickle

import attnlab.model as model
import numpy as np
import pytest
import torch
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.inputs import InputError
from attnlab.model.view import MODE, ViewModel

from tests.view.fixtures import FAMILIES, hf_attentions, make_view_model

TEXT, SRC = "the cat sat on the mat because the mat was warm", "a dog ran in the park"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("view")
    return {f: make_view_model(f, root / f, seed=i) for i, f in enumerate(FAMILIES)}


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_is_transformers_own(folders, family):
    lm = model.load(str(folders[family]))
    assert isinstance(lm, ViewModel) and lm.family == family and lm.info()["mode"] == MODE
    run = lm.run(TEXT, SRC if lm.reads_source else None)
    ref = hf_attentions(folders[family], run.ids, run.src_ids)
    for group, sites in run.groups().items():
        key = "self" if group == "self" else group
        assert len(sites) == len(ref[key])
        for i, site in enumerate(sites):
            want = ref[key][i][0].numpy()  # [H, q, k]
            got = run.records[site].pattern()
            assert got.shape == want.shape
            assert np.array_equal(got, want), f"{family} {site}"
            np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
    assert run.n_heads == lm.cfg.n_heads
    stacks = {r.stack for r in run.records.values()}
    assert stacks == ({"encoder", "decoder"} if lm.reads_source else {lm.arch})


def test_ids_are_the_tokenizers_and_kinds(folders):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folders["gptj"] / "tokenizer.json"))
    lm = model.load(str(folders["gptj"]))
    assert lm.encode(TEXT).ids[0].tolist() == tok.encode(TEXT).ids
    assert model.load(str(folders["mobilebert"])).arch == "encoder"
    enc = model.load(str(folders["pegasus"]))
    inp = enc.encode("the cat", SRC)
    assert inp.ids[0].tolist()[0] == 0  # the decoder's start token (decoder_start_token_id)
    assert inp.src_ids[0].tolist() == tok.encode(SRC).ids


def test_weights_only_and_what_it_cannot_do(folders):
    lm = model.load(str(folders["gptj"]))
    run = lm.run(TEXT)
    rec = run.records["blocks.1.attn"]
    assert rec.q is None and rec.k is None and rec.lazy is False
    with pytest.raises(InputError, match="weights only"):
        rec.scores(0)
    with pytest.raises(InputError, match="weights only"):
        run.matrices("self", "scores")
    mask = run.mask_of("self")
    assert mask.shape == (len(run.tokens),) * 2 and not mask[0, 1] and mask[1, 0]
    np.testing.assert_array_equal(run.matrices("self")[:, :, ~mask], 0.0)  # causal: nothing above the diagonal
    can = lm.describe()["can"]
    assert not can.has_qk and not can.has_cache and not can.converted and can.has_logits
    for call in (lambda: lm.run(TEXT, backend="sdpa"), lambda: lm.run(TEXT, mask=("bidirectional",)),
                 lambda: lm.generate(TEXT), lambda: lm.forward(lm.encode(TEXT), interventions={"x": 1})):
        with pytest.raises(InputError, match="converted family|own mask"):
            call()
    assert pickle.loads(pickle.dumps(run)).records["blocks.1.attn"].pattern(2).shape == mask.shape
    assert run.top_tokens is not None and len(run.top_tokens) == len(run.tokens)


def test_head_statistics_and_rollout_read_it(folders):
    from attnlab.analysis.attention.rollout import attention_rollout
    from attnlab.analysis.probes.head_table import head_table

    lm = model.load(str(folders["falcon"]))
    df, period = head_table(lm, lm.encode(TEXT))
    assert len(df) == lm.cfg.n_layers * lm.cfg.n_heads and df["induction"].notna().all()
    r = attention_rollout(lm.run(TEXT).matrices("self"), 0.5, "mean", 0.0)
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-5)
    enc = model.load(str(folders["pegasus"]))
    df, _ = head_table(enc, enc.encode("the cat", SRC))
    assert set(df["stack"]) == {"encoder", "decoder", "cross"}


def test_refuses_pickles_and_repository_code(tmp_path, folders):
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    cfg = json.loads((folders["gptj"] / "config.json").read_text())
    (pickled / "config.json").write_text(json.dumps(cfg))
    torch.save({}, pickled / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickle"):
        model.load(str(pickled))
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "config.json").write_text(json.dumps(cfg | {"auto_map": {"AutoModel": "modeling_x.X"}}))
    with pytest.raises(CheckpointError, match="own Python code"):
        model.load(str(remote))


def test_refuses_weights_transformers_would_fill_at_random(tmp_path, folders):
    from safetensors.torch import load_file, save_file

    f = tmp_path / "gptj"
    f.mkdir()
    for p in folders["gptj"].iterdir():
        (f / p.name).write_bytes(p.read_bytes())
    state = load_file(str(f / "model.safetensors"))
    del state["transformer.ln_f.bias"]  # 32 of ~30k parameters: the sizes agree, the names do not
    save_file(state, str(f / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"weights do not match model_type 'gptj': 1 weights of GPTJForCausalLM "
                                              r"are missing or of another shape \(e.g. transformer.ln_f.bias\)"):
        model.load(str(f))


def test_context_and_empty_text(folders):
    lm = model.load(str(folders["gpt_bigcode"]))
    assert lm.context == 48
    with pytest.raises(InputError, match="empty"):
        lm.run("   ")
    with pytest.raises(InputError):
        lm.run("the cat " * 40)
    with pytest.raises(InputError, match="source text"):
        model.load(str(folders["pegasus"])).run("the cat")


def test_notebook_views(folders):
    from attnlab.app.notebook import show

    for fam in ("gptj", "pegasus"):
        lm = model.load(str(folders[fam]))
        run = lm.run(TEXT, SRC if lm.reads_source else None)
        for view in ("heads", "head", "headview", "rollout", "tokens"):
            fig = show(run, view)
            assert fig.data, f"{fam} {view}"


def test_a_view_of_a_converted_family_agrees_with_our_model(tmp_path):
    """The same GPT-2 weights as our converted model and as a transformers view: the same weights per head and
    the same gradient relevance (the view's gradients flow through transformers' own attention weights)."""
    from attnlab.analysis.probes.relevance import gradient_relevance
    from attnlab.model.checkpoint import read_config
    from attnlab.model.view import load_view

    from tests.hf_fixtures import build

    folder = build("gpt2", "gpt2-3heads-bpe", tmp_path)
    ours, view = model.load(str(folder)), load_view(folder, read_config(folder))
    assert ours.mode == "converted" and view.mode == MODE
    a, b = ours.run(TEXT), view.run(TEXT)
    assert a.ids == b.ids and list(a.records) == list(b.records)
    for site in a.records:
        np.testing.assert_allclose(b.records[site].pattern(), a.records[site].pattern(), atol=2e-6)
    np.testing.assert_allclose(b.top_probs, a.top_probs, atol=2e-5)
    for pos in (3, -1):
        ra, rb = gradient_relevance(ours, ours.encode(TEXT), pos), gradient_relevance(view, view.encode(TEXT), pos)
        assert ra.target_id == rb.target_id
        np.testing.assert_allclose(rb.matrix, ra.matrix, atol=1e-5)
        assert rb.matrix[0, 1:].sum() == 0 and rb.row.max() > 0


def test_relevance_of_an_unconverted_encoder_decoder(folders):
    from attnlab.analysis.probes.relevance import gradient_relevance

    lm = model.load(str(folders["pegasus"]))
    rel = gradient_relevance(lm, lm.encode("the cat", SRC), -1)
    n_src = len(lm.encode("the cat", SRC).src_tokens)
    assert rel.source_row.shape == (n_src,) and rel.source_row.sum() > 0 and rel.matrix.shape == (3, 3)


def test_a_sentence_pair_and_padding_reach_transformers(folders):
    """A view reads a pair's token types and a padded batch's mask as transformers does (before: types dropped,
    padding attended)."""
    import transformers

    folder = folders["mobilebert"]
    lm = model.load(str(folder))
    inp = lm.encode(TEXT, pair=SRC)
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))  # the other side tokenizes for itself
    enc = tok(TEXT, SRC, return_tensors="pt")
    assert inp.ids.tolist() == enc["input_ids"].tolist() and inp.type_ids.tolist() == enc["token_type_ids"].tolist()
    assert 0 < int(inp.type_ids.sum()) < inp.ids.shape[1]  # both segments present
    ref = transformers.MobileBertForMaskedLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        want = ref(**enc, output_attentions=True)
    got = lm.forward(inp)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-5, rtol=0)
    from dataclasses import replace

    untyped = lm.forward(replace(inp, type_ids=None))  # the same ids read as one segment: other logits
    assert (untyped.logits - want.logits).abs().max() > 1e-3

    short = lm.encode("the cat sat")
    n, T = short.ids.shape[1], inp.ids.shape[1]
    ids = torch.full((2, T), tok.pad_token_id)  # [2, T]: the pair, then the short text padded on the right
    ids[0], ids[1, :n] = inp.ids[0], short.ids[0]
    mask = ids != tok.pad_token_id
    mask[0] = True
    types = torch.zeros_like(ids)
    types[0] = inp.type_ids[0]
    batch = type(inp)(ids, inp.tokens, type_ids=types, attention_mask=mask)
    out = lm.forward(batch)
    one = lm.forward(short)
    torch.testing.assert_close(out.logits[1, :n], one.logits[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.logits[0], want.logits[0], atol=1e-5, rtol=0)


def test_transformerlens_entry_points_on_a_view(folders):
    """run_with_cache, run_with_hooks and to_tokens on a transformers view (they were AttributeErrors): the cache holds
    the attention weights, transformers' own, and what `names` chooses; the logits are the plain forward's; a hook
    function is one line."""
    lm = model.load(str(folders["falcon"]))
    ids = lm.to_tokens(TEXT)
    assert ids.tolist() == lm.encode(TEXT).ids.tolist()
    logits, cache = lm.run_with_cache(TEXT)
    ref = hf_attentions(folders["falcon"], ids[0].tolist(), None)["self"]
    assert sorted(cache.keys()) == [f"blocks.{i}.attn.hook_pattern" for i in range(len(ref))]
    for i, want in enumerate(ref):
        assert torch.equal(cache["pattern", i], want)  # [1, H, q, k]
    assert torch.equal(logits, lm.forward(lm.encode(TEXT)).logits) and logits.shape[:2] == ids.shape
    _, one = lm.run_with_cache(TEXT, names="blocks.1.attn.hook_pattern")
    assert list(one.keys()) == ["blocks.1.attn.hook_pattern"]
    assert torch.equal(lm.run_with_hooks(TEXT), logits)
    with pytest.raises(InputError, match=f"^{lm.name} runs as a {MODE}: a hook function needs a converted family$"):
        lm.run_with_hooks(TEXT, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda x, hook: x)])
