"""The websocket class test (bench/wsclass.py): the token strip read back from the app's own HTML, another
session's tokens recognised as a mixed result, runs merged by (sessions, replicas), and a quick class of 5
sessions for 30 s on a real server: every step kind runs, 0 errors, 0 mixed results. Times are the benchmark's
business (`attnlab bench --class`), not asserted here."""

from __future__ import annotations

from unittest import mock

from attnlab.analysis.machinery.bench_report import ClassLoad
from attnlab.bench.classload import head_ticks, tokens_of
from attnlab.bench.readback import Run, strip_tokens
from attnlab.bench.wsclass import STEPS, WsSession, class_on_server, merge_run


def _strip_html(tokens, unknown=()) -> str:
    """What app.token_strip.token_strip writes, caught from st.html."""
    from attnlab.app.token_strip import token_strip

    with mock.patch("attnlab.app.token_strip.st") as st:
        token_strip(tokens, [0.1] * len(tokens), query=0, unknown=unknown)
    (body,), _ = st.html.call_args
    return body


def test_strip_tokens_reads_the_app_strip_back():
    toks = ["[BOS]", "A", "<b>", " ", "&amp;", "1", "✖x"]
    assert strip_tokens(_strip_html(toks)) == toks
    assert strip_tokens(_strip_html(["a", "zork"], unknown=[1])) == ["a", "zork"]  # the ✖ mark is not the token
    assert strip_tokens("<p>no strip here</p>") is None


def test_a_step_is_checked_against_its_own_text_and_the_others():
    ada, bo = (WsSession.__new__(WsSession) for _ in range(2))
    ada.name, ada.text, ada.texts = "Ada", "Ada r1 sees Ada", ["Ada r0 sees Ada", "Ada r1 sees Ada"]
    bo.name, bo.text, bo.texts = "Bo", "Bo r1 sees Bo", ["Bo r0 sees Bo", "Bo r1 sees Bo"]
    run = Run()
    run.strip = tokens_of("Ada r1 sees Ada")
    assert ada.problem(run, "strip", None, [ada, bo]) == (None, False)
    run.strip = tokens_of("Bo r0 sees Bo")  # an earlier text of Bo's: a mixed result
    assert ada.problem(run, "strip", None, [ada, bo]) == ("showed Bo's tokens", True)
    run.strip = tokens_of("Ada r0 sees Ada")  # its own old text: stale, an error but not mixed
    bad, mixed = ada.problem(run, "strip", None, [ada, bo])
    assert not mixed and "for 'Ada r1 sees Ada'" in bad
    run.charts["head"] = {"layout": {"xaxis": {"ticktext": head_ticks(tokens_of(ada.text))},
                                     "title": {"text": "<b>layer 1, head 0</b>"}}}
    assert ada.problem(run, "ticks", "layer 1", [ada, bo]) == (None, False)
    assert ada.problem(run, "ticks", "head 1", [ada, bo])[0] == "head matrix titled '<b>layer 1, head 0</b>', not 'head 1'"


def test_merge_run_replaces_the_same_sessions_and_replicas():
    runs = [{ClassLoad.SESSIONS: 30, ClassLoad.N_REPLICAS: 1, "p": 1}, {ClassLoad.SESSIONS: 30, ClassLoad.N_REPLICAS: 2}]
    out = merge_run(runs, {ClassLoad.SESSIONS: 30, ClassLoad.N_REPLICAS: 1, "p": 2})
    assert [(r[ClassLoad.N_REPLICAS], r.get("p")) for r in out] == [(2, None), (1, 2)]


def test_quick_class_of_websocket_sessions():
    out = class_on_server(sessions=5, seconds=30)
    assert out[ClassLoad.ERRORS] == 0, out[ClassLoad.NOTES]
    assert out[ClassLoad.MIXED] == 0, out[ClassLoad.NOTES]
    assert set(out[ClassLoad.BY_STEP]) == set(STEPS)  # every kind of step ran and was checked
    assert out[ClassLoad.STEPS] == sum(v["n"] for v in out[ClassLoad.BY_STEP].values()) >= 5 * 4
    assert out[ClassLoad.REPLICAS] == {"-": 5} and out[ClassLoad.N_REPLICAS] == 1
    assert len(out[ClassLoad.RSS]) >= 3 and all(mb > 50 for _, mb in out[ClassLoad.RSS])
