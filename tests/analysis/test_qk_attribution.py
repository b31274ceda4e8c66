"""QK attribution: the query-side × key-side terms sum to the captured score within 1e-5 on every family shape
(ours, GPT-2, Llama with GQA and RoPE, Qwen3's QK-norm, Gemma 2's soft cap, BERT's post-norm), each part's q and
k sum to the record's q and k, and what does not apply says so in one line."""

import json

import numpy as np
import pytest
import torch
from attnlab.analysis.probes.qk_attribution import qk_attribution
from attnlab.model.config import ModelConfig
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.inputs import InputError
from attnlab.model.loaded import LoadedModel
from attnlab.model.registry import load
from attnlab.model.tokenizer import ByteTokenizer
from attnlab.model.transformer import build_model

from attnlab.data import data_folder
from tests.family_grid import TEXT, TINY, make

TOL = 1e-5
STORY = json.loads((data_folder("sample_texts") / "lecture.json").read_text())["samples"][0]


def check_every_head(lm, text, pairs):
    """Every layer × head at each (query, key): terms sum to the record's score, parts to the record's q and k."""
    inputs = lm.encode(text)
    fwd = lm.forward(inputs)
    checked = 0
    for layer, blk in enumerate(lm.model.blocks):
        rec = fwd.capture[blk.attn.site]
        for head in range(lm.cfg.n_heads):
            for q, k in pairs:
                a = qk_attribution(lm, inputs, layer, head, q, k)
                assert abs(a.residual) <= TOL, (layer, head, q, k, a.score, a.total)
                want = rec.scores(head)[a.query, a.key] if rec.softcap is None else \
                    rec.raw_qk(head)[a.query, a.key] * rec.scale
                assert a.score == pytest.approx(float(want), abs=1e-6)
                np.testing.assert_allclose(a.q_vectors.sum(0), rec.q[0, head, a.query], atol=TOL)
                np.testing.assert_allclose(a.k_vectors.sum(0), rec.keys(head)[0, a.key], atol=TOL)
                assert len(a.terms()) == a.values.size + (a.position_bias is not None)
                checked += 1
    return checked


@pytest.fixture(scope="module")
def lecture():
    return load("lecture-decoder")


def test_lecture_decoder_answer_head_at_the_answer_source(lecture):
    inputs = lecture.encode(STORY["text"])
    a = qk_attribution(lecture, inputs, 3, 2, STORY["query_index"], STORY["source_index"])
    assert a.tokens[a.key] == "48" and a.weight > 0.99 and not a.masked
    parts = ["embed"] + [f"blocks.{i}.{p}" for i in range(3) for p in
                         [*(f"attn.head.{h}" for h in range(4)), "attn.bias", "mlp"]]
    assert a.query_parts == parts + ["ln_bias", "q_bias"] and a.key_parts == parts + ["ln_bias", "k_bias"]
    assert a.values.shape == (21, 21) and a.norm == "LayerNorm" and a.query_scale > 0 and a.key_scale > 0
    assert abs(a.residual) <= TOL and a.score == pytest.approx(26.0619, abs=1e-3)
    terms = a.terms()
    assert [abs(t["value"]) for t in terms] == sorted((abs(t["value"]) for t in terms), reverse=True)
    assert sum(t["value"] for t in terms) == pytest.approx(a.score, abs=TOL)
    assert a.key == qk_attribution(lecture, inputs, 3, 2, STORY["query_index"]).key  # the default: the argmax key
    js = a.to_json(top=5)
    assert len(js["terms"]) == 5 and js["score"] == pytest.approx(sum(t["value"] for t in js["terms"]) + js["rest"]
                                                                 + js["residual"], abs=1e-5)
    assert "frozen" in js["frozen_scale"]["note"] and js["key_token"] == "48"
    # the README's note: `48` against john's age `46`, and which key-side parts make the difference
    b = qk_attribution(lecture, inputs, 3, 2, STORY["query_index"], 10)
    assert b.tokens[10] == "46" and b.score == pytest.approx(7.992, abs=1e-3)
    diff = {p: v - b.sums("key")[p] for p, v in a.sums("key").items()}
    assert diff["blocks.1.attn.head.0"] == pytest.approx(11.29, abs=5e-3)
    assert diff["blocks.2.mlp"] == pytest.approx(6.32, abs=5e-3)
    embed = sum(t["value"] for t in terms if "embed" in (t["query_side"], t["key_side"]))
    assert abs(embed) < 0.02


def test_lecture_decoder_every_head(lecture):
    assert check_every_head(lecture, STORY["text"], [(63, 25), (63, 0), (10, 3), (-1, -1)]) == 64


def test_lecture_encoder_every_head():
    lm = load("lecture-encoder")
    text = "the cat sat on the [MASK] because it was warm"
    assert check_every_head(lm, text, [(6, 2), (0, 9), (9, 0)]) == 3 * lm.cfg.n_layers * lm.cfg.n_heads


def test_a_masked_key_is_flagged(lecture):
    a = qk_attribution(lecture, lecture.encode(STORY["text"]), 1, 0, 3, 9)
    assert a.masked and a.weight == 0 and abs(a.residual) <= TOL


