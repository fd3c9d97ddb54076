"""Provenance of a run, carried by every record: the code's git commit and whether (and how) the checkout differed
from it, library versions, data file hashes, the machine, timestamps; and :func:`quiet_libraries`, how the
libraries talk while a run works."""
from __future__ import annotations

import hashlib
import platform
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the task modules load datasets and pandas; this module stays light (the store imports it)
    from headprune_bench.benchmark.tasks import TaskSpec

#: Distributions whose versions every record names.
VERSIONED = ("headprune-bench", "torch", "transformers", "datasets", "numpy", "scikit-learn")


REPO_ROOT = Path(__file__).resolve().parents[1]
"""The source checkout this package runs from (a git repository when installed editable)."""


UNKNOWN = "unknown"
"""What a provenance field holds when git (or the machine) cannot tell."""


@dataclass(frozen=True)
class GitState:
    """The state of the code's checkout when a ``bench run`` starts (:func:`git_state`), as every record of the
    run carries it in ``provenance``.

    Attributes:
        commit: HEAD's hash, with ``+dirty`` when tracked files differ from it; :data:`UNKNOWN` when git cannot
            tell (no git, not a repository).
        dirty: whether the tracked files of the working tree (outside the run folder) differ from HEAD, staged or
            not (``git diff HEAD``: the code that runs); :data:`UNKNOWN` when git cannot tell.
        diff: sha256 (16 hex) of those differences, ``git diff HEAD`` in a fixed format (:data:`DIFF_ARGS`): equal
            for the same uncommitted changes on any machine, different for any other; None when clean,
            :data:`UNKNOWN` when git cannot tell. Untracked files are in none of the three.
    """

    commit: str
    dirty: bool | str
    diff: str | None

    def as_provenance(self) -> dict[str, Any]:
        """The record's ``provenance`` keys: ``git_commit``, ``git_dirty``, ``git_diff``."""
        return {"git_commit": self.commit, "git_dirty": self.dirty, "git_diff": self.diff}


GIT_UNKNOWN = GitState(UNKNOWN, UNKNOWN, UNKNOWN)
"""The state of a checkout git cannot read."""

DIFF_ARGS = ("diff", "HEAD", "--binary", "--full-index", "--no-renames", "--no-color", "--no-ext-diff",
             "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/")
"""``git diff`` in a format no user setting changes (prefixes, colour, external or text-conversion drivers, rename
detection, abbreviated object names), so that its hash is the same for the same changes everywhere."""


def _pathspec(root: Path, exclude: Path | None) -> list[str]:
    """The pathspec of the dirty check: the whole checkout, without ``exclude`` when it lies inside ``root``."""
    if exclude is None:
        return []
    try:
        rel = Path(exclude).resolve().relative_to(Path(root).resolve())
    except ValueError:  # the run folder is outside the repository
        return []
    return ["--", ".", f":(exclude){rel.as_posix()}"]


def _git(root: Path, *args: str, text: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=text, timeout=timeout)


def git_state(exclude: Path | None = None, root: Path | None = None) -> GitState:
    """The checkout's :class:`GitState` (``root``: default :data:`REPO_ROOT`). ``exclude`` (the run folder, when
    inside the repository) is left out of the dirty check and of the diff, so that a run's own output never makes
    its code dirty. Never raises: git missing, not a repository, or a git command that fails or hangs gives
    :data:`UNKNOWN` in the fields it would have told."""
    root = REPO_ROOT if root is None else Path(root)
    try:
        commit = _git(root, "rev-parse", "HEAD")
        if commit.returncode != 0:
            return GIT_UNKNOWN
        head = commit.stdout.strip()
        diff = _git(root, *DIFF_ARGS, *_pathspec(root, exclude), text=False, timeout=120)
        if diff.returncode != 0:
            return GitState(head, UNKNOWN, UNKNOWN)
        if not diff.stdout:
            return GitState(head, False, None)
        return GitState(head + "+dirty", True, hashlib.sha256(diff.stdout).hexdigest()[:16])
    except (OSError, subprocess.SubprocessError):
        return GIT_UNKNOWN


def git_commit(exclude: Path | None = None) -> str:
    """HEAD of the code's repository, with ``+dirty`` when tracked files differ from it; ``"unknown"`` when git
    cannot tell. ``exclude`` (the run folder, when inside the repository) is left out of the dirty check."""
    return git_state(exclude).commit


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
