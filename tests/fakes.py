"""Test-only methods (fake pruners), registered when this module is imported: ``import fakes`` (``tests/`` is on
the path of every test, as the folder of ``tests/conftest.py``), then name them like any method
(``--methods test-raises``). Their names all start with ``test-``; ``shipped_methods()`` leaves them out.

* for the runner (``test_runner.py``, ``test_reliability.py``): :class:`SelfBudgeted`, :class:`Retrains`,
  :class:`CountsPrunes`, :class:`EmptiesLayerZero`, :class:`OwnBudget`;
* for the cells on Ray (``test_parallel.py``): :class:`SlowSetter`, :class:`Raises`, :class:`KillsItsProcess`,
  :class:`RequestsStop`, :class:`SlowRetrainer`;
* for the conformance check (``test_methods.py``, ``test_reliability.py``): :class:`LastHeads`, :class:`Vandal`,
  :class:`Dice`, :class:`Unchecked`.

Ray workers cannot import this module (``tests/`` is not on their path); it is pickled by value, so its classes
travel to the workers inside :class:`~headprune_bench.benchmark.cells.work.CellWork`, as a user's own registered
method would. A ``bench run`` subprocess registers them too with ``tests/`` on its path
(``python -c "import fakes; ..."``, :data:`TESTS_DIR`).
"""
from __future__ import annotations

import copy
import os
import signal
import sys
import time
import warnings
from pathlib import Path

import torch

from headprune_bench.methods import HeadPruner, PruningResult, register

try:
    from ray import cloudpickle  # the cloudpickle Ray serialises with
except ImportError:  # Ray is an optional extra: only the tests of cells on Ray need it
    pass
else:
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: The folder of this module: put it on ``PYTHONPATH`` for a subprocess that imports it.
TESTS_DIR = Path(__file__).resolve().parent

SETTER_SLEEP_S = 2.0
LOG_LINE = "a log line from the prune step"
WARNING = "a warning from the prune step"


# --------------------------------------------------------------------------- the runner


@register
class SelfBudgeted(HeadPruner):
    """Decides its own count, like AUBER (a budget setter: ``matched:test-self-budgeted``): prunes the heads of
    layer 0 whose index is odd, and head 0 of layer 5 (7 heads)."""

    name = "test-self-budgeted"
    summary = "test only: decides its own head count"
    needs_target = False
    exact_budget = False

    def prune(self, model, context):
        mask = torch.ones(context.num_layers, context.num_heads)
        mask[0, 1::2] = 0
        mask[5, 0] = 0
        return PruningResult(mask=mask)


@register
class Retrains(SelfBudgeted):
    """Like AUBER: decides its own count (the mask of :class:`SelfBudgeted`) and returns re-trained weights: the
    base model with the classifier's bias of class 0 raised by 100, so its own weights predict class 0 for every
    example while the base model with the same mask does not."""

    name = "test-retrains"

    def changes_weights(self):
        return True

    def prune(self, model, context):
        own = copy.deepcopy(model)
        with torch.no_grad():
            own.classifier.bias[0] += 100.0
        return PruningResult(mask=super().prune(model, context).mask, retrained=True, model=own)


@register
class CountsPrunes(Retrains):
    """:class:`Retrains`, counting its prune steps."""

    name = "test-counts-prunes"
    calls = 0

    def prune(self, model, context):
        type(self).calls += 1
        return super().prune(model, context)


@register
class EmptiesLayerZero(HeadPruner):
    """Prunes every head of layer 0 (12 heads), scores rising with the head index."""

    name = "test-empties-layer"
    summary = "test only: empties layer 0"
    needs_target = False
    exact_budget = False

    def prune(self, model, context):
        mask = torch.ones(context.num_layers, context.num_heads)
        mask[0] = 0
        scores = torch.arange(context.total_heads, dtype=torch.float32).view(context.num_layers, context.num_heads)
        return PruningResult(mask=mask, scores=scores)


@register
class OwnBudget(SelfBudgeted):
    """Like AUBER: never reads the target, so one cell per (task, seed) serves every budget of the folder."""

    name = "test-own-budget"
    own_budget = True
    calls = 0

    def prune(self, model, context):
        assert context.target_heads is None, "an own-budget method must not be handed a target"
        type(self).calls += 1
        return super().prune(model, context)


# --------------------------------------------------------------------------- cells on Ray


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
        warnings.warn(f"{self.name}: {WARNING}")  # noqa: B028 (as a user's method would)
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


# --------------------------------------------------------------------------- the conformance check


@register
class LastHeads(HeadPruner):
    """What docs/extending.md's 'Adding a method' shows: a class and @register (its test runs check_pruner on it)."""

    name = "test-last-heads"
    summary = "prunes the last heads in flat order (test only)"
    defaults = {}

    def prune(self, model, context):
        mask = torch.ones(context.num_layers, context.num_heads)
        mask.view(-1)[context.total_heads - context.target_heads:] = 0
        return PruningResult(mask=mask)


@register
class Vandal(HeadPruner):
    """Edits the base model without saying it re-trained: the conformance check must catch it."""

    name = "test-vandal"
    summary = "zeroes a weight without saying it re-trained (test only)"

    def prune(self, model, context):
        with torch.no_grad():
            next(model.parameters()).zero_()
        mask = torch.ones(context.num_layers, context.num_heads)
        mask[0, : context.target_heads] = 0
        return PruningResult(mask=mask)


@register
class Dice(HeadPruner):
    """Draws its mask from the global RNG, not ``context.seed``: the conformance check must catch it."""

    name = "test-dice"
    summary = "uses the global RNG (test only)"

    def prune(self, model, context):
        mask = torch.ones(context.total_heads)
        mask[torch.randperm(context.total_heads)[: context.target_heads]] = 0
        return PruningResult(mask=mask.view(context.num_layers, context.num_heads))


@register
class Unchecked(HeadPruner):
    """An int option without a declared range (``constraints`` empty): the conformance check must catch it. A test
    that declares one sets ``constraints`` with ``monkeypatch``, so the class stays as written here."""

    name = "test-unchecked-option"
    summary = "an int option with no declared range (test only)"
    defaults = {"passes": 3}

    def prune(self, model, context):  # pragma: no cover
        return PruningResult(mask=torch.ones(context.num_layers, context.num_heads))
