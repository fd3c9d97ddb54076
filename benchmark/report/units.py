"""The rows of the report's tables (:class:`Unit`) and how tasks, budgets and methods are named, ordered and
coloured (methods by their registered classes' ``report_order`` and ``report_color``). See docs/choices.md
("Reports")."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from headprune_bench.benchmark.store.records import (
    CONTROL,
    CONTROL_NAME,
    NO_BUDGET,
    ORIGINAL,
    OWN,
    PRUNE_ONLY,
    RECOVER,
    is_repair_condition,
    repair_of,
)

TASK_ORDER = ("mrpc", "cola", "rte", "wnli")
EXCLUDED_FROM_AVERAGE = ("wnli",)
"""Tasks left out of cross-task averages (WNLI's dev set is adversarial)."""

#: Okabe & Ito (2008) colour-blind-safe palette.
OKABE_ITO = {"black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "green": "#009E73",
             "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7"}
#: Colours of the report's own rows (the methods' colours are their classes' ``report_color``).
REPORT_COLORS = {ORIGINAL: OKABE_ITO["black"], CONTROL_NAME: "#777777"}
#: For methods without a colour (ablations, new methods): Paul Tol's colour-blind-safe "muted" scheme less kwon's
#: wine (the first four at least 25 in CIE76 from every method's fixed colour), then Okabe-Ito yellow.
EXTRA_COLORS = ("#332288", "#999933", "#DDCC77", "#AA4499", "#117733", "#CC6677", "#44AA99", "#88CCEE",
                OKABE_ITO["yellow"])


CONDITION_SUFFIX = {RECOVER: " +recover", OWN: ", own fine-tuning"}
"""What a row's name adds for its condition (prune-only and control add nothing)."""


def condition_group(condition: str) -> str:
    """The condition group a record of ``condition`` is in: ``prune+recover`` (with control and own weights), a
    repair condition its own, else ``prune-only``."""
    if is_repair_condition(condition):
        return condition
    return RECOVER if condition in (RECOVER, CONTROL, OWN) else PRUNE_ONLY


def condition_suffix(condition: str) -> str:
    """:data:`CONDITION_SUFFIX` of ``condition``; `` +REPAIR`` for a repair condition (``prune+bias``: `` +bias``)."""
    return f" +{repair_of(condition)}" if is_repair_condition(condition) else CONDITION_SUFFIX.get(condition, "")


def task_key(task: str) -> tuple:
    """Sort key of a task: :data:`TASK_ORDER` first, then other tasks by name."""
    return (TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER), task)


def task_label(task: str) -> str:
    """GLUE's spelling of a task name (``cola`` -> ``CoLA``); an unknown task in capitals."""
    from headprune_bench.benchmark.tasks import TASKS

    return TASKS[task].glue_dir if task in TASKS else task.upper()


def budget_key(spec: str) -> tuple:
    """Sort key of a budget spec: none, fractions, head counts, matched, others; numbers ascending."""
    kind, _, value = str(spec).partition(":")
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    order = {NO_BUDGET: 0, "fraction": 1, "heads": 2, "matched": 3}.get(kind, 4)
    return (order, 0 if math.isnan(number) else number, value)


def short_budget(spec: str) -> str:
    """``fraction:0.3`` -> ``30%``, ``heads:12`` -> ``12 heads``, ``matched:auber`` -> ``= auber``,
    ``none`` -> ``''``."""
    kind, _, value = str(spec).partition(":")
    if kind == NO_BUDGET or not spec:
        return ""
    if kind == "fraction":
        try:
            return f"{100 * float(value):g}%"
        except ValueError:
            return spec
    if kind == "heads":
        return f"{value} heads"
    if kind == "matched":
        return f"= {value}"
    return spec


# --------------------------------------------------------------------------- methods, from the registry


def _registry() -> dict[str, Any]:
    from headprune_bench import methods
    return methods.available_methods()


