"""The shared word-level tokenizer of the three lecture models (one vocabulary, one tokenizer.json).

Words are split on whitespace only, so a text's tokens are exactly `text.split()`; the special
tokens ([PAD]=0, [UNK]=1, [BOS]=2, [EOS]=3, [MASK]=4, [SEP]=5) are recognised inside a text too
("how old is alvo ? [MASK]"). Encoding prepends [BOS] (a pair: [BOS] A [SEP] B) and never appends
[EOS]; decoding joins tokens with spaces.
"""

from __future__ import annotations

from tokenizers import Tokenizer, models, pre_tokenizers, processors

from .corpus import vocabulary
from .tasks_base import BOS, SEP, SPECIAL_TOKENS, UNK

FILENAME = "tokenizer.json"


def build_tokenizer(vocab: list[str] | None = None) -> Tokenizer:
    """A WordLevel tokenizer over `vocab` (default: the corpus vocabulary, specials first)."""
    vocab = vocabulary() if vocab is None else list(vocab)
    if list(vocab[: len(SPECIAL_TOKENS)]) != list(SPECIAL_TOKENS) or len(set(vocab)) != len(vocab):
        raise ValueError(f"vocab must start with {SPECIAL_TOKENS} and hold no duplicates")
    ids = {w: i for i, w in enumerate(vocab)}
    tok = Tokenizer(models.WordLevel(ids, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {SEP} $B:1", special_tokens=[(BOS, ids[BOS]), (SEP, ids[SEP])])
    return tok


def unknown_words(text: str, tokenizer: Tokenizer) -> list[str]:
    """The words of `text` that the tokenizer would turn into [UNK]."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    return [w for w in text.split() if w not in vocab]
