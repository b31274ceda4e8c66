"""`attnlab models`: every model that can be loaded now."""

from __future__ import annotations

from attnlab.cli.commands.common import print_json


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="list the models that can be loaded now")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def available_models() -> list[dict]:
    from attnlab.model.registry import known_names, load

    out = []
    for name in known_names():
        try:
            lm = load(name)
            out.append(lm.info() | {"mode": lm.mode})  # "converted" or "transformers view"
        except Exception as e:  # noqa: BLE001 — list what fails too, with the reason
            out.append({"name": name, "error": str(e)})
    return out


def cached_models() -> list[dict]:
    """The loadable models in the local Hugging Face cache (offline, read-only), without loading them; each says
    how it runs ("converted", or "transformers view" for a family without a converter)."""
    from attnlab.model.hf.cache import list_cached

    return [m.to_dict() for m in list_cached()]


def run(args) -> int:
    models, cached = available_models(), cached_models()
    if args.json:
        print_json({"models": models, "cached": cached})
    else:
        for line in table(models, cached):
            print(line)
    return 0


def table(models: list[dict], cached: list[dict]) -> list[str]:
    """The lines of `attnlab models`, each column as wide as its widest entry."""
    rows = []
    for m in models:
        if "error" in m:
            rows.append([m["name"], f"unavailable: {m['error']}"])
            continue
        moe = f"experts={m['experts']['n']} top-{m['experts']['top_k']}" if m.get("experts") else ""
        rows.append([m["name"], m["kind"], m["mode"], f"layers={m['layers']}", f"heads={m['heads']}",
                     f"context={m['context']}", moe])
    for m in cached:
        rows.append([m["repo_id"], f"in the Hugging Face cache: {m['family']}, {m['mode']}, "
                                   f"{(m['n_params'] or 0) / 1e6:.0f} M parameters"])
    full = [r for r in rows if len(r) > 2]
    widths = [max(len(r[i]) for r in full) for i in range(7)] if full else []
    name_w = max((len(r[0]) for r in rows), default=0)
    out = []
    for r in rows:
        cells = [r[0].ljust(name_w)] + ([c.ljust(w) for c, w in zip(r[1:], widths[1:])] if len(r) > 2 else r[1:])
        out.append("  ".join(cells).rstrip())
    return out