FAMILIES = ("gpt2", "llama", "qwen3", "gemma2", "bert")


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    cls, conf = TINY[request.param]
    return request.param, load_hf_folder(make(tmp_path_factory.mktemp(request.param), request.param, cls, **conf))


def test_families_terms_sum_to_the_score(family):
    name, lm = family
    n = len(lm.encode(TEXT).tokens)
    assert check_every_head(lm, TEXT, [(n - 1, 0), (n - 1, n // 2), (n // 2, 1)]) == 3 * lm.cfg.n_layers * lm.cfg.n_heads
    a = qk_attribution(lm, lm.encode(TEXT), lm.cfg.n_layers - 1, lm.cfg.n_heads - 1, -1, 2)
    first = set(a.query_parts) | set(a.key_parts)
    if name == "gpt2":
        assert {"pos_embed", "blocks.0.attn.bias", "ln_bias", "q_bias", "k_bias"} <= first
    if name in ("llama", "qwen3", "gemma2"):
        assert "pos_embed" not in first and "ln_bias" not in first and a.kv_head == (lm.cfg.n_heads - 1) // 2
    if name == "gemma2":  # soft cap: the terms sum to the score before it; the capped one is reported beside
        cap = lm.cfg.attn_softcap
        assert a.capped_score == pytest.approx(cap * np.tanh(a.score / cap), abs=1e-5)
        assert "blocks.0.ln_attn_out.bias" not in first  # RMSNorm: no β
    else:
        assert a.capped_score is None
    if name == "bert":  # post-norm: the embedding norm's and every earlier norm's β are parts; no norm before attention
        assert {"type_embed", "embed.norm.bias", "blocks.0.ln_attn_out.bias", "blocks.0.ln_mlp_out.bias"} <= first
        assert a.norm == "none" and a.query_scale == 1.0


def perturbed(cfg: ModelConfig, seed: int = 0) -> LoadedModel:
    """Our own model of `cfg` with every weight (biases and norm weights too) off its initial value."""
    torch.manual_seed(seed)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return LoadedModel("tiny", model, ByteTokenizer(add_bos=True), cfg, "random")


@pytest.mark.parametrize("conf", [
    dict(positional="alibi", norm="parallel"),
    dict(positional="sinusoidal", norm="peri", qk_norm=True),
    dict(positional="learned", norm="post", arch="encoder"),
    dict(positional="rope", norm_type="rmsnorm", mlp="moe", n_experts=4, n_kv_heads=2, rotary_dim=4),
], ids=["alibi-parallel", "sinusoidal-peri-qknorm", "post-encoder", "moe-gqa-partial-rope"])
def test_our_shapes_terms_sum_to_the_score(conf):
    cfg = ModelConfig(**{"arch": "decoder", "vocab_size": 260, "d_model": 32, "n_heads": 4, "n_layers": 3,
                         "max_len": 64, **conf})
    lm = perturbed(cfg)
    assert check_every_head(lm, "hello, world", [(12, 0), (12, 7), (5, 5), (3, 9)]) == 48
    a = qk_attribution(lm, lm.encode("hello, world"), 2, 1, 12, 3)
    if cfg.positional == "alibi":
        assert a.position_bias is not None and a.position_bias < 0
        assert a.terms()[-1]["value"] != 0 and any(t["query_side"] == "position_bias" for t in a.terms())
    if cfg.qk_norm:  # a LayerNorm QK-norm's β is a part of each side
        assert "q_norm_bias" in a.query_parts and "k_norm_bias" in a.key_parts
    if cfg.mlp == "moe":
        assert "blocks.1.mlp" in a.query_parts and a.kv_head == 0


def test_what_does_not_apply_is_one_line(lecture, tmp_path):
    from tests.view.fixtures import make_view_model

    inputs = lecture.encode("alex has a cat")
    T = inputs.ids.shape[1]
    for kw, msg in [(dict(layer=4, head=0), "layer 4 is out of range"), (dict(layer=0, head=4), "head 4 is out"),
                    (dict(layer=0, head=0, query=9), f"query 9 is out of range: the text has positions 0–{T - 1}$"),
                    (dict(layer=0, head=0, query=1, key=-9), "key -9 is out of range: the text has positions"),
                    (dict(layer=-5, head=0), "layer -5 is out of range: this model has layers 0–3$")]:
        with pytest.raises(InputError, match=msg):
            qk_attribution(lecture, inputs, **kw)
    view = load(str(make_view_model("falcon", tmp_path / "falcon")))
    with pytest.raises(InputError, match="needs a converted model"):
        qk_attribution(view, view.encode("the cat"), 0, 0)
    encdec = load("lecture-encdec")
    with pytest.raises(InputError, match="is an encoder–decoder"):
        qk_attribution(encdec, encdec.encode("x", "the cat"), 0, 0)


def test_roberta_with_a_padding_token_in_the_text(tmp_path):
    """RoBERTa's positions skip a padding token in the text (model/embeddings.py): hook_pos_embed is then [B, T, D]
    and the terms still sum to the score (it raised 'expand … the number of sizes provided (2)')."""
    cls, conf = TINY["roberta"]
    lm = load_hf_folder(make(tmp_path / "roberta", "roberta", cls, **conf))
    assert check_every_head(lm, "the [PAD] cat sat on the mat", [(8, 2), (2, 5), (0, 0)]) == 3 * 2 * 3
