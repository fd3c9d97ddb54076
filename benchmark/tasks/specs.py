"""The small GLUE tasks: :class:`TaskSpec`, :data:`TASKS`, :data:`TASK_GROUPS`, name lookup, and the errors of
the task modules (:class:`DataError`, :class:`DataWarning`)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import datasets

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

# name, GLUE folder, hub config, text fields, label names, metrics, primary metric (MRPC's: AUBER's reward metric)
TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("mrpc", "MRPC", "mrpc", _PAIR, ("not_equivalent", "equivalent"), ("accuracy", "f1"), "accuracy"),
        TaskSpec("cola", "CoLA", "cola", ("sentence",), ("unacceptable", "acceptable"), ("matthews_correlation",),
                 "matthews_correlation"),
        TaskSpec("rte", "RTE", "rte", _PAIR, ("entailment", "not_entailment"), ("accuracy",), "accuracy"),
        TaskSpec("wnli", "WNLI", "wnli", _PAIR, ("not_entailment", "entailment"), ("accuracy",), "accuracy"),
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
