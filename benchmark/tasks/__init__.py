"""The small GLUE tasks: task definitions, data loading (local GLUE files or the hub, both in the hub's
``nyu-mll/glue`` schema) and GLUE metrics. See docs/choices.md ("Tasks and data").
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
