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

Layout: task definitions in :mod:`benchmark.tasks.specs`, the GLUE files' reader in :mod:`benchmark.tasks.files`,
metrics and baselines in :mod:`benchmark.tasks.metrics`; this module chooses the source and loads from the hub,
and exports every public name of the four.
"""
from __future__ import annotations

from headprune_bench.benchmark.tasks.files import load_glue_local
from headprune_bench.benchmark.tasks.loading import describe_data_source, load_glue_hub, load_task, resolve_data_dir
from headprune_bench.benchmark.tasks.metrics import compute_metrics, majority_baseline, predicted_class_fraction
from headprune_bench.benchmark.tasks.specs import (
    GLUE_DIR_ENV,
    HUB_DATASET,
    SPLIT_FILES,
    TASK_GROUPS,
    TASKS,
    DataError,
    DataWarning,
    TaskSpec,
    get_task,
    resolve_tasks,
)

__all__ = [
    "GLUE_DIR_ENV",
    "HUB_DATASET",
    "SPLIT_FILES",
    "DataError",
    "DataWarning",
    "TaskSpec",
    "TASKS",
    "TASK_GROUPS",
    "get_task",
    "resolve_tasks",
    "resolve_data_dir",
    "load_task",
    "describe_data_source",
    "load_glue_local",
    "load_glue_hub",
    "compute_metrics",
    "majority_baseline",
    "predicted_class_fraction",
]
