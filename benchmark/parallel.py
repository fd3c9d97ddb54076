"""Cells in parallel on Ray (``bench run --workers N`` or ``--ray-address ADDR``).

The runner's dependency graph becomes Ray's task graph: every input of a cell is an argument, so Ray starts a cell
once its inputs exist and places it where its CPUs (``--threads-per-cell``) and GPU share (``--gpus-per-cell``,
Ray's fractional GPUs) are free:

* the base model of a (task, seed): one task per (task, seed) that has cells to do (trained once, however many
  cells wait for it), or the cached ``DIR/base/`` folder put into Ray's object store by this process;
* the unpruned cell (``original``, prune-only) after the base model; every other cell of the (task, seed) takes its
  record (for ``base_failed``, as the serial runner does);
* with ``matched:METHOD``, every other method's cells after the setter's prune-only cell (they match its count);
* a ``prune+recover`` or ``own-fine-tuning`` cell after its method's prune-only cell, whose prune step it reuses;
  the ``control`` after the base model.

Base models travel through Ray's object store, packed as :class:`~benchmark.transport.ModelParcel` (rebuilt by their
class where they arrive: a model unpickled in a process that never constructed its class has no attention outputs),
so workers never read or write the run folder: this process (the
driver) is the only writer of ``records.jsonl``, ``failures.jsonl`` and ``DIR/base/``, appending each record as
its cell returns (a driver killed at any moment loses only the cells still running; a rerun computes exactly
those). A cell whose method raises returns the error, which goes to ``failures.jsonl``; a worker that dies fails
its cell (and the cells waiting for it) the same way; Ray does not retry them (``max_retries=0``): the next run does.

Each cell runs :meth:`CellWork.run_cell <benchmark.cell_work.CellWork.run_cell>`, the serial runner's code, with
``--threads-per-cell`` torch threads; a worker's log lines and warnings come back with its cell and are logged and
warned here. Progress: one bar over cells whose text names what each worker is running.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any

from benchmark.cell_work import will_prune
from benchmark.records import ORIGINAL, PRUNE_ONLY, REUSES_PRUNE, Record
from benchmark.stopping import starts_after_stop
from benchmark.transport import ModelParcel, unpack

log = logging.getLogger("benchmark")

POLL_S = 1.0
"""Seconds between two looks at the workers' status (the progress text) while no cell returns."""


@dataclass
class Outcome:
    """What a Ray task returns for one cell (or a base model).

    Attributes:
        key: the cell key (for a base model: ``base|<task>|<seed>``).
        record: the finished cell's record, or None when it failed or was skipped.
        skipped: the task did not start the cell: a stop was requested (:mod:`benchmark.stopping`).
        error: ``Type: message`` of the failure, or None.
        trace: the failure's traceback text.
        logs: the worker's log lines of the cell, as ``(levelno, message)``.
        warnings: the warnings the cell raised, as ``(category, message)``.
    """

    key: str
    record: Record | None = None
    skipped: bool = False
    error: str | None = None
    trace: str = ""
    logs: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[tuple[type, str]] = field(default_factory=list)

    def record_dict(self) -> dict[str, Any] | None:
        """The record as ``records.jsonl`` stores it, or None."""
        return None if self.record is None else self.record.to_dict()


class _LogCollector(logging.Handler):
    """Keeps the ``benchmark`` logger's lines of one cell in a worker, to send them back with its outcome."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelno, record.getMessage()))


class _Capture:
    """Context manager of a worker's cell: torch threads, log lines and warnings into an :class:`Outcome`."""

    def __init__(self, outcome: Outcome, threads: int) -> None:
        self.outcome, self.threads = outcome, threads

    def __enter__(self) -> Outcome:
        import torch

        torch.set_num_threads(self.threads)
        self.handler = _LogCollector()
        log.addHandler(self.handler)
        log.setLevel(logging.INFO)
        self.catcher = warnings.catch_warnings(record=True)
        self.caught = self.catcher.__enter__()
        warnings.simplefilter("always")
        return self.outcome

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.catcher.__exit__(None, None, None)
        log.removeHandler(self.handler)
        self.outcome.logs = self.handler.lines
        self.outcome.warnings = [(w.category, str(w.message)) for w in self.caught]
        if exc is not None and isinstance(exc, Exception):  # the cell failed: its error goes back, not up
            self.outcome.error = f"{type(exc).__name__}: {exc}"
            self.outcome.trace = "".join(traceback.format_exception(exc_type, exc, tb))
            return True
        return False


