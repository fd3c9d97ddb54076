"""The wheel installs one unique top-level name, ``headprune_bench``, from the folders methods/ and benchmark/."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_lists_every_package_folder():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {"headprune_bench." + ".".join(p.parent.relative_to(ROOT).parts)
               for top in ("methods", "benchmark") for p in (ROOT / top).rglob("__init__.py")}
    assert listed == on_disk


def test_importing_every_module_adds_no_bare_methods_or_benchmark(tmp_path):
    """Run from a folder that does not hold the repository, so only the installed names can be found."""
    code = """
import importlib, pkgutil, sys
import headprune_bench.benchmark, headprune_bench.methods
for pkg in (headprune_bench.methods, headprune_bench.benchmark):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(info.name)
bare = sorted(m for m in sys.modules if m.split(".")[0] in ("methods", "benchmark"))
assert not bare, bare
for name in ("methods", "benchmark"):
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue
    assert "headprune" not in str(getattr(module, "__file__", "")), module  # another distribution's, not ours
print("ok", len([m for m in sys.modules if m.startswith("headprune_bench.")]))
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok ")


def test_bench_console_script_names_the_new_module():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"bench": "headprune_bench.benchmark.cli:main"}


def test_the_docs_export_target_is_ignored_by_git():
    """Issue 64, item 15: `bench export ... --out exported/...` (docs/export-speed.md) wrote 164 MB that showed as
    untracked."""
    import shutil

    import pytest

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "check-ignore", "-q", "exported/michel-mrpc-s0/model.safetensors"], cwd=ROOT,
                          timeout=30)
    assert done.returncode == 0
