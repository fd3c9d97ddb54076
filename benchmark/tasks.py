"""The small GLUE tasks: task definitions, data loading and GLUE metrics.

Two data sources give the same result, a :class:`datasets.DatasetDict` with the
splits ``"train"`` and ``"validation"`` in the schema of the Hugging Face hub
dataset ``nyu-mll/glue``:

* local files in the original GLUE distribution layout
  (``$GLUE_DIR/<TASK>/{train,dev}.tsv``, see ``shared/data/README.md``), read by
  :func:`load_glue_local`;
* the hub itself, read by :func:`load_glue_hub`.

:func:`load_task` picks one: an explicit data folder, else the ``GLUE_DIR``
environment variable, else the hub.

Schema (identical for both sources, see :attr:`TaskSpec.features`):

* CoLA: ``sentence`` (string), ``label`` (ClassLabel), ``idx`` (int32);
* MRPC, RTE, WNLI: ``sentence1``, ``sentence2`` (string), ``label``
  (ClassLabel), ``idx`` (int32).

``idx`` is the row's position in its split (0..n-1), as on the hub.

Metrics are computed with the scikit-learn functions that the hub's
``evaluate`` GLUE metric calls, and are fractions (accuracy and F1 in [0, 1],
Matthews correlation in [-1, 1]), never percentages.

Every problem with the data, its location or a task name raises
:class:`DataError`; data that loads but looks suspicious (a split holding one
class only) is reported with a :class:`DataWarning`.
"""

from __future__ import annotations

import csv
import difflib
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import datasets
import numpy as np
import pandas as pd
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

__all__ = [
    "DataError",
    "DataWarning",
    "TaskSpec",
    "TASKS",
    "TASK_GROUPS",
    "get_task",
    "resolve_tasks",
    "resolve_data_dir",
    "load_task",
    "load_glue_local",
    "load_glue_hub",
    "compute_metrics",
    "majority_baseline",
    "predicted_class_fraction",
]

HUB_DATASET = "nyu-mll/glue"
GLUE_DIR_ENV = "GLUE_DIR"
#: Output split name -> file name in a GLUE task folder.
SPLIT_FILES = {"train": "train.tsv", "validation": "dev.tsv"}


class DataError(ValueError):
    """A problem with the task data, its location or a task name.

    The message names the file, folder or option concerned and what was expected.
    """


class DataWarning(UserWarning):
    """Data that loads but deserves attention, e.g. a split with one class only."""


# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class TaskSpec:
    """One GLUE classification task.

    Attributes:
        name: lower-case CLI name, e.g. ``"mrpc"``.
        glue_dir: folder name in the GLUE layout, e.g. ``"MRPC"``.
        hub_config: config name in the hub dataset ``nyu-mll/glue``.
        text_fields: the hub's text column names, in order.
        label_names: the hub's ClassLabel names, in label-id order.
        metrics: the GLUE metrics of the task (keys of :func:`compute_metrics`).
        primary_metric: the one metric used to rank, reward and flag runs.
    """

    name: str
    glue_dir: str
    hub_config: str
    text_fields: tuple[str, ...]
    label_names: tuple[str, ...]
    metrics: tuple[str, ...]
    primary_metric: str

    @property
    def num_labels(self) -> int:
        """Number of classes (``len(label_names)``)."""
        return len(self.label_names)

    @property
    def features(self) -> datasets.Features:
        """The hub schema: text columns as strings, ``label`` ClassLabel, ``idx`` int32."""
        columns: dict[str, datasets.features.FeatureType] = {
            field: datasets.Value("string") for field in self.text_fields
        }
        columns["label"] = datasets.ClassLabel(names=list(self.label_names))
        columns["idx"] = datasets.Value("int32")
        return datasets.Features(columns)


_PAIR = ("sentence1", "sentence2")

TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            name="mrpc",
            glue_dir="MRPC",
            hub_config="mrpc",
            text_fields=_PAIR,
            label_names=("not_equivalent", "equivalent"),
            metrics=("accuracy", "f1"),
            primary_metric="accuracy",  # AUBER's reward metric
        ),
        TaskSpec(
            name="cola",
            glue_dir="CoLA",
            hub_config="cola",
            text_fields=("sentence",),
            label_names=("unacceptable", "acceptable"),
            metrics=("matthews_correlation",),
            primary_metric="matthews_correlation",
        ),
        TaskSpec(
            name="rte",
            glue_dir="RTE",
            hub_config="rte",
            text_fields=_PAIR,
            label_names=("entailment", "not_entailment"),
            metrics=("accuracy",),
            primary_metric="accuracy",
        ),
        TaskSpec(
            name="wnli",
            glue_dir="WNLI",
            hub_config="wnli",
            text_fields=_PAIR,
            label_names=("not_entailment", "entailment"),
            metrics=("accuracy",),
            primary_metric="accuracy",
        ),
    )
}

TASK_GROUPS: dict[str, tuple[str, ...]] = {"glue-small": ("mrpc", "cola", "rte", "wnli")}


def _unknown_task_error(name: str) -> DataError:
    known = sorted(TASKS) + sorted(TASK_GROUPS)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return DataError(f"unknown task {name!r}{hint}; known: {', '.join(known)}")


def get_task(task: TaskSpec | str) -> TaskSpec:
    """Return the :class:`TaskSpec` for a task or a task name (case-insensitive).

    Raises:
        DataError: the name is not a known task (the message suggests the closest one).
    """
    if isinstance(task, TaskSpec):
        return task
    key = str(task).strip().lower()
    if key not in TASKS:
        raise _unknown_task_error(key)
    return TASKS[key]


def resolve_tasks(spec: str) -> list[TaskSpec]:
    """Turn a CLI task option into task specs.

    Args:
        spec: a group name (``"glue-small"``) or comma-separated task and group
            names (``"mrpc,cola"``); case-insensitive, spaces around names ignored.

    Returns:
        The tasks in the order given, groups expanded, duplicates removed.

    Raises:
        DataError: empty option, or an unknown name, e.g.
            ``unknown task 'mrcp' (did you mean 'mrpc'?); known: ...``.
    """
    names = [part.strip().lower() for part in str(spec).split(",") if part.strip()]
    if not names:
        raise DataError(
            f"empty task option {spec!r}: expected a group ({', '.join(TASK_GROUPS)}) "
            f"or comma-separated task names ({', '.join(TASKS)})"
        )
    resolved: list[TaskSpec] = []
    for name in names:
        if name in TASK_GROUPS:
            members = TASK_GROUPS[name]
        elif name in TASKS:
            members = (name,)
        else:
            raise _unknown_task_error(name)
        resolved.extend(TASKS[m] for m in members if TASKS[m] not in resolved)
    return resolved


# --------------------------------------------------------------------------- loading


def resolve_data_dir(data_dir: str | Path | None = None) -> Path | None:
    """Choose the GLUE data folder: ``data_dir`` if given, else ``$GLUE_DIR``, else ``None``.

    ``None`` means "use the hub". The folder's existence is checked by :func:`load_glue_local`, not here.

    Raises:
        DataError: ``data_dir`` or ``$GLUE_DIR`` is given but empty (e.g. ``GLUE_DIR=$UNSET_VARIABLE``): an empty
            value is a mistake, not a request for the hub, so it is never read as "not given".
    """
    if data_dir is not None:
        if not str(data_dir).strip():
            raise DataError("--data-dir is empty: give the GLUE folder (GLUE's TSV layout), or leave the option out "
                            f"to use ${GLUE_DIR_ENV} or the Hugging Face hub")
        return Path(data_dir).expanduser()
    if GLUE_DIR_ENV in os.environ:
        from_env = os.environ[GLUE_DIR_ENV].strip()
        if not from_env:
            raise DataError(f"{GLUE_DIR_ENV} is set but empty (an unset shell variable?): set it to the GLUE folder, "
                            f"or unset it (unset {GLUE_DIR_ENV}) to read the tasks from the Hugging Face hub")
        return Path(from_env).expanduser()
    return None


def describe_data_source(data_dir: str | Path | None = None) -> str:
    """Where :func:`load_task` reads the tasks from, in words, for the first line a command prints: the folder
    and whether ``--data-dir`` or ``$GLUE_DIR`` named it, or the hub dataset.

    Raises:
        DataError: as :func:`resolve_data_dir`.
    """
    root = resolve_data_dir(data_dir)
    if root is None:
        return f"the Hugging Face hub ({HUB_DATASET}; no --data-dir, {GLUE_DIR_ENV} not set)"
    source = "--data-dir" if data_dir is not None else f"${GLUE_DIR_ENV}"
    return f"{root} ({source})"


