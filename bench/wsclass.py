"""A class at once without browsers (`attnlab bench --class --clients ws`): N sessions speak Streamlit's own
websocket protocol (/_stcore/stream, protobuf BackMsg/ForwardMsg) to one server or to nginx in front of
replicas, loopback only. The server does all its work (script runs, figures, deltas) while the clients cost
next to nothing, so the numbers are the server's: what a class of students on their own laptops would wait
for, not the rendering time of N chromiums sharing the server's cores (that is `--clients browser`).

Each session, about every STEP_S seconds: types its own text on Explore, opens Heatmaps, picks another layer
(the close-up fragment's button group), picks another head (the same fragment), goes back to Explore. A step
is timed from sending the BackMsg to the script_finished message (every delta of the run received). After
each step the session checks what it got: Explore's token strip or the head matrix's tick labels must be its
own text's tokens (another session's: a mixed result), the head matrix's title the layer it picked; an
exception or error box, a failed or unfinished run, or a step over SETTLE_S is an error.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import numpy as np
from attnlab.analysis.machinery.bench_report import ClassLoad
from attnlab.bench.classload import MODEL, SETTLE_S, STEP_S, name_of, rss_mb, rss_slope
from attnlab.bench.readback import Run, read_element, shown_in, want_for

STEPS = ("text", "page", "layer", "head", "back")  # one session's cycle


class WsSession:
    """One student: a websocket with its own text (its name, so its tokens are recognisable)."""

    def __init__(self, base: str, i: int):
        self.i, self.base, self.step = i, base, 0
        self.name = name_of(i)
        self.text, self.page, self.query = f"{self.name} r0 sees {self.name}", "", ""
        self.texts = [self.text]  # every text this session has typed (another session showing one: mixed)
        self.widgets: dict[str, tuple[str, str]] = {}
        self.replica = None
        self.ws = self._connect()

    def _connect(self):
        """The websocket, with the sticky cookie nginx sets on the first page request (none without nginx)."""
        from websockets.sync.client import connect

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{self.base}/", timeout=30) as r:
            cookie = "; ".join(c.split(";")[0] for c in r.headers.get_all("Set-Cookie") or [])
            self.replica = r.headers.get("X-Attnlab-Replica")
        ws = self.base.replace("http://", "ws://") + "/_stcore/stream"
        return connect(ws, subprotocols=["streamlit"], additional_headers={"Cookie": cookie} if cookie else None,
                       max_size=2**27, open_timeout=30)

    def close(self) -> None:
        self.ws.close()

    def rerun(self, widget=None, fragment: str = "") -> Run:
        """Send one rerun (the current page and query string, one changed widget) and read to its end."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string, cs.page_name = self.query, self.page
        if fragment:
            cs.fragment_id = fragment
        if widget is not None:
            cs.widget_states.widgets.append(widget)
        run, t0 = Run(), time.perf_counter()
        self.ws.send(msg.SerializeToString())
        while True:
            f = ForwardMsg()
            f.ParseFromString(self.ws.recv(timeout=SETTLE_S))
            kind = f.WhichOneof("type")
            if kind == "delta" and f.delta.WhichOneof("type") == "new_element":
                read_element(run, f.delta.new_element, f.delta.fragment_id)
            elif kind == "page_info_changed":
                self.query = f.page_info_changed.query_string
            elif kind == "script_finished":
                run.seconds, run.status = time.perf_counter() - t0, f.script_finished
                break
        self.widgets.update(run.widgets)
        if run.status not in (0, 3):  # FINISHED_SUCCESSFULLY, FINISHED_FRAGMENT_RUN_SUCCESSFULLY
            run.errors.append(f"script_finished status {run.status}")
        return run

    def act(self) -> tuple[str, Run, str, str | None]:
        """The next step of the cycle: (its name, its run, where its tokens show: "strip" or "ticks", the title
        the head matrix must have, else None)."""
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        name = STEPS[self.step % len(STEPS)]
        cycle = self.step // len(STEPS)
        self.step += 1
        if name == "text":
            self.text = f"{self.name} r{cycle} sees {self.name}"
            self.texts.append(self.text)
            return name, self.rerun(WidgetState(id=self.widgets["Text"][0], string_value=self.text)), "strip", None
        if name in ("page", "back"):
            self.page = "heatmaps" if name == "page" else ""
            return name, self.rerun(), "ticks" if name == "page" else "strip", None
        wid, frag = self.widgets["Layer" if name == "layer" else "Head"]
        pick = str(cycle % 2 if name == "head" else 1 - cycle % 2)  # layer 1, 0, 1, …; head 0, 1, 0, …
        w = WidgetState(id=wid)
        w.string_array_value.data.append(pick)
        return name, self.rerun(w, frag), "ticks", f"{name} {pick}"

    def problem(self, run: Run, where: str, title: str | None, others: list[WsSession]) -> tuple[str | None, bool]:
        """(what is wrong with a step's run, or None; whether it showed another session's text)."""
        shown = shown_in(run, where)
        if shown != want_for(self.text, where):
            other = next((o.name for o in others if o is not self and any(shown == want_for(t, where)
                                                                          for t in o.texts)), None)
            if other:
                return f"showed {other}'s tokens", True
            return f"{where}: {''.join(shown) if shown else 'nothing'!r} for {self.text!r}", False
        got = ((run.charts.get("head") or {}).get("layout", {}).get("title") or {}).get("text", "")
        if title and title not in got:
            return f"head matrix titled {got!r}, not {title!r}", False
        return None, False


