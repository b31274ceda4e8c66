"""The Lecture tour (/tour) with AppTest: every step renders without an error, its narrative states the values
computed here straight from the model (model.registry and analysis, not the tour's own code), its figure marks
the thing to look at and equals the handout's; Previous / Next walk the steps; bad `step=` values fall back to
step 1 with a note."""

from __future__ import annotations

import numpy as np
import pytest
from attnlab.analysis.attention.rollout import attention_rollout, fuse_heads
from attnlab.analysis.attention.scores import counterfactual_softmax
from attnlab.analysis.attention.stepwise import QUIZ_SCORES
from attnlab.analysis.machinery import checks, positions
from attnlab.analysis.machinery.block_walk import block_walk
from attnlab.analysis.machinery.flash_tiling import head_tiling
from attnlab.analysis.machinery.permutation import permutation_study
from attnlab.analysis.probes import patch_maps as vision
from attnlab.analysis.probes.image_run import image_capture, model_view, region_report, run_map
from attnlab.analysis.probes.lens import logit_lens
from attnlab.analysis.probes.patching import activation_patching
from attnlab.analysis.probes.relevance import gradient_relevance
from attnlab.analysis.probes.routing import route_text
from attnlab.analysis.probes.sinks import SINK_SHARE, measure_sinks
from attnlab.app.interp_examples import RETRIEVAL
from attnlab.app.presets import presets
from attnlab.app.tour import STEPS, step_of
from attnlab.app.tour.handout import embedded_figures, handout_html, views
from attnlab.model.gguf.smollm2 import INSTALL, smollm2_file
from attnlab.model.lecture.shapes import shape_images
from attnlab.model.registry import load

from tests.app.conftest import ok, open_page, specs

N = len(STEPS)


@pytest.fixture(scope="module")
def dec():
    return load("lecture-decoder")


@pytest.fixture(scope="module")
def handout():
    """The handout's figures and document, built once."""
    doc = handout_html(views())
    return doc, embedded_figures(doc)


def pct(x) -> str:
    return f"{100 * float(x):.0f}%"


def sample(model: str, pid: str):
    return next(p for p in presets(model) if p.id == pid)


def run(lm, p):
    return lm.capture(lm.encode(p.text, p.src_text), backend="eager")


