"""Cells in parallel on Ray (``bench run --workers N`` or ``--ray-address ADDR``): this process keeps the
dependency graph between cells, hands Ray the best ready cells into free slots, and is the only writer of the run
folder. Scheduling rules: docs/choices.md ("The Ray loop").
"""
from __future__ import annotations

import dataclasses
import logging
import math
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tqdm.auto import tqdm

from headprune_bench.benchmark.cells.work import CellWork, prunes_again, warn_other_base
from headprune_bench.benchmark.execution.eta import Eta
from headprune_bench.benchmark.execution.ray.tasks import Outcome, remote_functions
from headprune_bench.benchmark.execution.ray.transport import ModelParcel, unpack
from headprune_bench.benchmark.execution.resolve import Execution
from headprune_bench.benchmark.execution.stopping import Running, StopRequest
from headprune_bench.benchmark.execution.time_limit import MachineTimes, TimeLimit
from headprune_bench.benchmark.store.claims import Claims
from headprune_bench.benchmark.store.jsonl import RecordStore
from headprune_bench.benchmark.store.records import ORIGINAL, OWN, PRUNE_ONLY, CellKey, reuses_prune

log = logging.getLogger("benchmark")

POLL_S = 1.0
"""Seconds between two looks at the workers' status (the progress text) while no cell returns."""


def _start_ray(execution) -> bool:
    """Connect to Ray: the cluster at ``--ray-address``, or a local Ray with ``workers * threads_per_cell`` CPUs.
    An already initialised Ray (a test's, a notebook's) is used as it is. Returns whether this call started it."""
    import ray

    from headprune_bench.benchmark.config.presets import ConfigError

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


@runtime_checkable
class RunHandle(Protocol):
    """What the Ray loop reads and calls of the run that owns it (``run.runner.Runner`` provides it)."""

    execution: Execution
    store: RecordStore
    work: CellWork
    stop: StopRequest
    eta: Eta
    limit: TimeLimit | None
    warned_bases: set[tuple[str, int]]
    claims: Claims
    left_to_others: set[str]

    def seeds_to_do(self, planned: list[CellKey], todo: set[str]) -> list[tuple[Any, list[int]]]: ...

    def task_data(self, spec: Any) -> Any: ...

    def base_folder(self, task: str, seed: int) -> Path: ...

    def folder_times(self) -> MachineTimes: ...

    def record_failure(self, key: str, task: str, seed: int, method: str, condition: str, error: str,
                       trace: str) -> None: ...

    def save_base(self, task: str, seed: int, model: Any, info: dict[str, Any]) -> None: ...


