"""Reading the GLUE distribution files (``<data_dir>/<TASK>/{train,dev}.tsv``) into the hub's schema, and the
checks both data sources share (column names, one-class splits).

"""

from __future__ import annotations

import csv
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import pandas as pd

from headprune_bench.benchmark.tasks.specs import (
    GLUE_DIR_ENV,
    SPLIT_FILES,
    TASKS,
    DataError,
    DataWarning,
    TaskSpec,
    get_task,
)


@dataclass(frozen=True)
class _LocalFormat:
    """How one task is stored in the GLUE distribution files."""

    columns: tuple[str, ...]  # file columns in order (the header's names, or our names if no header)
    has_header: bool
    label_column: str
    text_columns: Mapping[str, str]  # file column -> hub text field
    label_values: Mapping[str, int]  # label cell -> label id


_BINARY_DIGITS = {"0": 0, "1": 1}
_NLI_HEADER = ("index", "sentence1", "sentence2", "label")
_NLI_TEXTS = {"sentence1": "sentence1", "sentence2": "sentence2"}

# columns, header line?, label column, text columns, label values
_LOCAL_FORMATS: dict[str, _LocalFormat] = {
    "cola": _LocalFormat(("source", "label", "original_label_mark", "sentence"), False, "label",
                         {"sentence": "sentence"}, _BINARY_DIGITS),
    "mrpc": _LocalFormat(("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"), True, "Quality",
                         {"#1 String": "sentence1", "#2 String": "sentence2"}, _BINARY_DIGITS),
    "rte": _LocalFormat(_NLI_HEADER, True, "label", _NLI_TEXTS, {"entailment": 0, "not_entailment": 1}),
    "wnli": _LocalFormat(_NLI_HEADER, True, "label", _NLI_TEXTS, _BINARY_DIGITS),
}

# pandas' C parser ends a line at "\r\n", "\r" or "\n"; the pre-scan must split the same way.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def load_glue_local(task: TaskSpec | str, data_dir: str | Path) -> datasets.DatasetDict:
    """Load a task from GLUE distribution files ``<data_dir>/<TASK>/{train,dev}.tsv``.

    Files are read as tab-separated with quoting off, decoded as ``utf-8-sig``,
    every cell a string. ``dev.tsv`` becomes the ``"validation"`` split. Blank
    lines are skipped; ``idx`` is the position among the data rows.

    Raises:
        DataError: missing data folder, task folder or file; empty file; missing,
            extra or duplicate columns (or a CoLA line with the wrong number of
            fields); a line whose field count differs from the header's; an
            unknown label value; a row with empty text. The message names the
            file and, for row problems, the line number.

    Warns:
        DataWarning: a split whose rows all have the same label.
    """
    task = get_task(task)
    root = _existing_data_dir(data_dir)
    folder = root / task.glue_dir
    if not folder.is_dir():
        present = sorted(p.name for p in root.iterdir() if p.is_dir())
        raise DataError(
            f"task folder {folder} not found: expected {task.glue_dir}/ with "
            f"{' and '.join(SPLIT_FILES.values())} in {root} (GLUE layout); "
            f"subfolders present: {', '.join(present) or 'none'}"
        )
    splits = {}
    for split, filename in SPLIT_FILES.items():
        splits[split] = _load_split(task, folder / filename)
    return datasets.DatasetDict(splits)


def _existing_data_dir(data_dir: str | Path | None) -> Path:
    if data_dir is None or not str(data_dir).strip():
        raise DataError(f"no GLUE data folder given: set {GLUE_DIR_ENV} or pass --data-dir")
    root = Path(data_dir).expanduser()
    expected = ", ".join(f"{spec.glue_dir}/" for spec in TASKS.values())
    if not root.exists():
        raise DataError(
            f"GLUE data folder {root} does not exist: set {GLUE_DIR_ENV} or pass --data-dir "
            f"to a folder in GLUE layout (holding {expected})"
        )
    if not root.is_dir():
        raise DataError(f"GLUE data folder {root} is not a folder: set {GLUE_DIR_ENV} or pass --data-dir")
    return root


def _load_split(task: TaskSpec, path: Path) -> datasets.Dataset:
    """Read, validate and convert one GLUE TSV file to a hub-schema Dataset."""
    fmt = _LOCAL_FORMATS[task.name]
    frame = _read_tsv(path, fmt)
    line_numbers = frame.index.to_numpy() + 1  # pandas row i is file line i + 1

    labels = _parse_labels(path, task, fmt, frame[fmt.label_column].tolist(), line_numbers)
    columns: dict[str, list] = {}
    for file_column, field in fmt.text_columns.items():
        texts = frame[file_column].tolist()
        empty = [row for row, text in enumerate(texts) if not text.strip()]
        if empty:
            row = empty[0]
            raise DataError(
                f"{path}, line {line_numbers[row]} (idx {row}): empty text in column {file_column!r}"
                f"{_more(len(empty), 'rows with empty text')}; every row needs a non-empty {file_column!r}"
            )
        columns[field] = texts
    columns["label"] = labels
    columns["idx"] = list(range(len(frame)))

    features = task.features
    dataset = datasets.Dataset.from_dict({name: columns[name] for name in features}, features=features)
    warn_if_one_class(str(path), task, labels, stacklevel=4)
    return dataset


