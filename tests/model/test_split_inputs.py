"""Split inputs (capture(split_inputs=True)): every query head, k/v head and MLP reads its own copy of the stream;
unchanged, the run equals the plain one, and an intervention on one copy reaches that reader only."""

import pytest
import torch
from attnlab.model.hooks import capture, replace_with

from tests.model.helpers import tiny, tokens

SHAPES = [dict(), dict(n_kv_heads=2, positional="rope", mlp="swiglu", norm_type="rmsnorm", bias=False, qk_norm=True),
          dict(norm="parallel", n_kv_heads=1), dict(mlp="moe", n_experts=4, top_k=2, n_kv_heads=2)]


@pytest.mark.parametrize("kw", SHAPES)
def test_split_run_equals_the_plain_run(kw):
    m, x = tiny(**kw), tokens(10, B=2)
    ref = m(x).logits
    with capture(split_inputs=True, records=False, names="*") as cap:
        got = m(x).logits
    torch.testing.assert_close(got, ref, rtol=0, atol=2e-6)
    H, Hkv = m.cfg.n_heads, m.cfg.kv_heads
    assert cap.tensor("blocks.1.attn.hook_q_input").shape == (2, 10, H, 32)
    assert cap.tensor("blocks.1.attn.hook_k_input").shape == cap.tensor("blocks.1.attn.hook_v_input").shape \
        == (2, 10, Hkv, 32)
    mlp_in = cap.tensor("blocks.1.hook_mlp_in")
    want = "blocks.1.hook_resid_pre" if kw.get("norm") == "parallel" else "blocks.1.hook_resid_mid"
    torch.testing.assert_close(mlp_in, cap.tensor(want), rtol=0, atol=0)


def test_one_query_heads_input_reaches_that_head_only():
    m, x = tiny(n_kv_heads=2, positional="rope"), tokens(8)
    with capture(split_inputs=True, records=False, names="blocks.1.attn.hook_z") as cap:
        m(x)
    z0 = cap.tensor("blocks.1.attn.hook_z")
    with capture(names="blocks.1.attn.hook_q_input", records=False, split_inputs=True) as cap:
        m(x)
    q_in = cap.tensor("blocks.1.attn.hook_q_input").clone()
    q_in[:, :, 3] += torch.randn_like(q_in[:, :, 3])  # only query head 3 reads another stream
    with capture(split_inputs=True, records=False, names="blocks.1.attn.hook_z",
                 interventions={"blocks.1.attn.hook_q_input": replace_with(q_in)}) as cap:
        m(x)
    z = cap.tensor("blocks.1.attn.hook_z")
    changed = (z - z0).abs().amax(dim=(0, 1, 3))  # hook_z [B, T, H, d] -> [H]
    assert changed[3] > 1e-3 and changed[[0, 1, 2]].max() == 0


def test_one_kv_heads_input_reaches_its_group_only():
    m, x = tiny(n_kv_heads=2), tokens(8)  # heads 0, 1 share k/v head 0; heads 2, 3 k/v head 1
    with capture(split_inputs=True, records=False, names=["blocks.0.attn.hook_z", "blocks.0.attn.hook_v_input"]) as c:
        m(x)
    v_in = c.tensor("blocks.0.attn.hook_v_input").clone()
    v_in[:, :, 1] = 0
    with capture(split_inputs=True, records=False, names="blocks.0.attn.hook_z",
                 interventions={"blocks.0.attn.hook_v_input": replace_with(v_in)}) as cap:
        m(x)
    changed = (cap.tensor("blocks.0.attn.hook_z") - c.tensor("blocks.0.attn.hook_z")).abs().amax(dim=(0, 1, 3))
    assert changed[[2, 3]].min() > 1e-3 and changed[[0, 1]].max() == 0


@pytest.mark.parametrize("kw", [dict(norm="post"), dict(norm="peri")])
def test_split_inputs_refuse_a_norm_between_sublayer_and_stream(kw):
    m = tiny(**kw)
    with pytest.raises(ValueError, match="pre-norm or parallel"), capture(split_inputs=True, records=False):
        m(tokens(4))
