"""A padded row reads its tokens at the positions a run of its own gives them: with a padding mask, learned and
sinusoidal positions count a row's real tokens (left padding does not move them), as transformers' OPT does; RoPE,
ALiBi and relative bias depend on distances only. Every positional kind and backend, a KV cache too."""

import pytest
import torch
from attnlab.model.cache import KVCache

from tests.model.helpers import tiny, tokens

SHORT, LONG = 5, 9


def _padded(short: torch.Tensor, long: torch.Tensor, side: str, pad: int = 0):
    """([2, LONG] ids: `long`, then `short` padded on `side`; [2, LONG] bool, True = a real token)."""
    n = long.shape[1] - short.shape[1]
    fill = torch.full((1, n), pad)
    row = torch.cat([fill, short], 1) if side == "left" else torch.cat([short, fill], 1)
    real = torch.ones(2, long.shape[1], dtype=torch.bool)
    if side == "left":
        real[1, :n] = False
    else:
        real[1, -n:] = False
    return torch.cat([long, row]), real


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope", "alibi"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_padded_row_equals_its_own_run(arch, positional, side, backend):
    m = tiny(arch, positional=positional)
    short, long = tokens(SHORT, seed=3), tokens(LONG, seed=4)
    ids, real = _padded(short, long, side)
    with torch.no_grad():
        both = m(ids, attention_mask=real, backend=backend).hidden  # [2, LONG, D]
        alone = m(short, backend=backend).hidden[0]  # [SHORT, D]
        first = m(long, backend=backend).hidden[0]
    assert (both[1][real[1]] - alone).abs().max() < 1e-5
    assert (both[0] - first).abs().max() < 1e-5
    assert alone.abs().max() > 0.1  # the numbers compared are not all zero


def test_left_padded_cached_steps_equal_the_run_alone():
    """A left-padded prompt then one token at a time through a KV cache (the padding mask covering every key so
    far): each step's logits equal the unpadded row's full run."""
    m = tiny("decoder", positional="learned")
    short, long = tokens(SHORT, seed=3), tokens(LONG, seed=4)
    ids, real = _padded(short, long, "left")
    steps = tokens(3, seed=5)
    full = torch.cat([short, steps], 1)  # [1, SHORT + 3]
    with torch.no_grad():
        alone = m(full).logits[0]  # [SHORT + 3, V]
        cache = KVCache()
        out = [m(ids, attention_mask=real, cache=cache).logits[1, -1]]
        for t in range(steps.shape[1]):
            real = torch.cat([real, torch.ones(2, 1, dtype=torch.bool)], 1)  # [2, k]
            nxt = torch.stack([steps[0, t], steps[0, t]])[:, None]  # [2, 1]
            out.append(m(nxt, attention_mask=real, cache=cache).logits[1, -1])
    assert (torch.stack(out) - alone[SHORT - 1:]).abs().max() < 1e-5
