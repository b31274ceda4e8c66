"""Code outside model/ never branches on the architecture: it asks the loaded model (lm.predicts_next_token,
lm.reads_source, lm.objective, lm.readout(), lm.capabilities…, model/capabilities.py). An AST scan of every room
above model/."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("analysis", "app", "pages", "cli", "bench", "lecture")
CLASSES = {"Decoder", "Encoder", "EncoderDecoder", "ViT"}
# reading `.arch` only to show or store it, never to choose what runs: file → the functions that may
DISPLAY = {
    "analysis/faithfulness/benchmark.py": ("faithfulness",),  # the report's "arch" field, printed by `attnlab faithfulness`
    "analysis/faithfulness/images.py": ("image_faithfulness",),  # the same field of the image report
    "app/inputs.py": ("require",),  # names the session model's kind in the page's one line ("is an encoder")
}
# lecture/ keys its tables (scorers, the cards' texts, model/lecture/roles.LOOK) by the model's training objective,
# `lm.objective` / `cfg.objective`, which model/ derives from the architecture in one place (model/config.OBJECTIVES);
# its recipes build ModelConfig(arch=...), which is construction, not a comparison.


def _archy(node: ast.AST) -> bool:
    """True for an expression that names an architecture: `arch`, `x.arch`, `x["arch"]`, `x.get("arch")`."""
    if isinstance(node, ast.Name):
        return node.id == "arch"
    if isinstance(node, ast.Attribute):
        return node.attr == "arch"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "arch"
    return isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and bool(node.args) and \
        isinstance(node.args[0], ast.Constant) and node.args[0].value == "arch"


def findings(path: Path) -> list[str]:
    return scan(path.read_text(), str(path.relative_to(ROOT)))


def scan(source: str, rel: str) -> list[str]:
    """Each architecture comparison in `source` (a file at `rel`), as 'rel:line what in function'."""
    tree, out = ast.parse(source), []
    for fn in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
        body = fn.body if fn is tree else [fn]
        where = getattr(fn, "name", "<module>")
        for node in (n for b in body for n in ast.walk(b)) if fn is not tree else _top_level(tree):
            if isinstance(node, ast.Attribute) and node.attr == "arch" and where not in DISPLAY.get(rel, ()):
                out.append(f"{rel}:{node.lineno} reads .arch in {where}")
            elif isinstance(node, ast.Compare) and any(_archy(x) for x in (node.left, *node.comparators)):
                out.append(f"{rel}:{node.lineno} compares with an architecture name in {where}")
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2 \
                    and {getattr(e, "id", getattr(e, "attr", None)) for e in
                         (node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]])} & CLASSES:
                out.append(f"{rel}:{node.lineno} isinstance of an architecture class in {where}")
    return sorted(set(out))


def _top_level(tree: ast.Module):
    """Nodes outside any function (a module's own statements, class bodies' fields)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def test_no_architecture_comparison_outside_model():
    found = [f for room in ROOMS for p in sorted((ROOT / room).rglob("*.py")) for f in findings(p)]
    assert found == [], "\n".join(found)


def test_every_display_read_is_still_there():
    """An allowance that no longer matches a read of `.arch` is removed, not kept."""
    for rel, functions in DISPLAY.items():
        tree = ast.parse((ROOT / rel).read_text())
        for name in functions:
            (fn,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
            assert any(isinstance(n, ast.Attribute) and n.attr == "arch" for n in ast.walk(fn)), f"{rel} {name}"


def test_the_scan_finds_each_form():
    """The scan itself: each form of comparison is found, asking the model is not."""
    got = scan("def f(lm, m, arch, info):\n    if lm.arch == 'decoder':\n        pass\n    k = arch in ('vit',)\n"
               "    ok = isinstance(m, EncoderDecoder) or info['arch'] != 'vit' or info.get('arch') == 'encoder'\n"
               "    return lm.reads_source or m.stack == 'encoder'\n", "analysis/x.py")
    assert [g.split(":", 1)[1] for g in got] == [
        "2 compares with an architecture name in f", "2 reads .arch in f", "4 compares with an architecture name in f",
        "5 compares with an architecture name in f", "5 isinstance of an architecture class in f"]