@functools.lru_cache(maxsize=4)
def _tokenizer(model: str):
    """The tokenizer of ``model``, loaded once per worker process."""
    from benchmark import models

    return models.load_tokenizer(model)


def _on_worker(work):
    """``work`` for a Ray worker: its device (``cuda`` is the GPU Ray assigned), no progress bars."""
    import torch

    from benchmark.provenance import quiet_libraries

    quiet_libraries()
    device = torch.device("cuda" if work.device.type == "cuda" else "cpu")
    return dataclasses.replace(work, device=device, cfg=dataclasses.replace(work.cfg, progress=False))


def _base_task(work, data, seed: int, threads: int, board) -> tuple[Any, dict[str, Any]]:
    """Ray task: fine-tune the base model of (``data``'s task, ``seed``); returns it on the CPU with its
    ``train_info``; None when a stop was requested before it started. Raises what fine-tuning raises (its cells then
    fail with that error)."""
    import torch

    if not _may_start(board, f"base|{data.spec.name}|{seed}", cell=("base", data.spec.name)):
        return None
    torch.set_num_threads(threads)
    work = _on_worker(work)
    model, info = work.train_base(data, seed, _tokenizer(work.cfg.model))
    return ModelParcel.pack(model), info


def _cell_task(work, data, seed: int, key: str, method: str, condition: str, base, setter, original, reuse,
               stored_prune, threads: int, board):
    """Ray task: one cell. ``base`` is ``(model, train_info)``; ``setter`` and ``original`` are the setter's and
    the unpruned cell's :class:`Outcome` or stored record (or None); ``reuse`` the prune step of this method's
    prune-only cell, or None; ``stored_prune`` that cell's stored record when this run did not compute it.
    Returns ``(Outcome, PruneState or None)``, the prune step on the CPU with its model packed; a skipped Outcome
    when a stop was requested before the cell started, or the time limit or its base model's absence kept it from
    starting."""
    if base is None:  # its base fine-tune did not start (a stop, or --time-limit): nor does the cell
        return Outcome(key, skipped=True), None
    prunes = will_prune(method, condition, reuse, stored_prune)
    if not _may_start(board, key, starts_after_stop(condition, reuse), (data.spec.name, method, condition, prunes)):
        return Outcome(key, skipped=True), None
    work = _on_worker(work)
    outcome, state = Outcome(key), None
    with _Capture(outcome, threads):
        bench = work.seed_bench(data, seed, unpack(base[0]).to(work.device), _tokenizer(work.cfg.model))
        record, state = work.run_cell(bench, method, condition, _record_of(setter), _unpacked(reuse), stored_prune)
        outcome.record = work.finish(record, key, bench, _record_of(original))
    return outcome, _state_on_cpu(state)


def _may_start(board, key: str, after_stop: bool = False, cell: tuple | None = None) -> bool:
    """Whether a task may start its work (no stop requested, or ``after_stop``: it starts even then, see
    :func:`~benchmark.stopping.starts_after_stop`; and it fits the run's ``--time-limit``, ``cell`` being
    ``("base", task)`` or ``(task, method, condition, prunes)``); if so the board shows it as running here."""
    import ray

    return ray.get(board.may_start.remote(key, f"pid {os.getpid()}", after_stop, cell))


def _record_of(value) -> dict[str, Any] | None:
    """A stored record (dict), or the record of an :class:`Outcome`, or None."""
    return value.record_dict() if isinstance(value, Outcome) else value


