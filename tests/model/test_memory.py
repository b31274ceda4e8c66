"""model/memory.py with real numbers: a Qwen2-0.5B-shaped config (built on the meta device, nothing
allocated), the formula term by term, /proc/meminfo and cgroup files written in tmp_path, and the refusal."""

from __future__ import annotations

import pytest
import torch
from attnlab.model import memory
from attnlab.model.config import ModelConfig
from attnlab.model.families.llama import llama_config
from attnlab.model.inputs import InputError
from attnlab.model.registry import RANDOM, random_model

QWEN2_05B = dict(  # Qwen/Qwen2-0.5B's config.json (the fields the converter reads)
    model_type="qwen2", vocab_size=151936, hidden_size=896, num_attention_heads=14, num_key_value_heads=2,
    num_hidden_layers=24, intermediate_size=4864, max_position_embeddings=32768, tie_word_embeddings=True,
    rope_theta=1000000.0, rms_norm_eps=1e-6, use_sliding_window=False, hidden_act="silu")


@pytest.fixture(scope="module")
def qwen():
    return llama_config(QWEN2_05B)


def test_qwen2_05b_parameters_exact(qwen):
    v, d, f, L, hkv, dh = 151936, 896, 4864, 24, 2, 64
    per_layer = (d * d + d) + 2 * (d * hkv * dh + hkv * dh) + d * d + 3 * d * f + 2 * d  # q, k, v (+biases), o, mlp, norms
    expected = v * d + L * per_layer + d  # tied embedding once, final norm
    assert expected == 494_032_768  # the count Qwen publishes for Qwen2-0.5B
    assert memory.n_params(qwen) == expected


def test_weights_in_float32_and_bfloat16(qwen):
    fp32, bf16 = memory.estimate_bytes(qwen, 128, torch.float32), memory.estimate_bytes(qwen, 128, "bfloat16")
    assert fp32["weights"] == 494_032_768 * 4 and round(fp32["weights"] / 1e9, 2) == 1.98
    assert bf16["weights"] == 494_032_768 * 2 and round(bf16["weights"] / 1e9, 2) == 0.99
    assert bf16["dtype"] == "bfloat16" and memory.estimate_bytes(qwen, 8, "torch.float16")["dtype"] == "float16"
    assert fp32["total"] == fp32["weights"] + fp32["activations"]
    assert fp32["load_peak"] == 494_032_768 * 5 and bf16["load_peak"] == 494_032_768 * 5 // 2  # 1.25 × weights


def test_activation_terms(qwen):
    t, L, H, d, hkv, V, F = 1000, 24, 14, 64, 2, 151936, 4864
    e = memory.estimate_bytes(qwen, t, torch.float32)
    assert e["patterns"] == L * H * t * t * 4 == 1_344_000_000  # 1.34 GB of float32 patterns at T = 1,000
    assert e["qk"] == L * t * (H * d + hkv * d) * 4
    assert e["masks"] == t * t
    assert e["logits"] == t * V * 12
    assert e["work"] == 2 * H * t * t * 4 + 4 * t * F * 4
    assert e["activations"] == sum(e[k] for k in ("qk", "patterns", "work", "masks", "logits"))
    fused = memory.estimate_bytes(qwen, t, torch.float32, backend="sdpa")
    assert fused["patterns"] == 0 and fused["qk"] == e["qk"] and fused["work"] == 4 * t * 896 * 4 + 4 * t * F * 4
    # patterns grow as T², q/k as T
    e2 = memory.estimate_bytes(qwen, 2 * t, torch.float32)
    assert e2["patterns"] == 4 * e["patterns"] and e2["qk"] == 2 * e["qk"]


def test_encdec_and_encoder_sites():
    for name in RANDOM:
        cfg = RANDOM[name]
        lm = random_model(name)
        assert memory.n_params(cfg) == sum(p.numel() for p in lm.model.parameters())
        run = lm.run("hello", "bonjour" if cfg.arch == "encdec" else None)
        assert memory.n_sites(cfg)[0] == len(run.records)
    enc = memory.estimate_bytes(RANDOM["random-encoder"], 10)
    assert enc["logits"] == 10 * 260 * 12  # its MLM head predicts tokens
    assert memory.estimate_bytes(ModelConfig(arch="encoder"), 10)["logits"] == 0


def test_estimate_covers_a_real_capture():
    """The stored patterns and q/k of a real eager run are exactly the estimate's 'patterns' and 'qk' terms."""
    lm = random_model("random-decoder")
    run = lm.run("attention is what the model pays")
    t = len(run.tokens)
    e = memory.estimate_bytes(lm.cfg, t)
    assert sum(r.pattern_full.nbytes for r in run.records.values()) == e["patterns"]
    assert sum(r.q.nbytes + r.k.nbytes for r in run.records.values()) == e["qk"]


