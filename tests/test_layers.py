"""Imports run one way: each module imports only from its own layer or the layers below it, and no two modules
import each other, directly or through others, while loading.

``LAYERS`` is the one statement of the order (docs/design.md explains it). A module belongs to the layer of the
longest prefix of its name listed there. Imports inside functions count as edges for the layer rule; the cycle
rule looks at module-level imports, the ones that run while a module loads.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "headprune_bench"
FOLDERS = {"methods": ROOT / "methods", "benchmark": ROOT / "benchmark"}

LAYERS: list[tuple[str, ...]] = [
    # methods: knows torch and transformers models, nothing of GLUE files, runs or the CLI
    ("methods.options", "methods.heads"),
    ("methods.base", "methods.repair"),
    ("methods.registry", "methods.attention", "methods.hard_concrete", "methods.gates", "methods.mask_tuning"),
    ("methods.random", "methods.confidence", "methods.michel", "methods.voita", "methods.dsp", "methods.redundancy",
     "methods.auber", "methods.repairs"),
    ("methods.conformance", "methods.repairs.conformance"),
    ("methods",),  # the package's public facade
    # benchmark, lowest first
    ("benchmark",),  # the package's docstring only
    ("benchmark.tasks",),
    ("benchmark.provenance",),
    ("benchmark.models",),
    ("benchmark.config",),
    ("benchmark.training",),
    ("benchmark.stats",),
    ("benchmark.store",),
    ("benchmark.cells",),
    ("benchmark.execution",),
    ("benchmark.run",),
    ("benchmark.tools",),
    ("benchmark.report",),
    ("benchmark.cli",),
]


def module_files() -> dict[str, Path]:
    """Every module of the two packages by its name without the ``headprune_bench.`` prefix."""
    out = {}
    for top, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = [top, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def layer_of(module: str) -> int:
    """Index in ``LAYERS`` of the longest listed prefix of ``module``; KeyError when none is listed."""
    best, best_len = None, -1
    for index, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_len:
                best, best_len = index, len(name)
    if best is None:
        raise KeyError(f"{module} is in no layer of tests/test_layers.py's LAYERS")
    return best


def imports_of(module: str, path: Path, modules: set[str]) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for each import of our packages in ``path``, names without the
    ``headprune_bench.`` prefix. ``from P import X`` names the module ``P.X`` when that is a module, else ``P``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top_level = {id(node) for node in tree.body}
    package = f"{PACKAGE}.{module}".split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}".removeprefix(PACKAGE + ".") in modules else base
                     for a in node.names]
        else:
            continue
        for name in names:
            name = name.removeprefix(PACKAGE + ".")
            if name in modules:
                found.append((name, node.lineno, id(node) in top_level))
    return found


def graph() -> dict[str, list[tuple[str, int, bool]]]:
    files = module_files()
    return {m: imports_of(m, p, set(files)) for m, p in files.items()}


def back_edges(edges: dict[str, list[tuple[str, int, bool]]]) -> list[str]:
    """Each import that reaches a higher layer or the facade of a package the module is in, as
    ``'src:line -> target'``."""
    return [f"{src}:{line} -> {dst}" for src, targets in edges.items() for dst, line, _ in targets
            if layer_of(dst) > layer_of(src) or src.startswith(dst + ".")]


def cycles(edges: dict[str, list[tuple[str, int, bool]]]) -> list[list[str]]:
    """Strongly connected components of more than one module in the graph of module-level imports."""
    adj = {m: sorted({d for d, _, top in targets if top}) for m, targets in edges.items()}
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in adj.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(adj):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    missing = []
    for module in module_files():
        try:
            layer_of(module)
        except KeyError as exc:
            missing.append(str(exc))
    assert not missing, missing


def test_imports_never_reach_a_higher_layer():
    assert back_edges(graph()) == []


def test_no_import_cycles_while_loading():
    assert cycles(graph()) == []


def test_methods_never_imports_benchmark():
    assert [f"{src}:{line} -> {dst}" for src, targets in graph().items() if src.startswith("methods")
            for dst, line, _ in targets if dst.startswith("benchmark")] == []


@pytest.mark.parametrize("source, line, expected", [
    # report reaching up into the CLI: the back-edge this test exists for
    ("benchmark.report.build", "from headprune_bench.benchmark.cli import report_cmd", ["benchmark.cli"]),
    # store reaching up into cells, as a lazy import inside a function
    ("benchmark.store.records", "def f():\n    from headprune_bench.benchmark.cells import work",
     ["benchmark.cells.work"]),
    # a method importing the benchmark
    ("methods.michel", "import headprune_bench.benchmark.tasks", ["benchmark.tasks"]),
    # relative import from a package's submodule up to a higher layer
    ("benchmark.stats.paired", "from ...benchmark import cli", ["benchmark.cli"]),
])
def test_the_checker_catches_a_back_edge(tmp_path, source, line, expected):
    """The rule itself: an added upward import is reported (so the tests above can fail)."""
    path = tmp_path / "m.py"
    path.write_text(line + "\n")
    modules = set(module_files())
    found = imports_of(source, path, modules)
    assert [d for d, _, _ in found] == expected
    assert back_edges({source: found}) == [f"{source}:{found[0][1]} -> {expected[0]}"]


def test_the_checker_catches_a_cycle():
    edges = {"benchmark.report": [("benchmark.report.build", 1, True)],
             "benchmark.report.build": [("benchmark.report.document", 1, True)],
             "benchmark.report.document": [("benchmark.report", 1, True)]}
    assert cycles(edges) == [["benchmark.report", "benchmark.report.build", "benchmark.report.document"]]
    assert back_edges(edges) == ["benchmark.report.document:1 -> benchmark.report"]
    # the facade importing its submodules is no cycle; a lazy import back is none, but still a back-edge
    edges["benchmark.report.document"] = [("benchmark.report", 1, False)]
    assert cycles(edges) == []
    assert back_edges(edges) == ["benchmark.report.document:1 -> benchmark.report"]
