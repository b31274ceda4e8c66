"""In-app navigation as the browser benchmark walks it: every page of the sidebar, clicked in one session, shows
its own title and its first chart (or is drawn without one), with no error."""

from __future__ import annotations

from attnlab.app.navigation import PAGES
from attnlab.bench.navigation import navigation_times

NO_CHART = {"Long inputs"}  # pages that draw no chart at their default inputs (an empty text box)


def test_every_page_of_the_sidebar_shows_its_first_chart(st_app, browser):
    rows = navigation_times(browser, st_app["url"], "model=lecture-decoder", passes=1)
    print(*[(r["page"], r.get("first_visit_s")) for r in rows], sep="\n")
    assert sorted(r["page"] for r in rows) == sorted(p[1] for p in PAGES)
    for r in rows:
        assert r["errors"] == [], (r["page"], r["errors"])
        assert r["first_visit_s"] > 0 and r["shown"] == ("plain" if r["page"] in NO_CHART else "chart"), r
