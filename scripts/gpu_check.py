"""Everything a session with one lent GPU should measure, in one command of about 8 minutes (issue 41, item 4).

    python scripts/gpu_check.py --out $OUT/gpu-check            # on the GPU machine, from the repository root
    python scripts/gpu_check.py --dry-run --out results/x       # anywhere: the commands, the cells, the time

Steps, in order (each a subprocess, timed; GPU memory sampled with nvidia-smi every 0.5 s):
1. the CUDA tests (`pytest -m cuda tests/test_cuda.py`);
2. per precision (fp32, bf16), the base models of MRPC and RTE seeds 0-3 (8 at a time on the GPU);
3. packing: the same fixed cells (MRPC and RTE, seeds 0-3, every method of `--methods all` but AUBER and its
   null control, prune-only and prune+recover) at 1, 4, 8 and 16 cells per GPU (`--workers N --gpus-per-cell 1/N`),
   in fp32 and bf16, each for a window of --window seconds: after it, a Ctrl-C (SIGINT) lets the running cells
   finish and starts no other, so cells per minute = records written / the step's wall time;
4. AUBER's prune step alone, one cell at 1 per GPU and eight at 8 per GPU (fp32).
It writes summary.json (per step: wall, cells, cells per minute, peak GPU memory and that divided by the cells
that shared the GPU) and README.md (the table) into --out, beside each step's run folder and log. The machine
needs what README command 1 installs, the packaged MiniLM's weights and the GLUE files ($GLUE_DIR).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKED = "random,confidence,michel,dsp,redundancy,voita,kwon"
CELLS = ["--tasks", "mrpc,rte", "--seeds", "0,1,2,3", "--preset", "quick", "--no-progress", "--no-report"]
OVERHEAD_S = 30
"""Expected seconds of a step besides its window (Ray's start, loading, the cells running at the Ctrl-C)."""


@dataclass
class Step:
    """One subprocess of the check: its name, its `bench run` options (``cells``: what to run; None: ``argv`` is
    the command), its run folder, the folder whose base models it starts from, its window (seconds before the
    Ctrl-C; None: to the end) and the cells that share the GPU (``per_gpu``: ``--workers N --gpus-per-cell 1/N``)."""

    name: str
    cells: list[str] | None = None
    folder: Path | None = None
    bases_from: Path | None = None
    window: float | None = None
    per_gpu: int = 1
    command: list[str] = field(default_factory=list)
    result: dict = field(default_factory=dict)

    @property
    def argv(self) -> list[str]:
        if self.cells is None:
            return self.command
        return [*BENCH, *self.cells, "--workers", str(self.per_gpu), "--gpus-per-cell", f"{1 / self.per_gpu:g}",
                "--out", str(self.folder)]


BENCH = [sys.executable, "-m", "headprune_bench.benchmark.cli", "run"]


def plan(out: Path, window: float) -> list[Step]:
    """The steps of the check, in order."""
    steps = [Step("cuda-tests", command=[sys.executable, "-m", "pytest", "-m", "cuda", "tests/test_cuda.py", "-q",
                                         "-p", "no:cacheprovider"])]
    for precision in ("fp32", "bf16"):
        bases = out / precision / "bases"
        steps.append(Step(f"bases-{precision}", ["--methods", "random", *CELLS, "--no-recover", "--precision",
                                                precision], bases, per_gpu=8))
        for n in (1, 4, 8, 16):
            steps.append(Step(f"packed-{precision}-{n}", ["--methods", PACKED, *CELLS, "--precision", precision],
                              out / precision / f"packed-{n}", bases, window, n))
    for n, tasks, seeds in ((1, "mrpc", "0-0"), (8, "mrpc,rte", "0,1,2,3")):
        steps.append(Step(f"auber-{n}", ["--methods", "auber", "--tasks", tasks, "--seeds", seeds, "--preset", "quick",
                                         "--no-recover", "--no-progress", "--no-report"],
                          out / "fp32" / f"auber-{n}", out / "fp32" / "bases", per_gpu=n))
    return steps


def dry_run(steps: list[Step]) -> None:
    """Print each command and, once per set of cells, `bench run --dry-run`'s plan of it (on the CPU: the cells
    are the same)."""
    seen = set()
    for step in steps:
        window = f" (window {step.window:g} s, then Ctrl-C)" if step.window else ""
        print(f"[{step.name}]{window} {' '.join(step.argv)}")
        if step.cells is None or tuple(step.cells[:-2]) in seen:  # (fp32 and bf16 plan the same cells)
            continue
        seen.add(tuple(step.cells[:-2]))
        plan_out = subprocess.run([*BENCH, *step.cells, "--workers", "0", "--device", "cpu", "--dry-run", "--out",
                                   str(step.folder)], capture_output=True, text=True, check=True).stdout
        print("\n".join(line for line in plan_out.splitlines() if line.startswith(("bench run --dry-run", "to do"))))
    windows = sum(s.window or 0 for s in steps)
    print(f"expected: about {(windows + OVERHEAD_S * len(steps)) / 60:.0f} min ({windows:g} s of windows and "
          f"about {OVERHEAD_S} s per step besides)")


def _sample_memory(stop: threading.Event, peak: list[int]) -> None:
    """Keep the largest GPU memory in use (MiB, nvidia-smi) in ``peak[0]`` until ``stop`` is set."""
    while not stop.is_set():
        try:
            used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=5).stdout.split()
            peak[0] = max(peak[0], *(int(u) for u in used))
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        stop.wait(0.5)


