"""Probes that run several inputs, interventions or path points in one batched forward give each row what a run of
its own gives: Readout.run_from with each row's own source (an encoder–decoder), head ablation sweeps, circuit runs
and gradients, EAP-IG-activations' staircases of any size, integrated gradients of different images in one pass, and
the experts' specialisation table over padded batches (an encoder too). Inputs share shapes and differ in content."""

import numpy as np
import pytest
import torch
from attnlab.analysis.circuit import act_paths
from attnlab.analysis.circuit.find import keep_masks, setup
from attnlab.analysis.circuit.scores import alphas
from attnlab.analysis.faithfulness.cases import make_cases
from attnlab.analysis.probes.ablation import ablate_head, head_sweep
from attnlab.analysis.probes.attributions import integrated_gradients, integrated_gradients_many
from attnlab.analysis.probes.patching import _Setup, activation_patching
from attnlab.analysis.probes.routing import lecture_classes, specialisation
from attnlab.model.config import ModelConfig
from attnlab.model.inputs import InputError
from attnlab.model.lecture import decoder_examples
from attnlab.model.lecture.shapes import shape_images
from attnlab.model.loaded import LoadedModel
from attnlab.model.registry import load
from attnlab.model.transformer import build_model

from tests.analysis.interp_models import tiny_llama
from tests.analysis.test_relevance import tiny as relevance_tiny


def tiny(arch: str, **kw) -> LoadedModel:
    """A float64 model with large random weights (peaked patterns), byte tokens."""
    return relevance_tiny(arch, 2, **{"vocab_size": 260, **kw})


# -- Readout.run_from of an encoder–decoder's decoder ------------------------------------------------------------
def _ends(lm, inp):
    """(stream entering decoder block 0 [1, T, D], the final stream [1, T, D], the encoder's output [1, S, D])."""
    ro = lm.readout()
    t = lm.forward(inp, names=[ro.resid_names[0], ro.resid_names[-1]], records=False).capture.tensor
    with torch.no_grad():
        memory = lm.model.encode(inp.src_ids)
    return t(ro.resid_names[0]), t(ro.resid_names[-1]), memory


def test_run_from_reads_each_rows_own_source_lecture_encdec():
    lm = load("lecture-encdec")
    cases = [c for c in make_cases(lm, 40, 0) if c.inputs.src_ids.shape[1] == 8 and c.inputs.ids.shape[1] == 9]
    a, b = cases[0].inputs, cases[1].inputs
    assert a.src_tokens != b.src_tokens  # one length, two sources
    (xa, fa, ma), (xb, fb, mb) = _ends(lm, a), _ends(lm, b)
    with torch.no_grad():
        both = lm.readout().run_from(0, torch.cat([xa, xb]), memory=torch.cat([ma, mb]))  # [2, T, D]
    np.testing.assert_allclose(both.numpy(), torch.cat([fa, fb]).numpy(), atol=1e-5, rtol=0)
    assert (fa - fb).abs().max() > 0.1


def test_run_from_with_sources_of_two_lengths_padded():
    lm = tiny("encdec")
    a, b = lm.encode("the cat", "uvw st"), lm.encode("the dog", "pq")  # sources of 7 and 3 tokens
    (xa, fa, ma), (xb, fb, mb) = _ends(lm, a), _ends(lm, b)
    memory = torch.zeros(2, ma.shape[1], ma.shape[2], dtype=ma.dtype)  # [2, S, D]: b's source padded
    memory[0], memory[1, :mb.shape[1]] = ma[0], mb[0]
    real = torch.zeros(2, ma.shape[1], dtype=torch.bool)
    real[0], real[1, :mb.shape[1]] = True, True
    with torch.no_grad():
        both = lm.readout().run_from(0, torch.cat([xa, xb]), memory=memory, memory_mask=real)
        alone = lm.readout().run_from(0, xb, memory=mb)
    np.testing.assert_allclose(both.numpy(), torch.cat([fa, fb]).numpy(), atol=1e-10, rtol=0)
    np.testing.assert_allclose(alone.numpy(), fb.numpy(), atol=1e-10, rtol=0)
    with pytest.raises(InputError, match="cross-attention: pass memory="):
        lm.readout().run_from(1, xa)


