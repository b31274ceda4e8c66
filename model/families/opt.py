"""OPT (OPTForCausalLM): learned positions stored with an offset of 2 (rows 0 and 1 serve padding; position p
reads row p + 2, so ours is that table from row 2), ReLU MLP, biases, pre-LN (post-LN when do_layer_norm_before is
false, as OPT-350m), a tied LM head. word_embed_proj_dim ≠ hidden_size (OPT-350m): token embeddings of that width,
projected (project_in, no bias) before the positions are added, and the final hidden states projected back
(project_out) for the head: ModelConfig.d_embed with project_tokens."""

from __future__ import annotations

from attnlab.model.config import ModelConfig
from attnlab.model.families.common import Mapper, State, activation, build, lm_head, refuse, require, strip
from attnlab.model.families.family import Family, fixed

OFFSET = 2  # OPTLearnedPositionalEmbedding's offset


def opt_config(hf: dict, names=None) -> ModelConfig:
    """An OPT config.json dict → ModelConfig."""
    require(hf, "opt", "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers", "ffn_dim",
            "max_position_embeddings")
    d = hf["hidden_size"]
    e = int(hf.get("word_embed_proj_dim") or d)
    refuse(hf, "opt", enable_bias=(True, True), layer_norm_elementwise_affine=(True, True),
           _remove_final_layer_norm=(False, False))
    return build(
        arch="decoder", vocab_size=hf["vocab_size"], d_model=d, n_heads=hf["num_attention_heads"],
        n_layers=hf["num_hidden_layers"], d_mlp=hf["ffn_dim"], max_len=hf["max_position_embeddings"],
        positional="learned", norm="pre" if hf.get("do_layer_norm_before", True) else "post",
        mlp=activation(hf.get("activation_function", "relu"), "opt"), bias=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)), output_head="lm", norm_eps=1e-5,
        qkv_layout="split", d_embed=e if e != d else None, project_tokens=e != d)


def convert_opt(hf_state: State, cfg: ModelConfig) -> State:
    """OPTForCausalLM (`model.decoder.`) or OPTModel (`decoder.`) tensors → ours."""
    s = strip(hf_state, "model.", "decoder.embed_tokens.weight")
    D, H, V, E = cfg.d_model, cfg.hidden, cfg.vocab_size, cfg.d_embed or cfg.d_model
    post = cfg.norm == "post"
    m = Mapper(s, "opt")
    e = "decoder."
    m.take(e + "embed_tokens.weight", "embed.tok.weight", (V, E))
    if cfg.project_tokens:
        m.take(e + "project_in.weight", "embed.project.weight", (D, E))
        m.take(e + "project_out.weight", "project_out.weight", (E, D))
    m.out["embed.pos.weight"] = m.pop(e + "embed_positions.weight", (cfg.max_len + OFFSET, D))[OFFSET:]  # [max_len, D]
    for i in range(cfg.n_layers):
        h, b = f"{e}layers.{i}.", f"blocks.{i}."
        a = h + "self_attn."
        m.qkv([a + n for n in ("q_proj", "k_proj", "v_proj")], [D, D, D], b + "attn", D, cfg, bias=True)
        m.linear(a + "out_proj", b + "attn.out", (D, D))
        m.norm(h + "self_attn_layer_norm", b + ("ln_attn_out" if post else "ln_attn"), D)
        m.linear(h + "fc1", b + "mlp.up", (H, D))
        m.linear(h + "fc2", b + "mlp.down", (D, H))
        m.norm(h + "final_layer_norm", b + ("ln_mlp_out" if post else "ln_mlp"), D)
    if not post:
        m.norm(e + "final_layer_norm", "ln_f", D)
    lm_head(m, hf_state, cfg, "opt", "embed_tokens.weight")
    return m.done()


FAMILY = Family("opt", "OPT (OPTForCausalLM checkpoints, OPT-350m's projected embeddings too)", opt_config,
                convert_opt, fixed("OPTForCausalLM"), {"bos": "</s>", "eos": "</s>", "pad": "<pad>"})
