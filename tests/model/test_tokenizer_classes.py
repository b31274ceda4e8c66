"""A folder whose tokenizer_config.json names a tokenizer class (LlamaTokenizer, T5Tokenizer, …) is tokenized as
transformers tokenizes it: transformers ≥ 5 rebuilds that class's own pipeline around tokenizer.json's
vocabulary, so the file read as it is gave other ids (a Llama-2-style " the cat" had a lone "▁" before "▁the"; a T5
"cat\\nmat" split on the newline), and compare-hf reported tokens_equal False on such checkpoints."""

from __future__ import annotations

import json

import pytest
from attnlab.model.hf.load import load_hf_folder
from attnlab.model.parity import compare_hf

from tests import family_grid as G
from tests.hf_fixtures import CORPUS

transformers = pytest.importorskip("transformers")

TEXTS = [G.TEXT, " the cat", "The Cat  sat.", "  leading spaces", "cat\nmat", "the</s> cat <s>", "héllo wörld 12"]
_LLAMA = dict(G.TINY["llama"][1], vocab_size=400, max_position_embeddings=256)


def sentencepiece_bpe():
    """A Llama-2-style tokenizer.json: "▁" prepended and for every space by the normalizer, BPE with byte
    fallback, `<s> $A`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tok.train_from_iterator([line.replace(" ", "▁") for line in CORPUS],
                            trainers.BpeTrainer(vocab_size=360, special_tokens=specials, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                       special_tokens=[("<s>", 1)])
    return tok


def unigram():
    """A T5-style tokenizer.json: Metaspace, Unigram, `$A </s>`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.UnigramTrainer(vocab_size=120, special_tokens=["<pad>", "</s>", "<unk>"],
                                                            unk_token="<unk>", show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    return tok


CASES = {
    # name: (model_type, transformers class, config kwargs, tokenizer, tokenizer_config.json)
    "llama-sentencepiece": ("llama", "LlamaForCausalLM", _LLAMA, sentencepiece_bpe, {
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "legacy": False}),
    "t5-unigram": ("t5", "T5ForConditionalGeneration", dict(G.TINY["t5"][1], vocab_size=200), unigram, {
        "tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    out = {}
    for i, (name, (mt, cls, conf, tokenizer, config)) in enumerate(CASES.items()):
        folder = G.make(tmp_path_factory.mktemp("tok") / name, mt, cls, seed=i, **conf)
        tokenizer().save(str(folder / "tokenizer.json"))
        (folder / "special_tokens_map.json").unlink()
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        out[name] = folder
    return out


def _ids(lm, text: str) -> list[int]:
    enc = lm.encode("", text) if lm.arch == "encdec" else lm.encode(text)
    return (enc.src_ids if lm.arch == "encdec" else enc.ids)[0].tolist()


@pytest.mark.parametrize("name", list(CASES))
def test_ids_are_transformers_own(folders, name):
    lm = load_hf_folder(folders[name])
    theirs = transformers.AutoTokenizer.from_pretrained(str(folders[name]), local_files_only=True)
    assert type(theirs).__name__ == CASES[name][4]["tokenizer_class"]
    for text in TEXTS:
        assert _ids(lm, text) == theirs(text)["input_ids"], text
    assert compare_hf(str(folders[name]), TEXTS[1])["tokens_equal"] is True


def test_the_file_read_as_it_is_would_differ(folders):
    """The same tokenizer.json without the class: the file's own normalizer (both sides agree again), whose ids
    differ from the class's on these texts, so the test above can fail."""
    from tokenizers import Tokenizer

    for name, text in [("llama-sentencepiece", " the cat"), ("t5-unigram", "cat\nmat")]:
        lm = load_hf_folder(folders[name])
        as_file = Tokenizer.from_file(str(folders[name] / "tokenizer.json")).encode(text).ids
        assert as_file != _ids(lm, text), name
    lm = load_hf_folder(folders["llama-sentencepiece"])
    as_file = Tokenizer.from_file(str(folders["llama-sentencepiece"] / "tokenizer.json")).encode(" the cat").tokens
    assert as_file[:2] == ["<s>", "▁"]  # the lone "▁" the class does not make
    assert lm.tokenizer.tok.id_to_token(_ids(lm, " the cat")[1]) != "▁"
