"""The hostile class's runs (`attnlab bench --class --hostile`, bench/hostile.py) as markdown, judged against
issue 37's done-when: 0 server deaths, 0 mixed results, the ordinary sessions' p95 ≤ 3 s, peak ≤ budget."""

from __future__ import annotations

P95_LIMIT_S = 3.0  # the ordinary sessions' p95 a hostile class must keep


def judged(run: dict) -> dict[str, bool | None]:
    """Each done-when condition of one run: True (met), False (missed), None (not measured)."""
    p95 = run.get("p95_s")
    return {"no server death": run["server_deaths"] == 0, "no mixed result": run["mixed"] == 0,
            "no error": run["errors"] == 0, f"ordinary p95 ≤ {P95_LIMIT_S:g} s": None if p95 is None else p95 <= P95_LIMIT_S,
            "peak ≤ budget": run["peak_mb"] <= run["budget_mb"]}


def hostile_markdown(runs: list[dict]) -> list[str]:
    """One row per run, then what each hostile page took and the sweeps, then the verdicts and notes."""
    lines = ["### A hostile class (`attnlab bench --class --hostile`)", "",
             "Websocket sessions on one server started with a memory budget (`attnlab app --max-memory GB`): the "
             "ordinary ones are the class above (random-decoder: a text, Heatmaps, a layer, a head, back); a share "
             "sends a new text of the longest allowed length (20,000 characters) to smollm2 on the heaviest pages "
             "in turn (each must answer or refuse in one line); one runs SmolLM2's patching sweep and then its "
             "circuit jobs (app.jobs) and checks its result names its own prompt. Peak: the largest of the server "
             "process's VmHWM and its RSS sampled every second.", "",
             "| sessions (ordinary + hostile + sweeper) | seconds | server deaths | errors | mixed results | "
             "ordinary steps | ordinary p50, s | ordinary p95, s | hostile steps (answered / refused) | hostile p95, s | "
             "sweeps (s each) | peak / budget, MB | load avg (start → end) |", "|---" * 13 + "|"]
    notes = []
    for r in runs:
        la = r.get("loadavg") or [[None], [None]]
        sweeps = ", ".join(f"{s['page']}{'' if s['done'] else ' unfinished'} {s['seconds']}" for s in r["sweeps"]) or "—"
        lines.append(
            f"| {r['sessions']} ({r['ordinary']} + {r['hostile']} + {r['sweepers']}) | {r['active_s']} | "
            f"{r['server_deaths']} | {r['errors']} | {r['mixed']} | {r['steps']} | {_s(r['p50_s'])} | {_s(r['p95_s'])} | "
            f"{r['hostile_steps']} ({r['answered']} / {r['refused']}) | {_s(r['hostile_p95_s'])} | {sweeps} | "
            f"{r['peak_mb']:,.0f} / {r['budget_mb']:,.0f} | {la[0][0]} → {la[-1][0]} |")
        verdicts = ", ".join(f"{k}: {'met' if v else 'MISSED' if v is False else 'not measured'}"
                             for k, v in judged(r).items())
        pages = "; ".join(f"{k or 'explore'} n={v['n']} p50 {_s(v['p50_s'])} s, max {_s(v['max_s'])} s"
                          for k, v in r.get("hostile_by_page", {}).items())
        notes += [f"- {r['sessions']} sessions: {verdicts}.", f"- {r['sessions']} sessions, hostile pages: {pages}."]
        notes += [f"- {r['sessions']} sessions: {n}" for n in r.get("notes", [])[:20]]
    return lines + [""] + notes + [""]


def merge_hostile(runs: list, run: dict) -> list:
    """The saved runs with `run` in place of an earlier one of the same session count."""
    return [r for r in runs if r["sessions"] != run["sessions"]] + [run]


def _s(v) -> str:
    return "—" if v is None else f"{v:.2f}"