def test_run_from_with_texts_of_two_lengths_padded():
    lm = tiny("encoder")
    ro = lm.readout()
    runs = [lm.forward(lm.encode(t), names=[ro.resid_names[0], ro.resid_names[-1]], records=False).capture.tensor
            for t in ("the cat sat", "a dog")]  # 13 and 7 tokens
    x = torch.zeros(2, 13, 16, dtype=torch.float64)  # [2, T, D]: the second text padded
    real = torch.zeros(2, 13, dtype=torch.bool)
    for b, t in enumerate(runs):
        n = t(ro.resid_names[0]).shape[1]
        x[b, :n], real[b, :n] = t(ro.resid_names[0])[0], True
    with torch.no_grad():
        both = ro.run_from(0, x, attention_mask=real)
        unmasked = ro.run_from(0, x)  # the padding read as tokens
    assert (unmasked[1, :7] - both[1, :7]).abs().max() > 0.01
    for b, t in enumerate(runs):
        n = int(real[b].sum())
        np.testing.assert_allclose(both[b, :n].numpy(), t(ro.resid_names[-1])[0].numpy(), atol=1e-10, rtol=0)


# -- head ablation: one batched forward against one head zeroed at a time ----------------------------------------
@pytest.mark.parametrize("kind", ["decoder", "moe", "encoder", "encdec"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_head_sweep_equals_one_head_zeroed_at_a_time(kind, backend):
    lm = tiny("decoder", mlp="moe", n_experts=4, top_k=2) if kind == "moe" else tiny(kind)
    inp = lm.encode("the cat sat", "uvw st") if kind == "encdec" else lm.encode("the cat sat")
    sites, grid, before = head_sweep(lm, inp, 2, None, backend)  # [sites, H]
    for i, site in enumerate(sites):
        for h in range(grid.shape[1]):
            clean, zeroed = ablate_head(lm, inp, site, h, 2, before.target_id, backend)
            assert grid[i, h] == pytest.approx(zeroed.target_prob - clean.target_prob, abs=1e-7)
    assert np.abs(grid).max() > 0.01


# -- circuit discovery -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs():
    return setup(tiny_llama(), "the cat sat on the mat", "the dog sat on the rug", "a", "b")


def test_circuit_runs_and_gradients_batched_equal_one_each(runs):
    shape = (len(runs.graph.senders), len(runs.graph.receivers))
    order = np.random.default_rng(0).permutation(shape[0] * shape[1])
    keep = keep_masks(order, [0, 10, 100, 400, shape[0] * shape[1]], shape, runs.valid.device)  # [5, S, R]
    many = runs.circuit_m(keep)
    one = torch.cat([runs.circuit_m(keep[k:k + 1]) for k in range(len(keep))])
    np.testing.assert_allclose(many.numpy(), one.numpy(), atol=1e-5, rtol=0)
    assert np.ptp(many.numpy()) > 0.2  # the circuits differ
    points = [0.1, 0.5, 0.9]
    mean = sum(runs.gradients([a]) for a in points) / len(points)
    np.testing.assert_allclose(runs.gradients(points).numpy(), mean.numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("rows", [1, 5])  # one run per staircase; staircases that split a group's runs
def test_activation_paths_in_staircases_of_any_size(runs, monkeypatch, rows):
    betas = alphas("eap-ig-act", 2)
    whole = act_paths.activation_scores(runs, betas)  # 9 groups × 2 points: one staircase of 18 runs
    monkeypatch.setattr(act_paths, "CHUNK_ROWS", rows)
    np.testing.assert_allclose(act_paths.activation_scores(runs, betas), whole, atol=1e-6, rtol=0)
    assert np.abs(whole).max() > 0.1


# -- integrated gradients of images in one shared pass ------------------------------------------------------------
def test_integrated_gradients_of_three_images_in_one_pass():
    lm = load("lecture-vit")
    jobs = [(lm.encode_image(ex.image), 0, ex.label) for ex in shape_images(3, 0, "eval")]
    sizes, forward = [], lm.forward
    lm.forward = lambda inp, **kw: sizes.append(inp.ids.shape[0]) or forward(inp, **kw)
    try:
        many = integrated_gradients_many(lm, jobs, steps=8)
    finally:
        del lm.forward
    assert sizes == [27]  # 3 images × 9 nodes: one pass
    for a, job in zip(many, jobs):
        one = integrated_gradients(lm, *job, steps=8)
        assert a.logit == pytest.approx(one.logit, abs=1e-5)
        np.testing.assert_allclose(a.row, one.row, atol=1e-5, rtol=0)
    assert np.abs(many[0].row - many[1].row).max() > 0.1


# -- which experts specialise: padded batches against one text at a time -----------------------------------------
@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_specialisation_of_padded_batches_equals_one_text_each(arch):
    moe = load("lecture-moe")  # its tokenizer knows the lecture words
    cfg = ModelConfig(arch=arch, vocab_size=moe.cfg.vocab_size, d_model=32, n_heads=4, n_layers=2, max_len=64,
                      mlp="moe", n_experts=4, top_k=1, output_head="mlm" if arch == "encoder" else None)
    torch.manual_seed(0)
    lm = LoadedModel(f"tiny-moe-{arch}", build_model(cfg).eval(), moe.tokenizer, cfg, "random")
    texts = [list(ex.tokens) for ex in decoder_examples(12, 1, split="eval")]
    assert len({len(t) for t in texts}) > 3
    batched = specialisation(lm, texts, lecture_classes(), batch=12)
    alone = specialisation(lm, texts, lecture_classes(), batch=1)
    np.testing.assert_array_equal(batched["share"], alone["share"])
    np.testing.assert_array_equal(batched["overall"], alone["overall"])


# -- activation patching: every cell of the staircases against one plain hooked run ---------------------------------
@pytest.mark.parametrize("kw", [dict(mlp="moe", n_experts=4, top_k=2), dict(positional="alibi", sliding_window=3),
                                dict(positional="rope", n_kv_heads=1)])
def test_patching_staircases_equal_one_plain_run_per_cell(kw):
    lm = tiny("decoder", **kw)
    clean, corrupt = "the cat sat", "the dog sat"
    got = activation_patching(lm, clean, corrupt, "a", "b", backend="eager")
    s = _Setup(lm, clean, corrupt, "a", "b", "eager")
    a, b, inp = lm.single_token_id("a"), lm.single_token_id("b"), lm.encode(corrupt)

    def restored(hook, p, h=None):  # positions p (of head h's output; h None: the stream) from the clean run
        def put(x, name):
            x, c = x.clone(), (s.resid if "resid" in name else s.z)["clean"][int(name.split(".")[1])]
            if h is None:
                x[:, p] = c[:, p]  # [1, T, D]
            else:
                x[:, p, h] = c[:, p, h]  # [1, T, H, d]
            return x

        logits = lm.forward(inp, interventions={hook: put}, records=False).logits[0, -1]
        return (float(logits[a] - logits[b]) - s.ld["corrupt"]) / s.gap

    L, T, H = got.resid.shape[0], got.resid.shape[1], got.heads.shape[1]
    want = [[restored(f"blocks.{i}.hook_resid_pre", p) for p in range(T)] for i in range(L)]
    np.testing.assert_allclose(got.resid, want, atol=1e-9, rtol=0)
    want = [[restored(f"blocks.{i}.attn.hook_z", slice(None), h) for h in range(H)] for i in range(L)]
    np.testing.assert_allclose(got.heads, want, atol=1e-9, rtol=0)
    for i, grid in got.head_pos.items():
        want = [[restored(f"blocks.{i}.attn.hook_z", p, h) for p in range(T)] for h in range(H)]
        np.testing.assert_allclose(grid, want, atol=1e-9, rtol=0)
    assert sorted(got.head_pos) == list(range(L)) and np.abs(got.heads).max() > 0.01
