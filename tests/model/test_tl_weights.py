"""lm.W_U, W_E, W_pos, W_Q/W_K/W_V/W_O and their biases in TransformerLens's layouts: equal to transformers' own tensors
(GPT-2's Conv1D, Llama's Linear with grouped-query attention), and reproducing every attention and MLP hook of a run
from the norms' hook_normalized by TransformerLens's einsums; the token helpers."""

from __future__ import annotations

import pytest
import torch
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.inputs import InputError
from attnlab.model.parity import load_transformers
from attnlab.model.positions import apply_rope
from attnlab.model.registry import load
from attnlab.model.rope import layer_cos_sin

from tests.family_grid import TINY, make

TEXT = "the cat sat on the mat because the mat was warm"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {"lecture": (load("lecture-decoder"), None)}
    for family in ("gpt2", "llama"):
        cls, conf = TINY[family]
        lm = load_hf_folder(make(tmp_path_factory.mktemp(family), family, cls, **conf))
        out[family] = (lm, load_transformers(lm))
    return out


def test_gpt2_weights_are_transformers_own_tensors(models):
    """GPT-2's Conv1D stores x @ W ([in, out]): its columns split into TransformerLens's per-head layouts exactly."""
    lm, hf = models["gpt2"]
    D, H, d = lm.cfg.d_model, lm.cfg.n_heads, lm.cfg.d_head
    t = hf.transformer
    assert torch.equal(lm.W_U, hf.lm_head.weight.T) and lm.W_U.shape == (D, lm.cfg.vocab_size)
    assert torch.equal(lm.W_E, t.wte.weight) and torch.equal(lm.W_pos, t.wpe.weight)
    assert torch.equal(lm.b_U, torch.zeros(lm.cfg.vocab_size))  # GPT-2's head has no bias: zeros, as TL
    for i, block in enumerate(t.h):
        w, b = block.attn.c_attn.weight, block.attn.c_attn.bias  # [D, 3D], [3D]
        for j, (W, B) in enumerate(((lm.W_Q, lm.b_Q), (lm.W_K, lm.b_K), (lm.W_V, lm.b_V))):
            assert torch.equal(W[i], w[:, j * D:(j + 1) * D].view(D, H, d).permute(1, 0, 2))  # [D, H·d] -> [H, D, d]
            assert torch.equal(B[i], b[j * D:(j + 1) * D].view(H, d))
        assert torch.equal(lm.W_O[i], block.attn.c_proj.weight.view(H, d, D))  # [H·d, D] -> [H, d, D]
        assert torch.equal(lm.b_O[i], block.attn.c_proj.bias)
        assert torch.equal(lm.W_in[i], block.mlp.c_fc.weight) and torch.equal(lm.W_out[i], block.mlp.c_proj.weight)
        assert torch.equal(lm.b_in[i], block.mlp.c_fc.bias) and torch.equal(lm.b_out[i], block.mlp.c_proj.bias)
    assert lm.W_gate is None
    total = lm.accumulated_bias(2, include_mlp_biases=True)
    torch.testing.assert_close(total, sum(b.attn.c_proj.bias + b.mlp.c_proj.bias for b in t.h), rtol=0, atol=1e-7)
    torch.testing.assert_close(lm.accumulated_bias(1, mlp_input=True, include_mlp_biases=False),
                               t.h[0].attn.c_proj.bias + t.h[1].attn.c_proj.bias, rtol=0, atol=1e-7)


