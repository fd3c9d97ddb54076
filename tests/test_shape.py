"""The shape the packages keep (issue 38): benchmark/ shows its architecture as sub-packages, modules and functions
stay small, and private names stay in the module that defines them."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [ROOT / "methods", ROOT / "benchmark"]
MAX_TOP_LEVEL_MODULES = 8
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def python_files() -> list[Path]:
    return sorted(p for folder in PACKAGES for p in folder.rglob("*.py"))


def test_benchmark_has_few_top_level_modules():
    top = sorted(p.name for p in (ROOT / "benchmark").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_stay_small(path):
    source = path.read_text()
    assert len(source.splitlines()) <= MAX_MODULE_LINES
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


def test_no_private_name_is_imported_from_another_module():
    found = []
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("headprune_bench")):
                found += [f"{path.relative_to(ROOT)}:{node.lineno} {alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert found == []
