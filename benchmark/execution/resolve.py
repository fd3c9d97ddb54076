"""How a run's cells execute: serially or on Ray (``--workers N``, ``--ray-address ADDR``; the CLI's ``--workers
auto``: one cell per CPU core where Ray is installed), with CPU threads and a GPU fraction per cell. See
docs/choices.md ("Execution options")."""
from __future__ import annotations

import dataclasses
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from headprune_bench.benchmark import models
from headprune_bench.benchmark.config.presets import ConfigError
from headprune_bench.benchmark.config.run import RunConfig
from headprune_bench.benchmark.provenance import machine_name


@dataclass(frozen=True)
class Execution:
    """The resolved execution options of a run.

    Attributes:
        workers: local Ray with this many cells at a time (``--workers``), or None.
        address: the Ray cluster to join (``--ray-address``; ``auto`` reads ``RAY_ADDRESS``), or None.
        threads_per_cell: torch CPU threads of one cell (Ray: the CPUs a cell reserves).
        gpus_per_cell: the share of a GPU one cell reserves (Ray's fractional GPUs; 0: cells run on CPU).
        device: where cells run; on Ray ``cuda`` (the GPU Ray assigns) or ``cpu``.
        note: why ``--workers auto`` chose what it chose, when that is worth a line ("" otherwise).
    """

    workers: int | None
    address: str | None
    threads_per_cell: int
    gpus_per_cell: float
    device: torch.device
    note: str = ""

    @property
    def parallel(self) -> bool:
        """Whether cells run on Ray."""
        return self.workers is not None or self.address is not None

    def machine(self) -> tuple[str, int] | None:
        """What the cells run on, as their records will name it (``cost.machine``, ``cost.threads``: the CPU's or
        GPU's name and torch's threads), or None on a Ray cluster, whose cells may run on different machines."""
        return None if self.address is not None else (machine_name(self.device), self.threads_per_cell)

    def describe(self) -> dict[str, Any]:
        """The options as JSON (kept in ``runs.jsonl``)."""
        if not self.parallel:
            return {"mode": "serial", "device": str(self.device)}
        return {"mode": "ray", "workers": self.workers, "ray_address": self.address,
                "threads_per_cell": self.threads_per_cell, "gpus_per_cell": self.gpus_per_cell,
                "device": str(self.device)}

    def summary(self) -> str:
        """One line for the log and the console."""
        if not self.parallel:
            return f"serial ({self.note})" if self.note else "serial"
        where = f"{self.workers} local workers" if self.workers is not None else f"Ray cluster {self.address}"
        gpu = f", {self.gpus_per_cell:g} GPU" if self.gpus_per_cell else ""
        note = f" ({self.note})" if self.note else ""
        return f"Ray: {where}, {self.threads_per_cell} thread(s){gpu} per cell{note}"


NATIVE_BF16 = ("avx512_bf16", "amx_bf16")
"""CPU flags (``/proc/cpuinfo``) of native bfloat16 arithmetic; without one, bf16 autocast is emulated and slower."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where that file is missing: not Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


def bf16_warning(precision: str, device: torch.device) -> str | None:
    """The warning for ``--precision bf16`` on a CPU without native bf16 (:data:`NATIVE_BF16`), else None."""
    if precision != "bf16" or device.type != "cpu":
        return None
    if NATIVE_BF16[0] in (flags := cpu_flags()) or NATIVE_BF16[1] in flags:
        return None
    return (f"--precision bf16 on a CPU without native bf16 ({' or '.join(NATIVE_BF16)} not in /proc/cpuinfo): "
            f"torch emulates it, so this run will be slower than fp32, not faster")


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def auto_workers(cfg: RunConfig) -> tuple[int | None, str]:
    """What ``--workers auto`` runs: ``(N, note)``, one cell per CPU core (``cores // --threads-per-cell``) on a
    local Ray, or ``(None, why)``, serial: a GPU the cells would use is visible (packing several cells on it is an
    explicit ``--workers N``), Ray is not installed (the note says how to install it), or one core only."""
    if cfg.device.startswith("cuda") or (cfg.device == "auto" and torch.cuda.is_available()):
        return None, "a GPU is visible: one cell at a time on it; --workers N shares it among N cells"
    if importlib.util.find_spec("ray") is None:
        return None, "Ray is not installed; pip install -e '.[ray]' runs one cell per CPU core"
    workers = cpu_cores() // (cfg.threads_per_cell or 1)
    if workers < 2:
        return None, "one CPU core for one cell at a time"
    return workers, "--workers auto: one cell per CPU core"


def resolve_execution(cfg: RunConfig) -> Execution:
    """The :class:`Execution` of ``cfg``: serial unless ``cfg.workers`` or ``cfg.ray_address`` is set, or
    ``cfg.auto_workers`` finds cores for several cells (:func:`auto_workers`).

    On Ray, ``threads_per_cell`` defaults to 1 when several cells share the machine, else to the CPU count;
    ``gpus_per_cell`` defaults to ``min(1, GPUs / N)`` for N local workers with a visible GPU and ``--device
    auto|cuda``, else to 0. Cells run on ``cuda`` exactly when ``gpus_per_cell > 0``.

    Raises:
        ConfigError: ``--device cuda:N`` on Ray (Ray assigns the GPU), ``--device cpu`` with a GPU share, a GPU
            share for local workers without a visible GPU, or ``--device cuda`` without one on a cluster.
        ValueError: ``--device`` names an unknown device or CUDA is missing (serial runs).
    """
    note = ""
    if cfg.auto_workers and not cfg.ray_address:
        workers, note = auto_workers(cfg)
        cfg = dataclasses.replace(cfg, workers=workers)
    if not cfg.workers and not cfg.ray_address:
        if cfg.threads_per_cell is not None or cfg.gpus_per_cell is not None:
            raise ConfigError(f"--threads-per-cell and --gpus-per-cell apply to cells on Ray, and this run is serial "
                              f"({note})")
        return Execution(None, None, torch.get_num_threads(), 0.0, models.resolve_device(cfg.device), note)
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"--device {cfg.device}: on Ray, Ray assigns each cell its GPU; use --device auto or cuda "
                          f"with --gpus-per-cell")
    gpus = cfg.gpus_per_cell
    if gpus is None:
        visible = torch.cuda.device_count() if cfg.workers and cfg.device != "cpu" else 0
        gpus = min(1.0, visible / cfg.workers) if visible else 0.0
    if gpus > 0 and cfg.device == "cpu":
        raise ConfigError(f"--gpus-per-cell {gpus:g} with --device cpu: drop one of them")
    if gpus > 0 and cfg.workers and torch.cuda.device_count() == 0:  # (a cluster's GPUs may be on other machines)
        built = "" if torch.backends.cuda.is_built() else "; this torch is built without CUDA"
        raise ConfigError(f"--gpus-per-cell {gpus:g}: no GPU is visible on this machine{built}; drop the option to "
                          f"run the cells on the CPU")
    if gpus == 0 and cfg.device == "cuda":
        raise ConfigError("--device cuda on Ray needs --gpus-per-cell G (the share of a GPU each cell reserves, "
                          "e.g. 0.25 runs four cells on one GPU)")
    threads = cfg.threads_per_cell or (1 if cfg.ray_address or cfg.workers > 1 else (os.cpu_count() or 1))
    return Execution(cfg.workers, cfg.ray_address, threads, float(gpus), torch.device("cuda" if gpus > 0 else "cpu"),
                     note)