def test_llama_grouped_query_weights_repeat_each_kv_head_for_its_query_heads(models):
    """TransformerLens's GroupedQueryAttention: W_K, W_V [L, H, D, d] repeat k/v head g for query heads g·group …;
    _W_K, _W_V [L, Hkv, D, d] keep the k/v heads; biases zeros (Llama has none)."""
    lm, hf = models["llama"]
    D, H, Hkv, d = lm.cfg.d_model, lm.cfg.n_heads, lm.cfg.kv_heads, lm.cfg.d_head
    assert (H, Hkv) == (4, 2) and torch.equal(lm.W_U, hf.lm_head.weight.T)
    assert torch.equal(lm.W_E, hf.model.embed_tokens.weight)
    for i, layer in enumerate(hf.model.layers):
        a = layer.self_attn
        assert torch.equal(lm.W_Q[i], a.q_proj.weight.view(H, d, D).transpose(1, 2))  # [H·d, D] -> [H, D, d]
        assert torch.equal(lm._W_K[i], a.k_proj.weight.view(Hkv, d, D).transpose(1, 2))
        assert torch.equal(lm.W_K[i, 3], lm._W_K[i, 1]) and torch.equal(lm.W_V[i, 2], lm._W_V[i, 1])
        assert torch.equal(lm.W_V[i, 1], a.v_proj.weight.view(Hkv, d, D).transpose(1, 2)[0])
        assert torch.equal(lm.W_O[i], a.o_proj.weight.T.reshape(H, d, D))
        assert torch.equal(lm.W_gate[i], layer.mlp.gate_proj.weight.T) and torch.equal(lm.W_in[i], layer.mlp.up_proj.weight.T)
    assert lm.W_K.shape == (2, H, D, d) and lm._W_V.shape == (2, Hkv, D, d) and lm.b_K.shape == (2, H, d)
    assert not lm.b_Q.any() and not lm.b_O.any() and lm._b_V.shape == (2, Hkv, d)
    with pytest.raises(InputError, match=r"^\S+ has rope positions, not a learned table: it has no W_pos$"):
        _ = lm.W_pos


def _normed(lm, cache, i: int, ln: str) -> torch.Tensor:
    """The input of block i's attention (ln1) or MLP (ln2): hook_normalized · w (+ b)."""
    norm = lm.model.blocks[i].ln_attn if ln == "ln1" else lm.model.blocks[i].ln_mlp
    x = cache["normalized", i, ln] * norm.weight
    return x + norm.bias if getattr(norm, "bias", None) is not None else x


@pytest.mark.parametrize("family", ["gpt2", "llama", "lecture"])
def test_the_weights_reproduce_every_hook_of_a_run(models, family):
    """q, k, v (after RoPE where the model has it), z, result, attn_out, the MLP's pre-activations and output from
    the ln1/ln2 inputs by TransformerLens's einsums on W_Q, W_K, W_V, W_O, W_in, W_out (k/v repeated per query), within
    32 float32 units in the last place (another matmul order: two threads moved one lecture value by 1.9e-5 of 18)."""
    lm, _ = models[family]
    _, cache = lm.run_with_cache(TEXT if family != "lecture" else "garo is seven . garo owns a rabbit .")
    T, group = cache["resid_pre", 0].shape[1], lm.cfg.n_heads // lm.cfg.kv_heads
    W_Q, W_K, W_V, W_O, b_Q, b_K, b_V, b_O = lm.W_Q, lm.W_K, lm.W_V, lm.W_O, lm.b_Q, lm.b_K, lm.b_V, lm.b_O
    with torch.no_grad():
        for i in range(lm.cfg.n_layers):
            x = _normed(lm, cache, i, "ln1")
            q, k, v = (torch.einsum("btm,hmd->bthd", x, W[i]) + b[i] for W, b in ((W_Q, b_Q), (W_K, b_K), (W_V, b_V)))
            if lm.cfg.positional == "rope":
                cos, sin = layer_cos_sin(lm.cfg, torch.arange(T), i, n_positions=T)
                q, k = (apply_rope(t.transpose(1, 2), cos, sin).transpose(1, 2) for t in (q, k))  # [B, H, T, d] view
            torch.testing.assert_close(q, cache["q", i], rtol=4e-6, atol=1e-5)
            torch.testing.assert_close(k, cache["k", i].repeat_interleave(group, 2), rtol=4e-6, atol=1e-5)
            torch.testing.assert_close(v, cache["v", i].repeat_interleave(group, 2), rtol=4e-6, atol=1e-5)
            kv = torch.einsum("btm,hmd->bthd", x, lm._W_V[i]) + lm._b_V[i]
            torch.testing.assert_close(kv, cache["v", i], rtol=4e-6, atol=1e-5)
            z = torch.einsum("bhqk,bkhd->bqhd", cache["pattern", i], v)
            torch.testing.assert_close(z, cache["z", i], rtol=4e-6, atol=1e-5)
            result = torch.einsum("bqhd,hdm->bqhm", cache["z", i], W_O[i])
            torch.testing.assert_close(result, cache["result", i], rtol=4e-6, atol=1e-5)
            torch.testing.assert_close(result.sum(2) + b_O[i], cache["attn_out", i], rtol=4e-6, atol=1e-5)
            x2 = _normed(lm, cache, i, "ln2")
            pre = x2 @ lm.W_in[i] + lm.b_in[i]
            torch.testing.assert_close(pre, cache["pre_linear" if lm.W_gate is not None else "pre", i], rtol=4e-6,
                                       atol=1e-5)
            if lm.W_gate is not None:
                torch.testing.assert_close(x2 @ lm.W_gate[i], cache["pre", i], rtol=4e-6, atol=1e-5)
            out = cache["post", i] @ lm.W_out[i] + lm.b_out[i]
            torch.testing.assert_close(out, cache["mlp_out", i], rtol=4e-6, atol=1e-5)