def _state_on_cpu(state):
    """A prune step ready to travel: its mask and scores on the CPU, its re-trained model packed
    (:class:`~benchmark.transport.ModelParcel`)."""
    if state is None:
        return None
    result = state.result
    moved = dataclasses.replace(result, mask=result.mask.cpu(),
                                scores=None if result.scores is None else result.scores.cpu(),
                                model=ModelParcel.pack(result.model))
    return dataclasses.replace(state, result=moved)


def _unpacked(state):
    """A prune step that travelled (:func:`_state_on_cpu`), with its re-trained model rebuilt; None unchanged."""
    if state is None or not isinstance(state.result.model, ModelParcel):
        return state
    return dataclasses.replace(state, result=dataclasses.replace(state.result, model=state.result.model.unpack()))


class _StatusBoard:
    """A Ray actor: what each worker is running (``key -> where``), for the driver's progress text, and whether
    tasks may still start (not after :meth:`stop`; only those that fit ``limit``, the run's
    :class:`~benchmark.time_limit.TimeLimit` or None)."""

    def __init__(self, limit=None) -> None:
        self.running: dict[str, str] = {}
        self.stopping = False
        self.limit = limit

    def may_start(self, key: str, where: str, after_stop: bool = False, cell: tuple | None = None) -> bool:
        if self.stopping and not after_stop:
            return False
        if self.limit is not None and cell is not None:
            fits = self.limit.fits_base(cell[1]) if cell[0] == "base" else self.limit.fits_cell(*cell)
            if not fits:
                return False
        self.running[key] = where
        return True

    def stop(self) -> None:
        self.stopping = True

    def snapshot(self) -> dict[str, str]:
        return dict(self.running)


@functools.lru_cache(maxsize=1)
def _remote():
    """The Ray remote functions and actor class (built on first use, so this module imports without Ray)."""
    import ray

    return (ray.remote(max_retries=0)(_base_task), ray.remote(max_retries=0, num_returns=2)(_cell_task),
            ray.remote(num_cpus=0)(_StatusBoard))


