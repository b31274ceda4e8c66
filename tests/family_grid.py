"""The parity grid of the family table: tiny random Hugging Face checkpoints of any family, by shape name.

`make(folder, model_type, cls, **conf)` writes one (save_pretrained, safetensors, every tensor perturbed off its
init, a tokenizer or an image processor beside it); `TINY` holds one small shape per row of model/families'
table (tests/model/test_families_table.py checks that every row has one); a family's own test adds a grid of
shapes (GQA ratios, tied/untied heads, windows, scaling) and checks each with `assert_parity`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from tests.hf_fixtures import EOT, _perturb, bpe_tokenizer, quiet_transformers, word_tokenizer  # noqa: E402

TEXT = "the cat sat on the mat because the mat was warm and the dog ran in the park"
BACKENDS = ("eager", "sdpa", "flash")
ENCODERS = {"bert", "roberta", "xlm-roberta", "distilbert", "electra", "albert"}  # BERT's word tokenizer
IMAGES = {"vit", "deit", "clip", "clip_vision_model"}  # families that read pixels (an image processor instead)
SEQ2SEQ = {"t5", "bart", "marian"}  # encoder–decoders: the word tokenizer, [PAD]/[SEP] as start and end

_DEC = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2, max_position_embeddings=64,
            num_attention_heads=4, num_key_value_heads=2)
TINY = {
    # model_type: (transformers class, config kwargs): one small shape per family
    "gpt2": ("GPT2LMHeadModel", dict(n_embd=24, n_head=3, n_layer=2, n_positions=40)),
    "bert": ("BertForMaskedLM", dict(hidden_size=24, num_attention_heads=3, num_hidden_layers=2,
                                     intermediate_size=40, max_position_embeddings=32)),
    "llama": ("LlamaForCausalLM", _DEC),
    "qwen2": ("Qwen2ForCausalLM", _DEC),
    "mistral": ("MistralForCausalLM", dict(_DEC, sliding_window=4)),
    "mixtral": ("MixtralForCausalLM", dict(_DEC, num_local_experts=4, num_experts_per_tok=2, sliding_window=None)),
    "vit": ("ViTForImageClassification", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                              intermediate_size=48, image_size=16, patch_size=4, num_labels=3)),
    "qwen3": ("Qwen3ForCausalLM", dict(_DEC, head_dim=16)),
    "gemma": ("GemmaForCausalLM", dict(_DEC, head_dim=16)),
    "gemma2": ("Gemma2ForCausalLM", dict(_DEC, head_dim=16, num_hidden_layers=3, sliding_window=4,
                                         query_pre_attn_scalar=12, attn_logit_softcapping=2.0,
                                         final_logit_softcapping=3.0)),
    "gemma3_text": ("Gemma3ForCausalLM", dict(_DEC, head_dim=16, num_hidden_layers=3, sliding_window=4,
                                              query_pre_attn_scalar=12, layer_types=[
                                                  "sliding_attention", "sliding_attention", "full_attention"],
                                              rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                                  "rope_theta": 500.0},
                                                               "sliding_attention": {"rope_type": "default",
                                                                                     "rope_theta": 50.0}})),
    "phi3": ("Phi3ForCausalLM", dict(_DEC, pad_token_id=None)),
    "phi": ("PhiForCausalLM", dict(_DEC, num_key_value_heads=4, partial_rotary_factor=0.5)),
    "gpt_neox": ("GPTNeoXForCausalLM", dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                            num_attention_heads=4, max_position_embeddings=64)),
    "gpt_neo": ("GPTNeoForCausalLM", dict(hidden_size=32, num_layers=3, num_heads=4, max_position_embeddings=64,
                                          attention_types=[[["global", "local"], 1], [["local"], 1]], window_size=5)),
    "bloom": ("BloomForCausalLM", dict(hidden_size=24, n_layer=2, n_head=3)),
    "opt": ("OPTForCausalLM", dict(hidden_size=32, ffn_dim=40, num_hidden_layers=2, num_attention_heads=4,
                                   max_position_embeddings=64, word_embed_proj_dim=32)),
}
_ENC = dict(hidden_size=24, num_attention_heads=3, num_hidden_layers=2, intermediate_size=40, max_position_embeddings=40)
_S2S = dict(d_model=24, encoder_attention_heads=3, decoder_attention_heads=3, encoder_layers=2, decoder_layers=2,
            encoder_ffn_dim=40, decoder_ffn_dim=40, max_position_embeddings=64)
_VIS = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, image_size=16, patch_size=4)
TINY |= {
    "roberta": ("RobertaForMaskedLM", dict(_ENC, type_vocab_size=1)),
    "xlm-roberta": ("XLMRobertaModel", dict(_ENC, type_vocab_size=1)),
    "distilbert": ("DistilBertForMaskedLM", dict(dim=24, n_heads=3, n_layers=2, hidden_dim=40,
                                                 max_position_embeddings=40)),
    "electra": ("ElectraForMaskedLM", dict(_ENC, embedding_size=16)),
    "albert": ("AlbertForMaskedLM", dict(_ENC, embedding_size=16, num_hidden_layers=3)),
    "t5": ("T5ForConditionalGeneration", dict(d_model=24, num_heads=3, d_kv=8, num_layers=2, num_decoder_layers=2,
                                              d_ff=40, feed_forward_proj="gated-gelu")),
    "bart": ("BartForConditionalGeneration", _S2S),
    "marian": ("MarianMTModel", _S2S),
    "deit": ("DeiTForImageClassificationWithTeacher", dict(_VIS, num_labels=3)),
    "clip": ("CLIPModel", dict(vision_config=_VIS, projection_dim=8,
                               text_config=dict(hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                                                intermediate_size=24, max_position_embeddings=16, vocab_size=30))),
    "clip_vision_model": ("CLIPVisionModel", _VIS),
}


def hf_model(model_type: str, cls: str, seed: int = 0, **conf):
    """A seeded random `transformers.<cls>` of `model_type` with config kwargs `conf`, every tensor perturbed."""
    import transformers

    quiet_transformers()
    config = transformers.AutoConfig.for_model(model_type, **conf)
    torch.manual_seed(seed)
    model = getattr(transformers, cls)(config).eval()
    _perturb(model, seed)
    with torch.no_grad():  # a fixed table (Marian's sinusoidal positions) is not a weight: put it back
        for m in model.modules():
            if hasattr(m, "create_weight"):
                m.weight.copy_(m.create_weight())
    return model


def make(folder: Path, model_type: str, cls: str, seed: int = 0, **conf) -> Path:
    """`hf_model(...)` saved in `folder` with a tokenizer (special tokens too) or, for an image model, an image
    processor."""
    import transformers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if model_type in IMAGES:
        hf_model(model_type, cls, seed, **conf).save_pretrained(folder, safe_serialization=True)
        size = conf.get("image_size", conf.get("vision_config", {}).get("image_size", 16))
        transformers.ViTImageProcessor(size={"height": size, "width": size}).save_pretrained(folder)
        return folder
    words = model_type in ENCODERS or model_type in SEQ2SEQ
    tok = word_tokenizer(True) if words else bpe_tokenizer()
    extra = {"pad_token_id": tok.token_to_id("[PAD]")} if model_type in ENCODERS else \
        {"bos_token_id": tok.token_to_id(EOT), "eos_token_id": tok.token_to_id(EOT)}
    if model_type in SEQ2SEQ:  # T5 and Marian start the target with [PAD], BART with its end token
        pad, sep = tok.token_to_id("[PAD]"), tok.token_to_id("[SEP]")
        extra = {"pad_token_id": pad, "eos_token_id": sep, "bos_token_id": tok.token_to_id("[CLS]"),
                 "decoder_start_token_id": sep if model_type == "bart" else pad, "forced_eos_token_id": None}
    model = hf_model(model_type, cls, seed, **{"vocab_size": tok.get_vocab_size(), **extra, **conf})
    model.save_pretrained(folder, safe_serialization=True)
    tok.save(str(folder / "tokenizer.json"))
    specials = {"pad_token": "[PAD]", "mask_token": "[MASK]"} if model_type in ENCODERS else \
        {"bos_token": EOT, "eos_token": EOT}
    if model_type in SEQ2SEQ:
        specials = {"pad_token": "[PAD]", "eos_token": "[SEP]"}
    (folder / "special_tokens_map.json").write_text(json.dumps(specials))
    return folder


def parity(folder: Path, backends=BACKENDS, text: str = TEXT) -> dict[str, dict]:
    """compare_models of the folder against transformers under each backend: {backend: report}."""
    from attnlab.model.hf.load import load_hf_folder
    from attnlab.model.parity import compare_models, load_transformers

    lm = load_hf_folder(folder)
    hf = load_transformers(lm)
    inputs = lm.encode_reading(text)  # an encoder–decoder: the text is its source, the target its start token
    return {b: compare_models(lm, hf, inputs, backend=b) for b in backends}


def assert_parity(reports: dict[str, dict]) -> dict:
    """Every backend within the tolerances (greedy tokens identical where it generates); the worst numbers."""
    from attnlab.model.parity import TOL_ATTENTION, TOL_HIDDEN, TOL_LOGITS

    for backend, r in reports.items():
        assert r["max_abs_attention"] <= TOL_ATTENTION, (backend, r)
        assert r["max_abs_hidden"] <= TOL_HIDDEN, (backend, r)
        assert r["max_abs_logits"] is None or r["max_abs_logits"] <= TOL_LOGITS, (backend, r)
        assert r["greedy_equal"] is not False, (backend, r)
    keys = ("max_abs_attention", "max_abs_hidden", "max_abs_logits")
    return {k: max((r[k] or 0.0) for r in reports.values()) for k in keys}
