"""Loading a task's splits: from a local GLUE folder or from the Hugging Face hub."""

from __future__ import annotations

import os
from pathlib import Path

import datasets

from headprune_bench.benchmark.tasks.files import check_column_names, load_glue_local, warn_if_one_class
from headprune_bench.benchmark.tasks.specs import (
    GLUE_DIR_ENV,
    HUB_DATASET,
    SPLIT_FILES,
    DataError,
    TaskSpec,
    get_task,
)

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
        check_column_names(where, list(dataset.column_names), tuple(features))
        if dataset.features != features:
            try:
                dataset = dataset.cast(features)
            except (ValueError, TypeError) as err:
                raise DataError(f"{where}: cannot cast to the expected features {features}: {err}") from err
        warn_if_one_class(where, task, dataset["label"], stacklevel=3)
        splits[split] = dataset
    return datasets.DatasetDict(splits)
