"""The lecturer's own tour: "Add this view to my tour" on a page adds the page and its URL state as the last step;
the tour page shows the lecturer's words and a link to the view, edits titles and words, moves and deletes steps,
saves a file that reads back; `attnlab app --tour FILE` opens on that file; bad files are one line."""

from __future__ import annotations

import json

import pytest
from attnlab.app.tour import BUILDERS, STEPS
from attnlab.app.tour.custom import PAGE_PATHS
from attnlab.app.tour.tour_file import TourFileError, load_tour, read_tour, tour_json
from attnlab.cli.main import main
from streamlit.testing.v1 import AppTest

from tests.app.conftest import ENTRY, ok

N = len(STEPS)
MINE = {"title": "My class", "steps": [
    {"builtin": "masks", "page": "step-by-step", "title": "Masks first", "text": "Ask the class first."},
    {"page": "heatmaps", "state": {"model": "lecture-decoder", "layer": "1", "head": "2"}, "title": "Up close",
     "text": "Head **1.2** looks one token back."}]}


def test_the_built_in_tour_is_a_tour_file():
    tour = load_tour(None)
    assert [e["builtin"] for e in tour.entries] == list(BUILDERS) and len(tour.steps) == N == 18
    assert [s.title for s in tour.steps] == [s.title for s in STEPS] and tour.steps[0].page == ""
    assert read_tour(tour_json(tour.title, tour.entries)).entries == tour.entries  # save, load: the same tour


@pytest.mark.parametrize("doc, line", [
    ("not json", "mine.json is not JSON"),
    ('{"steps": []}', "mine.json has 0 steps; a tour has 1 to 60"),
    ('[1, 2]', "mine.json is not a tour"),
    ('{"steps": [{"page": "heatmaps"}]}', "mine.json: step 1 needs a title"),
    ('{"steps": [{"page": "tour", "title": "x"}]}', "mine.json: step 1: unknown page 'tour'"),
    ('{"steps": [{"builtin": "nope", "page": "", "title": "x"}]}', "mine.json: step 1: unknown builtin 'nope'"),
    ('{"steps": [{"page": "", "title": "x", "state": {"a": [1]}}]}', "step 1: state must be an object"),
    ('{"steps": [{"page": "", "title": "x", "colour": "red"}]}', "step 1 has unknown field(s) colour"),
    ('{"steps": [{"page": ["heatmaps"], "title": "x"}]}', "mine.json: step 1: unknown page \"['heatmaps']\""),
    ('{"steps": [{"builtin": ["masks"], "page": "", "title": "x"}]}', "step 1: unknown builtin \"['masks']\""),
    ("[" * 100_000 + "]" * 100_000, "mine.json is not a tour: its JSON nests too deeply"),
    (json.dumps({"steps": [{"page": "", "title": "x", "state": {"text": "a" * 100_001}}]}),
     "mine.json: step 1: state is longer than 100,000 characters"),
    ('{"steps": ' + "[" * 50_000 + "]" * 50_000 + "}", "mine.json is not a tour: its JSON nests too deeply"),
])
def test_bad_tour_files_are_one_line(doc, line):
    with pytest.raises(TourFileError) as e:
        read_tour(doc, "mine.json")
    assert line in str(e.value) and "\n" not in str(e.value)


