"""The layering rule: no module imports from a layer above its own (lazy and type-only imports included).

The order is the one written in docs/design.md ("Layers and where they live"); this test reads it
from there, so the document and the rule cannot drift apart.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "etsim"
DESIGN = ROOT / "docs" / "design.md"


def layer_order() -> list[list[str]]:
    """Layers bottom-up from docs/design.md's code block after 'layer order:' (one line per layer)."""
    text = DESIGN.read_text(encoding="utf-8")
    match = re.search(r"<!-- layer order, bottom first -->\n```\n(.*?)```", text, re.S)
    assert match, "docs/design.md must list the layer order in a ``` block after '<!-- layer order, bottom first -->'"
    layers = []
    for line in match.group(1).splitlines():
        names = line.split("#")[0].split()
        if names:
            layers.append(names)
    return layers


def unit_of(module: str) -> str:
    """``etsim.system.collective`` → ``system``; top-level modules stand for themselves."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "etsim"


def imports(path: Path, module: str, *, type_only: bool = True) -> list[tuple[int, str]]:
    """Every ``etsim`` module *path* imports, anywhere in the file (functions, and TYPE_CHECKING blocks if *type_only*).

    ``from etsim import files`` and ``from etsim.x import y`` name the module imported: ``etsim.files``, and
    ``etsim.x.y`` when y is a module, else ``etsim.x``.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    if not type_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped.update(id(sub) for sub in ast.walk(node))
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("etsim")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("etsim"):
                for alias in node.names:
                    name = f"{target}.{alias.name}"
                    found.append((node.lineno, name if _is_module(name) else target))
    return found


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def modules() -> list[tuple[Path, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((path, ".".join(parts)))
    return out


def test_every_unit_has_a_layer():
    known = {name for layer in layer_order() for name in layer}
    units = {unit_of(module) for _, module in modules()}
    assert units - {"etsim"} <= known, f"units missing from docs/design.md's layer order: {units - known}"


def test_no_module_imports_from_a_layer_above():
    rank = {name: i for i, layer in enumerate(layer_order()) for name in layer}
    violations = []
    for path, module in modules():
        own = unit_of(module)
        if own == "etsim":  # etsim/__init__.py and etsim/__main__.py sit on top of everything
            continue
        for line, target in imports(path, module):
            other = unit_of(target)
            if other == "etsim":
                continue
            if rank[other] > rank[own]:
                violations.append(f"{path.relative_to(ROOT)}:{line}: {own} imports {target} ({other} is above {own})")
    assert not violations, "\n".join(violations)


def test_no_import_cycles_between_modules():
    """Modules import each other one way only (type-only imports aside): a cycle means two files that should be
    one, or a base that imports its plug-ins (network/bulk.py once imported every model, which imported it)."""
    import networkx as nx

    names = {module for _, module in modules()}
    graph = nx.DiGraph()
    for path, module in modules():
        for _, target in imports(path, module, type_only=False):
            while target not in names and "." in target:
                target = target.rpartition(".")[0]
            if target in names and target != module:
                graph.add_edge(module, target)
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def test_a_plug_in_base_imports_none_of_its_plug_ins():
    for base, plugins in (("network/bulk.py", "etsim.network.models"), ("network/builders.py", "etsim.network.kinds"),
                          ("experiment/engines/__init__.py", "etsim.experiment.engines."),
                          ("producers/workloads/base.py", "etsim.producers.workloads.")):  # fmt: skip
        path = PACKAGE / base
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        bad = [t for _, t in imports(path, module) if t.startswith(plugins)]
        assert not bad, f"{base} imports its plug-ins {bad}"


def test_no_source_file_is_over_600_lines():
    """A file that long holds several jobs: split it by job (issue 19 split spec.py, algorithm.py, verify.py)."""
    long = {str(path.relative_to(ROOT)): n for path, _ in modules() if (n := len(path.read_text().splitlines())) > 600}
    assert not long, long


def test_nothing_outside_compat_mentions_astra():
    """Only compat knows ASTRA-sim; the command table may name compat's sub-command (it cannot import it)."""
    hits = []
    for path, module in modules():
        if unit_of(module) == "compat":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "astra" in line.lower() and line.strip() != '"astra": "etsim.compat.cli",':
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "ASTRA-sim specifics belong in etsim.compat:\n" + "\n".join(hits)


def test_the_checker_sees_lazy_relative_and_type_only_imports(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from etsim.workload.engine import Engine\n"
        "def f():\n    from ..system import config\n    import etsim.cli\n"
    )
    found = {target for _, target in imports(path, "etsim.chakra.mod")}
    assert found == {"etsim.workload.engine", "etsim.system.config", "etsim.cli"}


def test_the_checker_sees_imports_of_a_subpackage_from_the_package(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text("from etsim import files, __version__\nfrom etsim.chakra import Trace\n")
    assert {target for _, target in imports(path, "etsim.mod")} == {"etsim.files", "etsim", "etsim.chakra"}
