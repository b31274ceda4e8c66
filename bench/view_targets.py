"""Issue 19's targets, judged from the `browser` and `class_load_ws` sections (None: not measured): switching
heads and layers, the other widgets and the first chart in chromium, and 30 sessions at once on one server."""

from __future__ import annotations

from attnlab.analysis.machinery.bench_report import Browser, ClassLoad, Target, Top

CHART = ("chart head", "chart layer")  # the head matrix's own buttons: switched in the browser
SWITCH = ("layer", "head")  # the same choice through the server, where a page has no buttons
TOUR = ("next step, first visit", "next step, cached")  # bench/tour.py's walks: judged on their own
TOUR_LIMIT = 1.5  # issue 30: each step's first chart after Next, on a warm server
FLAT_MB_PER_MIN = 1.0  # "memory flat after warm-up": at most this slope
NAV_LIMIT_S = 1.5  # issue 31: every page's first chart after in-app navigation, on a quiet machine


def _t(name: str, target: str, measured, passed, note: str = "") -> dict:
    return {Target.NAME: name, Target.TARGET: target, Target.MEASURED: measured, Target.PASSED: passed,
            Target.NOTE: note}


def _medians(row: dict, names) -> dict[str, float]:
    ws = row.get(Browser.WIDGETS, {})
    return {n: ws[n][Browser.MEDIAN] for n in names if (ws.get(n) or {}).get(Browser.MEDIAN) is not None}


def _switch(row: dict) -> tuple[float, str] | None:
    """The slowest way a lecturer switches head or layer on this row's page: the chart's buttons where it has
    them, else the Layer and Head widgets."""
    m = _medians(row, CHART) or _medians(row, SWITCH)
    return (max(m.values()), "chart buttons" if set(m) <= set(CHART) else "widgets") if m else None


def _worst(items) -> tuple[float, str] | None:
    items = [x for x in items if x is not None]
    return max(items) if items else None


def _tour(rows) -> dict:
    """The slowest Next of the tour's cached walk (every step once), with the first-visit walk's in the note."""
    ws = next((r.get(Browser.WIDGETS, {}) for r in rows if r.get(Browser.PAGE) == "tour"), {})
    first, cached = ((ws.get(n) or {}).get(Browser.TIMES) for n in TOUR)
    worst = max(cached) if cached else None
    note = (f"median {sorted(cached)[len(cached) // 2]:.2f} s over {len(cached)} steps" if cached else "not measured") + (
        f"; first visit of each step (its model runs): slowest {max(first):.2f} s" if first else "")
    return _t("tour: Next → the step's chart (every step)", f"≤ {TOUR_LIMIT} s", worst,
              None if worst is None else worst <= TOUR_LIMIT, note)


def view_targets(out: dict) -> list[dict]:
    t = []
    rows = (out.get(Top.BROWSER) or {}).get(Browser.ROWS, [])
    floor = ((out.get(Top.BROWSER) or {}).get(Browser.FLOOR) or {}).get(Browser.WARM)
    plain = ((out.get(Top.BROWSER) or {}).get(Browser.FLOOR_PLAIN) or {}).get(Browser.WARM)
    for label, long, limit in (("T ≤ 128", False, 0.3), ("T = 512", True, 0.5)):
        w = _worst((s[0], f"{r[Browser.PAGE]} ({s[1]})") for r in rows if ("T=512" in r.get(Browser.CASE, "")) == long
                   and (s := _switch(r)))
        t.append(_t(f"head or layer switch in chromium at {label}", f"≤ {limit} s", w and w[0],
                    None if w is None else w[0] <= limit, f"slowest: {w[1]}" if w else "not measured"))
    other = _worst((v, f"{r[Browser.PAGE]} {n} ({r.get(Browser.CASE, '')})") for r in rows
                   for n, v in _medians(r, [k for k in r.get(Browser.WIDGETS, {}) if k not in CHART + SWITCH + TOUR]).items())
    t.append(_t("any other widget in chromium", "≤ 1 s", other and other[0], None if other is None else other[0] <= 1,
                f"slowest: {other[1]}" if other else "not measured"))
    warm = _worst((r[Browser.WARM], f"{r[Browser.PAGE]} ({r.get(Browser.CASE, '')})") for r in rows
                  if r.get(Browser.WARM) is not None)
    t.append(_t("warm first chart in chromium", "≤ 1.0 s", warm and warm[0], None if warm is None else warm[0] <= 1,
                (f"slowest: {warm[1]}" if warm else "not measured")
                + (f"; floor (one Plotly chart alone) {floor:.2f} s" if floor else "")
                + (f"; Streamlit's floor (one line of text) {plain:.2f} s" if plain else "")))
    nav = (out.get(Top.BROWSER) or {}).get(Browser.NAVIGATION) or []
    first = _worst((max(v for k in (Browser.FIRST_VISIT, Browser.REVISIT) if (v := r.get(k)) is not None),
                    r[Browser.PAGE]) for r in nav if r.get(Browser.FIRST_VISIT) is not None)
    t.append(_t("sidebar click → first chart, every page (first visit and revisit)", f"≤ {NAV_LIMIT_S} s",
                first and first[0], None if first is None else first[0] <= NAV_LIMIT_S,
                f"slowest: {first[1]}" if first else "not measured"))
    t.append(_tour(rows))
    runs = [r for r in out.get(Top.CLASS_WS, []) if r[ClassLoad.SESSIONS] >= 30]
    run = min(runs, key=lambda r: r.get(ClassLoad.N_REPLICAS, 1)) if runs else None  # one server if measured
    where = "not measured" if run is None else (f"{run[ClassLoad.SESSIONS]} sessions, "
                                                f"{run.get(ClassLoad.N_REPLICAS, 1)} replica(s), {run[ClassLoad.ACTIVE]} s")
    head = None if run is None else (run.get(ClassLoad.BY_STEP, {}).get("head") or {}).get("p95_s")
    t.append(_t("head switch p95 under 30 sessions", "≤ 1 s", head, None if head is None else head <= 1, where))
    p95 = None if run is None else run[ClassLoad.P95]
    t.append(_t("any step p95 under 30 sessions", "≤ 3 s", p95, None if p95 is None else p95 <= 3, where))
    bad = None if run is None else run[ClassLoad.ERRORS] + run[ClassLoad.MIXED]
    t.append(_t("errors + mixed results under 30 sessions", "0", bad, None if bad is None else bad == 0, where))
    slope = None if run is None else run.get(ClassLoad.RSS_SLOPE)
    t.append(_t("server memory after warm-up under 30 sessions", f"≤ {FLAT_MB_PER_MIN:g} MB/min", slope,
                None if slope is None else slope <= FLAT_MB_PER_MIN, where))
    return t