class Tally:
    """What a class run counts, shared by its session threads: step times by step name, errors, mixed results."""

    def __init__(self):
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.mixed = 0

    def error(self, msg: str) -> None:
        with self.lock:
            self.errors.append(msg[:300])


def ordinary(s: WsSession, ss: list[WsSession], seconds: float, tally: Tally, opened: threading.Barrier) -> None:
    """One student's class: open the link (Explore, own text), wait for every session to open, then a step about
    every STEP_S seconds for `seconds`, each timed and checked (its own tokens, the title it picked)."""
    rnd = random.Random(s.i)
    try:
        s.query = f"model={MODEL}&text={quote(s.text)}"  # the link a student opens: Explore, own text
        bad, _ = s.problem(s.rerun(), "strip", None, ss)
        if bad:
            tally.error(f"{s.name} opening: {bad}")
    except Exception as e:  # noqa: BLE001 — counted; the barrier still has to be passed
        tally.error(f"{s.name} opening: {type(e).__name__}: {e}")
    opened.wait()
    end = time.perf_counter() + seconds
    time.sleep(rnd.uniform(0, STEP_S))  # students do not click in step
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        try:
            name, run, where, title = s.act()
            bad, other = s.problem(run, where, title, ss)
            with tally.lock:
                tally.times[name].append(run.seconds)
                tally.errors.extend(f"{s.name} {name}: {e}" for e in run.errors)
                if other:
                    tally.mixed += 1
                    tally.notes.append(f"{s.name} {name}: {bad}")
                elif bad:
                    tally.errors.append(f"{s.name} {name}: {bad}"[:300])
        except Exception as e:  # noqa: BLE001 — a lost websocket or a timeout: an error, the session stops
            tally.error(f"{s.name} step {s.step}: {type(e).__name__}: {e}")
            return
        time.sleep(max(0.0, rnd.uniform(0.5, 1.5) * STEP_S - (time.perf_counter() - t0)))


def pct(xs, q):
    return round(float(np.percentile(xs, q)), 3) if xs else None


def run_sessions(threads: list[threading.Thread], opened: threading.Barrier, seconds: float,
                 on_open: Callable[[float], None]) -> float:
    """Start the session threads, wait until each has opened its session (`opened`), call on_open(when), then join
    each (at most seconds + 3·SETTLE_S): when they were all open (perf_counter)."""
    for t in threads:
        t.start()
    opened.wait()
    t_act = time.perf_counter()
    on_open(t_act)
    for t in threads:
        t.join(seconds + 3 * SETTLE_S)
    return t_act


