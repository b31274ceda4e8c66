"""Hugging Face folders → our model: numbers equal to transformers under every backend, tokens,
over-length input, and the safety cases (pickles, unknown families, bad paths, corrupt weights)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.model import parity as compare  # noqa: E402
from attnlab.model.checkpoint import CheckpointError  # noqa: E402
from attnlab.model.hf.load import load_hf_folder  # noqa: E402
from attnlab.model.inputs import InputError  # noqa: E402
from attnlab.model.parity import TOL_ATTENTION, TOL_HIDDEN, TOL_LOGITS, compare_models, load_transformers  # noqa: E402
from attnlab.model.registry import load  # noqa: E402

from tests import hf_fixtures as F  # noqa: E402

pytest.importorskip("transformers")
BACKENDS = ("eager", "sdpa", "flash")
TEXT = "the cat sat on the mat"
PAIR = "the dog ran ."


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    out = {name: F.build("gpt2", name, root) for name in F.GPT2_SHAPES}
    out.update({name: F.build("bert", name, root) for name in F.BERT_SHAPES})
    return out


def _copy(folders, name, tmp_path) -> Path:
    dst = tmp_path / name
    shutil.copytree(folders[name], dst)
    return dst


# -- numbers -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(F.GPT2_SHAPES) + list(F.BERT_SHAPES))
def test_equal_to_transformers_every_backend(folders, name):
    lm = load_hf_folder(folders[name])
    hf = load_transformers(lm)
    gpt2 = name.startswith("gpt2")
    inputs = lm.encode(TEXT) if gpt2 else lm.encode("the cat sat", pair=PAIR)
    if not gpt2:
        assert inputs.type_ids is not None and inputs.type_ids.max() == 1
    for backend in BACKENDS:
        r = compare_models(lm, hf, inputs, backend=backend)
        assert r["max_abs_hidden"] <= TOL_HIDDEN, (backend, r)
        assert r["max_abs_attention"] <= TOL_ATTENTION, (backend, r)
        assert (r["n_layers"], r["n_heads"]) == (lm.cfg.n_layers, lm.cfg.n_heads)
        if gpt2 or lm.cfg.output_head_kind == "mlm":
            assert r["max_abs_logits"] <= TOL_LOGITS, (backend, r)
        else:
            assert r["max_abs_logits"] is None
        assert r["greedy_equal"] is (True if gpt2 else None), (backend, r)
        assert compare.within_tolerance(r)


def test_greedy_twenty_tokens(folders):
    lm = load_hf_folder(folders["gpt2-3heads-bpe"])
    hf = load_transformers(lm)
    ids = lm.encode("the cat").ids
    assert ids.shape[1] + 20 <= lm.cfg.max_len  # the full 20 tokens fit
    for backend in BACKENDS:
        assert compare.greedy_equal(lm, hf, ids, 20, backend)
    all_ids, labels = lm.generate("the cat", 20)
    assert len(all_ids) == ids.shape[1] + 20 or all_ids[-1] == lm.tokenizer.eos_id
    assert len(labels) == len(all_ids)


def test_config_facts(folders):
    lm = load_hf_folder(folders["gpt2-5heads-ctx12-words"], name="tiny", source="here")
    assert (lm.name, lm.source, lm.family, lm.arch) == ("tiny", "here", "gpt2", "decoder")
    info = lm.info()
    assert (info["layers"], info["heads"], info["context"], info["kind"]) == (1, 5, 12, "decoder")
    bert = load(str(folders["bert-mlm-3heads"]))  # through the registry, by path
    assert (bert.family, bert.cfg.output_head_kind, bert.cfg.norm, bert.info()["kind"]) == ("bert", "mlm", "post", "encoder")
    assert load_hf_folder(folders["bert-base-5heads-ctx12"]).cfg.output_head_kind == "none"


# -- tokens ------------------------------------------------------------------------------------------------
def test_gpt2_labels_byte_parts_and_eos(folders):
    lm = load_hf_folder(folders["gpt2-3heads-bpe"])
    assert lm.tokenizer.eos_id == lm.tokenizer.bos_id == F.bpe_tokenizer().token_to_id(F.EOT)
    inp = lm.encode("café the cat<|endoftext|>")
    assert inp.tokens[3:5] == ["é(1/2)", "é(2/2)"]  # two byte-level tokens of one character
    assert inp.tokens[-1] == "<|endoftext|>"
    assert inp.ids[0, -1].item() == lm.tokenizer.eos_id


def test_bert_labels_specials_and_types(folders):
    lm = load_hf_folder(folders["bert-mlm-3heads"])
    inp = lm.encode("The cat sat.", pair="a dog [MASK]")
    assert inp.tokens == ["[CLS]", "The", "cat", "sat", ".", "[SEP]", "a", "dog", "[MASK]", "[SEP]"]
    assert inp.type_ids.tolist() == [[0] * 6 + [1] * 4]
    assert lm.tokenizer.mask_id == inp.ids[0, 8].item()


def test_tokenizer_from_vocab_files(folders, tmp_path):
    """Without tokenizer.json, transformers builds the fast tokenizer from the vocabulary files, locally."""
    g = _copy(folders, "gpt2-3heads-bpe", tmp_path)
    (g / "tokenizer.json").unlink()
    F.bpe_tokenizer().model.save(str(g))  # vocab.json + merges.txt
    b = _copy(folders, "bert-mlm-3heads", tmp_path)
    (b / "tokenizer.json").unlink()
    vocab = sorted(F.word_tokenizer(True).get_vocab().items(), key=lambda kv: kv[1])
    (b / "vocab.txt").write_text("".join(t + "\n" for t, _ in vocab))
    for folder, text, pair in ((g, "café the cat<|endoftext|>", None), (b, "the cat sat .", "a dog")):
        a = load_hf_folder(folder).encode(text, pair=pair)
        ref = load_hf_folder(folders[folder.name]).encode(text, pair=pair)
        assert a.ids.tolist() == ref.ids.tolist() and a.tokens == ref.tokens


def test_over_length_input(folders):
    for name, n in (("gpt2-5heads-ctx12-words", 12), ("bert-base-5heads-ctx12", 12)):
        lm = load_hf_folder(folders[name])
        with pytest.raises(InputError, match=f"this model's context is {n} tokens"):
            lm.encode(" ".join(["the cat"] * 10))
        with pytest.raises(InputError, match="context is"):
            lm.run(" ".join(["the cat"] * 10))


def test_saved_truncation_does_not_hide_over_length(folders, tmp_path):
    """A tokenizer.json that truncates (like MiniLM's, at 128) must not silently cut the input."""
    f = _copy(folders, "bert-mlm-3heads", tmp_path)
    tok = F.word_tokenizer(True)
    tok.enable_truncation(8)
    tok.enable_padding(length=16)
    tok.save(str(f / "tokenizer.json"))
    lm = load_hf_folder(f)
    assert len(lm.encode("the cat sat on the mat").tokens) == 8  # no padding, no truncation
    with pytest.raises(InputError, match="context is 32 tokens"):
        lm.encode(" ".join(["the cat"] * 20))


def test_sharded_safetensors(folders, tmp_path):
    """model.safetensors.index.json + shards (how large checkpoints are saved) load like one file."""
    from safetensors.torch import load_file, save_file

    f = _copy(folders, "gpt2-untied-1head", tmp_path)
    state = load_file(str(f / "model.safetensors"))
    (f / "model.safetensors").unlink()
    keys = sorted(state)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for name, ks in shards.items():
        save_file({k: state[k] for k in ks}, str(f / name))
    weight_map = {k: name for name, ks in shards.items() for k in ks}
    (f / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    lm = load_hf_folder(f)
    r = compare_models(lm, load_transformers(load_hf_folder(folders["gpt2-untied-1head"])), lm.encode(TEXT))
    assert compare.within_tolerance(r), r
    weight_map[keys[0]] = "../elsewhere.safetensors"
    (f / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(CheckpointError, match="not a safetensors file in the folder"):
        load_hf_folder(f)


# -- safety ------------------------------------------------------------------------------------------------
@pytest.fixture
def no_unpickling(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("something tried to unpickle")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)


def test_pickle_only_folder_refused(folders, tmp_path, no_unpickling):
    f = _copy(folders, "gpt2-3heads-bpe", tmp_path)
    (f / "model.safetensors").unlink()
    (f / "pytorch_model.bin").write_bytes(pickle.dumps({"not": "loaded"}))
    with pytest.raises(CheckpointError) as e:
        load_hf_folder(f)
    msg = str(e.value)
    assert "pytorch_model.bin" in msg and "pickle" in msg and "arbitrary code" in msg
    assert "safe_serialization=True" in msg  # how to convert
    with pytest.raises(CheckpointError, match="pickle"):
        load(str(f))


def test_unknown_model_type(folders, tmp_path):
    f = _copy(folders, "gpt2-3heads-bpe", tmp_path)
    conf = json.loads((f / "config.json").read_text())
    conf.update(model_type="falcon")  # no converter: transformers' view, which refuses weights that do not fit
    (f / "config.json").write_text(json.dumps(conf))
    with pytest.raises(CheckpointError, match="describes 6,627,614,848 parameters of FalconForCausalLM but the "
                                              "weights hold 22,656: they do not match model_type 'falcon'"):
        load_hf_folder(f)
    conf.update(model_type="no-such-family")
    (f / "config.json").write_text(json.dumps(conf))
    with pytest.raises(CheckpointError, match="transformers cannot read config.json"):
        load_hf_folder(f)


@pytest.mark.parametrize("extra", [{"auto_map": {"AutoModel": "modeling_evil.Model"}}, {"trust_remote_code": True}])
def test_remote_code_config_refused(folders, tmp_path, extra):
    f = _copy(folders, "gpt2-3heads-bpe", tmp_path)
    conf = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**conf, "model_type": "llama", **extra}))
    with pytest.raises(CheckpointError, match="own Python code .auto_map / trust_remote_code.; attnlab never runs"):
        load_hf_folder(f)