def run_step(step: Step, out: Path) -> None:
    """Run ``step`` (its base models copied in first), timing it and sampling GPU memory; fills ``step.result``."""
    if step.bases_from is not None and (step.bases_from / "base").exists():
        shutil.copytree(step.bases_from / "base", step.folder / "base", dirs_exist_ok=True)
    peak, stop = [0], threading.Event()
    sampler = threading.Thread(target=_sample_memory, args=(stop, peak), daemon=True)
    sampler.start()
    start = time.time()
    with open(out / f"{step.name}.log", "w") as log:
        proc = subprocess.Popen(step.argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=step.window)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # the first Ctrl-C: running cells finish, no other starts
            proc.wait()
    wall = time.time() - start
    stop.set()
    sampler.join()
    records = step.folder / "records.jsonl" if step.folder else None
    cells = len(records.read_text().splitlines()) if records and records.exists() else 0
    step.result = {"exit": proc.returncode, "wall_s": round(wall, 1), "cells": cells,
                   "cells_per_min": round(60 * cells / wall, 2), "peak_gpu_mib": peak[0],
                   "peak_gpu_mib_per_cell": round(peak[0] / step.per_gpu), "per_gpu": step.per_gpu}
    print(f"[{step.name}] {json.dumps(step.result)}", flush=True)


def write_summary(steps: list[Step], out: Path) -> None:
    """summary.json and README.md's table."""
    (out / "summary.json").write_text(json.dumps({s.name: s.result for s in steps}, indent=1) + "\n")
    rows = [f"| {s.name} | {s.result.get('per_gpu')} | {s.result.get('exit')} | {s.result.get('wall_s')} | "
            f"{s.result.get('cells')} | {s.result.get('cells_per_min')} | {s.result.get('peak_gpu_mib')} | "
            f"{s.result.get('peak_gpu_mib_per_cell')} |" for s in steps]
    (out / "README.md").write_text(
        "# GPU check (written by scripts/gpu_check.py)\n\n"
        "| step | cells per GPU | exit | wall s | cells | cells/min | peak GPU MiB | per cell |\n"
        "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/gpu-check"))
    parser.add_argument("--window", type=float, default=12.0, help="seconds each packing level may start cells")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and the cells; run nothing")
    args = parser.parse_args()
    steps = plan(args.out, args.window)
    if args.dry_run:
        dry_run(steps)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "device.txt").write_text(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
                                         + f"\nGLUE_DIR={os.environ.get('GLUE_DIR', '')}\n")
    for step in steps:
        run_step(step, args.out)
        write_summary(steps, args.out)  # after every step: a cut session keeps what it measured


if __name__ == "__main__":
    main()
