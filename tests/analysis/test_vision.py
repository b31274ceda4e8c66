"""analysis/probes/patch_maps.py: rollout and gradient rollout by hand, regions, the ViT paper's two pictures."""

import numpy as np
import pytest
import torch
from attnlab.analysis.probes import patch_maps as V

E = np.eye(5)  # [CLS] + a 2×2 grid of patches: tokens 0..4


class FakeRun:
    """What the map functions read from a CapturedRun: the self-attention patterns [L, H, T, T]."""

    def __init__(self, patterns):
        self.p = np.asarray(patterns, dtype=np.float32)

    def matrices(self, group):
        assert group == "self"
        return self.p


def rows_to(token, t=5):
    """Every query attends only to `token`: [T, T]."""
    return np.tile(E[token], (t, 1))


def test_rollout_two_layers_by_hand():
    # Â1 = (A1 + I)/2, A1 → token 2: row 0 = ½e0 + ½e2, row 4 = ½e4 + ½e2. Â2, A2 → token 4: row 0 = ½e0 + ½e4.
    # R[0] = (Â2·Â1)[0] = ½Â1[0] + ½Â1[4] = ¼e0 + ½e2 + ¼e4 → patches [0, ½, 0, ¼] on the 2×2 grid
    p = np.stack([np.stack([rows_to(2)] * 2), np.stack([rows_to(4)] * 2)])  # [2, 2, 5, 5]
    np.testing.assert_allclose(V.rollout_map(FakeRun(p)), [[0, 0.5], [0, 0.25]])


def test_rollout_max_and_min_fusion_by_hand():
    # one layer, head 0 → token 2, head 1 → token 3. max: row 0 = e2 + e3; +I, /2, rownorm → (e0 + e2 + e3)/3
    p = np.stack([rows_to(2), rows_to(3)])[None]  # [1, 2, 5, 5]
    np.testing.assert_allclose(V.rollout_map(FakeRun(p), "max"), [[0, 1 / 3], [1 / 3, 0]])
    # min: fused 0 everywhere → only the identity: [CLS] keeps all, the patches get 0
    np.testing.assert_allclose(V.rollout_map(FakeRun(p), "min"), [[0, 0], [0, 0]])


def test_discard_drops_the_smallest_weights_never_cls_column():
    a = np.full((5, 5), 0.2)
    a[0] = [0.05, 0.05, 0.1, 0.3, 0.5]
    out = V.discard_flat(a, 0.2)  # floor(0.2·25) = 5 weights dropped
    assert (out == 0).sum() == 5
    assert (out[:, 0] > 0).all()  # the [CLS] column stays
    assert out[0, 1] == 0 and out[0, 2] == 0  # the two smallest outside column 0
    with pytest.raises(ValueError):
        V.discard_flat(a, 1.0)


def test_discard_changes_the_rollout_map():
    rng = np.random.default_rng(0)
    x = rng.random((2, 3, 5, 5))
    p = x / x.sum(-1, keepdims=True)
    kept, dropped = V.rollout_map(FakeRun(p)), V.rollout_map(FakeRun(p), discard=0.6)
    assert kept.shape == dropped.shape == (2, 2)
    assert not np.allclose(kept, dropped)


def test_grad_rollout_by_hand():
    # one layer, one head, uniform pattern 0.2; gradient −1 on key 1, +1 on key 2 (row 0 only)
    # relu(G ⊙ A) row 0 = [0, 0, 0.2, 0, 0]; (· + I)/2 = [0.5, 0, 0.1, 0, 0]; rownorm → [5/6, 0, 1/6, 0, 0]
    a = torch.full((1, 1, 5, 5), 0.2)
    g = torch.zeros(1, 1, 5, 5)
    g[0, 0, 0, 1], g[0, 0, 0, 2] = -1.0, 1.0
    r = V.grad_rollout_matrix([a], [g])
    np.testing.assert_allclose(r[0], [5 / 6, 0, 1 / 6, 0, 0])
    np.testing.assert_allclose(r[1:], np.eye(5)[1:])  # other rows: no gradient → identity


def test_regions_pointing_and_share():
    mask = np.zeros((4, 4), bool)
    mask[:2, :2] = True  # patch (0, 0) fully, of a 2×2 grid of 2×2-pixel patches
    mask[2, 3] = True  # a quarter of patch (1, 1)
    region = V.patch_region(mask, (2, 2))
    np.testing.assert_allclose(region, [[1, 0], [0, 0.25]])
    m = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert V.region_share(m, region) == pytest.approx((1 + 0.25 * 4) / 10)
    assert V.pointing_hit(m, region)  # top patch (1, 1) touches the mask
    assert not V.pointing_hit(np.array([[0, 9.0], [0, 0]]), region)
    with pytest.raises(ValueError):
        V.patch_region(np.zeros((5, 4), bool), (2, 2))


def test_mean_attention_distance_by_hand():
    # 2×2 grid, patch 4 px. Head 0: each patch attends to itself (0 px). Head 1: to patch (0,0) = token 1:
    # distances 0, 4, 4, 4√2 → mean (8 + 4√2)/4. [CLS] rows/columns are left out.
    own = np.eye(5)
    to_first = rows_to(1)
    d = V.mean_attention_distance(FakeRun(np.stack([own, to_first])[None]), (2, 2), 4)
    np.testing.assert_allclose(d, [[0.0, (8 + 4 * np.sqrt(2)) / 4]])


def test_maps_on_lecture_vit(vit, vit_image):
    lm = vit
    inp = lm.encode_image(vit_image.image)
    run = lm.capture(inp)
    for m in (V.patch_map_cls(run, 3, None), V.patch_map_cls(run, 0, 1, query=5), V.rollout_map(run, "max", 0.5),
              V.grad_rollout_map(lm, inp), V.relevance_map(lm, inp, target=2)):
        assert m.shape == lm.patch_grid
        assert np.isfinite(m).all() and (m >= 0).all()
    # the [CLS] map of one head is its pattern row without the [CLS] key
    row = run.layer_records("self")[1].pattern(2)[0]
    np.testing.assert_allclose(V.patch_map_cls(run, 1, 2), row[1:].reshape(8, 8), rtol=1e-6)
    sim = V.position_similarity(lm)
    assert sim.shape == (64, 8, 8)
    np.testing.assert_allclose(sim.reshape(64, 64).diagonal(), 1.0, atol=1e-9)
    assert V.mean_attention_distance(run, lm.patch_grid, 4).shape == (4, 4)
    with pytest.raises(Exception, match="outside"):
        V.patch_map_cls(run, 9, None)


def test_text_tools_run_on_the_vit(vit, vit_image):
    """Head statistics, flow and rollout from the text pages take a ViT run as they are."""
    from attnlab.analysis.attention.flow import attention_flow
    from attnlab.analysis.attention.head_stats import head_statistics
    from attnlab.analysis.attention.rollout import attention_rollout

    run = vit.capture(vit.encode_image(vit_image.image))
    p = run.matrices("self")  # [4, 4, 65, 65]
    stats = head_statistics(p, run.mask_of("self"), stack="encoder")
    assert stats is not None
    flow = attention_flow(p, 0)
    assert flow.shape == (65,) and np.isfinite(flow).all()
    r = attention_rollout(p)
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-6)
