"""CUDA checks (fp16/bf16): fused backends within 16 units in the last place (of the largest hidden value) of
eager, and no worse than twice eager's error against an fp32 reference. Skipped without a CUDA GPU."""

import pytest
import torch
from attnlab.model.hooks import capture

from tests.model.helpers import tiny, tokens

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_fused_matches_eager_in_half_precision(dtype, arch):
    ref_model = tiny(arch, d_model=128, n_heads=4, n_layers=2, max_len=256).cuda()
    x = tokens(200, B=2).cuda()
    with torch.no_grad():
        ref = ref_model(x, backend="eager").hidden.float()
        m = tiny(arch, d_model=128, n_heads=4, n_layers=2, max_len=256).cuda().to(dtype)
        eager = m(x, backend="eager").hidden.float()
        err_eager = (eager - ref).abs().max()
        for backend in ("sdpa", "flash"):
            with capture() as cap:
                out = m(x, backend=backend).hidden.float()
            ulp = torch.finfo(dtype).eps * ref.abs().max()
            assert (out - eager).abs().max() <= 16 * ulp
            assert (out - ref).abs().max() <= 2 * err_eager + 1e-6
            rec = cap["blocks.0.attn"]
            assert "[cuda]" in rec.kernel
            if backend == "flash" and arch == "decoder":
                assert rec.kernel.startswith("flash"), rec.kernel


def test_flash_kernel_is_pinned_for_causal_decoder():
    m = tiny(d_model=128, max_len=256).cuda().to(torch.bfloat16)
    with torch.no_grad(), capture() as cap:
        m(tokens(128).cuda(), backend="flash")
    assert cap["blocks.1.attn"].kernel == "flash [cuda]"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flash_backend_runs_where_cuda_flash_cannot(dtype):
    """float32, or an explicit mask: backend='flash' runs the next fused kernel and its record says which."""
    m = tiny("encoder", d_model=128, max_len=256).cuda().to(dtype)
    x = tokens(64, B=2).cuda()
    mask = torch.ones_like(x, dtype=torch.bool)
    mask[1, 40:] = False
    with torch.no_grad():
        eager = m(x, attention_mask=mask, backend="eager").hidden.float()
        with capture() as cap:
            out = m(x, attention_mask=mask, backend="flash").hidden.float()
    assert (out - eager).abs().max() <= 16 * torch.finfo(dtype).eps * max(1.0, eager.abs().max())
    assert cap["blocks.0.attn"].kernel in ("mem_efficient [cuda]", "math [cuda]")


def test_seeded_sampling_runs_on_cuda_and_draws_as_on_the_cpu():
    """generate(seed=…, temperature>0) on a CUDA model: torch.multinomial refused the CPU generator for CUDA
    probabilities ('Expected a 'cuda' device type for generator but found 'cpu''); the draw is made on the CPU, so
    the same seed gives the same tokens as on the CPU (float32, logits within ~1e-6)."""
    from attnlab.model.registry import load

    text = "garo is seven . garo owns a rabbit ."
    cpu = load("lecture-decoder")
    want = cpu.generate(text, 12, temperature=1.5, top_k=20, seed=3, stop_at_eos=False)
    gpu = load("lecture-decoder", device="cuda")
    got = gpu.generate(text, 12, temperature=1.5, top_k=20, seed=3, stop_at_eos=False)
    assert got == want and len(got[0]) == len(cpu.encode(text).tokens) + 12


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_heads_read_by_cuda_flash_unrepeated_and_repeated_for_other_kernels(dtype, monkeypatch):
    """bf16: CUDA's flash kernel reads the k/v heads grouped (enable_gqa, no copy); float32 (no flash kernel): they
    are repeated for the next kernel, which takes no grouped heads. Both equal the repeated run."""
    import attnlab.model.attention as A

    m = tiny(positional="rope", n_kv_heads=2, d_model=128, max_len=256).cuda().to(dtype)
    x = tokens(200, B=2).cuda()
    calls, real = [], A.repeat_kv
    monkeypatch.setattr(A, "repeat_kv", lambda t, g: calls.append(g) or real(t, g))
    with torch.no_grad(), capture() as cap:
        grouped = m(x, backend="flash").hidden.float()
    assert calls == ([] if dtype == torch.bfloat16 else [2] * 4), (calls, cap["blocks.0.attn"].kernel)
    monkeypatch.setattr("attnlab.model.attn_ctx.AttnCtx.grouped", lambda *a: False)
    with torch.no_grad():
        repeated = m(x, backend="flash").hidden.float()
    assert (grouped - repeated).abs().max() <= 16 * torch.finfo(dtype).eps * repeated.abs().max()
    assert cap["blocks.0.attn"].kernel.startswith("flash" if dtype == torch.bfloat16 else "mem_efficient")
