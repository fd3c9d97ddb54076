"""The status board of a run on Ray: one actor per ``bench run``, in a module that imports neither torch nor
transformers so that the actor's process starts fast (docs/choices.md, "The Ray loop")."""
from __future__ import annotations


class StatusBoard:
    """A Ray actor: what each worker is running (``key -> where``), for the driver's progress text, and whether
    tasks may still start (not after :meth:`stop`; only those that fit ``limit``, the run's
    :class:`~headprune_bench.benchmark.execution.time_limit.TimeLimit` or None).

    Args:
        limit: the run's time limit (``--time-limit``), or None for none.
    """

    def __init__(self, limit=None) -> None:
        self.running: dict[str, str] = {}
        self.stopping = False
        self.stop_bases = True
        self.limit = limit

    def refusal(self, key: str, where: str, after_stop: bool = False, cell: tuple | None = None) -> str | None:
        """Why the task ``key`` (running at ``where``, e.g. ``pid 123``) may not start, or None: it may, and the
        board shows it as running there. ``cell`` is ``("base", task)`` or ``(task, method, condition, prunes)``
        for the time limit; ``after_stop`` lets it start after :meth:`stop` and past the time limit (an
        ``own-fine-tuning`` cell holding its prune step's weights: ``stopping.starts_after_stop``)."""
        if self.stopping and not after_stop:
            return "stop requested"
        if self.limit is not None and cell is not None and not after_stop:
            refusal = self.limit.base_refusal(cell[1]) if cell[0] == "base" else self.limit.cell_refusal(*cell)
            if refusal is not None:
                return refusal
        self.running[key] = where
        return None

    def stop(self, bases: bool = True) -> None:
        """No task starts from now on, except those that may start after a stop; ``bases``: running base
        fine-tunes end at their next step (:meth:`stops_base`)."""
        self.stopping = True
        self.stop_bases = bases

    def stops_base(self) -> bool:
        """Whether a running base fine-tune should end now (a stop without ``--wait-for-base``)."""
        return self.stopping and self.stop_bases

    def learn(self, what: str, *args) -> None:
        """Add a finished record or base fine-tune to the limit's estimates (``add_record`` or ``add_base`` of its
        :class:`~headprune_bench.benchmark.execution.time_limit.MachineTimes`)."""
        if self.limit is not None:
            getattr(self.limit.times, what)(*args)

    def snapshot(self) -> dict[str, str]:
        """What runs where now: ``{key: where}``."""
        return dict(self.running)
