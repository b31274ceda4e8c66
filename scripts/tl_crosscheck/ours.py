"""The attnlab half of the TransformerLens cross-check (README, TransformerLens section): a random transformers GPT-2
and Llama (grouped-query attention) saved under OUT, each run through attnlab's cache calls, the results saved for
theirs.py. Run from the repository root: `python -m scripts.tl_crosscheck.ours [OUT]` (needs transformers, as the tests do)."""

import sys
from pathlib import Path

import torch
from attnlab.model.hf.load import load_hf_folder

from scripts.tl_crosscheck.common import IDS, WEIGHTS, A, B, calls
from tests.family_grid import TINY, make

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tl_crosscheck")

if __name__ == "__main__":
    for family in ("gpt2", "llama"):
        folder = OUT / family
        if not folder.exists():
            cls, conf = TINY[family]
            make(folder, family, cls, **conf)
        lm = load_hf_folder(folder)
        logits, cache = lm.run_with_cache(IDS)
        P = torch.randn(lm.cfg.d_model, 3, generator=torch.Generator().manual_seed(5))
        got = calls(cache, P) | {k: getattr(lm, k) for k in WEIGHTS} | {"logits": logits}
        got["attrs"] = cache.logit_attrs(cache.decompose_resid(pos_slice=-1), A, incorrect_tokens=B, pos_slice=-1)
        got["attrs_full"] = cache.logit_attrs(cache.get_full_resid_decomposition(pos_slice=-1), A, pos_slice=-1)
        got["dirs"] = lm.tokens_to_residual_directions(A)
        got["bias"] = lm.accumulated_bias(2, include_mlp_biases=False)
        labels = {"dec": cache.decompose_resid(return_labels=True)[1],
                  "acc": cache.accumulated_resid(incl_mid=True, return_labels=True)[1],
                  "full": cache.get_full_resid_decomposition(1, mlp_input=True, return_labels=True)[1]}
        torch.save({"t": {k: v.detach() for k, v in got.items()}, "labels": labels, "P": P}, OUT / f"{family}.pt")
        print(family, "saved", len(got), "tensors")
