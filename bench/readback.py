"""What one script run sent a websocket client, read back (bench/wsclass.py): the widgets by label, the
charts by key, the token strip's tokens and any error; what a step should show for a text."""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser

from attnlab.bench.classload import head_ticks, tokens_of


class _Strip(HTMLParser):
    """The tokens of the token strip's HTML (the text of each `.tok` chip, its <sub> position left out)."""

    def __init__(self):
        super().__init__()
        self.tokens, self._tok, self._sub, self._depth = [], None, 0, 0

    def handle_starttag(self, tag, attrs):
        cls = (dict(attrs).get("class") or "").split()
        if self._tok is not None:
            self._depth += 1
            self._sub += tag == "sub"
        elif "tok" in cls:
            self._tok, self._depth, self._unk = [], 1, "unk" in cls

    def handle_endtag(self, tag):
        if self._tok is None:
            return
        self._depth -= 1
        self._sub -= tag == "sub" and self._sub > 0
        if self._depth == 0:
            t = "".join(self._tok)
            self.tokens.append(t[1:] if self._unk and t.startswith("✖") else t)
            self._tok = None

    def handle_data(self, data):
        if self._tok is not None and not self._sub:
            self._tok.append(data)


def strip_tokens(body: str) -> list[str] | None:
    """The tokens of a token strip's HTML (app.token_strip), None when `body` holds no strip."""
    if 'class="strip' not in body:
        return None
    p = _Strip()
    p.feed(body)
    return p.tokens


class Run:
    """What one script run sent: seconds, its elements by kind, and how it ended."""

    def __init__(self):
        self.seconds, self.status = None, None
        self.widgets: dict[str, tuple[str, str]] = {}  # label → (widget id, fragment id)
        self.charts: dict[str, dict] = {}  # chart key ("head", …) → Plotly figure dict
        self.strip: list[str] | None = None
        self.errors: list[str] = []


def shown_in(run: Run, where: str) -> list[str] | None:
    """The tokens a run showed: the token strip's, or the head matrix's x tick labels (unescaped)."""
    if where == "strip":
        return run.strip
    ticks = (run.charts.get("head") or {}).get("layout", {}).get("xaxis", {}).get("ticktext")
    return [html.unescape(t) for t in ticks] if ticks else None


def want_for(text: str, where: str) -> list[str]:
    return tokens_of(text) if where == "strip" else head_ticks(tokens_of(text))


def read_element(run: Run, el, fragment: str) -> None:
    kind = el.WhichOneof("type")
    sub = getattr(el, kind)
    if kind in ("button_group", "text_area", "selectbox"):
        run.widgets[sub.label] = (sub.id, fragment)
    elif kind == "plotly_chart" and "-fig-" in sub.id:
        run.charts[sub.id.rsplit("-fig-", 1)[1]] = json.loads(sub.spec or sub.figure.spec)
    elif kind in ("html", "markdown") and (toks := strip_tokens(sub.body)) is not None:
        run.strip = toks
    elif kind == "exception":
        run.errors.append(f"exception: {sub.type}: {sub.message[:200]}")
    elif kind == "alert" and sub.format == 1:  # Alert.ERROR
        body = sub.body.strip()  # a refusal is one line: more is marked, so a checker can count it
        run.errors.append(f"error box: {body[:200]}" + (" [more than one line]" if "\n" in body else ""))