def test_available_bytes_meminfo_and_cgroups(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemFree:   100 kB\nMemAvailable:   22089516 kB\n")
    none = tmp_path / "no-cgroup"
    assert memory.available_bytes(meminfo=meminfo, cgroup=none) == 22089516 * 1024
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text("4000000000\n")
    (v2 / "memory.current").write_text("1000000000\n")
    assert memory.available_bytes(meminfo=meminfo, cgroup=v2) == 3_000_000_000  # the container's limit is lower
    (v2 / "memory.max").write_text("max\n")
    assert memory.available_bytes(meminfo=meminfo, cgroup=v2) == 22089516 * 1024
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("2000000000")
    (v1 / "memory.usage_in_bytes").write_text("500000000")
    assert memory.available_bytes(meminfo=meminfo, cgroup=v1.parent) == 1_500_000_000
    (v1 / "memory.limit_in_bytes").write_text(str(2**63 - 4096))  # v1's "no limit"
    assert memory.available_bytes(meminfo=meminfo, cgroup=v1.parent) == 22089516 * 1024
    assert memory.available_bytes(meminfo=tmp_path / "missing", cgroup=none) is None
    assert memory.available_bytes() is None or memory.available_bytes() > 0  # this machine


def test_check_fits_refuses_with_one_clear_line(qwen):
    est = memory.check_fits(qwen, 128, torch.float32, available=4_000_000_000)
    assert est["total"] == memory.estimate_bytes(qwen, 128)["total"]
    assert memory.check_fits(qwen, 128, torch.bfloat16, available=1_500_000_000)["weights"] == 988_065_536
    with pytest.raises(InputError) as e:
        memory.check_fits(qwen, 128, torch.float32, available=2_400_000_000)  # the fp32 weights fit, the run not
    msg = str(e.value)
    assert msg == ("this model needs about 2.26 GB at 128 tokens in float32 but only 2.40 GB is free; "
                   "load it in bfloat16 or shorten the text")
    assert "\n" not in msg
    with pytest.raises(InputError, match=r"needs about 2\.26 GB .* 2\.00 GB is free; load it in bfloat16$"):
        memory.check_fits(qwen, 128, "float32", available=2_000_000_000)  # fp32 weights alone do not fit
    with pytest.raises(InputError, match=r"0\.50 GB is free; pick a smaller model$"):
        memory.check_fits(qwen, 128, "bf16", available=500_000_000)
    with pytest.raises(InputError, match=r"1\.50 GB is free; load it in bfloat16 and shorten the text$"):
        memory.check_fits(qwen, 4096, "float32", available=1_500_000_000)
    # 5.6 GB of eager patterns at 2,048 tokens; sdpa keeps q and k only
    assert memory.estimate_bytes(qwen, 2048, "bf16")["patterns"] == 24 * 14 * 2048**2 * 4
    with pytest.raises(InputError, match=r"2,048 tokens in bfloat16 .*; use the sdpa backend or shorten the text$"):
        memory.check_fits(qwen, 2048, "bf16", available=5_000_000_000)
    assert memory.check_fits(qwen, 128, torch.float32, available=None)  # this machine: ~2.3 GB
    with pytest.raises(InputError, match="unknown dtype"):
        memory.estimate_bytes(qwen, 8, "int3")
    with pytest.raises(InputError, match="unknown backend"):
        memory.estimate_bytes(qwen, 8, backend="magic")


def test_fmt_gb():
    assert memory.fmt_gb(1_976_131_072) == "1.98 GB"
    assert memory.fmt_gb(12_000_000) == "12 MB"


def test_weights_loaded_counts_only_the_activations(qwen):
    """Before a run of a model already in memory: the free memory need only hold the activations."""
    act = memory.estimate_bytes(qwen, 128)["activations"]  # 0.28 GB at 128 tokens
    assert memory.check_fits(qwen, 128, available=int(act / 0.9) + 1, weights_loaded=True)
    with pytest.raises(InputError) as e:
        memory.check_fits(qwen, 2048, available=1_000_000_000, weights_loaded=True)
    assert str(e.value).startswith("running this model on 2,048 tokens needs about ")
    assert "more (float32, eager) but only 1.00 GB is free; " in str(e.value)


# -- a folder's config before loading it --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from tests.hf_fixtures import build

    root = tmp_path_factory.mktemp("hf")
    return {name: build(kind, name, root) for kind, name in (
        ("gpt2", "gpt2-3heads-bpe"), ("bert", "bert-mlm-3heads"), ("bert", "bert-base-5heads-ctx12"),
        ("llama", "qwen2-gqa4-bias-tied"), ("llama", "mistral-window5-mqa"), ("llama", "llama-gqa2-tied-theta"))}


def test_folder_config_is_what_loads(folders):
    from attnlab.model.hf.load import load_hf_folder
    from attnlab.model.registry import BUNDLED_DIR, load

    for name, folder in folders.items():
        lm = load_hf_folder(folder)
        cfg = memory.folder_config(folder)
        assert cfg == lm.cfg, name
        assert memory.n_params(cfg) == sum(p.numel() for p in lm.model.parameters()), name
    for name in ("lecture-decoder", "lecture-encdec"):
        assert memory.folder_config(BUNDLED_DIR / name) == load(name).cfg
    assert memory.folder_config(folders["bert-mlm-3heads"]).output_head_kind == "mlm"
    assert memory.folder_config(folders["bert-base-5heads-ctx12"]).output_head_kind == "none"


def test_check_folder_fits(folders, tmp_path):
    from attnlab.model.checkpoint import CheckpointError

    folder = folders["qwen2-gqa4-bias-tied"]
    est = memory.check_folder_fits(folder, 16, "float32", available=10**9)
    assert est["n_params"] == memory.n_params(memory.folder_config(folder))
    with pytest.raises(InputError, match=r"^this model needs about \d+ MB at 64 tokens in float32 but only 1 MB"):
        memory.check_folder_fits(folder, 64, available=1_000_000)
    (tmp_path / "config.json").write_text('{"model_type": "gptj"}')
    with pytest.raises(CheckpointError, match="not supported"):
        memory.folder_config(tmp_path)