def test_a_huge_tour_file_is_one_line_without_reading_it_all(tmp_path, capsys):
    big = tmp_path / "mine.json"
    big.write_text(json.dumps({"steps": [{"page": "", "title": "x", "text": "a" * 50_000_000}]}))
    with pytest.raises(TourFileError) as e:
        load_tour(big)
    assert str(e.value) == "mine.json is larger than 1,000,000 bytes: not a tour file"
    assert main(["handout", "--tour", str(big), "--out", str(tmp_path / "x.html")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"attnlab: error: {e.value}"]


def tour_app(monkeypatch, tmp_path, doc=None) -> AppTest:
    if doc is None:
        monkeypatch.delenv("ATTNLAB_TOUR", raising=False)
    else:
        (tmp_path / "mine.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
        monkeypatch.setenv("ATTNLAB_TOUR", str(tmp_path / "mine.json"))
    at = AppTest.from_file(ENTRY, default_timeout=120)
    at.run()
    return at


def test_a_tour_file_opens_with_the_lecturers_words_and_link(monkeypatch, tmp_path):
    at = tour_app(monkeypatch, tmp_path, MINE)
    at.switch_page("../pages/tour.py").run()
    ok(at)
    assert at.subheader[0].value == "Step 1 of 2: Masks first"
    assert "*My class: 2 steps, each a view with its settings and your words.*" in [m.value for m in at.markdown]
    text = "\n".join(m.value for m in at.markdown)
    assert "α₂,₂" in text and text.index("α₂,₂") < text.index("Ask the class first.")  # the model's words first
    at.button(key="tour_next").click().run()
    ok(at)
    assert at.subheader[0].value == "Step 2 of 2: Up close"
    text = "\n".join(m.value for m in at.markdown)
    assert "Head **1.2** looks one token back." in text
    assert "[Show this view ↗](/heatmaps?model=lecture-decoder&layer=1&head=2)" in text


def test_a_bad_tour_file_is_one_line_on_the_page_and_the_built_in_tour_runs(monkeypatch, tmp_path):
    at = tour_app(monkeypatch, tmp_path, '{"steps": 3}')
    at.switch_page("../pages/tour.py").run()
    assert not at.exception
    assert [e.value for e in at.error] == ["mine.json is not a tour: expected {\"title\": …, \"steps\": [ … ]}"]
    assert at.subheader[0].value.startswith(f"Step 1 of {N}:")
    assert f"*The lecture in {N} steps: each view with its model, its input and what to look at.*" in [
        m.value for m in at.markdown]


def test_add_this_view_then_edit_move_delete_and_save(monkeypatch, tmp_path):
    at = tour_app(monkeypatch, tmp_path)
    at.switch_page("../pages/heatmaps.py").run()
    ok(at)
    at.button(key="tour_add").click().run()
    ok(at)
    entries = at.session_state["tour_entries"]
    assert len(entries) == N + 1 and entries[-1]["page"] == "heatmaps" and entries[-1]["title"] == "Heatmaps: my view"
    assert entries[-1]["state"]["model"] == "lecture-decoder" and "present" not in entries[-1]["state"]
    at.switch_page("../pages/tour.py").run()
    at.selectbox(key="step").set_value(N + 1).run()
    ok(at)
    assert at.subheader[0].value == f"Step {N + 1} of {N + 1}: Heatmaps: my view"
    at.text_input(key=f"tour_t_{N + 1}_{N + 1}").set_value("Every head").run()
    at.text_area(key=f"tour_x_{N + 1}_{N + 1}").set_value("Look at layer 3.").run()
    at.button(key="tour_up").click().run()
    ok(at)
    assert at.subheader[0].value == f"Step {N} of {N + 1}: Every head" and at.query_params["step"] == str(N)
    entries = at.session_state["tour_entries"]
    assert entries[N - 1]["title"] == "Every head" and entries[N - 1]["text"] == "Look at layer 3."
    assert entries[N]["builtin"] == list(BUILDERS)[-1]  # the built-in last step moved down one
    at.button(key="tour_del").click().run()
    ok(at)
    assert len(at.session_state["tour_entries"]) == N and at.subheader[0].value.startswith(f"Step {N} of {N}:")
    saved = read_tour(tour_json(at.session_state["tour_title"], at.session_state["tour_entries"]))
    assert [e.get("builtin") for e in saved.entries] == list(BUILDERS)


def test_attnlab_app_tour_checks_the_file_and_passes_it_on(monkeypatch, tmp_path, capsys):
    seen = {}
    monkeypatch.setattr("os.execve", lambda exe, cmd, env: seen.update(env=env))
    (tmp_path / "mine.json").write_text(json.dumps(MINE))
    assert main(["app", "--device", "cpu", "--tour", str(tmp_path / "mine.json")]) == 0
    assert seen["env"]["ATTNLAB_TOUR"] == str((tmp_path / "mine.json").resolve())
    (tmp_path / "bad.json").write_text("{")
    assert main(["app", "--device", "cpu", "--tour", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("attnlab: error: bad.json is not JSON") and len(err) == 1
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)  # was a RecursionError's traceback
    for command in (["app", "--device", "cpu"], ["handout", "--out", str(tmp_path / "h.html")]):
        assert main([*command, "--tour", str(tmp_path / "deep.json")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["attnlab: error: deep.json is not a tour: its JSON nests too deeply"], command


def test_attnlab_app_on_a_bad_tour_file_writes_one_line_to_stderr(tmp_path):
    """In its own process (Streamlit's loggers write to the real stderr, which capsys does not hold): 51 lines."""
    import os
    import subprocess
    import sys

    (tmp_path / "bad.json").write_text('{"steps": [{"page": ["heatmaps"], "title": "x"}]}')
    done = subprocess.run([sys.executable, "-m", "attnlab.cli.main", "app", "--device", "cpu", "--tour",
                           str(tmp_path / "bad.json")], capture_output=True, text=True, timeout=120,
                          env=os.environ | {"OMP_NUM_THREADS": "1"}, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["attnlab: error: bad.json: step 1: unknown page \"['heatmaps']\"; pages are "
                                        + ", ".join(repr(p) for p in PAGE_PATHS)]


def test_a_view_whose_page_fails_is_one_line(tmp_path, capsys):
    tour = tmp_path / "mine.json"
    state = {"model": "lecture-decoder", "preset": "custom", "text": "x " * 600}  # past the model's context
    tour.write_text(json.dumps({"steps": [{"page": "", "state": state, "title": "x"}]}))
    assert main(["handout", "--tour", str(tour), "--out", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == ("attnlab: error: the page / at this state says: The text is 601 tokens long; this model's context "
                   "is 96 tokens. Change the text or the model and try again.")


def test_a_view_of_a_model_that_does_not_exist_is_one_line(monkeypatch, tmp_path, capsys):
    """The page stops before drawing (it names what it cannot load): the handout says so, not an empty figure."""
    monkeypatch.setenv("ATTNLAB_ALLOW_HUB", "0")
    tour = tmp_path / "mine.json"
    tour.write_text(json.dumps({"steps": [{"page": "heatmaps", "state": {"model": "nosuchmodel"}, "title": "x"}]}))
    assert main(["handout", "--tour", str(tour), "--out", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("attnlab: error: the page /heatmaps at this state draws nothing: This server does "
                              "not download models") and not (tmp_path / "x.html").exists()


def test_each_step_downloads_its_figure_when_kaleido_is_here(monkeypatch, tmp_path):
    from attnlab.app.tour.images import available

    at = tour_app(monkeypatch, tmp_path)
    at.switch_page("../pages/tour.py").run()
    ok(at)
    labels = {b.proto.label: b.proto.disabled for b in at.get("download_button")}
    assert set(labels) == {"Save the tour (JSON)", "The tour as an HTML handout", "This step's figure as PNG",
                           "This step's figure as SVG"}
    assert labels["This step's figure as PNG"] == labels["This step's figure as SVG"] == bool(available())


def test_a_tour_with_lecturers_views_is_built_apart_from_the_server(tmp_path):
    """AppTest replaces Streamlit's runtime while it runs a page: the app builds such a handout in a subprocess."""
    from attnlab.app.tour.handout import embedded_figures, handout_apart
    from streamlit.runtime import Runtime

    before = Runtime._instance
    doc = handout_apart(MINE["title"], MINE["steps"])
    assert Runtime._instance is before  # this process's runtime untouched
    assert sorted(embedded_figures(doc)) == [1, 2] and "<h2>Step 2 of 2: Up close</h2>" in doc


def test_a_tour_of_sixty_steps_takes_no_sixty_first(monkeypatch, tmp_path):
    """A tour file holds at most 60 steps: "Add this view" on a full tour added a 61st, and the tour page then failed
    to read its own tour."""
    full = {"title": "Full", "steps": [{"builtin": "masks", "page": "step-by-step", "title": f"S{i}"} for i in range(60)]}
    at = tour_app(monkeypatch, tmp_path, full)
    at.switch_page("../pages/heatmaps.py").run()
    at.button(key="tour_add").click().run()
    ok(at)
    assert len(at.session_state["tour_entries"]) == 60
    assert [t.proto.body for t in at.toast] == ["The tour already has 60 steps, the most a tour file holds: delete "
                                                "one on the Lecture tour page first."]
    at.switch_page("../pages/tour.py").run()
    ok(at)
    assert at.subheader[0].value == "Step 1 of 60: S0"


def test_a_lecturers_view_reads_the_pages_numpy_arrays_as_numbers():
    """A page's figure comes back as JSON with numpy arrays base64-encoded: the Heads page's view raised TypeError
    ("float() argument must be … not 'dict'") and the KV cache page's tick values became ['dtype', 'bdata']."""
    import numpy as np
    from attnlab.app.tour.custom import arrays, lecturer_view

    assert np.array_equal(arrays({"x": {"dtype": "i1", "bdata": "AAEC"}, "z": [{"dtype": "f4", "bdata": "AACAPwAAAEA=",
                                                                             "shape": "1, 2"}]})["z"][0], [[1.0, 2.0]])
    heads = lecturer_view({"page": "heads", "state": {"model": "lecture-decoder"}, "title": "x"}).fig
    assert all(np.asarray(t.z, dtype=float).ndim == 2 for t in heads.data if t.type == "heatmap")
    kv = lecturer_view({"page": "kv-cache", "state": {"model": "lecture-decoder"}, "title": "x"}).fig
    ticks = [list(a.tickvals) for a in [*kv.select_xaxes(), *kv.select_yaxes()] if a.tickvals is not None]
    assert ticks and all(isinstance(v, (int, float, np.number)) for t in ticks for v in t)
