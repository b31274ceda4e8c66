"""The target side of a Hugging Face encoder–decoder (T5, BART, Marian): the decoder reads
[decoder_start] + the text's tokens without the tokenizer's own specials (what transformers' generate and
shift-right feed it); the source side is the plain tokenizer."""

from __future__ import annotations

from attnlab.model.tokenizer import Encoding, HFTokenizer


class TargetTokenizer:
    """An HFTokenizer whose encode starts every target with `start_id` and adds no other special token."""

    kind = "hf"

    def __init__(self, base: HFTokenizer, start_id: int):
        if not 0 <= start_id < base.vocab_size:
            raise ValueError(f"decoder_start_token_id {start_id} is outside the vocabulary (0..{base.vocab_size - 1})")
        self.base, self.start_id = base, int(start_id)

    def encode(self, text: str, pair: str | None = None, add_special: bool = True) -> Encoding:
        body = self.base.encode(text, add_special=False) if text else Encoding([], [], [], [], [])
        if not add_special:
            return body
        return Encoding([self.start_id, *body.ids], [self.base.label(self.start_id), *body.labels],
                        [(0, 0), *body.offsets], [0, *(body.type_ids or [0] * len(body.ids))],
                        [True, *(body.special or [False] * len(body.ids))])

    def __getattr__(self, name):  # vocab_size, eos_id, label, decode, save, … as the base tokenizer's
        return getattr(self.base, name)
