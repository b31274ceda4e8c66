"""A config.json that leaves a key out (older checkpoints omit what their transformers version did not write) means
transformers' default for it, family by family (model/families/defaults.py): Mixtral's rope_theta 1e6 and
rms_norm_eps 1e-5, Phi's half rotary, GPT-NeoX's quarter rotary, Phi-3's rms_norm_eps 1e-5, Gemma 2's soft-caps
50 / 30 and window 4096, Gemma 3's RoPE bases 1e6 / 1e4 and five sliding layers in six, Mistral's window 4096, Marian's unscaled embeddings, T5's d_kv 64. Ours used the shared readers'
defaults instead: logits off by 0.31 (Mixtral rope_theta), 0.24 (GPT-NeoX), 0.21 (Phi), 0.74 (Marian), 4e-3
(Gemma 2), 1e-3 (Phi-3), 9e-4 (Mixtral eps), or a refusal (Gemma 2 without sliding_window)."""

from __future__ import annotations

import json

import pytest
from attnlab.model.families.defaults import DEFAULTS
from attnlab.model.hf.load import load_hf_folder

from tests import family_grid as G

transformers = pytest.importorskip("transformers")

ROPE = {"rope_theta": "rope_theta", "partial_rotary_factor": "partial_rotary_factor",
        "rotary_pct": "partial_rotary_factor"}  # keys transformers 5 keeps in rope_parameters
CASES = [(family, key) for family, keys in DEFAULTS.items() for key in keys]


# Gemma 3's keys that transformers 5 keeps elsewhere: (what config.json stores instead, where the config has it)
GEMMA3 = {"rope_theta": (("rope_parameters",), lambda c: c.rope_parameters["full_attention"]["rope_theta"]),
          "rope_local_base_freq": (("rope_parameters",), lambda c: c.rope_parameters["sliding_attention"]["rope_theta"]),
          "sliding_window_pattern": (("layer_types", "_sliding_window_pattern"), lambda c: c._sliding_window_pattern)}


def _stored(family, key):
    """The config.json keys that carry `key`."""
    if family == "gemma3_text" and key in GEMMA3:
        return GEMMA3[key][0]
    return ("rope_parameters",) if key in ROPE else (key,)


def _transformers_value(config, family, key):
    if family == "gemma3_text" and key in GEMMA3:
        return GEMMA3[key][1](config)
    return config.rope_parameters.get(ROPE[key]) if key in ROPE else getattr(config, key)


@pytest.mark.parametrize("family, key", CASES)
def test_a_key_left_out_reads_transformers_default(tmp_path, family, key):
    cls, conf = G.TINY[family]
    conf = dict(conf, **{"mistral": dict(sliding_window=4), "t5": dict(d_kv=64)}.get(family, {}))
    folder = G.make(tmp_path / family, family, cls, **conf)
    stored = json.loads((folder / "config.json").read_text())
    for k in _stored(family, key):
        stored.pop(k)
    (folder / "config.json").write_text(json.dumps(stored))
    theirs = transformers.AutoConfig.from_pretrained(str(folder))
    assert _transformers_value(theirs, family, key) == DEFAULTS[family][key]  # the table is transformers' default
    worst = G.assert_parity(G.parity(folder, backends=("eager",)))
    assert worst["max_abs_attention"] <= 1e-6 and worst["max_abs_logits"] <= 1e-5, worst
    if key == "sliding_window":  # 4096 ≫ the text here: the window is read, not only harmless
        assert load_hf_folder(folder).cfg.sliding_window == 4096


def test_a_key_set_to_null_stays_null(tmp_path):
    """Only a missing key takes the default: Gemma 2 with its soft-caps set to null has none."""
    cls, conf = G.TINY["gemma2"]
    folder = G.make(tmp_path / "g2", "gemma2", cls, **dict(conf, attn_logit_softcapping=None,
                                                            final_logit_softcapping=None))
    cfg = load_hf_folder(folder).cfg
    assert cfg.attn_softcap is None and cfg.logit_softcap is None
    G.assert_parity(G.parity(folder, backends=("eager",)))