def sampler(pids: list[int], rss: list, t_start: float, stop: threading.Event, every_s: float = 5.0) -> threading.Thread:
    """A started thread appending [seconds since t_start, the servers' RSS in MB] to `rss` every `every_s`."""
    def sample():
        while not stop.is_set():
            mb = [rss_mb(p) for p in pids or []]
            if mb and None not in mb:
                rss.append([round(time.perf_counter() - t_start, 1), round(sum(mb), 1)])
            stop.wait(every_s)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    return t


def run_ws_class(url: str, sessions: int, seconds: float, pids: list[int] | None = None,
                 progress: Callable[[str], None] | None = None) -> dict:
    """The load test against a running server (or nginx) at `url`; `pids`: the server processes to sample."""
    say = progress or (lambda msg: None)
    load0 = [round(x, 2) for x in os.getloadavg()]
    t_start = time.perf_counter()
    rss, stop, tally, replicas = [], threading.Event(), Tally(), defaultdict(int)
    ss = [WsSession(url, i) for i in range(sessions)]
    for s in ss:
        replicas[s.replica or "-"] += 1
    opened = threading.Barrier(sessions + 1)
    sampler(pids or [], rss, t_start, stop)
    threads = [threading.Thread(target=ordinary, args=(s, ss, seconds, tally, opened), daemon=True) for s in ss]
    t_act = run_sessions(threads, opened, seconds, lambda t: say(
        f"{sessions} websocket sessions open after {t - t_start:.0f} s; errors {len(tally.errors)}"))
    stop.set()
    for s in ss:
        s.close()
    every = [x for v in tally.times.values() for x in v]
    return {ClassLoad.SESSIONS: sessions, ClassLoad.SECONDS: round(time.perf_counter() - t_start, 1),
            ClassLoad.ACTIVE: round(time.perf_counter() - t_act, 1), ClassLoad.STEPS: len(every),
            ClassLoad.ERRORS: len(tally.errors), ClassLoad.MIXED: tally.mixed,
            ClassLoad.P50: round(statistics.median(every), 3) if every else None, ClassLoad.P95: pct(every, 95),
            ClassLoad.BY_STEP: {k: {"n": len(v), "p50_s": pct(v, 50), "p95_s": pct(v, 95)}
                                for k, v in tally.times.items()},
            ClassLoad.RSS: rss, ClassLoad.RSS_SLOPE: rss_slope(rss), ClassLoad.REPLICAS: dict(replicas),
            ClassLoad.LOAD: [load0, [round(x, 2) for x in os.getloadavg()]],
            ClassLoad.NOTES: (tally.errors + tally.notes)[:50]}


def class_on_server(sessions: int, seconds: float, replicas: int = 1,
                    progress: Callable[[str], None] | None = None) -> dict:
    """run_ws_class on a server of its own: one `streamlit run`, or `replicas` of them behind nginx."""
    from attnlab.bench.replicas import replicas as start_replicas
    from attnlab.bench.server import streamlit_server

    with tempfile.TemporaryDirectory(prefix="attnlab-wsclass-") as tmp:
        start = (streamlit_server(Path(tmp) / "server.log") if replicas == 1 else start_replicas(replicas, Path(tmp)))
        with start as srv:
            out = run_ws_class(srv["url"], sessions, seconds, [srv["pid"]], progress)
    return out | {ClassLoad.CLIENTS: "ws", ClassLoad.N_REPLICAS: replicas}


def merge_run(runs: list, run: dict) -> list:
    """The saved runs with `run` in place of an earlier one of the same sessions and replicas."""
    key = (run[ClassLoad.SESSIONS], run[ClassLoad.N_REPLICAS])
    return [r for r in runs if (r[ClassLoad.SESSIONS], r.get(ClassLoad.N_REPLICAS, 1)) != key] + [run]
