"""What runs in Ray's processes for the driver: the base fine-tune and cell tasks and what they return
(:class:`Outcome`); each asks the status board (:mod:`.status_board`) before it starts.

Workers never read or write the run folder: a task gets its inputs as arguments and returns its result (a model
packed as :class:`benchmark.execution.ray.transport.ModelParcel`), its log lines and warnings; the driver writes them.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any

from headprune_bench.benchmark.cells.work import will_prune
from headprune_bench.benchmark.execution.ray.status_board import StatusBoard
from headprune_bench.benchmark.execution.ray.transport import ModelParcel, unpack
from headprune_bench.benchmark.execution.stopping import starts_after_stop
from headprune_bench.benchmark.store.records import Record
from headprune_bench.benchmark.training import TrainingStopped

log = logging.getLogger("benchmark")


@dataclass
class Outcome:
    """What a Ray task returns for one cell (or a base model).

    Attributes:
        key: the cell key (for a base model: ``base|<task>|<seed>``).
        record: the finished cell's record, or None when it failed or was skipped.
        skipped: the task did not start the cell: a stop was requested (:mod:`benchmark.execution.stopping`).
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
    from headprune_bench.benchmark import models

    return models.load_tokenizer(model)


def _on_worker(work):
    """``work`` for a Ray worker: its device (``cuda`` is the GPU Ray assigned), no progress bars."""
    import torch

    from headprune_bench.benchmark.provenance import quiet_libraries

    quiet_libraries()
    device = torch.device("cuda" if work.device.type == "cuda" else "cpu")
    return dataclasses.replace(work, device=device, cfg=dataclasses.replace(work.cfg, progress=False))


def _base_task(work, data, seed: int, threads: int, board) -> tuple[Any, dict[str, Any]]:
    """Ray task: fine-tune the base model of (``data``'s task, ``seed``); returns it on the CPU with its
    ``train_info``; a skipped :class:`Outcome` saying why when a stop or the time limit kept it from starting, or a
    stop ended it (at a step, unless ``--wait-for-base``). Raises
    what fine-tuning raises (its cells then fail with that error)."""
    import torch

    key = f"base|{data.spec.name}|{seed}"
    refusal = _refusal(board, key, cell=("base", data.spec.name))
    if refusal is not None:
        message = f"base model of {data.spec.name} seed {seed} not trained: {refusal}"
        return Outcome(key, skipped=True, logs=[(logging.INFO, message)])
    torch.set_num_threads(threads)
    work = _on_worker(work)
    try:
        model, info = work.train_base(data, seed, _tokenizer(work.cfg.model), should_stop=_asker(board))
    except TrainingStopped as stopped:
        message = (f"base model of {data.spec.name} seed {seed}: stopped on request after step {stopped.steps} of "
                   f"{stopped.total_steps}, not saved (the next run fine-tunes it again)")
        return Outcome(key, skipped=True, logs=[(logging.WARNING, message)])
    return ModelParcel.pack(model), info


def _asker(board, every_s: float = 2.0):
    """``should_stop`` of a base fine-tune on a worker: asks the board (:meth:`StatusBoard.stops_base`) at most
    every ``every_s`` seconds, so a step does not wait on the driver."""
    import ray

    last = [time.monotonic()]

    def should_stop() -> bool:
        if time.monotonic() - last[0] < every_s:
            return False
        last[0] = time.monotonic()
        return bool(ray.get(board.stops_base.remote()))

    return should_stop


def _cell_task(work, data, seed: int, key: str, method: str, condition: str, base, setter, original, reuse,
               stored_prune, threads: int, board, level=None, scores=None):
    """Ray task: one cell. ``base`` is ``(model, train_info)``; ``setter`` and ``original`` are the setter's and
    the unpruned cell's :class:`Outcome` or stored record (or None); ``reuse`` the prune step of this method's
    prune-only cell, or None; ``stored_prune`` that cell's stored record when this run did not compute it;
    ``level`` the cell's budget level; ``scores`` a score pass source (``CellWork.score_pass``) or None.
    Returns ``(Outcome, PruneState or None)``, the prune step on the CPU with its model packed; a skipped Outcome
    when a stop was requested before the cell started, or the time limit or its base model's absence kept it from
    starting."""
    if isinstance(base, Outcome):  # its base fine-tune did not start (a stop, or --time-limit): nor does the cell
        return Outcome(key, skipped=True, logs=[(logging.INFO, f"cell {key} not started: no base model")]), None
    prunes = will_prune(method, condition, reuse, stored_prune, scored=scores is not None)
    refusal = _refusal(board, key, starts_after_stop(condition, reuse), (data.spec.name, method, condition, prunes))
    if refusal is not None:
        return Outcome(key, skipped=True, logs=[(logging.INFO, f"cell {key} not started: {refusal}")]), None
    work = _on_worker(work)
    outcome, state = Outcome(key), None
    with _Capture(outcome, threads):
        bench = work.seed_bench(data, seed, unpack(base[0]).to(work.device), _tokenizer(work.cfg.model))
        record, state = work.run_cell(bench, method, condition, _record_of(setter), _unpacked(reuse), stored_prune,
                                      level=level, scores=scores)
        resumed = isinstance(original, dict)  # stored by an earlier run; this run's original cell is an Outcome
        outcome.record = work.finish(record, key, bench, _record_of(original), stored_original=resumed)
    return outcome, _state_on_cpu(state)


def _refusal(board, key: str, after_stop: bool = False, cell: tuple | None = None) -> str | None:
    """Why a task may not start its work (a stop was requested, unless ``after_stop``: it starts even then, see
    :func:`benchmark.execution.stopping.starts_after_stop`, and past the time limit too; or it does not fit the run's
    ``--time-limit``, ``cell`` being ``("base", task)`` or ``(task, method, condition, prunes)``), or None: it may,
    and the board shows it as running here."""
    import ray

    return ray.get(board.refusal.remote(key, f"pid {os.getpid()}", after_stop, cell))


def _record_of(value) -> dict[str, Any] | None:
    """A stored record (dict), or the record of an :class:`Outcome`, or None."""
    return value.record_dict() if isinstance(value, Outcome) else value


def _state_on_cpu(state):
    """A prune step ready to travel: its mask and scores on the CPU, its re-trained model packed
    (:class:`~headprune_bench.benchmark.execution.ray.transport.ModelParcel`)."""
    if state is None:
        return None
    result = state.result
    moved = dataclasses.replace(result, mask=result.mask.cpu(),
                                scores=None if result.scores is None else result.scores.cpu(),
                                model=ModelParcel.pack(result.model))
    scored = state.score_pass
    if scored is not None:  # (a method that ranks once re-trains nothing: no model to pack)
        own = dataclasses.replace(scored.result, mask=scored.result.mask.cpu(), model=None,
                                  scores=None if scored.result.scores is None else scored.result.scores.cpu())
        scored = dataclasses.replace(scored, result=own)
    return dataclasses.replace(state, result=moved, score_pass=scored)


def _unpacked(state):
    """A prune step that travelled (:func:`_state_on_cpu`), with its re-trained model rebuilt; None unchanged."""
    if state is None or not isinstance(state.result.model, ModelParcel):
        return state
    return dataclasses.replace(state, result=dataclasses.replace(state.result, model=state.result.model.unpack()))


@functools.lru_cache(maxsize=1)
def remote_functions():
    """The Ray remote functions and actor class (built on first use, so this module imports without Ray)."""
    import ray

    return (ray.remote(max_retries=0)(_base_task), ray.remote(max_retries=0, num_returns=2)(_cell_task),
            ray.remote(num_cpus=0)(StatusBoard))
