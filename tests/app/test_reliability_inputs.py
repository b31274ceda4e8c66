"""Reliability (issue 9): limits as clear messages; hostile text shown as text in the token strip and the
figures; a hypothesis fuzz of text → tokens → capture → figure for every bundled and random model."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
from attnlab.app import frame, mechanics, state
from attnlab.app.figures.head_view import head_view
from attnlab.app.figures.matrix import matrix_heatmap
from attnlab.app.figures.mosaic import mosaic
from attnlab.app.figures.style import baseline_md, md
from attnlab.model.inputs import MAX_GENERATE, MAX_TEXT_CHARS, InputError
from attnlab.model.registry import RANDOM, bundled_names
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from tests.app.conftest import open_page, specs, titled, z_of
from tests.app.reliability import (
    CHANGE,
    DEFAULT,
    errors,
    no_exception,
    parse_strip,
    report,
    strip_bodies,
    vocab_words,
)


# -- 5. limits as clear messages ---------------------------------------------------------------------------
def _vocab_text(name: str, n: int) -> str:
    words = vocab_words(name)
    return " ".join(words[k % len(words)] for k in range(n))


def test_text_over_the_character_limit():
    at = open_page(None, model="random-decoder", text="ok")
    at.text_area(key="text").set_value("a" * (MAX_TEXT_CHARS + 1)).run()
    no_exception(at)
    assert errors(at) == [f"The text has {MAX_TEXT_CHARS + 1:,} characters; the limit is {MAX_TEXT_CHARS:,}{CHANGE}"]
    at.text_area(key="text").set_value("a" * MAX_TEXT_CHARS).run()  # within the characters, past the context
    assert errors(at) == [f"The text is {MAX_TEXT_CHARS + 1:,} tokens long; this model's context is "
                          f"{RANDOM['random-decoder'].max_len} tokens{CHANGE}"]
    at.text_area(key="text").set_value("back to normal").run()
    no_exception(at)
    assert not errors(at) and specs(at)


@pytest.mark.parametrize("name", [n for n in ("lecture-decoder", "lecture-encdec") if n in bundled_names()])
def test_tokens_past_the_context(name):
    lm = state.model(name)
    ctx = lm.cfg.max_len
    long = _vocab_text(name, ctx + 5)
    n_tok = len(lm.tokenizer.encode(long).ids)
    if lm.arch == "encdec":  # the source text is the long one
        at = open_page(None, model=name, text="the", src=long)
        what = "source text"
    else:
        at = open_page(None, model=name, text=long)
        what = "text"
    no_exception(at)
    assert errors(at) == [f"The {what} is {n_tok:,} tokens long; this model's context is {ctx:,} tokens{CHANGE}"]


def test_generation_limits():
    name = DEFAULT
    ctx = state.model(name).cfg.max_len
    full = _vocab_text(name, ctx - 1)  # with [BOS]: exactly the context, no room for a new token
    at = open_page("generate", model=name, text=full)
    no_exception(at)
    assert errors(at) == [f"The prompt already fills the model's context ({ctx:,} tokens here); shorten it. "
                          "Change the options above and try again."]
    at = open_page("generate", model="random-decoder", text="hi", gen_n=MAX_GENERATE + 1)  # a forged bookmark
    no_exception(at)
    assert not errors(at) and at.slider(key="gen_n").value == 16  # falls back to the default, within the slider
    with pytest.raises(InputError) as e:  # the app's generation path refuses more than MAX_GENERATE itself
        mechanics.generation_trace("random-decoder", "hi", None, MAX_GENERATE + 1)
    assert frame.error_message(e.value)[1] == (f"Can generate 0 to {MAX_GENERATE} new tokens, not "
                                               f"{MAX_GENERATE + 1}{CHANGE}")
    with pytest.raises(InputError, match=f"can generate 0 to {MAX_GENERATE} new tokens"):
        mechanics.cache_generation("random-decoder", "hi", None, MAX_GENERATE + 1, "eager")


# -- 6. hostile text: shown as text, never as markup -------------------------------------------------------
HOSTILE = {
    "script": "<script>window.__xss=1</script>",
    "img": '<img src=x onerror="window.__xss=1">',
    "plotly-markup": "<b>bold</b> <i>it</i> <br> <sup>2</sup> <span style='color:red'>red</span>",
    "plotly-link": '<a href="javascript:alert(1)">click</a> <a href=https://evil.example>x</a>',
    "entities": "&lt;b&gt; &amp; &#60;script&#62; &",
    "rtl": "שלום עולם مرحبا بالعالم \u202eevil\u202c",
    "combining": "e\u0301\u0301\u0301 Z\u0334\u0321\u031ba\u0337l\u0336g\u0338o",
    "zwj": "a\u200db\u200c c \u2060d \ufeffe",
    "emoji": "👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇫🇷",
    "markdown": "**bold** [link](javascript:alert(1)) $x^2$ `code` # h",
    "nul": "a\x00b",
    "control": "\x1b[31mred\x07",
    "huge": "x" * 100_000,
}
REFUSED = {  # the exact message for the texts the app refuses
    "nul": f"The text contains a control character U+0000 at position 1; remove it (only tab and newline are "
           f"allowed){CHANGE}",
    "control": f"The text contains a control character U+001B at position 0; remove it (only tab and newline are "
               f"allowed){CHANGE}",
    "huge": f"The text has 100,000 characters; the limit is {MAX_TEXT_CHARS:,}{CHANGE}",
}
STRIP_TAGS, STRIP_ATTRS = {"style", "div", "span", "sub"}, {"class", "title", "style"}


def escaped_label(label: str, token: str) -> bool:
    """A Plotly label for `token`: entity-escaped (no raw <, >, lone &), the token or its '…' shortening."""
    if html.escape(html.unescape(label), quote=False) != label:
        return False
    plain = html.unescape(label)
    return plain == token or (plain.endswith("…") and token.startswith(plain[:-1]))


def figure_strings(spec: dict) -> list[str]:
    """Every label Plotly draws as (pseudo-)HTML: tick text, trace text and categorical x/y, titles."""
    out = []
    for tr in spec["data"]:
        for k in ("text", "x", "y"):
            v = tr.get(k)
            if isinstance(v, str):
                out.append(v)
            elif isinstance(v, list):
                out += [s for row in v for s in (row if isinstance(row, list) else [row]) if isinstance(s, str)]
    for k, v in spec["layout"].items():
        if k.startswith(("xaxis", "yaxis")) and isinstance(v, dict):
            out += [s for s in v.get("ticktext") or [] if isinstance(s, str)]
    title = (spec["layout"].get("title") or {}).get("text") or ""
    out.append(title.replace("<br>", ""))  # the app's own line breaks (a title wrapped to its chart's width)
    return out


def plain_array(v) -> np.ndarray:
    """A 1-D array from a figure spec (plotly sends numpy arrays as base64 'bdata')."""
    if isinstance(v, dict) and "bdata" in v:
        import base64

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
    return np.asarray(v)


def check_shown_as_text(at, tokens: list[str]) -> None:
    """The strip shows exactly `tokens` and nothing but its own tags; no figure label carries markup."""
    for i, body in enumerate(strip_bodies(at)):  # the Explore page has one; Heatmaps none
        strip = parse_strip(body)
        assert i > 0 or strip.tokens == tokens
        assert strip.tags <= STRIP_TAGS and strip.attrs <= STRIP_ATTRS, (strip.tags, strip.attrs)
    for spec in specs(at):
        for s in figure_strings(spec):
            assert html.escape(html.unescape(s), quote=False) == s, s  # <, >, & only as entities


@pytest.mark.parametrize("name, page", [(DEFAULT, None), ("random-decoder", "heatmaps")])
def test_hostile_text_is_shown_as_text(name, page):
    """Every hostile text in one session, as a student would paste them one after another."""
    lm = state.model(name)
    at = open_page(page, model=name, text="start")
    for key, text in HOSTILE.items():
        at.text_area(key="text").set_value(text).run()
        no_exception(at)
        if key in REFUSED:
            assert errors(at) == [REFUSED[key]], key
            continue
        assert not errors(at), (key, errors(at))
        tokens = lm.encode(text).tokens
        check_shown_as_text(at, tokens)
        if page == "heatmaps":
            fig = titled(at, "layer 1, head 0")
            ticks, vals = fig["layout"]["xaxis"]["ticktext"], fig["layout"]["xaxis"]["tickvals"]
            vals = plain_array(vals).astype(int).tolist()
            assert all(escaped_label(t, tokens[v]) for t, v in zip(ticks, vals)), key
            assert z_of(fig["data"][0]).shape == (len(tokens), len(tokens))
        else:
            ax = titled(at, "Where does token")["layout"]["xaxis"]  # the labels kept where they fit
            vals = plain_array(ax["tickvals"]).astype(int).tolist()
            assert all(escaped_label(t, tokens[v]) for t, v in zip(ax["ticktext"], vals)), key
    at.text_area(key="text").set_value("<b>x</b>").run()
    if page is None:
        ticks = titled(at, "Where does token")["layout"]["xaxis"]["ticktext"]  # < b > x < / b >: split, escaped
        assert "&lt;" in ticks[1] and not any("<b>" in t for t in ticks)


# -- property-based fuzzing of text → tokens → capture → figure ---------------------------------------------
FUZZ_MODELS = [*[n for n in ("lecture-decoder", "lecture-encoder", "lecture-encdec") if n in bundled_names()],
               *RANDOM]
EXPECTED = ("is empty", "characters; the limit is", "control character", "tokens long; this model's context is",
            "gave no tokens")
FRAGMENTS = [*HOSTILE.values()][:10] + ["\n", "\t", " ", "[MASK]", "[BOS]", "<", ">", "&", "the", "cat"]
TRIED: dict[str, dict[str, int]] = {}


def _texts(name: str):
    words = [w for w in ("the cat sat on a mat < > ( ) [ ] ? . { } dog fox".split())]
    return hs.one_of(
        hs.text(max_size=120),
        hs.lists(hs.sampled_from(FRAGMENTS + words), max_size=12).map(" ".join),
        hs.lists(hs.sampled_from(words), min_size=1, max_size=80).map(" ".join),  # real tokens, some too long
        hs.text(alphabet=hs.characters(codec="utf-8", categories=["Cc", "Cf", "Mn", "Zs", "So", "Po"]),
                max_size=40),
    )


def _figure_invariants(cap, name: str) -> None:
    for i, group in enumerate(cap.groups()):
        qt, kt = cap.group_tokens(group)
        stack, mask = cap.matrices(group), cap.mask_of(group)  # [L, H, q, k], [q, k]
        assert stack.shape[2:] == (len(qt), len(kt)) and mask.shape == (len(qt), len(kt))
        live = mask.any(-1)
        np.testing.assert_allclose(stack.sum(-1)[..., live], 1, atol=1e-4)
        assert (stack[..., ~mask] == 0).all()
        # every cell as a heatmap trace: a long text would otherwise be pooled or sent as a PNG (no z to check)
        fig = matrix_heatmap(stack[-1, 0], qt, kt, mask=mask, title="fuzz", png_cells=10**9, max_side=max(len(qt), len(kt)))
        z = np.asarray(fig.data[0].z, dtype=np.float64)
        assert z.shape == (len(qt), len(kt)) and np.isnan(z[~mask]).all() and np.isfinite(z[mask]).all()
        for axis, toks in ((fig.layout.xaxis, kt), (fig.layout.yaxis, qt)):
            assert all(escaped_label(t, toks[int(v)]) for t, v in zip(axis.ticktext, axis.tickvals))
        mos = mosaic(stack, qt, kt, mask=mask)
        assert mos.layout.meta["heads"] == stack.shape[1]
        assert all(html.escape(html.unescape(s), quote=False) == s for s in mos.data[0].y)
        if i:
            continue
        hv = head_view(stack[-1], qt, kt, len(qt) - 1, range(stack.shape[1]))
        keys = hv.data[-1]  # the key labels: every k-th key and the strongest ones, each with its index
        assert len(keys.text) == len(keys.customdata) > 0
        assert all(escaped_label(t, kt[int(j)]) for t, (j, _) in zip(keys.text, keys.customdata))


@pytest.mark.parametrize("name", FUZZ_MODELS)
def test_fuzz_text_to_figure(name):
    lm = state.model(name)
    counts = TRIED.setdefault(name, {"inputs": 0, "drawn": 0, "refused": 0})

    @settings(max_examples=20, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(text=_texts(name), src=hs.one_of(_texts(name), hs.sampled_from(["the cat", "<b>x</b> & y", "שלום"])),
           backend=hs.sampled_from(["eager", "sdpa"]))
    def one(text, src, backend):
        counts["inputs"] += 1
        src = src if lm.arch == "encdec" else None
        try:
            cap = state.capture(name, text, src, backend)
        except InputError as e:
            level, msg = frame.error_message(e)
            assert level == "error" and any(x in msg for x in EXPECTED) and "\n" not in msg, msg
            counts["refused"] += 1
            return
        want = lm.encode(text, src)
        assert cap.tokens == want.tokens and cap.src_tokens == want.src_tokens
        assert all(isinstance(t, str) and t for t in cap.tokens)
        _figure_invariants(cap, name)
        counts["drawn"] += 1

    one()
    report(fuzz={name: counts})
    assert counts["inputs"] >= 20 and counts["drawn"] > 0


# -- Markdown in a token: shown as typed where a page writes a token into st.markdown ----------------------
MD_TEXT = "the [evil](https://evil.example)"


@settings(max_examples=200, deadline=None, database=None)
@given(label=hs.text(min_size=1, max_size=40))
def test_markdown_label_is_one_code_span(label):
    out = md(label, limit=60)
    fence = re.match(r"`+", out).group()
    assert out.endswith(fence) and fence not in label  # no backtick run inside can close the span early
    inner = out[len(fence):-len(fence)]
    assert inner == label or (inner[0] == inner[-1] == " " and inner[1:-1] == label)


@pytest.mark.parametrize(("name", "shown"), [
    ("every non-special token replaced by </s>", "every non-special token replaced by `</s>`"),
    ("every non-special token replaced by <|end_of_text|>", "every non-special token replaced by `<|end_of_text|>`"),
    ("every non-special token replaced by a`b", "every non-special token replaced by ``a`b``"),
    ("every token's embedding zero", "every token's embedding zero"),
])
def test_baseline_token_is_a_code_span(name, shown):
    """Integrated gradients' baseline names a tokenizer's token (Mistral's </s>, Llama-3's <|end_of_text|>): the
    Rollout page's captions show it as typed, never as HTML or Markdown."""
    assert baseline_md(name) == shown


@pytest.mark.skipif("lecture-encdec" not in bundled_names(), reason="needs the bundled lecture-encdec")
def test_markdown_in_a_token_is_shown_as_typed():
    src = "the cat sees the dog"
    at = open_page("cross_attention", model="lecture-encdec", src=src, text=MD_TEXT, x_start="prefix")
    no_exception(at)
    assert not errors(at), errors(at)
    line = next(m.value for m in at.markdown if "decoder reads position" in m.value)
    token = state.model("lecture-encdec").encode(MD_TEXT, src).tokens[-1]  # the link is split into its pieces
    assert token == ")" and "(`)`)" in line and "](https" not in line
    at = open_page("cross_attention", model="lecture-encdec", src=src, text="the `", x_start="prefix")
    line = next(m.value for m in at.markdown if "decoder reads position" in m.value)
    assert "(`` ` ``)" in line  # a backtick token in a code span of two backticks, as typed
