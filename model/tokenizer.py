"""Tokenizers behind one small interface: ids plus a readable label per token.

Labels come from character offsets into the text (word pieces show their text, special tokens
stay visible as e.g. "[CLS]"); a byte that is only part of a character shows that character with
its part number, e.g. "é¹⁄₂". Labels are plain text: escape them before HTML or Plotly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

SPECIALS = ("[BOS]", "[EOS]", "[PAD]", "[MASK]")


@dataclass
class Encoding:
    ids: list[int]
    labels: list[str]
    offsets: list[tuple[int, int]] = field(default_factory=list)  # char span in the text; (0, 0) for specials
    type_ids: list[int] | None = None
    special: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)


def part_label(ch: str, part: int, total: int) -> str:
    """A byte that is one part of a multi-byte character, shown readably: 'é(1/2)'."""
    return f"{ch}({part}/{total})"


def show(text: str) -> str:
    """Make whitespace visible in a token label (a label of spaces would vanish on an axis)."""
    return text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") if text.strip() == "" else text


class ByteTokenizer:
    """UTF-8 bytes 0..255 plus [BOS]=256, [EOS]=257, [PAD]=258, [MASK]=259 (the random models')."""

    vocab_size = 260
    bos_id, eos_id, pad_id, mask_id = 256, 257, 258, 259
    special_ids = frozenset({256, 257, 258, 259})  # BOS, EOS, PAD, MASK
    kind = "byte"

    def __init__(self, add_bos: bool = True, add_eos: bool = False):
        self.add_bos, self.add_eos = add_bos, add_eos

    def encode(self, text: str, add_special: bool = True) -> Encoding:
        ids, labels, offsets = [], [], []
        for i, ch in enumerate(text):
            b = ch.encode("utf-8")
            for j, byte in enumerate(b):
                ids.append(byte)
                labels.append(show(ch) if len(b) == 1 else part_label(ch, j + 1, len(b)))
                offsets.append((i, i + 1))
        special = [False] * len(ids)
        if add_special and self.add_bos:
            ids, labels, offsets, special = [self.bos_id] + ids, ["[BOS]"] + labels, [(0, 0)] + offsets, [True] + special
        if add_special and self.add_eos:
            ids, labels, offsets, special = ids + [self.eos_id], labels + ["[EOS]"], offsets + [(0, 0)], special + [True]
        return Encoding(ids, labels, offsets, None, special)

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def label(self, i: int) -> str:
        if i >= 256:
            return SPECIALS[i - 256]
        printable = 32 <= i < 127 or i in (9, 10, 13)
        return show(chr(i)) if printable else f"<0x{i:02X}>"


class HFTokenizer:
    """A `tokenizers` tokenizer.json (word-level lecture vocabularies, BERT WordPiece, GPT-2 BPE)."""

    kind = "hf"

    def __init__(self, tok, bos: str | None = None, eos: str | None = None, pad: str | None = None,
                 mask: str | None = None, unk: str | None = None):
        self.tok = tok
        self._unk_name = unk  # the UNK the folder names (unk_token), when the model itself names none
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        vocab = tok.get_vocab(with_added_tokens=True)
        self.bos_id = vocab.get(bos) if bos else None
        self.eos_id = vocab.get(eos) if eos else None
        self.pad_id = vocab.get(pad) if pad else None
        self.mask_id = vocab.get(mask) if mask else None

    @classmethod
    def from_file(cls, path: str | Path, **specials) -> HFTokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)), **specials)

    def encode(self, text: str, pair: str | None = None, add_special: bool = True) -> Encoding:
        enc = self.tok.encode(text, pair, add_special_tokens=add_special)
        labels = []
        seq_ids = enc.sequence_ids if pair is not None else [0 if s is not None else None for s in enc.sequence_ids]
        for tok, (a, b), special, seq in zip(enc.tokens, enc.offsets, enc.special_tokens_mask, seq_ids):
            src = pair if seq == 1 else text
            labels.append(tok if special or b <= a else show(src[a:b]))
        # Several byte-level tokens inside one character share its offsets: number their parts.
        labels = _number_parts(labels, enc.offsets, enc.special_tokens_mask, seq_ids)
        return Encoding(list(enc.ids), labels, [tuple(o) for o in enc.offsets], list(enc.type_ids),
                        [bool(s) for s in enc.special_tokens_mask])

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def label(self, i: int) -> str:
        """A readable label for one id (generated tokens): byte-level pieces decoded to text."""
        t = self.tok.id_to_token(int(i))
        if t is None:
            return f"<id {i}>"
        if t in self._specials:
            return t
        if self._byte_level:
            raw = bytes(_UNICODE_TO_BYTE.get(c, 0x3F) for c in t)
            try:
                return show(raw.decode("utf-8"))
            except UnicodeDecodeError:
                return "".join(f"<0x{b:02X}>" for b in raw)
        return t

    @cached_property
    def unk_id(self) -> int | None:
        """The id every word outside the vocabulary becomes, or None (a tokenizer that reads every text). BPE,
        WordPiece and WordLevel name it (unk_token); a sentencepiece Unigram (T5, ALBERT, XLNet) holds its index,
        which the binding shows only in the model's JSON; else the unk_token the folder names (Llama-2's <unk>,
        whose BPE transformers rebuilds with byte fallback and no unk of its own)."""
        unk = getattr(self.tok.model, "unk_token", None)
        if unk:
            return self.tok.token_to_id(unk)
        if type(self.tok.model).__name__ == "Unigram" and (i := json.loads(self.tok.model.__getstate__())
                                                            .get("unk_id")) is not None:
            return i
        return self.tok.token_to_id(self._unk_name) if self._unk_name else None

    @property
    def _byte_level(self) -> bool:
        return "ByteLevel" in repr(self.tok.decoder)

    @property
    def special_ids(self) -> set[int]:
        """The ids of the tokens that frame a text rather than carry it: BOS, EOS, PAD, MASK and the tokenizer's own
        special tokens ([CLS], [SEP], <|im_start|> …), [UNK] excepted (it stands for a word of the text)."""
        own = {i for i, t in self.tok.get_added_tokens_decoder().items() if t.special}
        named = {i for i in (self.bos_id, self.eos_id, self.pad_id, self.mask_id) if i is not None}
        return (own | named) - {self.unk_id}

    @property
    def _specials(self) -> set[str]:
        return {t.content for t in self.tok.get_added_tokens_decoder().values() if t.special}

    def save(self, path: str | Path) -> None:
        self.tok.save(str(path))

    @property
    def specials_json(self) -> str:
        return json.dumps({"bos": self.bos_id, "eos": self.eos_id, "pad": self.pad_id, "mask": self.mask_id})


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


_UNICODE_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}


def _number_parts(labels, offsets, special, seq_ids):
    out = list(labels)
    i = 0
    while i < len(labels):
        j = i
        while (j + 1 < len(labels) and not special[i] and offsets[j + 1] == offsets[i]
               and seq_ids[j + 1] == seq_ids[i] and offsets[i][1] - offsets[i][0] == 1):
            j += 1
        if j > i:
            for p in range(i, j + 1):
                out[p] = part_label(labels[i], p - i + 1, j - i + 1)
        i = j + 1
    return out


def edit_distance(a: str, b: str) -> int:
    """The fewest single-character insertions, deletions, substitutions and swaps of neighbours from a to b
    (optimal string alignment: a typed "jonh" is one edit from "john")."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]  # [|a|+1, |b|+1]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def nearest_word(word: str, words) -> str | None:
    """The word of `words` closest to `word` (lower-cased) by edit distance; a tie goes to a word with the same
    first letter, then to the alphabetically first."""
    w = word.lower()
    return min(words, key=lambda v: (edit_distance(w, v), v[:1] != w[:1], v), default=None)
