"""Prose against code in the packages: (docstring lines + comment lines) / code lines, blank lines left out.

    python scripts/prose_ratio.py [--top N] [FOLDER_OR_FILE ...]      (default: methods benchmark)

A line of a docstring (of a module, class, function, attribute or constant: any statement that is a bare string)
or a line that is only a comment is prose; every other non-blank line is code (a trailing comment leaves its line
code). The target for methods/ and benchmark/ together
is <= 0.30 (tests/test_prose.py); docs/ holds the why and the measurements.
"""
from __future__ import annotations

import argparse
import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.30


def count(path: Path) -> tuple[int, int]:
    """(prose lines, code lines) of one Python file."""
    source = path.read_text()
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        # docstrings of modules, classes and functions, and the bare strings documenting attributes and constants
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            doc_lines.update(range(node.lineno, node.end_lineno + 1))
    comment_lines = {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                     if tok.type == tokenize.COMMENT}
    prose = code = 0
    for number, line in enumerate(source.splitlines(), 1):
        if not line.strip():
            continue
        if number in doc_lines or (number in comment_lines and line.strip().startswith("#")):
            prose += 1
        else:
            code += 1
    return prose, code


def ratio(folders: list[Path]) -> tuple[float, list[tuple[float, int, int, Path]]]:
    """The overall ratio and (ratio, prose, code, path) per file."""
    rows = []
    for folder in folders:
        for path in [folder] if folder.is_file() else sorted(folder.rglob("*.py")):
            prose, code = count(path)
            rows.append((prose / max(code, 1), prose, code, path))
    total_prose = sum(r[1] for r in rows)
    total_code = sum(r[2] for r in rows)
    return total_prose / max(total_code, 1), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, default=[ROOT / "methods", ROOT / "benchmark"])
    parser.add_argument("--top", type=int, default=10, help="list the N files of highest ratio")
    args = parser.parse_args()
    overall, rows = ratio(args.folders)
    for r, prose, code, path in sorted(rows, key=lambda row: row[0], reverse=True)[: args.top]:
        print(f"{r:5.2f}  {prose:4d} / {code:4d}  {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    print(f"prose {sum(r[1] for r in rows)} / code {sum(r[2] for r in rows)} = {overall:.3f} (target <= {TARGET})")


if __name__ == "__main__":
    main()
