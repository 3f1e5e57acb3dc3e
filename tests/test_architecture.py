"""Rules of the architecture (docs/design.md, "A run's lifecycle"): no process-wide state used as a channel or an
unbounded cache, no layer's object changed from outside after it is built, and few long functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "etsim"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if not p.name.endswith("_pb2.py"))

# Methods that change a list, dict or set in place.
MUTATORS = frozenset({"append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "setdefault",
                      "add", "discard", "sort", "reverse", "__setitem__"})  # fmt: skip
# Objects of these names are an engine, a system layer or a network model wherever etsim's code names them so.
GUARDED = frozenset({"engine", "eng", "system", "sys_layer", "network", "model", "net_model"})
#: Functions allowed over 80 lines, each with the reason its docstring gives (hot loops kept whole).
LONG_ALLOWED = 6


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _rel(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def test_no_global_statement() -> None:
    found = [
        f"{_rel(p)}:{node.lineno}: global {', '.join(node.names)}"
        for p in SOURCES
        for node in ast.walk(_tree(p))
        if isinstance(node, ast.Global)
    ]
    assert not found, "\n".join(found)


def _module_containers(tree: ast.Module) -> set[str]:
    """Names bound at module level to a list, dict or set display or a list()/dict()/set()/OrderedDict() call."""
    names = set()
    for node in tree.body:
        targets: list[ast.expr] = []
        value = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        mutable = isinstance(value, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp | ast.SetComp) or (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id in ("list", "dict", "set", "OrderedDict", "defaultdict", "deque")
        )
        if mutable:
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_no_module_level_container_is_changed_by_a_function() -> None:
    """Module-level lists, dicts and sets are constants; what a module keeps between calls is a bounded cache."""
    found = []
    for path in SOURCES:
        tree = _tree(path)
        names = _module_containers(tree)
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                changed = None
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                    changed = node.func.value
                elif isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
                    targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
                    changed = next((t.value for t in targets if isinstance(t, ast.Subscript)), None)
                if isinstance(changed, ast.Name) and changed.id in names:
                    found.append(f"{_rel(path)}:{node.lineno}: {func.name} changes module-level {changed.id}")
    assert not found, "\n".join(found)


def test_no_engine_system_or_model_attribute_is_assigned_from_outside() -> None:
    found = []
    for path in SOURCES:
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.ctx, ast.Store)
                        and isinstance(sub.value, ast.Name | ast.Attribute)
                        and (sub.value.id if isinstance(sub.value, ast.Name) else sub.value.attr) in GUARDED
                    ):
                        found.append(f"{_rel(path)}:{node.lineno}: {ast.unparse(target)} = …")
    assert not found, "\n".join(found)


def test_at_most_a_handful_of_long_functions_each_saying_why() -> None:
    long = []
    for path in SOURCES:
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                if length > 80:
                    long.append((f"{_rel(path)}:{node.lineno} {node.name} ({length} lines)", ast.get_docstring(node)))
    assert len(long) <= LONG_ALLOWED, "\n".join(name for name, _ in long)
    for name, doc in long:
        assert doc and "long" in doc.lower(), f"{name}: a function over 80 lines says why in its docstring"


@pytest.mark.parametrize("rule", ["global", "container", "attribute"])
def test_the_rules_catch_what_they_forbid(rule: str, tmp_path: Path) -> None:
    source = {
        "global": "X = None\ndef f():\n    global X\n    X = 1\n",
        "container": "_CACHE = {}\ndef f(k):\n    _CACHE[k] = 1\n",
        "attribute": "def f(engine):\n    engine.fold = 1\n",
    }[rule]
    tree = ast.parse(source)
    if rule == "global":
        assert any(isinstance(n, ast.Global) for n in ast.walk(tree))
    elif rule == "container":
        assert _module_containers(tree) == {"_CACHE"}
    else:
        assigned = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)]
        assert assigned and isinstance(assigned[0].value, ast.Name) and assigned[0].value.id in GUARDED