def method_rank(name: str, registry: dict[str, Any] | None = None) -> tuple:
    """Sort key of a method name: ``original``, ``control``, then registered methods by ``report_order``, each
    followed by its ablations (by name), then methods without an order or not registered, by name. Never raises.
    """
    if name in (ORIGINAL, CONTROL_NAME):
        return (0 if name == ORIGINAL else 1, 0.0, "", 0, "")
    registry = _registry() if registry is None else registry
    cls = registry.get(name)
    ablated = getattr(cls, "ablation_of", None) if cls is not None else None
    head = ablated or name
    order = getattr(registry.get(head), "report_order", None)
    group = 3 if order is None else 2
    return (group, 0.0 if order is None else float(order), head, 1 if ablated else 0, name)


def ablation_parent(name: str, registry: dict[str, Any] | None = None) -> str | None:
    """The method ``name`` is an ablation of (its registered class's ``ablation_of``), or None: not an ablation,
    not registered, or a report row (original, control)."""
    if name in (ORIGINAL, CONTROL_NAME):
        return None
    cls = (_registry() if registry is None else registry).get(name)
    return getattr(cls, "ablation_of", None) if cls is not None else None


def _fixed_color(name: str, registry: dict[str, Any]) -> str | None:
    return REPORT_COLORS.get(name) or getattr(registry.get(name), "report_color", None)


def method_colors() -> dict[str, str]:
    """The fixed colours: ``original``, ``control`` and every registered method with a ``report_color``."""
    registry = _registry()
    return {**REPORT_COLORS, **{n: c for n in registry if (c := _fixed_color(n, registry))}}


def method_color(name: str, known: Sequence[str] = ()) -> str:
    """Colour of a method (same in every plot): its fixed colour, else one of :data:`EXTRA_COLORS` by its rank
    among the methods of ``known`` (and itself) that have no fixed colour."""
    registry = _registry()
    fixed = _fixed_color(name, registry)
    if fixed:
        return fixed
    extras = sorted({m for m in known if not _fixed_color(m, registry)} | {name},
                    key=lambda m: method_rank(m, registry))
    return EXTRA_COLORS[extras.index(name) % len(EXTRA_COLORS)]


def sorted_methods(names: Sequence[str]) -> list[str]:
    """``names`` once each, in the report's method order (:func:`method_rank`)."""
    registry = _registry()
    return sorted(set(names), key=lambda m: method_rank(m, registry))


# --------------------------------------------------------------------------- units


@dataclass(frozen=True)
class Unit:
    """A row of a table: (method, budget spec, condition[, options hash]).

    ``name`` is the method, or ``"control"`` for the unpruned model in the control condition; ``opts`` is set
    only where the method ran with several option sets in the report's folders.
    """

    name: str
    method: str
    budget: str
    condition: str
    opts: str | None = None

    @property
    def row_name(self) -> str:
        """The name a table row shows: the method, ``METHOD +recover`` in prune+recover, ``METHOD, own
        fine-tuning`` for a method's own weights (docs/protocol.md §4), with ``opts=HASH`` where several option
        sets ran."""
        text = self.name + condition_suffix(self.condition)
        return text + (f" opts={self.opts}" if self.opts else "")

    @property
    def label(self) -> str:
        """Human label, e.g. ``michel [fraction:0.3]``, ``auber [own] +recover``, ``auber [own], own fine-tuning``."""
        text = self.name
        if self.budget not in (NO_BUDGET, ""):
            text += f" [{self.budget}]"
        if self.opts:
            text += f" opts={self.opts}"
        return text + condition_suffix(self.condition)

    @property
    def sort_key(self) -> tuple:
        """Sort key of a row: original, control, then by method, budget, options hash and condition."""
        cond = {PRUNE_ONLY: 0, CONTROL: 1, RECOVER: 2, OWN: 3}.get(self.condition, 4)
        original_first = 0 if self.name == ORIGINAL else 1 if self.name == CONTROL_NAME else 2
        return (original_first, method_rank(self.name), budget_key(self.budget), self.opts or "", cond)

    def group(self) -> str:
        """The condition group whose table holds this row: prune+recover (with control and the methods' own
        weights) or prune-only."""
        return condition_group(self.condition)


def sorted_units(units: Sequence[Unit]) -> list[Unit]:
    """``units`` once each (first occurrence), in table order (:attr:`Unit.sort_key`)."""
    return sorted(dict.fromkeys(units), key=lambda u: u.sort_key)