def test_token_helpers_follow_transformerlens(models):
    lm, _ = models["gpt2"]
    ids = lm.to_tokens(TEXT)  # [1, T]
    strs = lm.to_str_tokens(TEXT)
    assert strs == [lm.tokenizer.tok.decode([i]) for i in ids[0].tolist()] and "".join(strs) == TEXT
    assert lm.to_str_tokens(ids) == strs == lm.to_str_tokens(ids[0].tolist())
    assert lm.to_string(ids[0]) == TEXT and lm.to_string(ids) == [TEXT]
    mat = lm.to_single_token(" mat")
    assert strs.index(" mat") == ids[0].tolist().index(mat)
    with pytest.raises(InputError, match=r"^' mat was' is not a single token of \S+ \(to_str_tokens shows how"):
        lm.to_single_token(" mat was")
    assert lm.to_single_str_token(mat) == " mat" == lm.tokenizer.tok.decode([mat])
    assert [lm.to_single_str_token(i) for i in ids[0].tolist()] == strs
    for bad in (-1, lm.cfg.vocab_size, 3.0, torch.tensor(mat)):
        with pytest.raises(InputError, match=r"^to_single_str_token takes one token id, an int in 0\.\.\d+; got "):
            lm.to_single_str_token(bad)
    w = lm.model.ln_f.weight
    folded = lm.W_U[:, mat] * w  # TransformerLens's fold_ln: w folded into W_U, then centred (LayerNorm)
    assert torch.equal(lm.tokens_to_residual_directions(mat), folded - folded.mean())
    assert torch.equal(lm.tokens_to_residual_directions(" mat"), lm.tokens_to_residual_directions(torch.tensor([mat])))
    both = lm.tokens_to_residual_directions(ids.expand(2, -1))  # [B, T] -> [B, T, D]
    assert both.shape == (2, ids.shape[1], lm.cfg.d_model)
    assert torch.equal(both[1, 3], lm.tokens_to_residual_directions(int(ids[0, 3])))
    llama, _ = models["llama"]  # RMSNorm: not centred
    assert torch.equal(llama.tokens_to_residual_directions(5), llama.W_U[:, 5] * llama.model.ln_f.weight)
    byte_lm, _ = models["lecture"]
    assert byte_lm.to_str_tokens("garo is")[0] == "[BOS]"
