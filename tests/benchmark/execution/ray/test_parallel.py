"""Cells on Ray (``bench run --workers N`` / ``--ray-address``) on real GLUE data with the smoke preset on the tests'
tiny encoder (``smoke_runs.tiny_encoder``: MiniLM's head grid and tokenizer): records equal to the serial run's, a
killed driver resumed, failures in workers, matched budgets waiting for their setter, the options' checks.

One local Ray per module (``ray.init(num_cpus=2)``, shut down at the end, no process left behind): each new Ray
worker pays 10-20 s importing torch on two cores, and the runner uses an already initialised Ray as it is.

Equality is exact: the serial reference runs with one torch thread, as every Ray cell does by default with
``--workers 2``, so both compute the same operations in the same order. (With a different thread count, e.g. the
serial default of all cores, float32 reductions such as Michel's accumulated gradients change in their last bits;
masks, predictions and metrics then agree whenever no score is within rounding of a tie.)
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import fakes
import pytest
import ray
import torch
from click.testing import CliRunner
from smoke_runs import kill_after_records, negate_classifier, run_smoke, smoke_config, stable, tiny_encoder

from headprune_bench.benchmark.cli import main
from headprune_bench.benchmark.config.presets import ConfigError
from headprune_bench.benchmark.config.run import RAY_MISSING
from headprune_bench.benchmark.execution.resolve import resolve_execution
from headprune_bench.benchmark.execution.time_limit import MARGIN, CellTimes
from headprune_bench.benchmark.provenance import machine_name
from headprune_bench.benchmark.run.runner import Runner
from headprune_bench.benchmark.store.jsonl import RecordStore
from headprune_bench.benchmark.store.records import BASE_DIFFERS, Record, read_ids
from headprune_bench.methods.registry import in_methods_all, shipped_methods

SETTER = fakes.SlowSetter.name
RUN = dict(methods_spec=f"random,michel,{SETTER}", tasks_spec="wnli", budget=f"matched:{SETTER}", recover=True)
CLI_RUN = ["--preset", "smoke", "--methods", RUN["methods_spec"], "--tasks", RUN["tasks_spec"], "--budget",
           RUN["budget"], "--recover", "--device", "cpu", "--no-progress", "--no-report"]
N_CELLS = 8  # original (prune-only, control), then 3 methods x (prune-only, prune+recover); one task: CI time


def _ray_processes(marker: str) -> list[str]:
    """Command lines of live processes that mention ``marker`` (the module's Ray temp folder)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and marker in cmd:
            found.append(cmd)
    return found


@pytest.fixture(scope="module")
def ray_address():
    """A local Ray of 2 CPUs for the module; its GCS address. Shut down at the end, leaving no process."""
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must stay under 108 bytes
    try:
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp)
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        deadline = time.time() + 30
        while _ray_processes(temp) and time.time() < deadline:
            time.sleep(0.5)
        left = _ray_processes(temp)
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"Ray processes left behind: {left}"


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory, glue_dir):
    """The serial run of :data:`RUN` on one torch thread (as each Ray cell): the reference."""
    out = tmp_path_factory.mktemp("serial")
    _one_thread_run(out, glue_dir, RUN)
    return out


