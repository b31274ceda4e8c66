"""A tour file: JSON {"title": …, "steps": [step, …]}, each step either one of the built-in views
({"builtin": "masks", "page": "step-by-step", "title": …}: figure and narrative computed from the model now) or a
lecturer's view ({"page": "heatmaps", "state": {URL state}, "title": …, "text": …}: the page's first figure at that
state, with the lecturer's words). The built-in tour is app/tour/lecture.json. A bad file is one line
(TourFileError)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.app.tour.builders import BUILDERS
from attnlab.app.tour.core import Step
from attnlab.app.tour.custom import PAGE_PATHS, lecturer_view

from attnlab.data import data_folder

BUILTIN = "lecture.json"
MAX_STEPS, MAX_TEXT = 60, 2000
MAX_BYTES = 1_000_000  # a tour file: 60 steps of 2,000 characters and their URL states fit many times over
MAX_STATE = 100_000  # one URL state's characters: Streamlit drops a longer query string without a word (524,288)


class TourFileError(ValueError):
    """A tour file that cannot be read: the message is one line saying what and where."""


@dataclass(frozen=True)
class Tour:
    """A tour: its title, the steps to build and the entries they came from (what a save writes back)."""
    title: str
    steps: list[Step]
    entries: list[dict] = field(default_factory=list)


def _entry(i: int, raw) -> dict:
    """One step entry checked and normalised; TourFileError naming step i (1-based) otherwise."""
    where = f"step {i}"
    if not isinstance(raw, dict):
        raise TourFileError(f"{where} is not an object with page, state, title and text")
    unknown = set(raw) - {"builtin", "page", "state", "title", "text"}
    if unknown:
        raise TourFileError(f"{where} has unknown field(s) {', '.join(sorted(unknown))}")
    title, text, page = raw.get("title", ""), raw.get("text", ""), raw.get("page", "")
    if not isinstance(title, str) or not title.strip() or len(title) > 200:
        raise TourFileError(f"{where} needs a title (text of 1 to 200 characters)")
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise TourFileError(f"{where}: text must be a string of at most {MAX_TEXT} characters")
    if not isinstance(page, str) or page not in PAGE_PATHS:
        raise TourFileError(f"{where}: unknown page {str(page)[:40]!r}; pages are "
                            f"{', '.join(repr(p) for p in PAGE_PATHS)}")
    builtin = raw.get("builtin")
    if builtin is not None and (not isinstance(builtin, str) or builtin not in BUILDERS):
        raise TourFileError(f"{where}: unknown builtin {str(builtin)[:40]!r}; one of {', '.join(BUILDERS)}")
    state = raw.get("state", {})
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float, bool))
                                              for k, v in state.items()):
        raise TourFileError(f"{where}: state must be an object of URL parameters (names to text or numbers)")
    if sum(len(k) + len(str(v)) for k, v in state.items()) > MAX_STATE:
        raise TourFileError(f"{where}: state is longer than {MAX_STATE:,} characters (a URL that long is not opened)")
    out = {"page": page, "title": title.strip(), "text": text}
    return out | ({"builtin": builtin} if builtin else {"state": {k: str(v) for k, v in state.items()}})


def step_of_entry(n: int, e: dict) -> Step:
    """The Step an entry describes: a built-in builder, or the lecturer's view of a page."""
    if "builtin" in e:
        build = BUILDERS[e["builtin"]]
        if e.get("text"):  # the lecturer's words after the model's
            return Step(n, e["title"], e["page"], lambda present, b=build, t=e["text"]: _with_words(b(present), t))
        return Step(n, e["title"], e["page"], build)
    return Step(n, e["title"], e["page"], lambda present, e=e: lecturer_view(e, present))


def _with_words(view, text: str):
    from dataclasses import replace

    return replace(view, narrative=f"{view.narrative}\n\n{text}")



def parse_tour(data, source: str = "the tour file") -> Tour:
    """A tour from decoded JSON; TourFileError (one line) when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise TourFileError(f"{source} is not a tour: expected {{\"title\": …, \"steps\": [ … ]}}")
    steps = data["steps"]
    if not 1 <= len(steps) <= MAX_STEPS:
        raise TourFileError(f"{source} has {len(steps)} steps; a tour has 1 to {MAX_STEPS}")
    title = data.get("title", "")
    if not isinstance(title, str) or len(title) > 200:
        raise TourFileError(f"{source}: the title must be text of at most 200 characters")
    try:
        entries = [_entry(i, s) for i, s in enumerate(steps, 1)]
    except TourFileError as e:
        raise TourFileError(f"{source}: {e}") from None
    return Tour(title.strip() or "My tour", [step_of_entry(i, e) for i, e in enumerate(entries, 1)], entries)


def read_tour(text: str | bytes, source: str = "the tour file") -> Tour:
    """A tour from a file's text."""
    if len(text) > MAX_BYTES:
        raise TourFileError(f"{source} is larger than {MAX_BYTES:,} bytes: not a tour file")
    try:
        data = json.loads(text)
    except RecursionError:  # '[[[[…' a hundred thousand deep: json's decoder recurses once per level
        raise TourFileError(f"{source} is not a tour: its JSON nests too deeply") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TourFileError(f"{source} is not JSON ({str(e).split(':')[0]}, line {getattr(e, 'lineno', '?')})") \
            from None
    return parse_tour(data, source)


def load_tour(path: str | Path | None) -> Tour:
    """The tour in `path`, or the built-in tour for None."""
    p = data_folder("app.tour") / BUILTIN if path is None else Path(path)
    try:
        with open(p, "rb") as f:
            text = f.read(MAX_BYTES + 1)  # a huge file is refused without reading it all
    except OSError as e:
        raise TourFileError(f"cannot read the tour file {p}: {e.strerror or e}") from None
    return read_tour(text, p.name)


def tour_json(title: str, entries: list[dict]) -> str:
    """The file a tour saves to (what `read_tour` reads back)."""
    return json.dumps({"title": title, "steps": entries}, ensure_ascii=False, indent=1) + "\n"
