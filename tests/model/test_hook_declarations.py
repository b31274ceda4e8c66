"""Hook points are declared once, where they fire: each module class names its own (a class attribute), every hook
it fires is among them, the model's hook list is derived from them, and no other list of hook names is kept."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import torch
from attnlab.model.attention import Attention
from attnlab.model.embeddings import Embeddings
from attnlab.model.hooks import HEAD_AXIS, capture
from attnlab.model.layers import MLP, Block
from attnlab.model.moe import MoE
from attnlab.model.norms import NormHooks
from attnlab.model.patches import PatchEmbed
from attnlab.model.stack import Stack
from attnlab.model.transformer import Decoder

from tests.model.helpers import tiny, tokens

MODEL = Path(__file__).resolve().parents[2] / "model"
DECLARING = (Attention, Block, MLP, MoE, Embeddings, PatchEmbed, Stack, Decoder, NormHooks)
FIRES = ("hook", "_hook_heads", "point")  # cap.hook(name, x), _hook_heads(cap, name, x), hooks.point(site, name)
OUTSIDE_A_CLASS = {"attention_kernels.py": Attention}  # eager_attention fires its caller's pattern hooks


def declared(cls) -> set[str]:
    """The hook points class `cls` declares: its class attributes named *HOOKS (tuples)."""
    out = set()
    for k in dir(cls):
        v = getattr(cls, k)
        if k.endswith("HOOKS") and isinstance(v, tuple):
            out |= set(v)
    return out


def fired() -> list[tuple[str, str | None, str]]:
    """(file, enclosing class, hook point) for every hook name written literally where a hook fires."""
    out = []
    for path in sorted(MODEL.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for cls in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
            name = getattr(cls, "name", None)
            body = cls.body
            nodes = [n for b in body for n in ast.walk(b)] if name else \
                [n for b in body if not isinstance(b, ast.ClassDef) for n in ast.walk(b)]
            for node in nodes:
                if not (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
                        in FIRES and len(node.args) >= 2):
                    continue
                arg = node.args[1] if getattr(node.func, "id", None) == "_hook_heads" or \
                    getattr(node.func, "attr", None) == "point" else node.args[0]
                text = arg.value if isinstance(arg, ast.Constant) else \
                    arg.values[-1].value if isinstance(arg, ast.JoinedStr) and isinstance(arg.values[-1], ast.Constant) \
                    else ""
                m = re.search(r"(?:^|\.)(hook_\w+)$", str(text))
                if m:
                    out.append((path.name, name, m[1]))
    return out


def test_every_hook_fired_is_declared_by_its_class():
    found = fired()
    assert len(found) >= 20  # the scan sees the firing sites
    classes = {c.__name__: c for c in DECLARING}
    wrong = []
    for file, cls_name, point in found:
        cls = classes.get(cls_name) if cls_name else OUTSIDE_A_CLASS.get(file)
        if cls is None or point not in declared(cls):
            wrong.append(f"{file} {cls_name or '<module>'} fires {point}, not declared there")
    assert wrong == []


def test_no_list_of_hook_names_outside_the_module_classes():
    """A module-level tuple or list of hook names would be a second declaration (HEAD_AXIS is a layout table
    keyed by Attention's hooks)."""
    lists = []
    for path in sorted(MODEL.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List)) and any(
                    isinstance(e, ast.Constant) and str(e.value).startswith("hook_") for e in node.value.elts):
                lists.append(f"{path.name}:{node.lineno}")
    assert lists == []
    assert set(HEAD_AXIS) <= set(Attention.HOOKS)


def test_the_model_names_exactly_the_declared_hooks():
    """Over every kind of block (gated MLP, MoE, cross-attention, post-norm, parallel, split inputs, a ViT), the
    hooks that fire are the model's hook_names(), and together they are every declared point."""
    seen = set()
    for arch, kw in [("decoder", {"mlp": "swiglu"}), ("decoder", {"mlp": "moe", "n_experts": 4, "top_k": 2}),
                     ("encdec", {}), ("encoder", {"norm": "post"}), ("decoder", {"norm": "parallel"}),
                     ("decoder", {"norm": "peri", "norm_type": "rmsnorm"}), ("encdec", {"qk_norm": True}),
                     ("encoder", {"norm": "post", "embed_norm": True})]:
        m = tiny(arch, **kw)
        with capture(names="*") as cap, torch.no_grad():
            m(tokens(6), tokens(5)) if arch == "encdec" else m(tokens(6))
        assert sorted(cap.tensors) == sorted(m.hook_names()), (arch, kw)
        seen |= set(cap.tensors)
    m = tiny("decoder")
    with capture(names="*", split_inputs=True, records=False) as cap, torch.no_grad():
        m(tokens(6))
    seen |= set(cap.tensors)
    vit = importlib.import_module("tests.model.test_vit").vit_lm()
    seen |= set(vit.model.hook_names())
    points = {n.rsplit(".", 1)[-1] for n in seen}
    assert points == set().union(*(declared(c) for c in DECLARING))
