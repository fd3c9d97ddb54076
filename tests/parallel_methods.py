"""Test-only methods for the Ray tests (``test_parallel.py``), in their own module so that a ``bench run``
subprocess can register them too (``python -c "import parallel_methods; ..."`` with ``tests/`` on the path).

Ray workers cannot import this module (``tests/`` is not on their path); it is pickled by value, so its classes
travel to the workers inside :class:`~headprune_bench.benchmark.cells.work.CellWork`, as a user's own registered method would.
"""
from __future__ import annotations

import os
import signal
import sys
import time
import warnings

import torch
from ray import cloudpickle  # the cloudpickle Ray serialises with

from headprune_bench.methods import HeadPruner, PruningResult, register

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SETTER_SLEEP_S = 2.0
LOG_LINE = "a log line from the prune step"
WARNING = "a warning from the prune step"


@register
class SlowSetter(HeadPruner):
    """Decides its own count, like AUBER, after :data:`SETTER_SLEEP_S` seconds: prunes heads 1, 3, 5, 7, 9, 11 of
    layer 0 and head 0 of layer 5 (7 heads). As the setter of ``matched:test-slow-setter`` it makes a cell that
    did not wait for it start visibly earlier than it finished. Logs :data:`LOG_LINE` and warns :data:`WARNING`."""

    name = "test-slow-setter"
    summary = "test only: decides its own head count, slowly"
    needs_target = False
    exact_budget = False

    def prune(self, model, context):
        time.sleep(SETTER_SLEEP_S)
        context.log(f"{self.name}: {LOG_LINE}")
        warnings.warn(f"{self.name}: {WARNING}")
        mask = torch.ones(context.num_layers, context.num_heads)
        mask[0, 1::2] = 0
        mask[5, 0] = 0
        return PruningResult(mask=mask)


@register
class Raises(HeadPruner):
    """Raises in its prune step."""

    name = "test-raises"
    summary = "test only: its prune step raises"
    needs_target = False
    exact_budget = False

    def prune(self, model, context):
        raise RuntimeError("deliberate failure in the prune step")


@register
class KillsItsProcess(HeadPruner):
    """Ends the process it runs in (``os._exit``), as a worker killed by the OOM killer or a segfault would."""

    name = "test-kills-process"
    summary = "test only: its prune step ends the process"
    needs_target = False
    exact_budget = False

    def prune(self, model, context):
        os._exit(3)


@register
class RequestsStop(HeadPruner):
    """Sends SIGINT (a Ctrl-C) to the process whose pid is in the file of option ``pid_file`` (the run's driver),
    then keeps running for ``seconds``: the stop arrives while this cell runs, which must still be written. With
    ``retrained`` it returns its model as re-trained weights (as AUBER does), so the run plans its ``own-fine-tuning``
    cell too."""

    name = "test-requests-stop"
    summary = "test only: its prune step presses Ctrl-C on the driver, then finishes"
    needs_target = False
    exact_budget = False
    defaults = {"pid_file": "", "seconds": 2.0, "retrained": False}

    def changes_weights(self) -> bool:
        return bool(self.options["retrained"])

    def prune(self, model, context):
        os.kill(int(open(self.options["pid_file"]).read()), signal.SIGINT)
        time.sleep(self.options["seconds"])
        mask = torch.ones(context.num_layers, context.num_heads)
        mask[0, 0] = 0
        if self.options["retrained"]:
            return PruningResult(mask=mask, retrained=True, model=model)
        return PruningResult(mask=mask)


@register
class SlowRetrainer(HeadPruner):
    """Prunes head 0 of layer 0 after ``seconds`` and returns its model as re-trained weights (as AUBER does), so
    the run plans an ``own-fine-tuning`` cell that reuses this prune step."""

    name = "test-slow-retrainer"
    summary = "test only: returns its own weights, slowly"
    needs_target = False
    exact_budget = False
    defaults = {"seconds": 3.0}

    def changes_weights(self) -> bool:
        return True

    def prune(self, model, context):
        time.sleep(self.options["seconds"])
        mask = torch.ones(context.num_layers, context.num_heads)
        mask[0, 0] = 0
        return PruningResult(mask=mask, retrained=True, model=model)