def expected(k: int, dec) -> list[str]:
    """What step k's narrative must say, computed from the model here."""
    if k == 1:  # the lecture's own story: the head that lands on the answer
        p = sample("lecture-decoder", "decoder-story-1")
        cap = run(dec, p)
        q, s = p.query_index, p.source_index
        g = cap.matrices("self")[:, :, q, s]  # [L, H]
        layer, head = np.unravel_index(np.argmax(g), g.shape)
        assert cap.tokens[s] == "48" and cap.top_tokens[q][0] == "48"
        return [f"head {layer}.{head} puts **{pct(g.max())}**", f"p = **{cap.top_probs[q][0]:.3f}**",
                f"token {s} `48`, {q - s} tokens back"]
    if k == 2:  # the lecture's story as vectors: the head that mixes values, led by the fact
        p = sample("lecture-decoder", "decoder-story-1")
        cap = run(dec, p)
        q, s = p.query_index, p.source_index
        row = cap.matrices("self")[:, :, q]  # [L, H, T]
        g = np.where(row.max(-1) < 0.9, row[..., s], -1.0)  # [L, H]
        layer, head = np.unravel_index(np.argmax(g), g.shape)
        w, scores = row[layer, head], cap.records[f"blocks.{layer}.attn"].scores(head)[q]
        a, b = np.argsort(w)[::-1][:2]
        return [f"head {layer}.{head}", f"q·k/√32 is **{scores[a]:.2f}** for token {a} `48` and **{scores[b]:.2f}**",
                f"α = **{w[a]:.3f}** and **{w[b]:.3f}**", "meets the 64 keys"]
    if k in (3, 8):
        p = sample("lecture-decoder", "decoder-retrieval-2")
        cap = run(dec, p)
        q, s = p.query_index, p.source_index
        if k == 3:
            rec = cap.records["blocks.0.attn"]
            m = rec.mask_for()
            cf = counterfactual_softmax(rec.raw_qk(0), rec.scale, mask=m, bias=None if rec.bias is None else rec.bias[0])
            live = m.any(-1)
            return [f"**{cf.scaled_entropy[live].mean():.2f}** nats", f"drops to **{cf.unscaled_entropy[live].mean():.2f}**",
                    f"d_k = {round(1 / rec.scale ** 2)}"]
        w = block_walk(dec, dec.encode(p.text), q)
        return [f"**{w.resid_norms[0]:.2f}**", f"**{w.resid_norms[-1]:.2f}**",
                f"‖Δ‖ = **{max(w.attn_delta.max(), w.mlp_delta.max()):.2f}**"]
    if k == 4:
        e = np.exp(QUIZ_SCORES)  # zero after the softmax: each row's visible share of all four keys
        after = (np.tril(e).sum(1) / e.sum(1)).min()
        return ["α₂,₂ = e¹/(e¹+e¹) = **0.50**", "summing to **1.000**", f"only **{after:.3f}**"]
    if k == 5:
        study = permutation_study(load("random-encoder"), "the cat sat on the mat", None, 0)
        kept = [n for n, r in zip(study.settings, study.table()) if r.max() <= 1e-5]
        assert kept == ["none"]  # only the setting without positions (and without a mask) keeps the symmetry
        return [f"within **{study.table()[0].max():.1e}**", "within 1e-05 only with no positions; a causal mask,"]
    if k == 6:
        p = sample("lecture-decoder", "decoder-induction-1")
        g = run(dec, p).matrices("self")[:, :, p.query_index, p.source_index]  # [L, H]
        layer, head = np.unravel_index(np.argmax(g), g.shape)
        n = int((g > 0.5).sum())
        rest = g[g <= 0.5].mean()
        return [f"**{n} of {g.size}** heads put over 50%", f"head {layer}.{head} the most, **{pct(g.max())}**",
                f"{pct(rest)} on average", "d_head = 128 / 4 = **32**"]
    if k == 7:
        demo = positions.rope_demo(32, 24)
        return [f"**{demo['spread_rope'].max():.1e}**", f"**{demo['spread_abs'].max():.2f}**", "**rope**"]
    if k == 9:
        lm = load("lecture-encdec")
        p = sample("lecture-encdec", "encdec-translation-1")
        cap = run(lm, p)
        m = cap.matrices("cross")[-1].mean(0)  # [T, S]
        enc = cap.matrices("encoder")[-1].mean(0)  # [S, S]
        cells = [(t - 1, s) for t, s in p.alignment]
        hits = sum(int(np.argmax(m[r]) == c) for r, c in cells)
        return [f"**{pct(np.mean([m[r, c] for r, c in cells]))}** of the weight on average",
                f"{hits} of {len(cells)} target words", "above the diagonal: **0**",
                f"**{pct(np.triu(enc, 1).sum(-1).mean())}** on later tokens", f"a {m.shape[0]} × {m.shape[1]} rectangle"]
    if k == 10:
        p = sample("lecture-decoder", "decoder-induction-1")
        gen = checks.generation_steps(dec, dec.encode(p.text), 12, "eager")
        worst = max(s["max_abs_logits"] for s in gen["steps"])
        return [f"within **{worst:.1e}**", f"{len(gen['steps'])} of {len(gen['steps'])} tokens identical"]
    if k == 11:
        p = sample("lecture-decoder", "decoder-retrieval-4")
        inp = dec.encode(p.text)
        worst = max(max(checks.check_backend(dec, inp, b).detail["per_site"].values()) for b in ("sdpa", "flash"))
        t, z = head_tiling(dec, inp, "blocks.3.attn", 0, 8, 8)  # the note's head 3.0, blocks of 8
        r = p.query_index
        m = np.array([st.m_after[r % 8] for st in t.steps_of(r // 8)])  # [tiles]: row r's running max
        jump = int(np.flatnonzero(m == m[-1])[0])
        return [f"to **{worst:.1e}** in every pattern", f"this {len(run(dec, p).tokens)}-token story",
                f"Row {r} of head 3.0: tile {jump + 1}", f"last of {len(m)} tiles",
                f"from **{m[jump - 1]:.2f}** to **{m[jump]:.2f}**",
                f"output equals eager's to **{np.abs(t.output[r] - z[r]).max():.1e}**"]
    if k == 12:
        p = sample("lecture-decoder", "decoder-retrieval-1")
        cap, q = run(dec, p), p.query_index
        stack = cap.matrices("self")
        rows = {"attention (last layer)": fuse_heads(stack[-1], "mean")[q], "rollout": attention_rollout(stack)[q],
                "gradient relevance": gradient_relevance(dec, dec.encode(p.text), q,
                                                         dec.single_token_id(p.answer)).row}
        out = []
        for name, r in rows.items():
            r = np.array(r, dtype=np.float64)
            r[q] = -np.inf
            out.append(f"{name} points at token {int(np.argmax(r))}")
        return out
    if k == 13:
        vit = load("lecture-vit")
        size, patch = vit.describe()["image_size"], vit.describe()["patch_size"]
        s = shape_images(6, 0, "eval", size)[0]
        view = model_view(vit, s.image)
        r = image_capture(vit, view)
        share = region_report({"rollout": run_map(r, "rollout")}, vision.patch_region(s.mask, (size // patch,) * 2))
        return [f"**{pct(share[0]['share inside'])}** of its mass", f"chance {pct(share[0]['chance'])}",
                f"p = **{r.top_probs[0][0]:.2f}**"]
    if k == 14:
        moe = load("lecture-moe")
        r, _ = route_text(moe, moe.encode(sample("lecture-moe", "decoder-retrieval-2").text))
        e = int(np.argmax(r.load[0]))
        return [f"expert E{e} takes **{pct(r.load[0, e])}**", f"**{r.entropy[0].mean():.2f}** bits"]
    if k == 15:
        if smollm2_file() is None:  # the optional wheel: the step says so in one line
            return [f"SmolLM2-135M is not installed on this machine (`{INSTALL}`)"]
        lm, p = load("smollm2"), sample("smollm2", "smollm2-ioi")
        g = run(lm, p).matrices("self")[:, :, p.query_index, p.source_index]  # [L, H]: the last row on " Mary"
        layer, head = np.unravel_index(np.argmax(g), g.shape)
        prob = logit_lens(lm, p.text, p.answer).answer_probs[-1, -1]
        return [f"head **{layer}.{head}** puts the most weight", f"**{pct(g.max())}**", f"p = **{prob:.2f}**",
                f"all {g.size} heads"]
    if k == 16:
        p = sample("lecture-decoder", "decoder-retrieval-2")
        lens = logit_lens(dec, p.text, p.answer)
        probs = lens.answer_probs[:, -1]  # [R]: p(answer) at the last position
        first = int(np.flatnonzero(lens.top_ids[:, -1, 0] == dec.single_token_id(p.answer))[0])
        return [f"after **{lens.rows[first]}** (p = **{probs[first]:.3f}**)",
                ", ".join(f"{r} {v:.2f}" for r, v in zip(lens.rows, probs))]
    if k == 17:
        ex = RETRIEVAL
        pt = activation_patching(dec, ex.clean, ex.corrupt, ex.answer, ex.wrong)
        layer, head = np.unravel_index(np.argmax(pt.heads), pt.heads.shape)
        return [f"from **{pt.ld_clean:+.2f}** to **{pt.ld_corrupt:+.2f}**",
                f"head **{layer}.{head}** restores **{pct(pt.heads.max())}**", "(`garo` → `hildo`)"]
    if k == 18:  # attention sinks, measured here on SmolLM2 (lecture-decoder without it)
        r = measure_sinks(load("smollm2") if smollm2_file() is not None else dec)
        layer, head = np.unravel_index(np.argmax(r.share), r.share.shape)
        late = slice(r.share.shape[0] // 2, None)
        ratio = np.median(r.norms["value_first"] / r.norms["value_rest"])
        return [f"**{int((r.share >= SINK_SHARE).sum())} of {r.share.size}** heads",
                f"head **{layer}.{head}** puts **{pct(r.share.max())}**",
                f"norm **{r.norms['resid_first'][late].mean():,.0f}** against **{r.norms['resid_rest'][late].mean():,.0f}**",
                f"**{ratio:.2f}×** theirs"]
    raise AssertionError(k)


def narrative(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def no_scale(data: list[dict]) -> list[dict]:
    """A figure's traces without their colour scales (the handout writes out the theme's)."""
    return [{k: v for k, v in t.items() if k != "colorscale"} for t in data]


def marked(spec: dict) -> bool:
    """The figure points at something: a tour mark (shape or annotation), or the view's own outline."""
    lay = spec["layout"]
    names = [x.get("name") for x in lay.get("shapes", []) + lay.get("annotations", [])]
    names += [t.get("name") for t in spec["data"]]
    return bool({"tour-look", "reference alignment", "ground truth"} & set(names))


@pytest.mark.parametrize("k", range(1, N + 1))
def test_every_step_renders_with_the_models_numbers(k, dec, handout):
    at = open_page("tour", step=k)
    ok(at)
    assert at.subheader[0].value == f"Step {k} of {N}: {STEPS[k - 1].title}"
    text = narrative(at)
    for want in expected(k, dec):
        assert want in text, (want, text)
    (spec,) = specs(at)
    assert marked(spec)
    assert no_scale(spec["data"]) == no_scale(handout[1][k]["data"])  # the handout embeds the app's figure,
    assert all(t.get("colorscale") for t in handout[1][k]["data"] if t["type"] == "heatmap")  # with its own colours
    assert f"/{STEPS[k - 1].page}?" in text  # the link to the same view on its page
    assert at.query_params["step"] == str(k)


@pytest.mark.parametrize("raw", ["0", "99", "abc", "-3", "7.5"])
def test_bad_step_values_fall_back_to_step_one_with_a_note(raw):
    at = open_page("tour", step=raw)
    ok(at)
    assert at.subheader[0].value.startswith(f"Step 1 of {N}:")
    assert len(at.info) == 1 and "step 1" in at.info[0].value and step_of(raw)[1] == at.info[0].value
    assert at.query_params["step"] == "1"


def test_previous_and_next_walk_the_steps():
    at = open_page("tour", step=N - 1)
    at.button(key="tour_next").click().run()
    ok(at)
    assert at.subheader[0].value.startswith(f"Step {N} of {N}:") and at.query_params["step"] == str(N)
    assert at.button(key="tour_next").disabled
    at.button(key="tour_prev").click().run()
    at.button(key="tour_prev").click().run()
    assert at.subheader[0].value.startswith(f"Step {N - 2} of {N}:") and at.query_params["step"] == str(N - 2)
    at.selectbox(key="step").set_value(1).run()
    assert at.button(key="tour_prev").disabled and at.query_params["step"] == "1"


def test_presentation_mode_keeps_the_link_and_hides_the_download():
    at = open_page("tour", step=4, present=1)
    ok(at)
    assert "present=1" in narrative(at) and not at.get("download_button")
    assert specs(at)[0]["layout"]["height"] == 460


def test_the_real_english_step_says_in_one_line_when_smollm2_is_missing(monkeypatch):
    from attnlab.app.tour import beyond

    monkeypatch.setattr(beyond, "smollm2_file", lambda: None)
    view = beyond.real_english(False)
    assert view.narrative == f"SmolLM2-135M is not installed on this machine (`{INSTALL}`): this step needs its weights."
    assert "\n" not in view.narrative and view.numbers == {"installed": False}
    assert view.fig.layout.annotations[0].text == view.narrative.replace("`", "")


@pytest.mark.parametrize("k, script", [(15, "heatmaps"), (16, "lens"), (17, "patching"), (18, "sinks")])
def test_the_new_steps_links_open_the_same_view(k, script):
    """The link's URL state opens the step's page on the tour's model, input and head (SmolLM2 if installed)."""
    if k == 15 and smollm2_file() is None:
        pytest.skip("smollm2 is not installed")
    view = STEPS[k - 1].build(False)
    at = open_page(script, **view.params)
    ok(at)
    for key, v in view.params.items():
        assert at.query_params[key] == str(v), key
    text = narrative(at)
    if k == 16:
        assert f"{view.numbers['probabilities'][-1]:.4f} at the output" in text
    if k == 17:
        assert f"**{view.numbers['ld_clean']:+.3f}**" in text