def _one_thread_run(out, glue_dir, run: dict) -> None:
    """``run`` serially on one torch thread (as each Ray cell computes), the caller's thread count restored."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_smoke(out, glue_dir, **run)
    finally:
        torch.set_num_threads(threads)


def _bench(args: list[str]):
    """``bench run ARGS`` in this process, on the tiny encoder unless ARGS name a ``--model``."""
    return CliRunner().invoke(main, ["run", *args, *([] if "--model" in args else ["--model", tiny_encoder()])])


@pytest.fixture(scope="module")
def parallel_run(ray_address, glue_dir, tmp_path_factory):
    """:data:`RUN` through the CLI with ``--workers 2``: (folder, CLI result)."""
    out = tmp_path_factory.mktemp("parallel")
    return out, _bench([*CLI_RUN, "--workers", "2", "--data-dir", str(glue_dir), "--out", str(out)])


def test_workers_equal_the_serial_run_record_for_record(parallel_run, serial_run, glue_dir):
    out, res = parallel_run
    assert res.exit_code == 0, res.output
    assert "Ray: 2 local workers, 1 thread(s) per cell" in res.output
    parallel, serial = RecordStore(out).records(), RecordStore(serial_run).records()
    assert len(parallel) == len(serial) == N_CELLS
    assert stable(parallel) == stable(serial)  # masks, scores, per-example predictions, metrics, budgets, flags
    assert sorted(p.name for p in (out / "base").iterdir()) == ["wnli-seed0"]  # saved by the driver
    # what ran each cell and the base fine-tune: this machine, one torch thread each (threads_per_cell below)
    assert {(r["cost"]["machine"], r["cost"]["threads"]) for r in parallel} == {(machine_name("cpu"), 1)}
    info = json.loads((out / "base" / "wnli-seed0" / "train_info.json").read_text())
    assert (info["machine"], info["threads"]) == (machine_name("cpu"), 1)
    # the machine the time limit estimates this run's cells for (rule 1 of
    # headprune_bench.benchmark.execution.time_limit) is the one its records name
    assert resolve_execution(smoke_config(out, glue_dir, workers=2)).machine() == (machine_name("cpu"), 1)
    plan = json.loads((out / "runs.jsonl").read_text().splitlines()[-1])
    assert plan["execution"] == {"mode": "ray", "workers": 2, "ray_address": None, "threads_per_cell": 1,
                                 "gpus_per_cell": 0.0, "device": "cpu"}
    # a worker's log lines reach run.log and its warnings the driver's console, as in a serial run
    log_text = (out / "run.log").read_text()
    assert log_text.count("trained in") == 1  # one base fine-tune per (task, seed), though 8 cells wait for it
    assert log_text.count(f"{SETTER}: {fakes.LOG_LINE}") == 1
    assert f"warning: {SETTER}: {fakes.WARNING}" in res.output


def _redo_random_cells(folder: Path, glue_dir, invert_stored: bool) -> list[tuple]:
    """Drop the random cells' records of ``folder`` (their stored original record's 64 dev predictions inverted,
    if ``invert_stored``, else as the fixture wrote them) and run again on Ray: (condition, base differs) of each
    random record."""
    kept = []
    for line in (folder / "records.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["method"] == "original" and record["condition"] == "prune-only" and invert_stored:
            record["predictions"] = [1 - p for p in read_ids(record["predictions"])]
        if record["method"] != "random":
            kept.append(json.dumps(record) + "\n")
    (folder / "records.jsonl").write_text("".join(kept))
    again = _bench([*CLI_RUN, "--workers", "2", "--data-dir", str(glue_dir), "--out", str(folder)])
    assert again.exit_code == 0, again.output
    assert all(BASE_DIFFERS not in r["trace"] for r in RecordStore(folder).records() if r["method"] != "random")
    return sorted((r["condition"], r["trace"].get(BASE_DIFFERS))
                  for r in RecordStore(folder).records() if r["method"] == "random")


def test_cells_of_a_resumed_seed_check_its_base_model_against_the_stored_original_record(parallel_run, glue_dir,
                                                                                          tmp_path):
    """The random cells are to do again, twice. First the base model is gone from DIR/base/ (a clean clone) and a
    worker fine-tunes it again; the stored original record's 64 dev predictions are inverted, so each new record
    says 64 differ iff the model fine-tuned again (seeded, one thread, as before) predicts as the first one did.
    Then, the stored predictions as written, the cached base model has its classifier negated: all 64 of its
    predictions flip against the stored record. Each new record carries the count; the driver warns once per run
    and (task, seed) though two cells say so."""
    out, res = parallel_run
    assert res.exit_code == 0, res.output
    folder = tmp_path / "copy"
    shutil.copytree(out, folder)
    original = (folder / "records.jsonl").read_text()
    for item in (folder / "base" / "wnli-seed0").iterdir():
        if item.name != "train_info.json":
            shutil.rmtree(item) if item.is_dir() else item.unlink()
    assert _redo_random_cells(folder, glue_dir, invert_stored=True) == [("prune+recover", 64), ("prune-only", 64)]
    log_text = (folder / "run.log").read_text()
    assert log_text.count("wnli-seed0 trained in") == 2  # the fixture's fine-tune (run.log was copied), then this one

    (folder / "records.jsonl").write_text(original)
    negate_classifier(folder / "base" / "wnli-seed0")
    assert _redo_random_cells(folder, glue_dir, invert_stored=False) == [("prune+recover", 64), ("prune-only", 64)]
    log_text = (folder / "run.log").read_text()
    assert log_text.count("wnli-seed0 trained in") == 2  # the cached (negated) model: not fine-tuned again
    assert log_text.count("wnli seed 0: the base model predicts 64 of 64 dev examples otherwise") == 2


def test_matched_cells_wait_for_their_setter(parallel_run):
    out, res = parallel_run
    assert res.exit_code == 0, res.output
    records = [Record.from_dict(r) for r in RecordStore(out).records()]
    [setter] = [r for r in records if r.method == SETTER and r.condition == "prune-only"]
    matched = [r for r in records if r.method in ("random", "michel")]
    assert len(matched) == 4 and setter.heads_pruned == 7
    for r in matched:  # each started after the setter's cell had finished, with its count as the target
        assert r.started_at >= setter.finished_at and r.budget.target == 7 == r.heads_pruned, r.cell


def test_a_failing_method_and_a_dying_worker_land_in_failures_and_the_rest_finishes(ray_address, glue_dir, tmp_path):
    args = ["--preset", "smoke", "--methods", "random,test-raises,test-kills-process", "--tasks", "wnli",
            "--budget", "heads:10", "--device", "cpu", "--no-report", "--workers", "2",
            "--data-dir", str(glue_dir), "--out", str(tmp_path)]
    res = _bench(args)
    assert res.exit_code == 1
    assert "running:" in res.stderr and "pid " in res.stderr  # the bar's text: what each worker runs
    assert {r["method"] for r in RecordStore(tmp_path).records()} == {"original", "random"}
    assert {(r["method"], r["condition"]) for r in RecordStore(tmp_path).records()} == {
        ("original", "prune-only"), ("original", "control"), ("random", "prune-only"), ("random", "prune+recover")}
    failures = {(f["method"], f["condition"]): f
                for f in map(json.loads, (tmp_path / "failures.jsonl").read_text().splitlines())}
    # each failed prune step fails its prune+recover cell too (it needs the prune step's mask), with its error
    assert set(failures) == {(m, c) for m in ("test-raises", "test-kills-process")
                             for c in ("prune-only", "prune+recover")}
    for condition in ("prune-only", "prune+recover"):
        assert failures[("test-raises", condition)]["error"] == "RuntimeError: deliberate failure in the prune step"
        assert "died" in failures[("test-kills-process", condition)]["error"].lower(), failures
    assert "fakes.py" in failures[("test-raises", "prune-only")]["traceback"]  # the worker's traceback
    assert "4 cell(s) failed" in res.output
    # a rerun retries exactly the failed cells
    res = _bench(args)
    assert res.exit_code == 1
    plan = json.loads((tmp_path / "runs.jsonl").read_text().splitlines()[-1])
    assert plan["to_do"] == 4 and len((tmp_path / "failures.jsonl").read_text().splitlines()) == 8


def test_a_cell_another_run_holds_is_left_to_it_on_ray(ray_address, glue_dir, tmp_path):
    """Issue 42, item 5, on Ray: a cell whose claim another `bench run` holds is not computed a second time; the run
    says so, and once the claim is released the same command computes it."""
    from headprune_bench.benchmark.store.claims import Claims

    args = ["--preset", "smoke", "--methods", "random", "--tasks", "wnli", "--device", "cpu", "--no-report",
            "--workers", "2", "--data-dir", str(glue_dir), "--out", str(tmp_path)]
    runner = Runner(smoke_config(tmp_path, glue_dir, workers=2, recover=True))  # its plan: keys with options hashes
    try:
        held = next(str(c) for c in runner.planned_cells() if (c.method, c.condition) == ("random", "prune+recover"))
    finally:
        runner.close()
    other = Claims(tmp_path)  # (another process's claim: an flock on another open file)
    assert other.take(held)
    res = _bench(args)
    assert res.exit_code == 0, res.output
    assert "1 cell(s) left to another bench run" in res.stderr
    assert held not in RecordStore(tmp_path) and len(RecordStore(tmp_path).records()) == 3
    other.release_all()
    assert _bench(args).exit_code == 0 and held in RecordStore(tmp_path)


@pytest.mark.slow  # about 30-60 s each: kept out of the CI suite's 10 minutes
def test_driver_killed_then_rerun_equals_the_uninterrupted_run(ray_address, serial_run, glue_dir, tmp_path):
    """A `bench run` driver on this module's Ray cluster (--ray-address) killed with SIGKILL after a few records,
    then rerun: nothing finished is lost or computed again, and the records equal the serial run's."""
    out = tmp_path / "killed"
    code = "import sys, fakes; from headprune_bench.benchmark.cli import main; sys.exit(main())"
    cmd = [sys.executable, "-c", code, "run", *CLI_RUN, "--model", tiny_encoder(), "--ray-address", ray_address,
           "--data-dir", str(glue_dir), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fakes.TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    kill_after_records(cmd, out / "records.jsonl", 3, env=env)
    before = RecordStore(out).records()
    assert 3 <= len(before) < N_CELLS
    res = _bench([*CLI_RUN, "--workers", "2", "--data-dir", str(glue_dir), "--out", str(out)])
    assert res.exit_code == 0, res.output
    plan = json.loads((out / "runs.jsonl").read_text().splitlines()[-1])
    assert plan["to_do"] == N_CELLS - len(before)  # what was written is not computed again
    resumed = RecordStore(out).records()
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(resumed) == len(lines) == N_CELLS  # nothing lost, nothing twice
    assert stable(resumed) == stable(RecordStore(serial_run).records())


@pytest.mark.parametrize("kwargs, message", [
    (dict(workers=-1), "--workers -1: expected auto (one cell per CPU core on a local Ray), 0 (one cell at a time"),
    (dict(workers="\u0663"), "--workers \u0663: expected auto"),
    (dict(workers="all"), "--workers all: expected auto"),
    (dict(workers=2, ray_address="auto"), "--workers with --ray-address"),
    (dict(ray_address=" "), "--ray-address '': expected a Ray address"),
    (dict(threads_per_cell=2), "--threads-per-cell applies to cells on Ray: add --workers N or --ray-address"),
    (dict(gpus_per_cell=0.5), "--gpus-per-cell applies to cells on Ray"),
    (dict(workers=2, threads_per_cell=0), "--threads-per-cell 0: expected >= 1"),
    (dict(workers=2, gpus_per_cell=1.5), "--gpus-per-cell 1.5: expected a share of one GPU in [0, 1]"),
    (dict(workers=2, gpus_per_cell=-1.0), "--gpus-per-cell -1: expected a share"),
    (dict(ray_address="127.0.0.1:1"), "--ray-address 127.0.0.1:1: nothing answers at 127.0.0.1:1"),
    (dict(ray_address="ray://127.0.0.1:1"), "--ray-address ray://127.0.0.1:1: nothing answers at 127.0.0.1:1"),
])
def test_ray_options_are_checked_before_anything_loads(kwargs, message, tmp_path, glue_dir):
    """An unreachable --ray-address among them (issue 42, item 3: Ray retried for minutes after the run folder was
    created): refused within the connection time-out."""
    start = time.time()
    with pytest.raises(ConfigError) as err:
        smoke_config(tmp_path / "run", glue_dir, **kwargs)
    assert message in str(err.value)
    assert not (tmp_path / "run").exists() and time.time() - start < 10


def test_workers_auto_is_one_cell_per_core_on_ray_else_serial_saying_why(monkeypatch, tmp_path, glue_dir):
    """Issue 41, item 5: `bench run` without --workers ran one cell at a time on a 2-core machine."""
    from headprune_bench.benchmark.execution import resolve

    monkeypatch.setattr(resolve, "cpu_cores", lambda: 4)
    auto = resolve_execution(smoke_config(tmp_path, glue_dir, workers="auto"))
    assert (auto.workers, auto.threads_per_cell, auto.device.type) == (4, 1, "cpu")
    assert auto.summary() == "Ray: 4 local workers, 1 thread(s) per cell (--workers auto: one cell per CPU core)"
    two = resolve_execution(smoke_config(tmp_path, glue_dir, workers="auto", threads_per_cell=2))
    assert (two.workers, two.threads_per_cell) == (2, 2)
    for serial in ("0", 0, None):
        assert not resolve_execution(smoke_config(tmp_path, glue_dir, workers=serial)).parallel
    cluster = smoke_config(tmp_path, glue_dir, workers="auto", ray_address="auto")  # a cluster decides
    assert (cluster.workers, cluster.auto_workers) == (None, False)
    monkeypatch.setattr(resolve, "cpu_cores", lambda: 1)
    assert resolve_execution(smoke_config(tmp_path, glue_dir, workers="auto")).summary() == (
        "serial (one CPU core for one cell at a time)")
    monkeypatch.setattr(resolve, "cpu_cores", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gpu = resolve_execution(smoke_config(tmp_path, glue_dir, workers="auto", device="auto"))
    assert not gpu.parallel and "a GPU is visible" in gpu.summary()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    real = __import__("importlib").util.find_spec
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    no_ray = resolve_execution(smoke_config(tmp_path, glue_dir, workers="auto"))
    assert no_ray.summary() == "serial (Ray is not installed; pip install -e '.[ray]' runs one cell per CPU core)"
    with pytest.raises(ConfigError, match="--threads-per-cell and --gpus-per-cell apply to cells on Ray, and this "
                                          "run is serial \\(Ray is not installed"):
        resolve_execution(smoke_config(tmp_path, glue_dir, workers="auto", threads_per_cell=1))


def test_bench_run_defaults_to_workers_auto(ray_address, monkeypatch, tmp_path, glue_dir):
    """The CLI's default (the tests' conftest sets BENCH_WORKERS=0, so their runs stay serial)."""
    from headprune_bench.benchmark.execution import resolve

    monkeypatch.delenv("BENCH_WORKERS")
    monkeypatch.setattr(resolve, "cpu_cores", lambda: 2)
    res = _bench(["--preset", "smoke", "--methods", "random", "--tasks", "wnli", "--no-recover", "--no-progress",
                  "--no-report", "--data-dir", str(glue_dir), "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert "| Ray: 2 local workers, 1 thread(s) per cell (--workers auto: one cell per CPU core)" in res.output
    assert "bench run: 2 cells planned, 2 to do; expected time: known after the first base fine-tune" in res.output
    assert len(RecordStore(tmp_path / "run").records()) == 2


def test_workers_without_ray_say_what_to_install(monkeypatch, tmp_path, glue_dir):
    real = __import__("importlib").util.find_spec
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    res = _bench(["--preset", "smoke", "--methods", "random", "--tasks", "wnli", "--workers", "2",
                  "--data-dir", str(glue_dir), "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and res.output.strip().splitlines()[-1] == f"Error: {RAY_MISSING}"
    assert "pip install -e '.[ray]'" in RAY_MISSING and not (tmp_path / "run").exists()


def test_gpu_share_and_threads_default_from_the_workers(monkeypatch, tmp_path, glue_dir):
    """Packing: with a visible GPU, --workers 4 gives each cell a quarter of it and runs cells on CUDA; the
    device type (part of the experiment) follows the GPU share, not the driver's own device."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    ex = resolve_execution(smoke_config(tmp_path, glue_dir, workers=4, device="auto"))
    assert (ex.gpus_per_cell, ex.threads_per_cell, ex.device.type) == (0.25, 1, "cuda")
    ex = resolve_execution(smoke_config(tmp_path, glue_dir, workers=4, device="cpu"))
    assert (ex.gpus_per_cell, ex.device.type) == (0.0, "cpu")
    assert ex.machine() == (machine_name("cpu"), 1)
    ex = resolve_execution(smoke_config(tmp_path, glue_dir, ray_address="auto", gpus_per_cell=0.125, device="auto"))
    assert (ex.gpus_per_cell, ex.threads_per_cell, ex.device.type) == (0.125, 1, "cuda")
    assert ex.machine() is None  # a cluster's cells may run on different machines: no machine of their own
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    ex = resolve_execution(smoke_config(tmp_path, glue_dir, workers=1))
    assert (ex.gpus_per_cell, ex.threads_per_cell, ex.device.type) == (0.0, os.cpu_count(), "cpu")


@pytest.mark.parametrize("kwargs, message", [
    (dict(ray_address="auto", device="cuda"), "--device cuda on Ray needs --gpus-per-cell"),
    (dict(workers=2, device="cuda:1"), "Ray assigns each cell its GPU"),
    (dict(workers=2, device="cpu", gpus_per_cell=0.5), "--gpus-per-cell 0.5 with --device cpu"),
], ids=["cuda-without-gpu-share", "numbered-gpu", "gpu-share-on-cpu"])
def test_gpu_options_that_contradict_each_other_are_refused(kwargs, message, monkeypatch, tmp_path, glue_dir):
    """With a visible GPU (as in the test above)."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=message):
        resolve_execution(smoke_config(tmp_path, glue_dir, **kwargs))


def test_a_gpu_share_without_a_visible_gpu_is_refused_before_the_folder_exists(monkeypatch, tmp_path, glue_dir):
    """Issue 42, item 2: on a machine without CUDA, `--workers 1 --gpus-per-cell 0.5` used to start Ray, fail in a
    cell and leave run.json pinned to cuda."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    res = _bench(["--preset", "smoke", "--methods", "random", "--tasks", "wnli", "--workers", "1",
                  "--gpus-per-cell", "0.5", "--data-dir", str(glue_dir), "--out", str(tmp_path / "run")])
    assert res.exit_code == 1, res.output
    assert res.output.strip().splitlines()[-1].startswith("Error: --gpus-per-cell 0.5: no GPU is visible")
    assert not (tmp_path / "run").exists()


def test_serial_runs_are_unchanged_by_the_ray_options(tmp_path, glue_dir):
    runner = Runner(smoke_config(tmp_path, glue_dir))
    try:
        assert not runner.execution.parallel and runner.execution.describe() == {"mode": "serial", "device": "cpu"}
    finally:
        runner.close()


@pytest.mark.slow
def test_every_method_on_glue_small_equals_the_serial_run(ray_address, glue_dir, tmp_path):
    """The issue's bar: `bench run --methods all --tasks glue-small --preset smoke --workers 2` equals the serial
    run record for record (the serial run on one torch thread, as each Ray cell). `all` is spelled out as the
    shipped methods: in a test session it would also hold the methods the test modules register."""
    shipped = ",".join(name for name, cls in shipped_methods().items() if in_methods_all(cls))
    assert len(shipped.split(",")) == 9  # auber-null, AUBER's null-reward control, is in `all`
    args = ["--preset", "smoke", "--methods", shipped, "--tasks", "glue-small", "--device", "cpu", "--no-progress",
            "--no-report", "--data-dir", str(glue_dir)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        serial = _bench([*args, "--out", str(tmp_path / "serial")])
    finally:
        torch.set_num_threads(threads)
    parallel = _bench([*args, "--workers", "2", "--out", str(tmp_path / "parallel")])
    assert serial.exit_code == 0 == parallel.exit_code, serial.output + parallel.output
    records = RecordStore(tmp_path / "parallel").records()
    # 4 tasks x (original: prune-only, control; 8 methods: prune-only, prune+recover; auber, auber-null and voita
    # (joint): own-fine-tuning) -- the CLI's default conditions
    assert len(records) == 4 * (2 + 8 * 2 + 3)
    assert stable(records) == stable(RecordStore(tmp_path / "serial").records())


# serial: -m slow (CI time)
@pytest.mark.parametrize("workers", [pytest.param(None, marks=pytest.mark.slow), 2], ids=["serial", "ray"])
def test_the_first_ctrl_c_lets_running_cells_finish_and_starts_only_own_weights_computed(workers, ray_address,
                                                                                      glue_dir, tmp_path):
    """A stop requested while a cell runs (its method presses Ctrl-C on this process, then finishes, returning its
    own weights as AUBER does): that cell is written; its own-fine-tuning cell still runs after the stop (it only
    evaluates those weights, which no later run could get without pruning again); no other cell starts (its
    prune+recover cell resumes from the stored mask); nothing is a failure; `bench run` says how many cells wait and
    exits 130 without a report. The rerun computes the waiting cells and never that prune step again (it would
    press Ctrl-C again)."""
    pid_file = tmp_path / "pid"
    pid_file.write_text(str(os.getpid()))
    out = tmp_path / "run"
    args = ["--preset", "smoke", "--methods", "random,test-requests-stop", "--tasks", "wnli", "--budget",
            "heads:10", "--device", "cpu", "--no-progress", "--option", f"test-requests-stop.pid_file={pid_file}",
            "--option", "test-requests-stop.retrained=true", "--data-dir", str(glue_dir),
            "--out", str(out)] + (["--workers", str(workers)] if workers else [])
    res = _bench(args)
    assert res.exit_code == 130, res.output
    records = {(r["method"], r["condition"]): r for r in RecordStore(out).records()}
    assert ("test-requests-stop", "prune-only") in records
    own = records[("test-requests-stop", "own-fine-tuning")]  # started after the stop
    assert own["weights"] == "own" and own["retrained"] is True
    assert own["mask"] == records[("test-requests-stop", "prune-only")]["mask"]
    assert ("test-requests-stop", "prune+recover") not in records
    assert not (out / "failures.jsonl").exists() or not (out / "failures.jsonl").read_text().strip()
    waiting = int(res.output.split("stopped on request: ")[1].split(" cell(s)")[0])
    assert waiting >= 1
    assert len(records) + waiting == len(json.loads((out / "runs.jsonl").read_text().splitlines()[-1])["cells"])
    assert not (out / "report").exists()
    log = (out / "run.log").read_text()  # what the Ctrl-C said: the running cell, for how long, and its fate
    assert re.search(r"running now:\n(  .*\n)*  wnli s0 test-requests-stop heads:10 prune-only: running for \d+ s, no "
                     r"time recorded for it yet; it finishes and is written\n", log), log

    pid_file.write_text("not a pid")  # int() raises: the rerun's cell would fail if it pruned again
    again = _bench([*args, "--no-report"])
    assert again.exit_code == 0, again.output
    rerun = {(r["method"], r["condition"]): r for r in RecordStore(out).records()}
    assert ("test-requests-stop", "prune+recover") in rerun
    assert rerun[("test-requests-stop", "own-fine-tuning")] == own  # not computed again
    assert json.loads((out / "runs.jsonl").read_text().splitlines()[-1])["to_do"] == waiting


def test_a_base_fine_tune_on_a_worker_asks_the_board_whether_a_stop_ends_it(ray_address):
    """On Ray the first Ctrl-C reaches the driver only: a worker's base fine-tune asks the status board after its
    steps (at most every ``every_s``) and stops unless the run was started with --wait-for-base."""
    from headprune_bench.benchmark.execution.ray.tasks import _asker, remote_functions

    board = remote_functions()[2].remote(None)
    ask, seldom = _asker(board, every_s=0.0), _asker(board, every_s=3600.0)
    assert not ask()
    ray.get(board.stop.remote(False))  # --wait-for-base
    assert not ask()
    ray.get(board.stop.remote(True))
    assert ask() and not seldom()  # (within its first hour, it has not asked)


# serial: -m slow (CI time)
@pytest.mark.parametrize("workers", [pytest.param(None, marks=pytest.mark.slow), 2], ids=["serial", "ray"])
def test_time_limit_starts_only_the_cells_that_fit(workers, ray_address, glue_dir, tmp_path):
    """Seed 0 runs whole; its random prune+recover record is then made to say 10^6 s. Seed 1 under --time-limit
    10m: every cell runs but that one (its estimate does not fit), the run exits 75 with 1 cell not run and no
    failure (a rerun resumes as after any stop). Before, with the base fine-tune made to say 10^6 s,
    the same command starts nothing: no cell runs without its base model, and none fails.

    Last, a method new to the folder (a prune step of S seconds) on both seeds, one cell at a time, under a limit of
    1.25 x the folder's longest recorded work L + 20 s (for the run's start) and S > limit / 2.25: seed 0's cell
    starts (nothing estimates it, and 1.25 x L fits); the run learns its time, so seed 1's, which starts at least
    S later, when at most limit - S < 1.25 x S are left, is refused with that estimate (a run that learnt only
    from the folder would start it, or refuse it as unestimated), and run.log says why."""
    out = tmp_path / "run"
    args = ["--preset", "smoke", "--methods", "random", "--tasks", "wnli", "--budget", "heads:10", "--device", "cpu",
            "--no-progress", "--no-report", "--data-dir", str(glue_dir), "--out", str(out)]
    args += ["--workers", str(workers)] if workers else []
    first = _bench([*args, "--seeds", "1"])
    assert first.exit_code == 0, first.output
    first_lines = lines = (out / "records.jsonl").read_text().splitlines()
    edited = []
    for line in lines:
        record = json.loads(line)
        if record["method"] == "random" and record["condition"] == "prune+recover":
            record["cost"]["wall_s"] = 1e6
        edited.append(json.dumps(record))
    (out / "records.jsonl").write_text("\n".join(edited) + "\n")

    info_file = out / "base" / "wnli-seed0" / "train_info.json"
    info = info_file.read_text()
    info_file.write_text(json.dumps({**json.loads(info), "wall_s": 1e6}))
    nothing = _bench([*args, "--seeds", "2", "--time-limit", "10m"])  # seed 1's base fine-tune cannot fit:
    assert nothing.exit_code == 75, nothing.output  # nor can any of its cells, though each would
    assert "time limit: 4 cell(s) not run" in nothing.output
    assert len(RecordStore(out).records()) == 4 and not (out / "base" / "wnli-seed1").exists()
    assert not (out / "failures.jsonl").exists() or not (out / "failures.jsonl").read_text().strip()
    info_file.write_text(info)

    limited = _bench([*args, "--seeds", "2", "--time-limit", "10m"])
    assert limited.exit_code == 75, limited.output
    done = {(r["seed"], r["method"], r["condition"]) for r in RecordStore(out).records()}
    assert "time limit: 1 cell(s) not run" in limited.output, (limited.output, sorted(done))
    assert (1, "random", "prune+recover") not in done
    assert {(1, "original", "prune-only"), (1, "original", "control"), (1, "random", "prune-only")} <= done
    assert not (out / "failures.jsonl").exists() or not (out / "failures.jsonl").read_text().strip()
    assert any("seed=1|random|" in line and "|prune+recover|" in line and "not started: time limit: expected" in line
               for line in (out / "run.log").read_text().splitlines())

    lines = (out / "records.jsonl").read_text().splitlines()  # seed 0's cell as it was: 10^6 s no longer longest
    (out / "records.jsonl").write_text("\n".join(first_lines + lines[len(first_lines):]) + "\n")
    limit = MARGIN * CellTimes.of_folder(RecordStore(out).records(), out / "base").longest + 20.0
    seconds = math.ceil(limit / (1.0 + MARGIN)) + 1
    slow = [*args[:3], "test-slow-retrainer", *args[4:], "--option", f"test-slow-retrainer.seconds={seconds}",
            "--seeds", "2", "--time-limit", f"{limit:.1f}s", *(["--threads-per-cell", "2"] if workers else [])]
    # (on Ray: 2 threads per cell on the module's 2-CPU Ray, one cell at a time)
    learned = _bench(slow)
    assert learned.exit_code == 75, learned.output
    done = {(r["seed"], r["method"], r["condition"]) for r in RecordStore(out).records()}
    assert (0, "test-slow-retrainer", "prune-only") in done and (1, "test-slow-retrainer", "prune-only") not in done
    # seed 0's other cells, when its step returns: at most limit - S < 1.25 x S left, nothing estimates them; the
    # prune+recover cell waits (the stored mask resumes it), the own-fine-tuning cell starts (its weights are only
    # in this run's memory: refused, the next run would prune again for them)
    assert (0, "test-slow-retrainer", "own-fine-tuning") in done
    assert (0, "test-slow-retrainer", "prune+recover") not in done
    seed1 = next(line for line in (out / "run.log").read_text().splitlines()
                 if "seed=1|test-slow-retrainer|" in line and "|prune-only|" in line and "not started" in line)
    assert float(seed1.split("expected ")[1].split(" s")[0]) >= seconds, seed1



def test_a_cell_reusing_a_prune_step_of_this_run_starts_before_cells_that_were_ready_earlier(ray_address, glue_dir,
                                                                                             tmp_path, monkeypatch):
    """The driver's order: when a method's prune step returns, its own-fine-tuning cell (which holds that step's
    weights in memory) starts before the other seeds' cells, ready long before; Ray's own order would run those
    first and keep the weights waiting (a stop or a session's end then loses them).

    And the driver never hands Ray more tasks than its slots, base fine-tunes included: three seeds open at once
    (a window of slots + 1), and Ray would run a third base fine-tune beside two others, since every task blocks
    in ``ray.get`` (the status board) and lends its CPU meanwhile. The driver waits on everything it handed Ray,
    so the longest list it waits on is that count."""
    waited: list[int] = []
    real_wait = ray.wait

    def counting_wait(refs, *args, **kwargs):
        waited.append(len(refs))
        return real_wait(refs, *args, **kwargs)

    monkeypatch.setattr(ray, "wait", counting_wait)
    out = tmp_path / "run"
    res = _bench(["--preset", "smoke", "--methods", "test-slow-retrainer,random", "--tasks", "wnli", "--seeds", "3",
                  "--budget", "heads:10", "--device", "cpu", "--no-progress", "--no-report", "--workers", "2",
                  "--no-recover", "--data-dir", str(glue_dir), "--out", str(out),
                  "--model", "minilm-l6"])  # cells of seconds: the record's start times count whole seconds
    assert res.exit_code == 0, res.output
    records = RecordStore(out).records()
    for seed in (0, 1, 2):
        mine = {r["condition"]: r for r in records if r["seed"] == seed and r["method"] == "test-slow-retrainer"}
        step_done = mine["prune-only"]["finished_at"]
        for condition in ("own-fine-tuning",):
            # cells of other methods that started after the step returned and before this one (ISO times to the
            # second): at most the one the other worker may have been handed just before the step returned
            started = mine[condition]["started_at"]
            between = [(r["seed"], r["method"], r["condition"]) for r in records
                       if r["method"] != "test-slow-retrainer" and step_done <= r["started_at"] < started]
            assert len(between) <= 1, (seed, condition, between)
    assert waited and max(waited) == 2, waited  # 2 workers: never 3 (three base fine-tunes at once before)


def test_a_sweep_on_ray_shares_the_score_pass_and_equals_the_serial_sweep(ray_address, glue_dir, tmp_path):
    sweep = dict(methods_spec="random,michel", tasks_spec="wnli", budget="fraction:0.1,0.5,0.9")
    serial = tmp_path / "serial"
    _one_thread_run(serial, glue_dir, sweep)
    parallel = tmp_path / "parallel"
    shutil.copytree(serial / "base", parallel / "base")
    run_smoke(parallel, glue_dir, workers=2, **sweep)
    records = RecordStore(parallel).records()
    assert len(records) == 1 + 2 * 3
    assert stable(records) == stable(RecordStore(serial).records())  # score_pass traces included
    scored = {r["cell"]: r["trace"].get("score_pass", {}).get("cell")
              for r in records if r["condition"] == "prune-only"}
    for key, source in scored.items():
        method, level = key.split("|")[2:4]
        if method != "original" and level != "fraction:0.1":
            assert source.split("|")[2:5] == [method, "fraction:0.1", "prune-only"], key
        else:  # the scoring level and the unpruned model
            assert source is None, key


@pytest.mark.slow
def test_repair_cells_on_ray_wait_for_their_mask_and_equal_the_serial_run(ray_address, glue_dir, tmp_path):
    """``--repair`` on Ray: each prune+REPAIR cell waits for its method's prune-only cell, takes its mask and gives
    the serial run's record (the calibration sample and the repairs are deterministic)."""
    repaired = dict(methods_spec="random", tasks_spec="wnli", repair="bias,scales")
    serial = tmp_path / "serial"
    _one_thread_run(serial, glue_dir, repaired)
    parallel = tmp_path / "parallel"
    shutil.copytree(serial / "base", parallel / "base")
    run_smoke(parallel, glue_dir, workers=2, **repaired)
    records = RecordStore(parallel).records()
    assert sorted(r["condition"] for r in records) == ["prune+bias", "prune+scales", "prune-only", "prune-only"]
    assert stable(records) == stable(RecordStore(serial).records())
    masks = {r["condition"]: r["mask"] for r in records if r["method"] == "random"}
    assert masks["prune+bias"] == masks["prune+scales"] == masks["prune-only"]
