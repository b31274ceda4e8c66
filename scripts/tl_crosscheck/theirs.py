"""The TransformerLens half of the cross-check: the same weights in TransformerLens's HookedTransformer(cfg) (its own
weight conversion; unfolded, and a fold_ln copy for logit_attrs and the directions, as its from_pretrained default
reads them), the same calls, the largest difference per call. Run in a scratch venv with transformer_lens < 4
(3.9.0 here; 4.x has no HookedTransformer) after ours.py: `python scripts/tl_crosscheck/theirs.py [OUT]`."""

import sys
from pathlib import Path

import torch
import transformers
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights, convert_llama_weights

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tl_crosscheck")
sys.path.insert(0, str(Path(__file__).parent))
from common import IDS, WEIGHTS, A, B, calls  # noqa: E402


def config(family, c):
    if family == "gpt2":
        return HookedTransformerConfig(n_layers=c.n_layer, d_model=c.n_embd, d_head=c.n_embd // c.n_head,
                                       n_heads=c.n_head, d_mlp=4 * c.n_embd, d_vocab=c.vocab_size, n_ctx=c.n_positions,
                                       act_fn="gelu_new", normalization_type="LN", eps=c.layer_norm_epsilon,
                                       use_attn_result=True)
    d_head = c.hidden_size // c.num_attention_heads
    return HookedTransformerConfig(n_layers=c.num_hidden_layers, d_model=c.hidden_size, d_head=d_head,
                                   n_heads=c.num_attention_heads, n_key_value_heads=c.num_key_value_heads,
                                   d_mlp=c.intermediate_size, d_vocab=c.vocab_size, n_ctx=c.max_position_embeddings,
                                   act_fn="silu", normalization_type="RMS", eps=c.rms_norm_eps,
                                   positional_embedding_type="rotary", rotary_dim=d_head,
                                   rotary_base=c.rope_parameters["rope_theta"], final_rms=True, gated_mlp=True,
                                   use_attn_result=True, original_architecture="LlamaForCausalLM")


torch.set_grad_enabled(False)
for family in ("gpt2", "llama"):
    cls = transformers.GPT2LMHeadModel if family == "gpt2" else transformers.LlamaForCausalLM
    hf = cls.from_pretrained(OUT / family).eval()
    cfg = config(family, hf.config)
    sd = (convert_gpt2_weights if family == "gpt2" else convert_llama_weights)(hf, cfg)

    def model(fold, cfg=cfg, sd=sd):
        m = HookedTransformer(cfg)
        m.load_and_process_state_dict({k: v.clone() for k, v in sd.items()}, fold_ln=fold, center_writing_weights=False,
                                      center_unembed=False, fold_value_biases=False,
                                      refactor_factored_attn_matrices=False)
        return m.eval()

    plain, folded = model(False), model(True)
    ours = torch.load(OUT / f"{family}.pt")
    logits, cache = plain.run_with_cache(IDS)
    _, fcache = folded.run_with_cache(IDS)
    theirs = calls(cache, ours["P"]) | {k: getattr(plain, k) for k in WEIGHTS} | {"logits": logits}
    theirs["attrs"] = fcache.logit_attrs(fcache.decompose_resid(pos_slice=-1), A, incorrect_tokens=B, pos_slice=-1)
    theirs["attrs_full"] = fcache.logit_attrs(fcache.get_full_resid_decomposition(pos_slice=-1), A, pos_slice=-1)
    theirs["dirs"] = folded.tokens_to_residual_directions(A)
    theirs["bias"] = plain.accumulated_bias(2, include_mlp_biases=False)
    print(family)
    for k, v in theirs.items():
        diff = (v.float() - ours["t"][k].float()).abs().max().item()
        print(f"  {k:10s} {tuple(v.shape)!s:18s} max |TL - attnlab| = {diff:.1e}")
    for k, lab in (("dec", cache.decompose_resid(return_labels=True)[1]),
                   ("acc", cache.accumulated_resid(incl_mid=True, return_labels=True)[1]),
                   ("full", cache.get_full_resid_decomposition(1, mlp_input=True, return_labels=True)[1])):
        print(f"  labels {k}: {'equal' if lab == ours['labels'][k] else 'DIFFER'}")
