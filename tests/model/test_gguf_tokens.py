"""A GGUF file's tokens as transformers' GGUF tokenizer gives them: BOS/EOS from tokenizer.ggml.add_bos_token /
add_eos_token (a sentencepiece vocabulary adds BOS unless told not to), a byte-level vocabulary without
`<|endoftext|>`, and compare-hf tokenizing on each side so a difference fails naming its position."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.model.gguf import tokenizer as gguf_tokenizer  # noqa: E402
from attnlab.model.gguf.compare import compare_gguf  # noqa: E402
from attnlab.model.parity import within_tolerance  # noqa: E402

import attnlab as al  # noqa: E402
from tests import gguf_fixtures as G  # noqa: E402

TEXT = "the cat sat on the mat"
CONF = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=64)
CASES = {  # name: (tokenizer kind, tokenizer.ggml flags, first id, last id) — llama: <s> = 1, </s> = 2
    "llama-add-bos": ("llama", {"add_bos_token": True}, 1, None),
    "llama-no-flag": ("llama", {}, 1, None),  # llama.cpp and transformers add BOS to sentencepiece by default
    "llama-eos-only": ("llama", {"add_bos_token": False, "add_eos_token": True}, None, 2),
    "gpt2-add-bos": ("gpt2", {"add_bos_token": True}, "eot", None),
    "gpt2-no-eot": ("gpt2-no-eot", {}, None, None),
}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ATTNLAB_GGUF_CACHE", str(tmp_path_factory.getbasetemp() / "gguf-tokens-cache"))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = {}
    for name, (kind, flags, _, _) in CASES.items():
        folder = tmp_path_factory.mktemp(name)
        out[name] = G.write_gguf(folder / "m.gguf", "llama", {}, tokenizer=kind, tokenizer_extra=flags, **CONF)[0]
    return out


def _theirs(path, text=TEXT):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)(text).input_ids


@pytest.mark.parametrize("name", list(CASES))
def test_ids_equal_transformers_gguf_tokenizer(files, name):
    kind, _, first, last = CASES[name]
    path = files[name]
    lm = al.load(str(path))
    ours, theirs = lm.encode(TEXT).ids[0].tolist(), _theirs(path)
    assert ours == theirs
    body = G.sentencepiece_tokens() if kind == "llama" else G.byte_level_tokens(G.F.bpe_tokenizer(), kind == "gpt2")[0]
    if first is not None:
        assert ours[0] == (body.index(G.F.EOT) if first == "eot" else first)
    else:
        assert ours[0] >= 3  # a word piece, not a special token
    if last is not None:
        assert ours[-1] == last and ours.count(last) == 1
    assert max(ours) < lm.cfg.vocab_size


def test_byte_level_without_endoftext_loads(files):
    """transformers' byte-level conversion adds GPT-2's `<|endoftext|>`; the file has no embedding for it."""
    lm = al.load(str(files["gpt2-no-eot"]))
    n = len(G.byte_level_tokens(G.F.bpe_tokenizer(), with_eot=False)[0])
    assert lm.cfg.vocab_size == n and lm.tokenizer.vocab_size == n
    assert G.F.EOT not in lm.tokenizer.tok.get_vocab(with_added_tokens=True)
    assert within_tolerance(compare_gguf(str(files["gpt2-no-eot"]), TEXT, greedy_tokens=4))


def test_compare_hf_reports_tokens_from_each_side(files, capsys):
    report = compare_gguf(str(files["llama-add-bos"]), TEXT, greedy_tokens=4)
    assert report["tokens_equal"] is True and report["first_token_difference"] is None
    assert within_tolerance(report)
    assert main(["compare-hf", "--model", str(files["llama-add-bos"]), "--text", TEXT]) == 0
    assert "tokens            equal" in capsys.readouterr().out


def test_compare_hf_fails_on_a_tokenizer_difference(files, monkeypatch, capsys, tmp_path):
    """Without the BOS rule (the old converter) compare-hf must fail, naming position 0 and both ids."""
    monkeypatch.setattr(gguf_tokenizer, "bos_eos_template", lambda bos, eos, tok: tok.post_processor)
    monkeypatch.setenv("ATTNLAB_GGUF_CACHE", str(tmp_path / "old-cache"))
    report = compare_gguf(str(files["llama-add-bos"]), TEXT, greedy_tokens=4)
    assert report["tokens_equal"] is False and not within_tolerance(report)
    assert report["first_token_difference"]["position"] == 0 and report["first_token_difference"]["transformers"] == 1
    assert main(["compare-hf", "--model", str(files["llama-add-bos"]), "--text", TEXT]) == 1
    out = capsys.readouterr().out
    assert "differ at position 0" in out and "transformers 1" in out and "FAIL" in out


def test_refusal_names_the_file_not_a_temporary_folder(tmp_path):
    """More tokens than embeddings is refused — said of the .gguf the user gave, not of the converted folder."""
    from attnlab.model.gguf.reader import GGUFError

    path = G.write_gguf(tmp_path / "short.gguf", "llama", {}, tokenizer="llama", n_embeddings=300, **CONF)[0]
    with pytest.raises(GGUFError) as e:
        al.load(str(path))
    msg = str(e.value)
    assert msg == f"short.gguf: the tokenizer has {len(G.sentencepiece_tokens())} tokens but the model only 300 embeddings"
    assert "config.json" not in msg and "/" not in msg


def test_a_tokenizer_transformers_cannot_build_is_a_note(tmp_path):
    """tokenizer_config.json naming a class transformers lacks: the token check says why, it does not crash."""
    from attnlab.model.parity_inputs import token_report

    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "NoSuchTokenizer"}')
    report = token_report([1, 2], tmp_path, "the cat")
    assert report["tokens_equal"] is None and report["tokens_note"].startswith("transformers' tokenizer failed: ")


def test_compare_hf_when_transformers_cannot_load_the_file(tmp_path, capsys):
    """A "mistral" architecture file (ours loads it; gguf-py, so transformers, does not know it): one line, exit 2."""
    path = G.write_gguf(tmp_path / "mis.gguf", "mistral", {}, **CONF)[0]
    assert al.load(str(path)).family == "mistral"
    assert main(["compare-hf", "--model", str(path), "--text", TEXT]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnlab: error: transformers' GGUF loader cannot load mis.gguf (NotImplementedError: ")
    assert err.endswith("nothing to compare with") and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize("pre,flag,bos", [("llama-bpe", None, True), ("tekken", None, True), ("llama-bpe", False, False),
                                          ("qwen2", None, False), ("gpt2", None, False)])
def test_byte_level_bos_default_is_llama_cpps(tmp_path, pre, flag, bos):
    """No add_bos_token flag: llama.cpp adds BOS for Llama 3's "llama-bpe" (and the other pre types it lists), as
    the model was trained; transformers' GGUF tokenizer does not, so there the two differ by that one token."""
    extra = {} if flag is None else {"add_bos_token": flag}
    path = G.write_gguf(tmp_path / "m.gguf", "llama", {}, tokenizer_extra=extra, metadata={"tokenizer.ggml.pre": pre},
                        **CONF)[0]
    ours, theirs = al.load(str(path)).encode(TEXT).ids[0].tolist(), _theirs(path)
    eot = G.byte_level_tokens(G.F.bpe_tokenizer())[0].index(G.F.EOT)  # the fixture's BOS id
    assert ours == ([eot] + theirs if bos else theirs)  # transformers adds no BOS here, with or without the flag
    assert ours.count(eot) == int(bos) and theirs.count(eot) == 0


