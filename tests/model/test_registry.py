import pytest
import torch
from attnlab.model.checkpoint import CheckpointError, load_folder, save_folder
from attnlab.model.inputs import InputError
from attnlab.model.tokenizer import ByteTokenizer

import attnlab as al


def test_byte_tokenizer_labels_parts_of_characters():
    enc = ByteTokenizer().encode("aé😀 <b>")
    assert enc.ids[:4] == [256, 97, 0xC3, 0xA9]
    assert enc.labels[:4] == ["[BOS]", "a", "é(1/2)", "é(2/2)"]
    assert enc.labels[4:8] == ["😀(1/4)", "😀(2/4)", "😀(3/4)", "😀(4/4)"]
    assert enc.labels[8:] == ["␣", "<", "b", ">"]
    assert ByteTokenizer().decode(enc.ids) == "aé😀 <b>"
    tok = ByteTokenizer()
    assert [tok.label(i) for i in (65, 32, 10, 5, 127, 200, 256, 259)] == [
        "A", "␣", "⏎", "<0x05>", "<0x7F>", "<0xC8>", "[BOS]", "[MASK]"]


def test_random_models_are_deterministic():
    a, b = al.load("random-decoder"), al.load("random-decoder")
    for (ka, va), (kb, vb) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


def test_run_api_and_generate():
    lm = al.load("random-decoder")
    run = lm.run("abcabc", backend="flash")
    rec = run["blocks.0.attn"]
    assert run.tokens == ["[BOS]", "a", "b", "c", "a", "b", "c"]
    assert rec.pattern().shape == (4, 7, 7) and rec.backend == "flash"
    ids, labels = lm.generate("ab", 5)
    assert len(ids) == 8 and labels[:3] == ["[BOS]", "a", "b"]
    with pytest.raises(InputError, match="0 to 256"):
        lm.generate("ab", 10_000)
    with pytest.raises(InputError, match="does not generate"):
        al.load("random-encoder").generate("ab", 3)


def test_checkpoint_round_trip_and_errors(tmp_path):
    lm = al.load("random-decoder")
    folder = save_folder(lm.model, lm.cfg, tmp_path / "m")
    model, cfg, meta = load_folder(folder)
    assert cfg == lm.cfg
    x = torch.tensor([[1, 2, 3]])
    assert torch.equal(model(x).logits, lm.model(x).logits)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_folder(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_folder(folder)


def test_unknown_name_and_bad_paths(tmp_path):
    with pytest.raises(InputError, match="unknown model 'gpt-99'"):
        al.load("gpt-99")
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        al.load(str(f))


def test_model_roots_confine_typed_folders(tmp_path, monkeypatch):
    lm = al.load("random-encoder")
    inside = save_folder(lm.model, lm.cfg, tmp_path / "allowed" / "enc")
    (inside / "tokenizer.json").write_text("{}")
    outside = save_folder(lm.model, lm.cfg, tmp_path / "elsewhere" / "enc")
    monkeypatch.setenv("ATTNLAB_MODEL_ROOTS", str(tmp_path / "allowed"))
    from attnlab.model.registry import model_roots

    roots = model_roots()
    assert roots == [(tmp_path / "allowed").resolve()]
    with pytest.raises(InputError, match="outside the allowed model folders"):
        al.load(str(outside), roots=roots)
    with pytest.raises(InputError, match="outside the allowed"):
        al.load(str(tmp_path / "allowed" / ".." / "elsewhere" / "enc"), roots=roots)
    with pytest.raises(CheckpointError):  # inside the root: it is read (and this tokenizer.json is bad)
        al.load(str(inside), roots=roots)
