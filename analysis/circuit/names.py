"""What a circuit's heads are called: the roles a model card names them for, or their measured head types."""

from __future__ import annotations

import re

from attnlab.model.lecture.roles import DECODER_LOOK

_BOLD = re.compile(r"\*\*(\d+)\.(\d+)\*\*")
_TABLE = re.compile(r"^\| ([a-z/ -]+) \| ((?:\d+\.\d+ [-\d.]+(?:, )?)+) \|$", re.M)  # smollm2.md's head-type table


def card_roles(card: str | None) -> dict[str, list[str]]:
    """`blocks.{L}.attn.head.{H}` → the tasks a model card names the head for, in card order: the lecture cards'
    "What to look at" lines (model/lecture/card_heads.DECODER_LOOK; the bold head only, not the runner-up) and a card's
    table of head types (`| type | L.H score, … |`)."""
    out: dict[str, list[str]] = {}

    def add(layer, head, role):
        roles = out.setdefault(f"blocks.{layer}.attn.head.{head}", [])
        if role not in roles:
            roles.append(role)

    for line in (card or "").splitlines():
        for task, template in DECODER_LOOK.items():
            prefix = "- " + template.split("{h}")[0]
            m = _BOLD.match(line, len(prefix)) if line.startswith(prefix) else None
            if m:
                add(m[1], m[2], task)
    for row in _TABLE.finditer(card or ""):
        for cell in row[2].split(", "):
            layer, head = cell.split(" ")[0].split(".")
            add(layer, head, row[1].strip())
    return out


def type_roles(table) -> dict[str, list[str]]:
    """`blocks.{L}.attn.head.{H}` → [its head-type label] from a head table (analysis.probes.head_table.head_table), for
    every head with a type other than "mixed"."""
    return {f"blocks.{int(r.layer)}.attn.head.{int(r.head)}": [r.label] for r in table.itertuples()
            if r.label != "mixed" and getattr(r, "stack", "decoder") in ("decoder", "")}
