"""Helpers of the reliability tests: the report file, page error checks, the token strip's parsed text."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
from attnlab.app import inputs, state
from attnlab.model.config import ModelConfig
from attnlab.model.registry import default_model

from tests.app.conftest import titled, z_of

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = default_model()
FOLDER = inputs.FOLDER
REPORT = ROOT / "artifacts" / "reliability.json"
LOADED = "The model could not be loaded: "
FIX = ". Pick another model or fix the folder."
CHANGE = ". Change the text or the model and try again."


def report(**numbers) -> None:
    """Print the numbers for the issue and merge them into artifacts/reliability.json."""
    print("\nRELIABILITY", json.dumps(numbers))
    REPORT.parent.mkdir(exist_ok=True)
    old = json.loads(REPORT.read_text()) if REPORT.is_file() else {}
    for k, v in numbers.items():  # one level deep: per-model entries add up across tests
        old[k] = old[k] | v if isinstance(v, dict) and isinstance(old.get(k), dict) else v
    REPORT.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")


def no_exception(at) -> None:
    assert not at.exception, [e.message for e in at.exception]


def errors(at) -> list[str]:
    return [e.value for e in at.error]


def strip_bodies(at) -> list[str]:
    return [h.proto.body for h in at.get("html") if 'class="strip"' in h.proto.body]


class _Strip(HTMLParser):
    """The chips of a token strip: their text (index removed) and every tag and attribute seen."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tokens: list[str] = []
        self.tags: set[str] = set()
        self.attrs: set[str] = set()
        self._in_tok = self._in_sub = self._unk = False

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs |= {k for k, _ in attrs}
        if tag == "span" and dict(attrs).get("class") in ("tok", "tok unk"):  # "tok unk": read as [UNK], marked ✖
            self._in_tok = True
            self._unk = dict(attrs)["class"] == "tok unk"
            self.tokens.append("")
        self._in_sub = self._in_sub or tag == "sub"

    def handle_endtag(self, tag):
        if tag == "sub":
            self._in_sub = False
        elif tag == "span":
            self._in_tok = False

    def handle_data(self, data):
        if self._in_tok and not self._in_sub:
            if self._unk and not self.tokens[-1]:
                data = data.removeprefix("✖")  # the unknown-word mark, not part of the token
            self.tokens[-1] += data


def parse_strip(body: str) -> _Strip:
    p = _Strip()
    p.feed(body)
    p.close()
    return p


def strip_tokens(at, i: int = 0) -> list[str]:
    return parse_strip(strip_bodies(at)[i]).tokens


def serves_default(at) -> None:
    """Pick the default model again: no message, the chart has data, the strip has tokens."""
    at.selectbox(key="model").set_value(DEFAULT).run()
    no_exception(at)
    assert not errors(at), errors(at)
    z = z_of(titled(at, "Where does token")["data"][0])
    assert z.shape[0] == load_cfg(DEFAULT).n_layers and np.isfinite(z).any()
    assert strip_bodies(at)


_CFGS: dict[str, ModelConfig] = {}


def load_cfg(name: str) -> ModelConfig:
    if name not in _CFGS:
        _CFGS[name] = state.model(name).cfg
    return _CFGS[name]


def vocab_words(name: str) -> list[str]:
    vocab = state.model(name).tokenizer
    if hasattr(vocab, "tok"):
        return sorted(w for w in vocab.tok.get_vocab() if w.isalpha())
    return ["the", "cat", "sat", "on", "a", "mat", "<b>", "é", "👍", "שלום"]