def load_task(task: TaskSpec | str, data_dir: str | Path | None = None) -> datasets.DatasetDict:
    """Load a task's ``"train"`` and ``"validation"`` (GLUE dev) splits.

    Source: local GLUE files under ``data_dir`` or ``$GLUE_DIR`` when either is
    set (see :func:`resolve_data_dir`), else the hub dataset ``nyu-mll/glue``.
    Both sources give the schema :attr:`TaskSpec.features`.

    Raises:
        DataError: unknown task, or any problem with the data (see the loaders).
    """
    task = get_task(task)
    root = resolve_data_dir(data_dir)
    if root is None:
        return load_glue_hub(task)
    return load_glue_local(task, root)


def load_glue_hub(task: TaskSpec | str) -> datasets.DatasetDict:
    """Load a task from the hub dataset ``nyu-mll/glue`` (train and validation only).

    The unlabeled test split is dropped; the splits are cast to
    :attr:`TaskSpec.features` if the hub's features differ from them.

    Raises:
        DataError: the hub cannot be reached or its data lacks a split or column.
    """
    task = get_task(task)
    try:
        loaded = datasets.load_dataset(HUB_DATASET, task.hub_config)
    except Exception as err:  # network, auth, cache: all mean "no hub data"
        raise DataError(
            f"could not load {HUB_DATASET!r} config {task.hub_config!r} from the Hugging Face hub "
            f"({type(err).__name__}: {err}); to use local GLUE files instead, "
            f"set {GLUE_DIR_ENV} or pass --data-dir"
        ) from err

    features = task.features
    splits = {}
    for split in SPLIT_FILES:
        where = f"hub dataset {HUB_DATASET!r} config {task.hub_config!r} split {split!r}"
        if split not in loaded:
            raise DataError(f"{where} is missing; found splits: {', '.join(loaded)}")
        dataset = loaded[split]
        _check_column_names(where, list(dataset.column_names), tuple(features))
        if dataset.features != features:
            try:
                dataset = dataset.cast(features)
            except (ValueError, TypeError) as err:
                raise DataError(f"{where}: cannot cast to the expected features {features}: {err}") from err
        _warn_if_one_class(where, task, dataset["label"], stacklevel=3)
        splits[split] = dataset
    return datasets.DatasetDict(splits)


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