def _read_tsv(path: Path, fmt: _LocalFormat) -> pd.DataFrame:
    """Read a GLUE TSV file into string columns named ``fmt.columns``.

    A pre-scan of the raw lines checks the header and every line's field count
    (pandas would silently pad short lines); pandas then parses the cells. The
    returned frame keeps pandas' row index, i.e. the 0-based file line number.
    """
    if not path.is_file():
        raise DataError(f"missing file {path}: expected {path.name} in {path.parent} (GLUE layout)")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataError(f"{path} is not valid UTF-8: {err}") from err

    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # the file ends with a line break
    blank = {i for i, line in enumerate(lines) if not line.strip() and "\t" not in line}
    content = [i for i in range(len(lines)) if i not in blank]
    expected_layout = (
        f"a header line {' | '.join(fmt.columns)}" if fmt.has_header
        else f"lines of {len(fmt.columns)} tab-separated fields ({', '.join(fmt.columns)})"
    )
    if not content:
        raise DataError(f"{path} is empty: expected {expected_layout} followed by data rows")

    names = list(fmt.columns)
    header_line = None
    if fmt.has_header:
        header_line = content.pop(0)
        names = lines[header_line].split("\t")
        check_column_names(str(path), names, fmt.columns)
        if not content:
            raise DataError(f"{path} has a header but no data rows")

    wrong = [i for i in content if lines[i].count("\t") + 1 != len(names)]
    if wrong:
        first = wrong[0]
        found = lines[first].count("\t") + 1
        expected = "the header has" if fmt.has_header else "expected"
        raise DataError(
            f"{path}, line {first + 1}: {found} tab-separated fields, {expected} {len(names)} "
            f"({', '.join(names)}){_more(len(wrong), 'lines with a wrong field count')}"
        )

    frame = pd.read_csv(
        path,
        sep="\t",
        quoting=csv.QUOTE_NONE,
        encoding="utf-8-sig",
        dtype=str,
        keep_default_na=False,
        header=None,
        names=names,
        index_col=False,
        skip_blank_lines=False,  # keeps pandas' row index equal to the file line index
    )
    if len(frame) != len(lines):  # cannot happen unless pandas and the pre-scan disagree on line breaks
        raise DataError(f"{path}: pandas read {len(frame)} lines, expected {len(lines)}; check its line breaks")
    skip = sorted(blank | ({header_line} if header_line is not None else set()))
    return frame.drop(index=skip)


def check_column_names(where: str, found: list[str], expected: tuple[str, ...]) -> None:
    """Raise DataError naming missing, extra or duplicate columns."""
    missing = [c for c in expected if c not in found]
    extra = [c for c in found if c not in expected]
    duplicated = sorted({c for c in found if found.count(c) > 1})
    problems = []
    if missing:
        problems.append(f"missing column(s) {', '.join(map(repr, missing))}")
    if extra:
        problems.append(f"unexpected column(s) {', '.join(map(repr, extra))}")
    if duplicated:
        problems.append(f"duplicated column(s) {', '.join(map(repr, duplicated))}")
    if problems:
        raise DataError(
            f"{where}: {'; '.join(problems)}; expected columns {', '.join(map(repr, expected))}, "
            f"found {', '.join(map(repr, found))}"
        )


def _parse_labels(
    path: Path, task: TaskSpec, fmt: _LocalFormat, cells: list[str], line_numbers: np.ndarray
) -> list[int]:
    """Map label cells to label ids, or raise DataError naming the first unknown value."""
    labels = [fmt.label_values.get(cell.strip()) for cell in cells]
    unknown = [row for row, label in enumerate(labels) if label is None]
    if unknown:
        row = unknown[0]
        allowed = ", ".join(f"{value!r} ({task.label_names[i]})" for value, i in fmt.label_values.items())
        raise DataError(
            f"{path}, line {line_numbers[row]} (idx {row}): unknown label {cells[row]!r} in column "
            f"{fmt.label_column!r}{_more(len(unknown), 'rows with unknown labels')}; allowed values: {allowed}"
        )
    return labels


def _more(count: int, what: str) -> str:
    return f" ({count} {what} in all)" if count > 1 else ""


def warn_if_one_class(where: str, task: TaskSpec, labels, stacklevel: int) -> None:
    """Warn (DataWarning) when every label is the same; stacklevel points at the public caller."""
    labels = [int(label) for label in labels]
    present = sorted(set(labels))
    if len(present) == 1:
        warnings.warn(
            f"{where}: all {len(labels)} rows have label {task.label_names[present[0]]!r} "
            f"({present[0]}); metrics such as F1 and Matthews correlation are degenerate on it",
            DataWarning,
            stacklevel=stacklevel,
        )
