"""Stopping a run between cells: the first Ctrl-C (SIGINT) lets the running cells finish and starts no other,
except the ``own-fine-tuning`` cells of prune steps this run computed (:func:`starts_after_stop`); a running base
fine-tune stops at its next step unless ``--wait-for-base``; a second Ctrl-C stops at once. The first says what is
running and how long it is expected to take. Why: docs/choices.md ("Stopping")."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

log = logging.getLogger("benchmark")


def starts_after_stop(condition: str, reuse) -> bool:
    """Whether a cell still starts after a stop was requested: an ``own-fine-tuning`` cell whose prune step
    (``reuse``, a :class:`benchmark.cells.work.PruneState` or None) this run computed, and so holds its method's own
    weights in memory (a state rebuilt from a stored record holds none)."""
    from headprune_bench.benchmark.store.records import OWN

    return condition == OWN and reuse is not None and not reuse.from_record


def duration_text(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.4 h``: a duration as a person reads it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class Running:
    """Work a run has started and not finished: a cell, or a base fine-tune (``base``).

    Attributes:
        label: what it is, e.g. ``mrpc s3 auber prune-only`` or ``base fine-tune of mrpc seed 3``.
        expected_s: its estimated seconds from the folder's records (``execution.time_limit``), or None.
        started: when it started (``time.monotonic()``).
    """

    label: str
    expected_s: float | None
    base: bool = False
    started: float = field(default_factory=time.monotonic)

    def line(self, stops_bases: bool, now: float | None = None) -> str:
        """What the first Ctrl-C says of it: how long it has run, how long it should take, and what happens to it."""
        ran = duration_text((time.monotonic() if now is None else now) - self.started)
        expected = ("no time recorded for it yet" if self.expected_s is None
                    else f"expected about {duration_text(self.expected_s)} in all")
        if self.base and stops_bases:
            return (f"{self.label}: running for {ran} ({expected}); stops at its next training step, not saved: the "
                    f"next run fine-tunes it again (--wait-for-base lets it finish instead)")
        done = "it finishes and is saved (--wait-for-base)" if self.base else "it finishes and is written"
        return f"{self.label}: running for {ran}, {expected}; {done}"


class StopRequest:
    """Whether a stop was asked for (by the first SIGINT, or by :meth:`request`).

    Attributes:
        requested (bool): True once a stop was asked for.
        stops_bases: whether a stop ends a running base fine-tune at its next step (False: ``--wait-for-base``).
        running: what the run has started and not finished, by key (:class:`Running`); the runner keeps it.
    """

    def __init__(self, stops_bases: bool = True) -> None:
        self._event = threading.Event()
        self.stops_bases = stops_bases
        self.running: dict[str, Running] = {}

    @property
    def stops_base_now(self) -> bool:
        """Whether a running base fine-tune should end at this step."""
        return self.requested and self.stops_bases

    def message(self) -> str:
        """What the first Ctrl-C prints: what stops, what is running and for how long (several lines)."""
        now = time.monotonic()
        lines = [f"  {work.line(self.stops_bases, now)}" for work in list(self.running.values())]
        return "\n".join(["stopping: no other cell starts (but the own-fine-tuning evaluations of prune steps "
                           "already computed); " + ("running now:" if lines else "nothing is running now"), *lines,
                           "press Ctrl-C again to stop at once, losing what is running"])

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self) -> None:
        """Ask the run to stop between cells (what the first SIGINT does)."""
        self._event.set()


@contextlib.contextmanager
def stop_between_cells(stops_bases: bool = True) -> Iterator[StopRequest]:
    """Within the block, the first SIGINT requests a stop between cells and prints :meth:`StopRequest.message`
    (on stderr and the log); the second raises ``KeyboardInterrupt``. The previous handler is restored on exit.
    Outside the main thread (where Python cannot install signal handlers) the block runs with a request that only
    :meth:`StopRequest.request` sets."""
    stop = StopRequest(stops_bases)
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        if stop.requested:  # the second Ctrl-C: stop now
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        stop.request()
        message = stop.message()
        os.write(2, f"\nbench run: {message}\n".encode())  # print could re-enter a write this signal interrupted
        log.warning("%s", message)

    signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)
