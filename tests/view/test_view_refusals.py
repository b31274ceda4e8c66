"""Models a view cannot feed (audio, images, images with text) refused in one accurate line from config.json
alone, before transformers or any weight reads them; no "Loading weights" bar on any refusal; compare-hf on a
view says it is a view."""

from __future__ import annotations

import json
import shutil

import pytest
from attnlab.cli.main import main

from tests.view.fixtures import make_view_model


def _config(model_type: str) -> dict:
    """A tiny real config.json of `model_type` as transformers writes it."""
    import transformers as T

    small = {
        "whisper": lambda: T.WhisperConfig(d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                                           decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24,
                                           num_mel_bins=8, vocab_size=300,
                                           architectures=["WhisperForConditionalGeneration"]),
        "llava": lambda: T.LlavaConfig(architectures=["LlavaForConditionalGeneration"]),
        "swin": lambda: T.SwinConfig(image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2],
                                     window_size=4, architectures=["SwinForImageClassification"]),
    }[model_type]()
    return small.to_dict()


REFUSED = {"whisper": "reads audio", "llava": "reads images and text together", "swin": "reads images"}


@pytest.mark.parametrize("model_type", list(REFUSED))
def test_refused_before_any_weight_is_read(tmp_path, capfd, model_type):
    folder = tmp_path / model_type
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_config(model_type)))
    (folder / "model.safetensors").write_bytes(b"not safetensors: reading it would fail differently")
    capfd.readouterr()  # transformers' own notes while the config above was built
    for command in (["check", "--model", str(folder)], ["compare-hf", "--model", str(folder)],
                    ["capture", "--model", str(folder), "--text", "the cat", "--out", str(tmp_path / "run.npz")]):
        assert main(command) == 2, command
        out, err = capfd.readouterr()
        lines = err.strip().splitlines()
        assert len(lines) == 1 and out == "", (command, out, err)
        assert f"model_type {model_type!r}" in lines[0] and REFUSED[model_type] in lines[0], lines[0]
        assert "vit, deit, clip" in lines[0] and "Hugging Face checkpoint" not in lines[0]


def test_a_text_head_of_a_multimodal_config_is_not_refused():
    """A config with a vision_config that names a causal LM head (Gemma 3's text-only use) passes the check."""
    from attnlab.model.checkpoint import CheckpointError
    from attnlab.model.view.folder import refuse_unreadable

    refuse_unreadable(None, {"model_type": "gemma3", "architectures": ["Gemma3ForCausalLM"], "vision_config": {}})
    with pytest.raises(CheckpointError, match="model_type 'new_vlm' .* reads images and text together"):
        refuse_unreadable("x", {"model_type": "new_vlm", "architectures": ["NewVlmForConditionalGeneration"],
                                "vision_config": {}})
    refuse_unreadable(None, {"model_type": "gptj", "architectures": ["GPTJForCausalLM"]})
    with pytest.raises(CheckpointError, match="model_type 'whisper' reads audio"):  # no architectures: model_type
        refuse_unreadable("x", {"model_type": "whisper"})


def test_no_progress_bar_on_a_refusal_after_loading(tmp_path, capfd):
    folder = make_view_model("gptj", tmp_path / "gptj")
    (folder / "tokenizer.json").unlink()  # refused after transformers loaded the weights
    capfd.readouterr()
    assert main(["check", "--model", str(folder)]) == 2
    out, err = capfd.readouterr()
    assert err.strip().splitlines() == [f"attnlab: error: {folder} has no tokenizer files (tokenizer.json, "
                                        "vocab.txt or vocab.json + merges.txt)"]
    assert "Loading weights" not in out + err


def test_compare_hf_on_a_view_says_view(tmp_path, capfd):
    folder = make_view_model("falcon", tmp_path / "falcon")
    capfd.readouterr()
    assert main(["compare-hf", "--model", str(folder)]) == 2
    err = capfd.readouterr().err.strip()
    assert "runs as a transformers view (model_type 'falcon' has no converter)" in err and len(err.splitlines()) == 1
    shutil.rmtree(folder)