def _start_ray(execution) -> bool:
    """Connect to Ray: the cluster at ``--ray-address``, or a local Ray with ``workers * threads_per_cell`` CPUs.
    An already initialised Ray (a test's, a notebook's) is used as it is. Returns whether this call started it."""
    import ray

    from benchmark.config import ConfigError

    if ray.is_initialized():
        return False
    if execution.address is not None:
        try:
            ray.init(address=execution.address, log_to_driver=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:  # no cluster there, or a bad address
            raise ConfigError(f"--ray-address {execution.address}: cannot join a Ray cluster there "
                              f"({type(exc).__name__}: {exc})") from exc
    else:
        ray.init(num_cpus=execution.workers * execution.threads_per_cell, include_dashboard=False, log_to_driver=True)
    return True


def _slots(execution) -> int:
    """How many cells Ray can run at once (from the cluster's resources and one cell's)."""
    import ray

    resources = ray.cluster_resources()
    slots = int(resources.get("CPU", 1) // execution.threads_per_cell)
    if execution.gpus_per_cell > 0:
        slots = min(slots, int(math.floor(resources.get("GPU", 0) / execution.gpus_per_cell + 1e-9)))
    return max(1, slots)


@dataclass
class _Pending:
    """A submitted Ray task the driver waits for."""

    kind: str  # "base" or "cell"
    task: str
    seed: int
    method: str = ""
    condition: str = ""
    key: str = ""

    def label(self) -> str:
        """What the progress text says of it."""
        if self.kind == "base":
            return f"base {self.task} s{self.seed}"
        return f"{self.task} s{self.seed} {self.method} {self.condition}"


def run_on_ray(runner, planned: list[tuple[str, int, str, str]], todo: set[str], bar) -> None:
    """Compute the cells of ``todo`` on Ray (see the module docstring); records and failures are written by this
    process through ``runner``'s store, in the order cells return.

    Args:
        runner: the :class:`~benchmark.runner.Runner` (its store, cell work, execution options, failures).
        planned: every planned (task, seed, method, condition), in the serial order.
        todo: the keys still to compute; finished keys are removed.
        bar: the tqdm bar over cells.

    Raises:
        RunFolderError: a cached base model cannot be loaded, or a trained one cannot be saved.
        OSError: the run folder cannot be written.
    """
    import ray

    started = _start_ray(runner.execution)
    try:
        _Driver(runner, planned, todo, bar).run()
    finally:
        if started:
            ray.shutdown()


class _Driver:
    """The loop of :func:`run_on_ray`: submits each (task, seed)'s task graph (a window of them at a time, so the
    object store holds few base models) and writes what returns."""

    def __init__(self, runner, planned, todo: set[str], bar) -> None:
        import ray

        self.runner, self.planned, self.todo, self.bar = runner, planned, todo, bar
        self.ex = runner.execution
        base_fn, cell_fn, board_cls = _remote()
        self.base_fn = base_fn.options(num_cpus=self.ex.threads_per_cell, num_gpus=self.ex.gpus_per_cell)
        self.cell_fn = cell_fn.options(num_cpus=self.ex.threads_per_cell, num_gpus=self.ex.gpus_per_cell)
        self.board = board_cls.remote(runner.limit)
        self.work = dataclasses.replace(runner.work, cfg=dataclasses.replace(runner.work.cfg, progress=False))
        self.groups = [(spec, seed) for spec, seeds in runner.seeds_to_do(planned, todo) for seed in seeds]
        self.window = _slots(self.ex) + 1
        self.pending: dict[Any, _Pending] = {}
        self.open_groups: dict[tuple[str, int], int] = {}  # (task, seed) -> cells still pending
        self.data_refs: dict[str, tuple[Any, Any]] = {}  # task -> (TaskData, its object ref)
        self.ray = ray

    def run(self) -> None:
        """Submit and collect until every group is done."""
        next_group = 0
        stopping = False
        while next_group < len(self.groups) or self.pending:
            if self.runner.stop.requested and not stopping:  # the first Ctrl-C: no task starts after this (but
                # the own-fine-tuning cells of prune steps computed here, benchmark.stopping.starts_after_stop)
                stopping = True
                self.ray.get(self.board.stop.remote())
                next_group = len(self.groups)
            while next_group < len(self.groups) and len(self.open_groups) < self.window:
                self._submit_group(*self.groups[next_group])
                next_group += 1
            if not self.pending:
                continue
            ready, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=POLL_S)
            for ref in ready:
                self._collect(ref, self.pending.pop(ref))
            self._show_status()

    # ------------------------------------------------------------------ submitting

    def _data(self, spec):
        """The task's data and its object ref (prepared and put once per task)."""
        if spec.name not in self.data_refs:
            data = self.runner.task_data(spec)
            self.data_refs[spec.name] = (data, self.ray.put(data))
        return self.data_refs[spec.name]

    def _base(self, spec, seed: int):
        """The object ref of the base model: the cached folder's model, or a Ray task that trains it."""
        _, data_ref = self._data(spec)
        folder = self.runner.base_folder(spec.name, seed)
        if (folder / "config.json").exists():
            import torch

            cpu_work = dataclasses.replace(self.work, device=torch.device("cpu"))
            return self.ray.put((ModelParcel.pack(cpu_work.load_base(folder)), None))
        ref = self.base_fn.remote(self.work, data_ref, seed, self.ex.threads_per_cell, self.board)
        self.pending[ref] = _Pending("base", spec.name, seed, key=f"base|{spec.name}|{seed}")
        return ref

    def _submit_group(self, spec, seed: int) -> None:
        """Submit the cells to do of (task, seed), each with its inputs as arguments."""
        _, data_ref = self._data(spec)
        base = self._base(spec, seed)
        work, runner = self.work, self.runner
        stored = lambda method: runner.store.get(work.key(spec.name, seed, method, PRUNE_ONLY))  # noqa: E731
        inputs: dict[str, Any] = {}  # method -> its prune-only Outcome ref (this run) or stored record
        states: dict[str, Any] = {}  # method -> its prune-only PruneState ref (this run)
        count = 0
        setter = work.setter()
        for task, s, method, condition in self.planned:
            if task != spec.name or s != seed:
                continue
            key = work.key(task, seed, method, condition)
            if key not in self.todo:
                continue
            original = inputs.get(ORIGINAL, stored(ORIGINAL)) if method != ORIGINAL or condition != PRUNE_ONLY else None
            setter_input = None
            if setter is not None and method not in (ORIGINAL, setter):
                setter_input = inputs.get(setter, stored(setter))
            reuse = states.get(method) if condition in REUSES_PRUNE else None
            stored_prune = stored(method) if condition in REUSES_PRUNE and reuse is None else None  # resumed
            out_ref, state_ref = self.cell_fn.remote(work, data_ref, seed, key, method, condition, base, setter_input,
                                                     original, reuse, stored_prune, self.ex.threads_per_cell,
                                                     self.board)
            if condition == PRUNE_ONLY:
                inputs[method], states[method] = out_ref, state_ref
            self.pending[out_ref] = _Pending("cell", task, seed, method, condition, key)
            count += 1
        if count:  # (a group is only submitted with a cell to do)
            self.open_groups[(spec.name, seed)] = count

    # ------------------------------------------------------------------ collecting

    def _collect(self, ref, pending: _Pending) -> None:
        """Write what a task returned: a base model to ``DIR/base/``, a record to the store, a failure to
        ``failures.jsonl``."""
        try:
            value = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:  # the worker died, or an input of this task failed
            value = Outcome(pending.key, error=_ray_error(exc), trace=str(exc))
        if pending.kind == "base":
            self._save_base(pending, value)
            return
        outcome = value
        if outcome.skipped:  # a stop was requested before it started: neither a record nor a failure
            self._close_one(pending)
            return
        for level, message in outcome.logs:
            log.log(level, "%s", message)
        for category, message in outcome.warnings:
            warnings.warn(message, category, stacklevel=1)
        if outcome.record is not None:
            self.runner.store.add(outcome.record)
            self.todo.discard(pending.key)
            log.info("cell %s done (%.1f s)", pending.key, outcome.record.cost.wall_s)
        else:
            self.runner.record_failure(pending.key, pending.task, pending.seed, pending.method, pending.condition,
                                       outcome.error, outcome.trace)
        self.bar.update(1)
        self._close_one(pending)

    def _close_one(self, pending: _Pending) -> None:
        """One cell of its (task, seed) less to wait for."""
        group = (pending.task, pending.seed)
        self.open_groups[group] -= 1
        if not self.open_groups[group]:
            del self.open_groups[group]

    def _save_base(self, pending: _Pending, value) -> None:
        """Save a base model that a worker trained (under the (task, seed)'s lock; kept if another process saved
        it first). A failed base fine-tune is logged; its cells fail with its error."""
        if value is None:  # not started: a stop was requested
            return
        if isinstance(value, Outcome):
            log.error("base model of %s seed %d failed: %s", pending.task, pending.seed, value.error)
            return
        model, info = value
        self.runner.save_base(pending.task, pending.seed, unpack(model), info)

    def _show_status(self) -> None:
        """The bar's text: what each worker runs now."""
        if self.bar.disable:
            return
        try:
            running = self.ray.get(self.board.snapshot.remote(), timeout=5)
        except self.ray.exceptions.GetTimeoutError:
            return
        now = sorted((running[p.key], p.label()) for p in self.pending.values() if p.key in running)
        self.bar.set_description(f"{len(now)} running")
        self.bar.set_postfix_str(" | ".join(f"{where}: {what}" for where, what in now), refresh=True)


def _ray_error(exc: Exception) -> str:
    """``Type: message`` of a Ray error: the original exception of a failed input, or the worker's death."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, Exception):
        return f"{type(cause).__name__}: {cause}"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"


