"""AppTest helpers for the Streamlit pages."""

from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit import config
from streamlit.testing.v1 import AppTest

ENTRY = "../../app/main.py"  # AppTest.from_file: relative to the calling test file
PAGES = "../../pages"


@pytest.fixture(autouse=True, scope="session")
def _apptest_config():
    # AppTest keeps each widget's format_func (a lambda) in session state for its own use; the served app
    # never does, and keeps runner.enforceSerializableSessionState on (.streamlit/config.toml, browser tests).
    config.set_option("runner.enforceSerializableSessionState", False)


def open_page(page: str | None = None, timeout: float = 120, **params) -> AppTest:
    """Open the app at `/` (page None, through the entry script and its navigation) or pages/<page>.py
    directly, as a bookmark of /<page>?params would; `params` are the URL's query parameters."""
    at = AppTest.from_file(ENTRY if page is None else f"{PAGES}/{page}.py", default_timeout=timeout)
    for k, v in params.items():
        at.query_params[k] = str(v)
    return at.run()


def finish_jobs(at: AppTest, timeout: float = 600) -> AppTest:
    """Wait for every running job (app.jobs) to end, then run the page again: what its progress bar's poll does."""
    from attnlab.app import state

    for job in list(state._jobs()._jobs.values()):
        assert job.wait(timeout), f"job {job.key[0]} still running after {timeout} s"
    return at.run()


def specs(at: AppTest) -> list[dict]:
    """The Plotly figures on the page, as JSON (st.plotly_chart has no typed AppTest element)."""
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def titled(at: AppTest, text: str) -> dict:
    """The one figure whose title contains `text` (or, among several, equals it)."""
    def titles(s):  # as sent, and as read (a title wrapped to its chart's width by style.fit_title is one line)
        raw = s["layout"].get("title", {}).get("text") or ""
        return raw, raw.replace("<br>", " ")
    found = [s for s in specs(at) if any(text in t for t in titles(s))]
    if len(found) > 1:
        found = [s for s in found if text in titles(s)]
    assert len(found) == 1, [s["layout"].get("title", {}).get("text") for s in specs(at)]
    return found[0]


def panel(at: AppTest, title: str) -> dict:
    """The shown trace of the panel titled `title` in the page's panels figure (app.figures.panels)."""
    found = [t for s in specs(at) if title in (s["layout"].get("meta") or {}).get("panels", [])
             for t in s["data"] if t.get("name", "").startswith(f"{title} · ") and t.get("visible", True) is True]
    assert len(found) == 1, [s["layout"].get("meta") for s in specs(at)]
    return found[0]


def z_of(trace: dict) -> np.ndarray:
    """A heatmap's z as a float array (plotly sends numpy arrays base64-encoded as 'bdata')."""
    z = trace["z"]
    if isinstance(z, dict) and "bdata" in z:
        import base64

        arr = np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"]))
        return arr.reshape(z["shape"] if isinstance(z["shape"], list) else
                           [int(s) for s in str(z["shape"]).split(",")]).astype(np.float64)
    return np.array([[np.nan if v is None else v for v in row] for row in z], dtype=np.float64)


def overview_z(fig) -> np.ndarray:
    """The [nq, nk] matrix an overview figure (app.figures.overview) shows, its row bands put back together
    (NaN where nothing was sent)."""
    ny, nx = fig.layout.meta["shape"]
    rows = {name: i for i, name in enumerate(fig.layout.yaxis.categoryarray)}
    cols = {name: j for j, name in enumerate(fig.layout.xaxis.categoryarray)}
    z = np.full((ny, nx), np.nan, dtype=np.float32)
    for tr in fig.data:
        r, c = rows[tr.y[0]], cols[tr.x[0]]
        band = np.asarray(tr.z, dtype=np.float32)  # [band rows, band columns]
        z[r:r + band.shape[0], c:c + band.shape[1]] = band
    return z


def ok(at: AppTest) -> None:
    """No exception element and no error message on the page."""
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def widget(at: AppTest, key: str):
    """The slider or button group (url_state.index draws buttons for a few values, a slider for many) with `key`."""
    for kind in (at.button_group, at.slider):
        found = [w for w in kind if w.key == key]
        if found:
            return found[0]
    raise KeyError(key)


def arr(v) -> np.ndarray:
    """A Plotly data array: a list, or numpy sent base64-encoded ('bdata')."""
    if isinstance(v, dict) and "bdata" in v:
        import base64

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).astype(np.float64)
    return np.asarray(v, dtype=np.float64)
