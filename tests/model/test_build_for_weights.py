"""build_for_weights: the model of a config without random weights, for loading: it draws nothing from the
random generator, skips nothing in other threads, and once loaded equals a randomly built model given the same
weights (computed buffers included)."""

import threading

import pytest
import torch
from attnlab.model.checkpoint import build_for_weights, load_weights
from attnlab.model.config import ModelConfig
from attnlab.model.transformer import build_model
from attnlab.model.weights import NoRandomInit

CONFIGS = {
    "gpt2-like": dict(vocab_size=40, d_model=32, n_heads=4, n_layers=2, max_len=32),
    "llama-like": dict(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, max_len=32, positional="rope",
                       norm_type="rmsnorm", mlp="swiglu", bias=False),
    "alibi": dict(vocab_size=40, d_model=32, n_heads=4, n_layers=2, max_len=32, positional="alibi"),
    "sinusoidal": dict(vocab_size=40, d_model=32, n_heads=4, n_layers=2, max_len=32, positional="sinusoidal"),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_loaded_model_equals_a_randomly_built_one(name):
    cfg = ModelConfig(**CONFIGS[name])
    torch.manual_seed(1)
    reference = build_model(cfg).eval()
    state = {k: v.clone() for k, v in reference.state_dict().items()}
    torch.manual_seed(7)
    before = torch.rand(4)
    torch.manual_seed(7)
    model = build_for_weights(cfg)
    assert torch.equal(torch.rand(4), before)  # no random number drawn
    load_weights(model, state, "test")
    for (k, a), (_, b) in zip(model.named_buffers(), reference.named_buffers()):
        assert torch.equal(a, b), k  # computed buffers (sinusoids, ALiBi slopes) made as usual
    x = torch.randint(0, 40, (1, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model.eval()(x).logits, reference(x).logits)


def test_other_threads_still_draw_random_weights():
    torch.manual_seed(3)
    expected = torch.empty(5).normal_()
    seen = []

    def other():
        torch.manual_seed(3)
        seen.append(torch.empty(5).normal_())

    with NoRandomInit():
        t = torch.full((5,), 2.0)
        assert torch.equal(t.normal_(), torch.full((5,), 2.0))  # skipped here
        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
    assert torch.equal(seen[0], expected)