def run_on_ray(runner: RunHandle, planned: list[CellKey], todo: set[str], bar) -> None:
    """Compute the cells of ``todo`` on Ray (see the module docstring); records and failures are written by this
    process through ``runner``'s store, in the order cells return.

    Args:
        runner: the run (its store, cell work, execution options, failures).
        planned: the key of every planned cell, in the serial order.
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


@dataclass
class _Queued:
    """A cell of an open (task, seed) that waits for its inputs or for a free slot."""

    key: str
    task: str
    seed: int
    method: str
    condition: str
    order: int  # its place in the plan
    needs: tuple[str, ...]  # keys of the cells whose outcome it takes (those of this run must return first)
    prune_key: str  # the key of its method's prune-only cell at its level
    pass_key: str | None = None  # the prune-only cell whose score pass it derives its mask from (a sweep)


class _Driver:
    """The loop of :func:`run_on_ray`: opens (task, seed) groups a window at a time (so the object store holds few
    base models), hands Ray the best ready cells while it has free slots, and writes what returns."""

    def __init__(self, runner: RunHandle, planned: list[CellKey], todo: set[str], bar) -> None:
        import ray

        self.runner, self.planned, self.todo, self.bar = runner, planned, todo, bar
        self.ex = runner.execution
        base_fn, cell_fn, board_cls = remote_functions()
        self.base_fn = base_fn.options(num_cpus=self.ex.threads_per_cell, num_gpus=self.ex.gpus_per_cell)
        self.cell_fn = cell_fn.options(num_cpus=self.ex.threads_per_cell, num_gpus=self.ex.gpus_per_cell)
        self.board = board_cls.remote(runner.limit)
        self.work = dataclasses.replace(runner.work, cfg=dataclasses.replace(runner.work.cfg, progress=False))
        self.groups = [(spec, seed) for spec, seeds in runner.seeds_to_do(planned, todo) for seed in seeds]
        self.slots = _slots(self.ex)
        self.window = self.slots + 1
        self.times = runner.limit.times if runner.limit is not None else runner.folder_times()
        self.pending: dict[Any, _Pending] = {}
        self.queue: list[_Queued] = []
        self.open_groups: dict[tuple[str, int], int] = {}  # (task, seed) -> cells still to return
        self.bases: dict[tuple[str, int], Any] = {}  # (task, seed) -> base model ref (cached, or a returned task)
        self.base_queue: list[tuple[str, int, Any]] = []  # base fine-tunes of opened groups not handed to Ray yet
        self.coming: set[str] = set()  # keys of this run's cells that have not returned yet
        self.outputs: dict[str, tuple[Any, Any]] = {}  # key -> (Outcome ref, PruneState ref) of returned cells
        self.data_refs: dict[str, tuple[Any, Any]] = {}  # task -> (TaskData, its object ref)
        self.ray = ray

    def run(self) -> None:
        """Open groups, dispatch and collect until nothing is running or can start."""
        next_group = 0
        stopping = False
        while True:
            if self.runner.stop.requested and not stopping:  # the first Ctrl-C: no task starts after this (but
                # the own-fine-tuning cells of prune steps computed here: stopping.starts_after_stop)
                stopping = True
                self.ray.get(self.board.stop.remote(self.runner.stop.stops_bases))
                next_group = len(self.groups)
                self.queue = [q for q in self.queue if q.condition == OWN and self._reused(q)]
                self.base_queue = []
            while next_group < len(self.groups) and len(self.open_groups) < self.window:
                self._open_group(*self.groups[next_group])
                next_group += 1
            self._dispatch()
            if not self.pending:
                return  # what is left in the queue cannot start (its base model never came: a stop)
            ready, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=POLL_S)
            for ref in ready:
                self._collect(ref, self.pending.pop(ref))
            self._show_status()

    # ------------------------------------------------------------------ opening groups, dispatching

    def _data(self, spec):
        """The task's data and its object ref (prepared and put once per task)."""
        if spec.name not in self.data_refs:
            data = self.runner.task_data(spec)
            self.data_refs[spec.name] = (data, self.ray.put(data))
        return self.data_refs[spec.name]

    def _open_group(self, spec, seed: int) -> None:
        """Queue the cells to do of (task, seed); its base model: the cached folder's, or a Ray task that trains
        it (queued: :meth:`_dispatch` submits it into the next free slot, before any cell)."""
        _, data_ref = self._data(spec)
        folder = self.runner.base_folder(spec.name, seed)
        if (folder / "config.json").exists():
            import torch

            cpu_work = dataclasses.replace(self.work, device=torch.device("cpu"))
            self.bases[(spec.name, seed)] = self.ray.put((ModelParcel.pack(cpu_work.load_base(folder)), None))
        else:
            self.base_queue.append((spec.name, seed, data_ref))
        work, setter = self.work, self.work.setter()
        count = 0
        for order, cell in enumerate(self.planned):
            key, task, method, condition, level = str(cell), cell.task, cell.method, cell.condition, cell.budget
            if task != spec.name or cell.seed != seed or key not in self.todo:
                continue
            prune_key = work.key(task, seed, method, PRUNE_ONLY, level)
            unpruned = work.key(task, seed, ORIGINAL, PRUNE_ONLY)
            needs = [unpruned] if (method, condition) != (ORIGINAL, PRUNE_ONLY) else []
            if work.takes_setter(method, level):
                needs.append(work.key(task, seed, setter, PRUNE_ONLY))
            if reuses_prune(condition):
                needs.append(prune_key)
            pass_key = self._pass_key(task, seed, method, condition, prune_key)
            if pass_key is not None:
                needs.append(pass_key)
            self.queue.append(_Queued(key, task, seed, method, condition, order, tuple(needs), prune_key, pass_key))
            self.coming.add(key)
            count += 1
        if count:  # (a group is only opened with a cell to do)
            self.open_groups[(spec.name, seed)] = count

    def _pass_key(self, task: str, seed: int, method: str, condition: str, prune_key: str) -> str | None:
        """The prune-only cell a prune-only cell of a method that ranks once takes its scores from: its pass
        level's (:meth:`CellWork.pass_level`) when this run computes that, else a stored prune-only record of the
        method at another level; None: it prunes (or is that cell)."""
        level = self.work.pass_level(method) if condition == PRUNE_ONLY else None
        if level is None:
            return None
        source = self.work.key(task, seed, method, PRUNE_ONLY, level)
        if source != prune_key and (source in self.todo or self.runner.store.get(source) is not None):
            return source
        stored = [self.work.key(task, seed, method, PRUNE_ONLY, other) for other in self.work.levels_of(method)]
        return next((k for k in stored if k != prune_key and self.runner.store.get(k) is not None), None)

    def _reused(self, q: _Queued) -> bool:
        """Whether ``q`` reuses a prune step this run computed (it holds the method's weights in memory)."""
        return reuses_prune(q.condition) and q.prune_key in self.outputs

    def _rank(self, q: _Queued) -> tuple:
        """Dispatch order (smallest first): cells reusing a prune step of this run, then the longest expected
        (unknown counts as longest), then the plan's order (module docstring)."""
        estimate = self._estimate(q)
        return (not (self._reused(q) or q.pass_key is not None), -(math.inf if estimate is None else estimate), q.order)

    def _estimate(self, q: _Queued) -> float | None:
        """``q``'s expected seconds from the folder's and this run's times, or None."""
        reused = self._reused(q) or q.pass_key is not None
        prunes = prunes_again(q.method, q.condition, reused, self.runner.store.get(q.prune_key) is not None)
        return self.times.cell(q.task, q.method, q.condition, prunes)

    def _dispatch(self) -> None:
        """Submit the queued base fine-tunes, then the best ready cells, while fewer tasks than slots are running
        (the driver holds that limit, not Ray: module docstring)."""
        while self.base_queue and len(self.pending) < self.slots:
            task, seed, data_ref = self.base_queue.pop(0)
            ref = self.base_fn.remote(self.work, data_ref, seed, self.ex.threads_per_cell, self.board)
            self.pending[ref] = _Pending("base", task, seed, key=f"base|{task}|{seed}")
            self.runner.stop.running[f"base|{task}|{seed}"] = Running(f"base fine-tune of {task} seed {seed}",
                                                                     self.times.base_estimate(task), base=True)
        while len(self.pending) < self.slots:
            ready = [q for q in self.queue
                     if (q.task, q.seed) in self.bases and not any(k in self.coming for k in q.needs)]
            if not ready:
                return
            best = min(ready, key=self._rank)
            self.queue.remove(best)
            self._submit(best)

    def _submit(self, q: _Queued) -> None:
        """Submit one cell with its inputs: this run's returned outcomes and prune steps, else stored records. A
        cell another ``bench run`` into the folder holds the claim on, or has stored meanwhile, is left to it."""
        work, store = self.work, self.runner.store
        claimed = self.runner.claims.take(q.key)
        store.refresh()
        if not claimed or q.key in store:
            self.runner.claims.release(q.key)
            self.coming.discard(q.key)
            if q.key in store:
                self.todo.discard(q.key)
                self.bar.update(1)
            else:
                log.info("cell %s: another bench run is computing it; left to it", q.key)
                self.runner.left_to_others.add(q.key)
            self._close_one(_Pending("cell", q.task, q.seed, q.method, q.condition, q.key))
            return

        def outcome_or_record(method: str):
            key = work.key(q.task, q.seed, method, PRUNE_ONLY)
            return self.outputs[key][0] if key in self.outputs else store.get(key)

        setter = work.setter()
        level = CellKey.parse(q.key).budget
        original = outcome_or_record(ORIGINAL) if (q.method, q.condition) != (ORIGINAL, PRUNE_ONLY) else None
        setter_input = outcome_or_record(setter) if work.takes_setter(q.method, level) else None
        reuse = self.outputs[q.prune_key][1] if self._reused(q) else None
        stored_prune = store.get(q.prune_key) if reuses_prune(q.condition) and reuse is None else None  # resumed
        scores = None
        if q.pass_key is not None:  # this run's scoring cell's prune step, or that cell's stored record
            scores = self.outputs[q.pass_key][1] if q.pass_key in self.outputs else store.get(q.pass_key)
        _, data_ref = self.data_refs[q.task]
        out_ref, state_ref = self.cell_fn.remote(work, data_ref, q.seed, q.key, q.method, q.condition,
                                                 self.bases[(q.task, q.seed)], setter_input, original, reuse,
                                                 stored_prune, self.ex.threads_per_cell, self.board, level, scores)
        self.pending[out_ref] = _Pending("cell", q.task, q.seed, q.method, q.condition, q.key)
        self.outputs[q.key] = (out_ref, state_ref)  # read by its dependents once it returns
        self.runner.stop.running[q.key] = Running(" ".join(str(p) for p in (q.task, f"s{q.seed}", q.method, level,
                                                                            q.condition) if p), self._estimate(q))

    # ------------------------------------------------------------------ collecting

    def _collect(self, ref, pending: _Pending) -> None:
        """Write what a task returned: a base model to ``DIR/base/``, a record to the store, a failure to
        ``failures.jsonl``."""
        try:
            value = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:  # the worker died, or an input of this task failed
            value = Outcome(pending.key, error=_ray_error(exc), trace=str(exc))
        self.runner.stop.running.pop(pending.key, None)
        if pending.kind == "base":
            self._save_base(pending, value)
            self.bases[(pending.task, pending.seed)] = ref  # its cells can start (and fail with its error)
            return
        self.coming.discard(pending.key)
        self.runner.claims.release(pending.key)
        outcome = value
        for level, message in outcome.logs:
            log.log(level, "%s", message)
        for category, message in outcome.warnings:
            warnings.warn(message, category, stacklevel=1)
        if outcome.skipped:  # a stop or the time limit kept it from starting: neither a record nor a failure
            self._close_one(pending)
            return
        if outcome.record is not None:
            self.runner.store.add(outcome.record)
            warn_other_base(outcome.record, self.runner.warned_bases)
            self._learn("add_record", outcome.record_dict())
            self.runner.eta.finished(pending.key, record=outcome.record_dict())
            self.todo.discard(pending.key)
            log.info("cell %s done (%.1f s)", pending.key, outcome.record.cost.wall_s)
        else:
            self.runner.record_failure(pending.key, pending.task, pending.seed, pending.method, pending.condition,
                                       outcome.error, outcome.trace)
        self.bar.update(1)
        self._close_one(pending)

    def _close_one(self, pending: _Pending) -> None:
        """One cell of its (task, seed) less to wait for; a finished group's base model and prune steps are let
        go (Ray frees them)."""
        group = (pending.task, pending.seed)
        self.open_groups[group] -= 1
        if not self.open_groups[group]:
            del self.open_groups[group]
            self.bases.pop(group, None)
            done = [k for k in self.outputs if k.startswith(f"{pending.task}|seed={pending.seed}|")]
            for key in done:
                del self.outputs[key]

    def _save_base(self, pending: _Pending, value) -> None:
        """Save a base model that a worker trained (under the (task, seed)'s lock; kept if another process saved
        it first). A failed base fine-tune is logged; its cells fail with its error."""
        if isinstance(value, Outcome):  # not started or stopped (a stop, or the time limit: it says which), or failed
            for level, message in value.logs:
                log.log(level, "%s", message)
                if level >= logging.WARNING:  # a base fine-tune a stop ended
                    tqdm.write(f"bench run: {message}", file=sys.stderr)
            if not value.skipped:
                log.error("base model of %s seed %d failed: %s", pending.task, pending.seed, value.error)
            return
        model, info = value
        self.runner.save_base(pending.task, pending.seed, unpack(model), info)
        self._learn("add_base", pending.task, info)
        self.runner.eta.finished(pending.key, base_info=info)

    def _learn(self, what: str, *args) -> None:
        """Add a finished cell's record (``add_record``) or base fine-tune (``add_base``) to the time estimates:
        the driver's, which order the cells, and the status board's, which hold ``--time-limit``
        (:class:`~headprune_bench.benchmark.execution.time_limit.MachineTimes`)."""
        getattr(self.times, what)(*args)
        if self.runner.limit is not None:  # waited for: the next cell's worker asks the board
            self.ray.get(self.board.learn.remote(what, *args))

    def _show_status(self) -> None:
        """The bar's text: what each worker runs now."""
        if self.bar.disable:
            return
        try:
            running = self.ray.get(self.board.snapshot.remote(), timeout=5)
        except self.ray.exceptions.GetTimeoutError:
            return
        now = sorted((running[p.key], p.label()) for p in self.pending.values() if p.key in running)
        self.bar.set_description(f"{self.runner.eta.text()}; {len(now)} running")
        self.bar.set_postfix_str(" | ".join(f"{where}: {what}" for where, what in now), refresh=True)


def _ray_error(exc: Exception) -> str:
    """``Type: message`` of a Ray error: the original exception of a failed input, or the worker's death."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, Exception):
        return f"{type(cause).__name__}: {cause}"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"