@pytest.mark.parametrize("prefix", [False, True])
def test_sentencepiece_space_prefix_as_llama_cpp(tmp_path, prefix):
    """tokenizer.ggml.add_space_prefix false: no "▁" before the text, as llama.cpp reads it (transformers' GGUF
    tokenizer ignores the key and always puts one there); true reads as both do."""
    path = G.write_gguf(tmp_path / "m.gguf", "llama", {}, tokenizer="llama", tokenizer_extra={"add_space_prefix": prefix},
                        **CONF)[0]
    lm = al.load(str(path))
    ids = lm.encode("the cat").ids[0].tolist()
    vocab = G.sentencepiece_tokens()
    want = ["<s>", "▁the", "▁cat"] if prefix else ["<s>", "t", "h", "e", "▁cat"]
    assert ids == [vocab.index(t) for t in want]
    assert _theirs(path, "the cat") == [vocab.index(t) for t in ("<s>", "▁the", "▁cat")]
    assert lm.tokenizer.tok.decode(ids, skip_special_tokens=True) == "the cat"
    report = compare_gguf(str(path), "the cat", greedy_tokens=2)
    assert report["tokens_equal"] is prefix and report["max_abs_logits"] == 0
    assert ("add_space_prefix=false" in report.get("tokens_note", "")) is not prefix


def test_compare_hf_says_why_a_llama_bpe_file_differs_at_position_0(tmp_path, capsys):
    path = G.write_gguf(tmp_path / "m.gguf", "llama", {}, metadata={"tokenizer.ggml.pre": "llama-bpe"}, **CONF)[0]
    report = compare_gguf(str(path), TEXT, greedy_tokens=4)
    assert report["tokens_equal"] is False and report["first_token_difference"]["position"] == 0
    assert report["max_abs_logits"] == 0  # the model itself is read the same; only the ids differ
    assert main(["compare-hf", "--model", str(path), "--text", TEXT]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("tokens"))
    assert line.endswith("ours starts with BOS, which llama.cpp adds for tokenizer.ggml.pre 'llama-bpe' when the "
                         "file has no add_bos_token flag; transformers' GGUF tokenizer leaves it out")
