"""The packages keep prose (docstrings and comments) to what a caller needs: at most 0.30 of their code lines."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("prose_ratio", ROOT / "scripts" / "prose_ratio.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prose_ratio_of_the_packages_is_at_most_the_target():
    script = _script()
    overall, _ = script.ratio([ROOT / "methods", ROOT / "benchmark"])
    assert overall <= script.TARGET


def test_prose_ratio_counts_docstrings_and_comment_lines_not_trailing_comments(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('"""Module."""\nX = 1\n"""About X."""\n\n# a comment\n'
                    'def f():  # trailing\n    """Doc\n    two."""\n    return X\n')
    assert _script().count(path) == (5, 3)