_LOCAL_FORMATS: dict[str, _LocalFormat] = {
    "cola": _LocalFormat(
        columns=("source", "label", "original_label_mark", "sentence"),
        has_header=False,
        label_column="label",
        text_columns={"sentence": "sentence"},
        label_values=_BINARY_DIGITS,
    ),
    "mrpc": _LocalFormat(
        columns=("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
        has_header=True,
        label_column="Quality",
        text_columns={"#1 String": "sentence1", "#2 String": "sentence2"},
        label_values=_BINARY_DIGITS,
    ),
    "rte": _LocalFormat(
        columns=_NLI_HEADER,
        has_header=True,
        label_column="label",
        text_columns={"sentence1": "sentence1", "sentence2": "sentence2"},
        label_values={"entailment": 0, "not_entailment": 1},
    ),
    "wnli": _LocalFormat(
        columns=_NLI_HEADER,
        has_header=True,
        label_column="label",
        text_columns={"sentence1": "sentence1", "sentence2": "sentence2"},
        label_values=_BINARY_DIGITS,
    ),
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
    _warn_if_one_class(str(path), task, labels, stacklevel=4)
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
        _check_column_names(str(path), names, fmt.columns)
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


def _check_column_names(where: str, found: list[str], expected: tuple[str, ...]) -> None:
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


def _warn_if_one_class(where: str, task: TaskSpec, labels, stacklevel: int) -> None:
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


# --------------------------------------------------------------------------- metrics


def _f1_binary(y_true, y_pred) -> float:
    # zero_division=0.0 returns what sklearn's default returns (0.0), without the warning.
    return f1_score(y_true, y_pred, average="binary", pos_label=1, zero_division=0.0)


_METRIC_FUNCTIONS = {
    "accuracy": accuracy_score,
    "f1": _f1_binary,
    "matthews_correlation": matthews_corrcoef,
}


def _as_class_ids(values, what: str, num_labels: int) -> np.ndarray:
    """Check that ``values`` is a non-empty 1-D sequence of ids in [0, num_labels)."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(
            f"{what}: expected a 1-D sequence of class ids, got shape {array.shape}"
            " (take the argmax over logits first)"
        )
    if array.size == 0:
        raise ValueError(f"{what}: empty")
    if array.dtype == bool:
        array = array.astype(np.int64)
    if not np.issubdtype(array.dtype, np.number) or not np.all(np.equal(np.mod(array, 1), 0)):
        raise ValueError(f"{what}: expected integer class ids, got dtype {array.dtype}")
    array = array.astype(np.int64)
    outside = array[(array < 0) | (array >= num_labels)]
    if outside.size:
        raise ValueError(f"{what}: class id {outside[0]} outside 0..{num_labels - 1}")
    return array


def compute_metrics(task: TaskSpec | str, predictions, labels) -> dict[str, float]:
    """The task's GLUE metrics of ``predictions`` against ``labels``.

    Args:
        task: task spec or name.
        predictions: 1-D sequence of predicted class ids (length n).
        labels: 1-D sequence of gold class ids (length n).

    Returns:
        ``{metric: value}`` for each of ``task.metrics``, python floats: accuracy
        and F1 (binary, positive class 1) as fractions in [0, 1], Matthews
        correlation in [-1, 1]. Computed with scikit-learn's ``accuracy_score``,
        ``f1_score`` and ``matthews_corrcoef``, as the hub ``evaluate`` GLUE metric
        does. F1 is 0.0 when class 1 is never predicted nor present; MCC is 0.0
        when predictions or labels are constant.

    Raises:
        ValueError: inputs not 1-D, empty, of different lengths, or not class ids.
    """
    task = get_task(task)
    y_pred = _as_class_ids(predictions, "predictions", task.num_labels)
    y_true = _as_class_ids(labels, "labels", task.num_labels)
    if y_pred.shape != y_true.shape:
        raise ValueError(f"{len(y_pred)} predictions for {len(y_true)} labels")
    return {metric: float(_METRIC_FUNCTIONS[metric](y_true, y_pred)) for metric in task.metrics}


def majority_baseline(task: TaskSpec | str, train_labels, eval_labels) -> dict:
    """The majority-class baseline on the eval split: the score of always predicting the eval split's most
    frequent label (ties go to the smaller label id).

    The rule, and why: it is the best score any constant prediction reaches on the examples being scored
    (accuracy: the majority share; F1 of MRPC's positive class: the majority is the positive class on GLUE's
    dev set; MCC: every constant scores 0), so "at or below the majority baseline" always means "no better than
    a constant". A baseline from the train split's majority could point the wrong way on a subsample: a 64-example
    WNLI train sample whose majority is class 1 gives 43.75% on a dev sample whose majority is class 0 (56.25%),
    and a model at 54.69% would pass as better than the baseline while below always-class-0. On the full GLUE
    splits both rules agree for MRPC, RTE, CoLA and WNLI (protocol.md §7's published figures).

    Returns ``{"majority_label": int, "train_majority_label": int, **compute_metrics(task, predictions,
    eval_labels)}``; ``train_majority_label`` (the train split's most frequent label) is kept for reference only.
    A run at or below this score is degenerate (protocol.md §6).

    Raises:
        ValueError: labels empty or not class ids of the task.
    """
    task = get_task(task)
    train = _as_class_ids(train_labels, "train_labels", task.num_labels)
    gold = _as_class_ids(eval_labels, "eval_labels", task.num_labels)
    majority = int(np.bincount(gold, minlength=task.num_labels).argmax())
    predictions = np.full(gold.shape, majority)
    return {"majority_label": majority, "train_majority_label": int(np.bincount(train, minlength=task.num_labels).argmax()),
            **compute_metrics(task, predictions, gold)}


def predicted_class_fraction(predictions) -> float:
    """Share (in [0, 1]) of the predictions that fall in the most frequent predicted class.

    A run with a value above 0.95 on dev is degenerate (protocol.md §6).

    Raises:
        ValueError: predictions empty or not 1-D.
    """
    array = np.asarray(predictions)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"predictions: expected a non-empty 1-D sequence, got shape {array.shape}")
    _, counts = np.unique(array, return_counts=True)
    return float(counts.max() / array.size)
