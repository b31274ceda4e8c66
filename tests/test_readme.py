"""The README as a newcomer reads it: every Python snippet runs as written, and its table of pages is the
navigation's (app/navigation.py, the one table of pages)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SNIPPETS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_readme_has_python_snippets():
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("i", range(len(SNIPPETS)))
def test_readme_snippet_runs(i):
    exec(compile(SNIPPETS[i], f"README.md snippet {i}", "exec"), {"__name__": f"readme_{i}"})  # noqa: S102


def readme_pages() -> dict[str, list[tuple[str, str]]]:
    """The README's page table: section -> [(title, URL path)] in its order."""
    part = README.split("\n## Pages\n", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("section", "---"):
            continue
        out[cells[0]] = re.findall(r"(?:^|\), )([A-Z][\w &-]*?) \(`/([\w-]*)`", cells[1])
    return out


def test_readme_page_table_is_the_navigation():
    from attnlab.app.navigation import sections

    want = {title: [(p[1], p[2]) for p in pages] for title, pages in sections().items()}
    assert readme_pages() == want
