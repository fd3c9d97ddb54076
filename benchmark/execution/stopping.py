"""Stopping a run between cells: the first Ctrl-C (SIGINT) lets the running cells finish and starts no other,
except the ``own-fine-tuning`` cells of prune steps this run computed (:func:`starts_after_stop`); a second one
stops at once. Why: docs/choices.md ("Stopping")."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger("benchmark")


def starts_after_stop(condition: str, reuse) -> bool:
    """Whether a cell still starts after a stop was requested: an ``own-fine-tuning`` cell whose prune step
    (``reuse``, a :class:`benchmark.cells.work.PruneState` or None) this run computed, and so holds its method's own
    weights in memory (a state rebuilt from a stored record holds none)."""
    from headprune_bench.benchmark.store.records import OWN

    return condition == OWN and reuse is not None and not reuse.from_record


class StopRequest:
    """Whether a stop was asked for (by the first SIGINT, or by :meth:`request`).

    Attributes:
        requested (bool): True once a stop was asked for.
    """

    def __init__(self) -> None:
        self._event = threading.Event()

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self) -> None:
        """Ask the run to stop between cells (what the first SIGINT does)."""
        self._event.set()


@contextlib.contextmanager
def stop_between_cells() -> Iterator[StopRequest]:
    """Within the block, the first SIGINT requests a stop between cells (and says so on the log); the second
    raises ``KeyboardInterrupt``. The previous handler is restored on exit. Outside the main thread (where Python
    cannot install signal handlers) the block runs with a request that only :meth:`StopRequest.request` sets."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        if stop.requested:  # the second Ctrl-C: stop now
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        stop.request()
        message = ("stopping after the running cells (they finish and are written; no other cell starts but the "
                   "own-fine-tuning evaluations of prune steps already computed); press Ctrl-C again to stop at "
                   "once, losing them")
        os.write(2, f"\nbench run: {message}\n".encode())  # async-signal-safe, unlike print
        log.warning("%s", message)

    signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)
