"""The shared word-level tokenizer of the three lecture models (one vocabulary, one tokenizer.json).

Text is read as people type it: lower-cased, split on whitespace and with each punctuation mark a token of its
own ("Alex?" reads as `alex ?`), so the slide's "How old is the best friend of Alex?" and the corpus's
"how old is the best friend of alex ?" are the same tokens. The special tokens ([PAD]=0, [UNK]=1, [BOS]=2,
[EOS]=3, [MASK]=4, [SEP]=5) are recognised inside a text too, as typed ("how old is alvo ? [MASK]").
Encoding prepends [BOS] (a pair: [BOS] A [SEP] B) and never appends [EOS]; decoding joins tokens with spaces.
"""

from __future__ import annotations

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from .corpus import vocabulary
from .tasks_base import BOS, SEP, SPECIAL_TOKENS, UNK

FILENAME = "tokenizer.json"


def build_tokenizer(vocab: list[str] | None = None) -> Tokenizer:
    """A WordLevel tokenizer over `vocab` (default: the corpus vocabulary, specials first)."""
    vocab = vocabulary() if vocab is None else list(vocab)
    if list(vocab[: len(SPECIAL_TOKENS)]) != list(SPECIAL_TOKENS) or len(set(vocab)) != len(vocab):
        raise ValueError(f"vocab must start with {SPECIAL_TOKENS} and hold no duplicates")
    ids = {w: i for i, w in enumerate(vocab)}
    tok = read_as_typed(Tokenizer(models.WordLevel(ids, unk_token=UNK)))
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {SEP} $B:1", special_tokens=[(BOS, ids[BOS]), (SEP, ids[SEP])])
    return tok


def read_as_typed(tok: Tokenizer) -> Tokenizer:
    """`tok` set to lower-case its text and split it on whitespace and around every punctuation mark."""
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Punctuation("isolated")])
    return tok


def unknown_words(text: str, tokenizer: Tokenizer) -> list[str]:
    """The words of `text` (as typed) that the tokenizer turns into [UNK]."""
    unk = tokenizer.token_to_id(UNK)
    enc = tokenizer.encode(text, add_special_tokens=False)
    return [text[a:b] for i, (a, b) in zip(enc.ids, enc.offsets) if i == unk]