def test_missing_path_and_file(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_hf_folder(tmp_path / "nope")
    with pytest.raises(InputError, match=r"the folder .*nope does not exist; give a model folder with config.json, or a name \(lecture-decoder, "):
        load(str(tmp_path / "nope"))
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"x")
    with pytest.raises(CheckpointError, match="is a file, not a folder"):
        load_hf_folder(file)
    with pytest.raises(InputError, match="not a folder"):
        load(str(file))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="no config.json"):
        load_hf_folder(empty)


def test_corrupt_or_truncated_safetensors(folders, tmp_path):
    f = _copy(folders, "bert-mlm-3heads", tmp_path)
    data = (f / "model.safetensors").read_bytes()
    (f / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_hf_folder(f)
    (f / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_hf_folder(f)


@pytest.mark.parametrize("change, match", [
    ({"n_positions": 50}, r"wpe\.weight has shape \(40, 24\), config\.json needs \(50, 24\)"),
    ({"n_layer": 3}, r"lacks h\.2\."),
    ({"n_layer": 1}, r"unexpected weights h\.1\."),
    ({"vocab_size": 200}, r"wte\.weight has shape"),
    ({"n_head": 5}, "not divisible"),
])
def test_config_weight_mismatch(folders, tmp_path, change, match):
    f = _copy(folders, "gpt2-3heads-bpe", tmp_path)
    conf = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**conf, **change}))
    with pytest.raises(CheckpointError, match=match):
        load_hf_folder(f)


