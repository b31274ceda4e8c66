"""What each page sends: the real page script (pages/<page>.py) run once through Streamlit's AppTest with a
T-token text, and the bytes of what it emits: the Plotly JSON of every chart (`plotly_chart` elements'
spec, exactly as Streamlit serialises the figure; matrices drawn as a PNG ride inside it as data URIs)
plus the bytes of every st.image.

The pages read their inputs as a bookmark gives them: `?model=…&text=…` (Long inputs: `?long_model=…` and
its own text box). The model is random-long-decoder, the one registry model whose context reaches the
benchmark's longest T (4,096): its byte tokenizer makes T − 1 characters T tokens.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from attnlab.analysis.machinery.bench_report import Payload
from attnlab.app.navigation import PAGES as NAV_PAGES

from attnlab.data import data_folder

MODEL = "random-long-decoder"
# Pages that read another kind of model: measured with it, at its default input (their payload does not grow with T)
OWN_MODEL = {"vision": ("vit_model", "lecture-vit")}
NOT_MEASURED = {
    "block": "one token's path: its default figures hold O(layers × d_model) numbers whatever T",
    "cross_attention": "encoder–decoder only (the payload model is a decoder)",
    "permutation": "random-weight encoders on a short shuffled text (the page's own study), not the model at T",
    "positions": "position tables of the model (P × d), not attention over the text",
    "routing": "mixture-of-experts models only: with the payload model (no experts) it shows lecture-moe on its "
               "sample, tokens × experts per layer, independent of T",
    "step_by_step": "a fixed toy example, independent of T",
    "patching": "one run per patched layer and position (O(layers × T) forward passes): a compute study at T = 4,096, "
                "not a payload",
}
# every page of the navigation (app/navigation.py, the one table of pages) not said above, in navigation order
PAGES = tuple(Path(f).stem for f, *_ in NAV_PAGES if Path(f).stem not in NOT_MEASURED)
TIMEOUT_S = 1800.0


def page_text(T: int, model: str = MODEL) -> str:
    """A text that `model` reads as exactly T tokens: the app's long sample (nonsense words repeating every
    ~1/8 of the text), cut to the right number of characters. ValueError when no cut gives T tokens."""
    from attnlab.app.longinput import long_sample
    from attnlab.model.registry import load

    lm = load(model)
    if T > lm.context:
        raise ValueError(f"T={T} is over {model}'s context of {lm.context} tokens")
    base = long_sample(8 * T + 8, period=max(16, T // 8))  # repeats as the app's own long sample

    def cut(n: int) -> str:  # never ends in a space
        return base[:n - 1] + ("." if base[n - 1] == " " else base[n - 1])

    def tokens(n: int) -> int:
        try:
            return len(lm.encode(cut(n)).tokens)
        except ValueError:  # InputError: over the context
            return T + 1

    lo, hi = 1, len(base)  # the shortest cut of at least T tokens (a token holds one character or more)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if tokens(mid) < T else (lo, mid)
    if tokens(lo) != T:
        raise ValueError(f"no cut of the sample text is {T} tokens for {model}")
    return cut(lo)


@contextmanager
def _recorded_media():
    """{file_id: bytes} of every media file AppTest stores while the block runs (st.image among them)."""
    from unittest import mock

    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
    from streamlit.testing.v1 import app_test

    sizes: dict[str, int] = {}

    class Recording(MemoryMediaFileStorage):
        def load_and_get_id(self, path_or_data, mimetype, kind, filename=None) -> str:
            file_id = super().load_and_get_id(path_or_data, mimetype, kind, filename)
            sizes[file_id] = self._files_by_id[file_id].content_size
            return file_id

    with mock.patch.object(app_test, "MemoryMediaFileStorage", Recording):
        yield sizes


def run_script(script: str | Path, query: dict | None = None, state: dict | None = None,
               timeout: float = TIMEOUT_S):
    """(AppTest after one run of `script` with these query parameters and session state, media sizes)."""
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    # AppTest keeps widgets' format_func lambdas in session state; the served app never does
    config.set_option("runner.enforceSerializableSessionState", False)
    at = AppTest.from_file(str(script), default_timeout=timeout)
    for k, v in (state or {}).items():
        at.session_state[k] = v
    for k, v in (query or {}).items():
        at.query_params[k] = str(v)
    with _recorded_media() as media:
        at.run()
    return at, media


def sent_bytes(at, media: dict[str, int] | None = None) -> tuple[list[int], list[int]]:
    """(UTF-8 bytes of each chart's Plotly JSON, bytes of each st.image) in page order."""
    figures = [len(el.proto.spec.encode("utf-8")) for el in at.get("plotly_chart")]
    images = []
    for el in [*at.get("image"), *at.get("imgs")]:  # st.image: typed "image" by AppTest (older: "imgs")
        for img in el.proto.imgs:
            file_id = os.path.splitext(os.path.basename(img.url))[0]
            images.append((media or {}).get(file_id, len(img.url.encode("utf-8"))))  # a data URL is its own bytes
    return figures, images


def page_inputs(page: str, text: str, model: str = MODEL) -> tuple[dict, dict]:
    """(query parameters, session state) that give `page` this model and text, as the page reads them."""
    if page == "long_input":
        return {"long_model": model}, {"long_text": text}
    if page in OWN_MODEL:
        key, own = OWN_MODEL[page]
        return {key: own}, {}
    return {"model": model, "text": text}, {}


def page_payload(page: str, T: int, model: str = MODEL, text: str | None = None,
                 timeout: float = TIMEOUT_S) -> dict:
    """One payload row: run pages/<page>.py with a T-token text; bytes None and an error when it fails."""
    text = page_text(T, model) if text is None else text
    query, state = page_inputs(page, text, model)
    t = time.perf_counter()
    row = {Payload.PAGE: page, Payload.T: T, Payload.MODEL: OWN_MODEL.get(page, (None, model))[1]}
    try:
        at, media = run_script(data_folder("pages") / f"{page}.py", query, state, timeout)
    except Exception as e:  # noqa: BLE001 — AppTest's own failure (a timeout): report it, do not stop the run
        return row | {Payload.BYTES: None, Payload.ERROR: f"{type(e).__name__}: {e}"[:300]}
    problems = [e.message for e in at.exception] + [e.value for e in at.error]
    if problems:
        return row | {Payload.BYTES: None, Payload.ERROR: " ".join(str(problems[0]).split())[:300]}
    figures, images = sent_bytes(at, media)
    row |= {Payload.BYTES: sum(figures) + sum(images), Payload.FIGURES: figures}
    if images:
        row[Payload.IMAGES] = images
    return row | {Payload.BUILD_S: round(time.perf_counter() - t, 3)}


def page_payloads(lengths, pages=PAGES, model: str = MODEL,
                  progress: Callable[[str], None] | None = None) -> tuple[list[dict], str]:
    """Payload rows for every page at every T (failed pages last), and a note on how they were measured."""
    import streamlit as st

    out = []
    for T in lengths:
        try:
            text = page_text(T, model)
        except ValueError as e:  # T over the model's context: say so for every page, measure the rest
            out += [{Payload.PAGE: page, Payload.T: T, Payload.MODEL: model, Payload.BYTES: None,
                     Payload.ERROR: str(e)} for page in pages]
            continue
        for page in pages:
            if progress:
                progress(f"payload: {page} at T={T}")
            out.append(page_payload(page, T, model, text))
            st.cache_data.clear()  # each page starts from nothing cached: one page's arrays in memory at a time
    out = [p for p in out if p[Payload.BYTES] is not None] + [p for p in out if p[Payload.BYTES] is None]
    note = (f"Each page script (pages/<page>.py) runs once through Streamlit's AppTest with {model} and a "
            "T-token text, as a bookmark ?model=…&text=… gives it (Long inputs: its own model and text box), "
            "every other option at its default (Vision: lecture-vit on its default sample image, whatever T); bytes = the UTF-8 length of every plotly_chart's JSON as "
            "Streamlit sends it, summed, plus any st.image. Pages not measured: "
            + "; ".join(f"{k} ({v})" for k, v in NOT_MEASURED.items()) + ".")
    return out, note
