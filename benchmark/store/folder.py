"""A run folder's own files besides the result store: ``DIR/run.json`` (the experiment settings and config hash,
one configuration per folder) and ``DIR/base/<task>-seed<seed>/`` (the fine-tuned base models).
See docs/choices.md ("The run folder")."""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from headprune_bench.benchmark.config.presets import ConfigError, Experiment, comparable_settings, diff_dicts
from headprune_bench.benchmark.provenance import now_utc
from headprune_bench.benchmark.store.jsonl import file_lock

log = logging.getLogger("benchmark")

RUN_JSON = "run.json"
RUN_LOCK = ".run.lock"
BASE_DIR = "base"
TRAIN_INFO = "train_info.json"


class RunFolderError(OSError):
    """The run folder (or a file in it) cannot be written: a full disk, missing permissions, a file where a
    folder should be. The message names the path; finished cells stay in ``records.jsonl``."""


def check_run_json(out: Path, experiment: Experiment, write: bool = True) -> str:
    """Refuse a folder made with another experiment configuration; accept a subset or superset of its tasks.
    Returns the folder's config hash: the one ``run.json`` was created with, which every record of the folder
    carries (adding a task never changes it).

    Runs under an exclusive lock on ``DIR/.run.lock``. Data hashes are compared per file: a task left out is no
    conflict, a task added is merged into ``run.json``. Afterwards ``experiment.data_hashes`` holds the folder's
    hashes (all its tasks). ``write=False`` (``bench run --dry-run``) only compares: no lock, nothing written.

    Raises:
        ConfigError: a setting or a data file's hash differs from the folder's; the message lists each change.
        OSError: the folder cannot be read or written.
    """
    path = Path(out) / RUN_JSON
    if not write:
        return _compare_run_json(path, experiment, write=False)
    with open(Path(out) / RUN_LOCK, "a+b") as lock, file_lock(lock.fileno()):
        return _compare_run_json(path, experiment, write=True)


def _compare_run_json(path: Path, experiment: Experiment, write: bool) -> str:
    """:func:`check_run_json`'s work, the lock held when it ``write``s."""
    current = experiment.as_dict()
    if not path.exists():
        digest = experiment.digest()
        if write:
            _write_run_json(path, experiment, digest, {"created": now_utc()})
        return digest
    stored = json.loads(path.read_text())
    old = stored.get("experiment", {})
    old_hashes, new_hashes = old.get("data_hashes", {}), current.get("data_hashes", {})
    old_settings, new_settings = comparable_settings(old), comparable_settings(current)
    changes = diff_dicts(old_settings, new_settings)
    old_source, new_source = old.get("data_source", "<absent>"), current.get("data_source", "<absent>")
    if old_settings.get("data_source") != new_settings.get("data_source"):  # hub and local: name both as given
        changes = [f"data_source: {old_source!r} -> {new_source!r}" if c.startswith("data_source:") else c
                   for c in changes]
    elif old_source != new_source:
        log.info("run.json: the data folder is now %s (this folder was made with %s); its files' hashes are "
                 "compared one by one", new_source, old_source)
    changes += [f"data_hashes.{f}: {old_hashes[f]!r} -> {new_hashes[f]!r}"
                for f in sorted(set(old_hashes) & set(new_hashes)) if old_hashes[f] != new_hashes[f]]
    if changes:
        if "protocol" not in old:
            changes.insert(0, "protocol: 1 (this folder predates the protocol version) -> "
                              f"{current['protocol']}: conditions evaluate other weights now")
            changes = [c for c in changes if not c.startswith("protocol:") or "predates" in c]
        raise ConfigError(
            f"{path}: this run folder was made with a different configuration; refusing to mix results.\n"
            f"  " + "\n  ".join(changes) + "\nUse another --out folder, or the same options as before."
        )
    added = sorted(set(new_hashes) - set(old_hashes))
    experiment.data_hashes = {**old_hashes, **new_hashes}
    digest = stored.get("config_hash") or experiment.digest()
    if added and write:
        log.info("run.json: adding data files %s", ", ".join(added))
        _write_run_json(path, experiment, digest,
                        {k: v for k, v in stored.items() if k not in ("experiment", "config_hash")})
    return digest


def _write_run_json(path: Path, experiment: Experiment, digest: str, extra: dict[str, Any]) -> None:
    """Write ``run.json`` atomically (a temporary file renamed over it): ``extra``, the experiment, the hash."""
    tmp = path.with_name(f"{RUN_JSON}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**extra, "experiment": experiment.as_dict(), "config_hash": digest},
                              indent=2, sort_keys=True))
    tmp.replace(path)


def save_base_model(model, tokenizer, folder: Path, info: dict[str, Any]) -> None:
    """Save a fine-tuned base model with its tokenizer (a complete Hugging Face folder) and ``train_info.json``
    (``info``) to ``folder``, atomically: written to ``<folder>.tmp``, then renamed.

    Raises:
        RunFolderError: the folder cannot be written (disk full, permissions, ``base/`` not a folder); no
            half-written folder is left behind.
    """
    tmp = folder.with_name(folder.name + ".tmp")
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)  # a complete Hugging Face folder: loadable with its tokenizer
        (tmp / TRAIN_INFO).write_text(json.dumps(info))
        if folder.is_dir():  # no model in it (the caller found no config.json): e.g. a clone's train_info.json
            shutil.rmtree(folder)
        tmp.replace(folder)
    except Exception as exc:  # disk full, permissions, base/ not a folder; safetensors raises its own types
        shutil.rmtree(tmp, ignore_errors=True)  # leave no half-written folder behind
        raise RunFolderError(f"{folder}: cannot save the fine-tuned base model ({type(exc).__name__}: "
                             f"{exc})") from exc


def base_train_infos(base_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The ``train_info.json`` of each base model under ``base_dir`` (``DIR/base``; folders ``<task>-seed<N>``),
    by ``(task, seed)``: ``wall_s`` (seconds the fine-tune took), ``examples`` (train split size), ``seed``,
    ``finished``. An unreadable or non-object file, and a folder name without an integer seed (``mrpc-seed0.tmp``),
    are left out."""
    infos: dict[tuple[str, int], dict[str, Any]] = {}
    for info_file in sorted(base_dir.glob(f"*-seed*/{TRAIN_INFO}")) if base_dir.is_dir() else []:
        task, _, seed = info_file.parent.name.rpartition("-seed")
        try:
            info = json.loads(info_file.read_text())
            key = (task, int(seed))
        except (OSError, ValueError):
            continue
        if isinstance(info, dict):
            infos[key] = info
    return infos