def test_tokenizer_bigger_than_model(folders, tmp_path):
    f = _copy(folders, "gpt2-5heads-ctx12-words", tmp_path)
    F.bpe_tokenizer().save(str(f / "tokenizer.json"))  # 300 tokens for a ~35-token model
    with pytest.raises(CheckpointError, match="the tokenizer has 300 tokens"):
        load_hf_folder(f)


def test_hub_refused_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError, match="HF_HUB_OFFLINE"):
        load("someone/some-model")


def test_never_trust_remote_code():
    src = "".join(p.read_text() for p in (Path(__file__).parents[2] / "model" / "hf").glob("*.py"))
    assert "trust_remote_code=True" not in src


# -- command -----------------------------------------------------------------------------------------------
def test_cli_compare_hf_gpt2(folders, capsys):
    rc = main(["compare-hf", "--model", str(folders["gpt2-3heads-bpe"]), "--text", "the cat", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    assert set(out) == {"max_abs_logits", "max_abs_hidden", "max_abs_attention", "greedy_equal", "n_layers",
                        "n_heads", "tokens_equal", "first_token_difference"}
    assert out["tokens_equal"] is True and out["first_token_difference"] is None
    assert out["greedy_equal"] is True and (out["n_layers"], out["n_heads"]) == (2, 3)
    assert out["max_abs_logits"] <= TOL_LOGITS and out["max_abs_attention"] <= TOL_ATTENTION


def test_cli_compare_hf_exit_codes(folders, capsys, monkeypatch, tmp_path):
    bert = str(folders["bert-base-5heads-ctx12"])
    assert main(["compare-hf", "--model", bert, "--text", "the cat", "--pair", "a dog", "--backend", "sdpa"]) == 0
    assert "PASS" in capsys.readouterr().out
    monkeypatch.setattr(compare, "TOL_HIDDEN", -1.0)  # an impossible tolerance: reported as a failure
    assert main(["compare-hf", "--model", bert, "--text", "the cat", "--json"]) == 1
    capsys.readouterr()
    monkeypatch.undo()
    for argv in (["--model", str(tmp_path / "nope")], ["--model", "random-decoder"],
                 ["--model", bert, "--text", " ".join(["cat"] * 20)], ["--model", bert, "--text", ""]):
        assert main(["compare-hf", *argv, "--json"]) == 2, argv
        assert capsys.readouterr().err.startswith("attnlab: error:")


def test_generated_byte_level_tokens_get_readable_labels():
    from attnlab.model.tokenizer import HFTokenizer

    from tests.hf_fixtures import EOT, bpe_tokenizer

    tok = HFTokenizer(bpe_tokenizer())
    enc = tok.encode("é\nab")
    labels = [tok.label(i) for i in enc.ids]
    assert "Ã" not in "".join(labels) and "Ċ" not in "".join(labels)
    assert labels[-1] in ("b", "ab") and "⏎" in labels
    assert any(lab.startswith("<0x") for lab in labels) or "é" in labels
    assert tok.label(tok.tok.token_to_id(EOT)) == EOT
