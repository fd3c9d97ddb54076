"""Provenance of a run, carried by every record: the code's git commit, library versions, data file hashes, the
machine, timestamps; and :func:`quiet_libraries`, how the libraries talk while a run works."""
from __future__ import annotations

import hashlib
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the task modules load datasets and pandas; this module stays light (the store imports it)
    from headprune_bench.benchmark.tasks import TaskSpec

#: Distributions whose versions every record names.
VERSIONED = ("headprune-bench", "torch", "transformers", "datasets", "numpy", "scikit-learn")


REPO_ROOT = Path(__file__).resolve().parents[1]
"""The source checkout this package runs from (a git repository when installed editable)."""


def git_commit(exclude: Path | None = None) -> str:
    """HEAD of the code's repository, with ``+dirty`` when tracked files differ from it; ``"unknown"`` when git
    cannot tell. ``exclude`` (the run folder, when inside the repository) is left out of the dirty check."""
    root = REPO_ROOT
    status = ["git", "status", "--porcelain", "--untracked-files=no"]
    if exclude is not None:
        try:
            rel = Path(exclude).resolve().relative_to(root)
            status += ["--", ".", f":(exclude){rel.as_posix()}"]
        except ValueError:  # the run folder is outside the repository
            pass
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(status, cwd=root, capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return "unknown"
        return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def library_versions() -> dict[str, str]:
    """``{"python": version, distribution: version or "not installed"}`` for :data:`VERSIONED`."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def data_hashes(task_list: list[TaskSpec], data_dir: Path | None) -> dict[str, str]:
    """sha256 (16 hex) of each local TSV file, keyed ``task/file``; or per task the hub dataset name
    (``hub:nyu-mll/glue/<config>``) when ``data_dir`` is None (reading from the hub). Missing files are left out.

    Raises:
        OSError: a file exists but cannot be read.
    """
    from headprune_bench.benchmark import tasks

    if data_dir is None:
        return {t.name: f"hub:{tasks.HUB_DATASET}/{t.hub_config}" for t in task_list}
    out = {}
    for t in task_list:
        for fname in tasks.SPLIT_FILES.values():
            path = Path(data_dir) / t.glue_dir / fname
            if path.exists():
                out[f"{t.name}/{fname}"] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return out


def quiet_libraries() -> None:
    """Silence transformers' per-load reports and the per-map progress bars of datasets (our own progress bars
    over cells and fine-tuning steps stay)."""
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()


def machine_name(device) -> str:
    """What ran the work on ``device`` (a ``torch.device`` or its string, ``"cpu"``, ``"cuda:0"``): the GPU's name
    on CUDA (``torch.cuda.get_device_name``), else the CPU's model name from ``/proc/cpuinfo`` (``"AMD EPYC"``,
    ``"Intel(R) Xeon(R) ..."``), else the platform's processor or architecture."""
    if str(device).startswith("cuda"):
        import torch  # only here: this module stays light

        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def now_utc() -> str:
    """The current UTC time, ISO 8601 to the second (``2025-01-31T12:00:00+00:00``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
