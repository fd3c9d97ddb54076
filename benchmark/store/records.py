"""The result record of one cell, typed and versioned (``schema``), and the :class:`CellKey` it is stored under
(``task|seed=N|method|budget|condition|opts=HASH``). Old schemas are migrated on read: docs/output-files.md."""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

from headprune_bench.benchmark.config.presets import config_hash
from headprune_bench.benchmark.provenance import UNKNOWN

SCHEMA = 4
"""The schema version :class:`Record` writes (3: ``base_check``, ``provenance.git_dirty`` / ``git_diff`` /
``precision``; 4: ``predictions`` and ``labels`` in the compact form, :func:`compact_ids`)."""
COMPACT_SCHEMA = 4
"""The first schema whose writer stores ``predictions`` and ``labels`` as :func:`compact_ids` strings; a record of an
older schema is written back with the lists it was read with."""
IDS_PREFIX = "ids:"
"""The start of a compact ``predictions`` / ``labels`` string: a string of digits alone would be read as a number
by ``pandas.read_json``."""

# --------------------------------------------------------------------------- shared names (one home each)

ORIGINAL = "original"
"""The method name of the unpruned base model."""
CONTROL_NAME = "control"
"""The report's name of the unpruned model in the ``control`` condition."""
PRUNE_ONLY, RECOVER, CONTROL, OWN = "prune-only", "prune+recover", "control", "own-fine-tuning"
"""Conditions (docs/protocol.md §4): the mask on the base weights, evaluated; the same re-fine-tuned on mini-train with
the mask fixed (the headline); the unpruned base model given that re-fine-tuning (method ``original``, the
headline's reference); a method's own re-trained weights with its mask (AUBER's output as its paper reports it;
only for methods whose ``changes_weights()`` is true)."""
CONDITIONS = (PRUNE_ONLY, RECOVER, CONTROL, OWN)
REUSES_PRUNE = (RECOVER, OWN)
"""Conditions whose cell reuses the prune step of the method's prune-only cell (same mask, same weights); a repair
condition (:func:`repair_condition`) too: :func:`reuses_prune`."""
REPAIR_PREFIX = "prune+"
"""The start of a repair condition, ``prune+<repair>`` (``prune+bias``): the selector's prune-only mask on the base
weights, repaired by a registered repair (``headprune_bench.methods.repairs``) before the dev evaluation."""
NO_REPAIR, FINETUNE = "none", "finetune"
"""The repairs that are conditions of their own: ``none`` is ``prune-only``, ``finetune`` is ``prune+recover``."""


def repair_condition(repair: str) -> str:
    """The condition of a cell whose mask gets ``repair``: ``prune-only`` for ``none``, ``prune+recover`` for
    ``finetune``, else ``prune+<repair>``."""
    return {NO_REPAIR: PRUNE_ONLY, FINETUNE: RECOVER}.get(repair, REPAIR_PREFIX + repair)


def is_repair_condition(condition: str) -> bool:
    """Whether ``condition`` is ``prune+<repair>`` of a training-free repair (not ``prune+recover``)."""
    return condition.startswith(REPAIR_PREFIX) and condition != RECOVER


def repair_of(condition: str) -> str:
    """The repair a condition's model got: ``none`` (prune-only), ``finetune`` (prune+recover, and the control's
    fine-tune), ``own`` (a method's own re-trained weights), or the repair of ``prune+<repair>``."""
    if condition == PRUNE_ONLY:
        return NO_REPAIR
    if condition in (RECOVER, CONTROL):
        return FINETUNE
    if condition == OWN:
        return "own"
    return condition[len(REPAIR_PREFIX):] if is_repair_condition(condition) else condition


def reuses_prune(condition: str) -> bool:
    """Whether a cell of ``condition`` reuses its method's prune-only step (:data:`REUSES_PRUNE` or a repair)."""
    return condition in REUSES_PRUNE or is_repair_condition(condition)


def reuses_mask(condition: str) -> bool:
    """Whether a cell of ``condition`` needs only its method's prune-only mask (not re-trained weights), so that
    a stored prune-only record serves it: ``prune+recover`` and every repair condition."""
    return condition == RECOVER or is_repair_condition(condition)


def weights_of(condition: str) -> str:
    """The weights a condition evaluates (:data:`WEIGHTS`; ``base+<repair>`` for a repair condition)."""
    return f"base+{repair_of(condition)}" if is_repair_condition(condition) else WEIGHTS.get(condition, "")
WEIGHTS = {PRUNE_ONLY: "base", RECOVER: "base+recovery", CONTROL: "base+recovery", OWN: "own"}
"""The weights a condition evaluates (``Record.weights``): the (task, seed)'s fine-tuned base model; that model
re-fine-tuned by the shared recovery recipe; the method's own re-trained weights. An ``own-fine-tuning`` cell
whose method left the weights unchanged (``retrained`` false) records ``base``. Read from protocol-1 records only:
``own+recovery`` (a re-training method's prune+recover cell started from its own weights) and ``unknown``."""
NO_BUDGET = "none"
"""Budget spec of the unpruned model."""
OWN_BUDGET = "own"
"""Budget spec of a method that decides its own head count (``HeadPruner.own_budget``, e.g. AUBER)."""
NO_OPTIONS = "-"
"""Options hash of the unpruned model (it has no options)."""

BASE_DIFFERS = "base_dev_predictions_differ"
"""``Record.trace`` key of a cell computed on a base model that predicts ``N`` dev examples otherwise than the stored
``original`` record of its (task, seed) (``CellWork.base_check``, a
resumed run); absent when none differs or nothing was compared. ``bench report`` warns about such records."""

NOT_RECORDED = "not recorded"
"""What a reader gives for a field that the record's writer did not write (a record of an older schema)."""
BASE_EQUAL, BASE_NOT_COMPARED, BASE_CHECK_FAILED = "equal", "not compared", "check failed"
"""``Record.base_check`` (schema 3): the base model the cell ran on predicted every dev example as the stored
``original`` record of its (task, seed) did; there was no earlier record to compare it with (the (task, seed)'s base
model and its ``original`` cell are this run's); the comparison raised (logged). Otherwise ``differs:N``
(:func:`base_differs_text`): N dev predictions differed (also :data:`BASE_DIFFERS` in the trace)."""


def base_differs_text(differ: int) -> str:
    """``Record.base_check`` of a compared base model: :data:`BASE_EQUAL` for 0, else ``differs:N``."""
    return BASE_EQUAL if differ == 0 else f"differs:{int(differ)}"


SCORE_PASS = "score_pass"
"""``Record.trace`` key of a cell whose mask was derived from another cell's scores (a method that ranks once,
``HeadPruner.ranks_once``, at another budget level): ``{"cell": that cell's key, "prune_wall_s", "forward_examples",
"backward_examples"}``, the score pass's cost, counted in that cell only."""

METRIC_LABEL = {"accuracy": "acc", "matthews_correlation": "MCC", "f1": "F1"}
"""Short label of each GLUE metric in tables."""
METRIC_AXIS = {"accuracy": "accuracy (%)", "matthews_correlation": "MCC × 100", "f1": "F1 (%)"}
"""Axis label of each GLUE metric in plots (scores are shown in percent points, MCC × 100)."""


def options_hash(method: str, options: dict[str, Any] | None) -> str:
    """The ``opts`` part of a cell key: :data:`NO_OPTIONS` for the unpruned model, else the options' hash."""
    return NO_OPTIONS if method == ORIGINAL else config_hash(options or {})


def _protocol1_weights(d: dict[str, Any], condition: str) -> str:
    """The weights a schema-0/1 record evaluated: under protocol 1 a method that re-trains (AUBER; Voita, DSP when
    joint) started every condition from its own weights, so its prune+recover cell evaluated ``own+recovery``;
    ``unknown`` when the method or its options cannot be read any more; else as the condition says."""
    if condition != RECOVER or d.get("method") == ORIGINAL:
        return ""  # (derived from the condition by __post_init__)
    try:
        from headprune_bench import methods
        own = methods.create(d["method"], **(d.get("method_options") or {})).changes_weights()
    except Exception:  # noqa: BLE001 - an unregistered method or an option it no longer has
        return "unknown"
    return "own+recovery" if own else "base+recovery"


def _old_base_check(d: dict[str, Any]) -> str:
    """``base_check`` of a record written without it: ``differs:N`` where its trace holds :data:`BASE_DIFFERS` (the
    check ran and N predictions differed), else :data:`NOT_RECORDED` (it may not have run, or found none)."""
    differ = (d.get("trace") or {}).get(BASE_DIFFERS)
    return base_differs_text(int(differ)) if differ else NOT_RECORDED


def compact_ids(values: list[int]) -> str | list[int]:
    """The stored form of per-example class ids (``predictions``, ``labels``) from schema 4 on: :data:`IDS_PREFIX`
    and one digit per example (``"ids:0110"`` for ``[0, 1, 1, 0]``) when the list is not empty and every value is
    an integer from 0 to 9; else the list itself. One byte an example instead of three, one line still one JSON
    object."""
    if values and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and 0 <= v <= 9 for v in values):
        return IDS_PREFIX + bytes(int(v) + 48 for v in values).decode("ascii")
    return values


def read_ids(value: Any, name: str = "predictions") -> Any:
    """Per-example class ids as a record stores them (field ``name``), read: a :func:`compact_ids` string as the list
    of ints it holds (in a record of any schema); a list (or any other value, which the store refuses) as it is;
    a missing one as ``[]``.

    Raises:
        ValueError: a string that is not :data:`IDS_PREFIX` followed by digits; the message names ``name``.
    """
    if not isinstance(value, str):
        return value or []
    digits = value[len(IDS_PREFIX):]
    if not value.startswith(IDS_PREFIX) or not digits.isascii() or (digits and not digits.isdigit()):
        excerpt = value if len(value) <= 24 else value[:21] + "..."
        raise ValueError(f"{name} {excerpt!r} is neither a list nor {IDS_PREFIX!r} followed by digits")
    return [b - 48 for b in digits.encode("ascii")]


def layers_emptied(mask: list[list[int]]) -> int:
    """How many layers of an ``[L][H]`` 0/1 mask lost every head (0 for an empty mask)."""
    return sum(1 for row in mask if row and not any(row))


# --------------------------------------------------------------------------- the cell key


@dataclass(frozen=True, order=True)
class CellKey:
    """The key of one cell: ``task|seed=N|method|budget|condition|opts=HASH``.

    Attributes:
        task: GLUE task name (``mrpc``).
        seed: the (task, seed) pair's seed.
        method: registered method name, or :data:`ORIGINAL`.
        budget: budget spec (``fraction:0.3``, ``matched:auber``, :data:`OWN_BUDGET`, :data:`NO_BUDGET`).
        condition: one of :data:`CONDITIONS`, or a repair condition ``prune+<repair>`` (:func:`repair_condition`).
        opts: the method options' hash (:func:`options_hash`); ``None`` for keys of the first runner, which had
            no ``opts`` part.
    """

    task: str
    seed: int
    method: str
    budget: str
    condition: str
    opts: str | None = NO_OPTIONS

    def __str__(self) -> str:
        text = f"{self.task}|seed={self.seed}|{self.method}|{self.budget}|{self.condition}"
        return text if self.opts is None else f"{text}|opts={self.opts}"

    @classmethod
    def parse(cls, text: str) -> CellKey:
        """The key of its string form (with or without the ``opts=`` part).

        Raises:
            ValueError: not a cell key; the message quotes it.
        """
        parts = str(text).split("|")
        opts = None
        if len(parts) == 6 and parts[5].startswith("opts="):
            opts = parts.pop()[len("opts="):]
        if len(parts) != 5 or not parts[1].startswith("seed=") or not parts[1][5:].lstrip("-").isdigit():
            raise ValueError(f"{text!r} is not a cell key (task|seed=N|method|budget|condition|opts=HASH)")
        task, seed, method, budget, condition = parts
        return cls(task, int(seed[5:]), method, budget, condition, opts)

    @classmethod
    def of(cls, task: str, seed: int, method: str, budget: str, condition: str,
           options: dict[str, Any] | None) -> CellKey:
        """The key of a cell whose method ran with ``options`` (hashed with :func:`options_hash`)."""
        return cls(task, int(seed), method, budget, condition, options_hash(method, options))


# --------------------------------------------------------------------------- the record


@dataclass
class BudgetInfo:
    """How many heads a cell was asked to prune and pruned.

    Attributes:
        spec: the budget spec the cell is keyed with.
        target: the head count asked for (None when the method decided, or for the unpruned model).
        achieved: heads pruned (0 in the mask).
        note: how the target came about (``matched:auber (auber pruned 46)``, ``decides its own count``, ...).
    """

    spec: str
    target: int | None
    achieved: int
    note: str


@dataclass
class Cost:
    """Cost of a cell: ``wall_s`` (seconds, pruning + any re-fine-tuning + the dev evaluation, not the shared base
    fine-tune), ``prune_wall_s`` (the method alone), ``device`` (``cpu``, ``cuda:0``), examples through forward /
    backward, ``machine`` (the CPU's or GPU's name, :func:`benchmark.provenance.machine_name`) and ``threads``
    (torch's intra-op threads while the cell ran). Records written before ``machine`` and ``threads`` existed
    read as ``""`` and 0: unknown."""

    wall_s: float = math.nan
    prune_wall_s: float = math.nan
    device: str = ""
    forward_examples: int = 0
    backward_examples: int = 0
    machine: str = ""
    threads: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of a record's ``cost``; ``machine`` and ``threads`` only when known, so that a record
        written before they existed writes back as it was read."""
        out = dataclasses.asdict(self)
        for name, unknown in (("machine", ""), ("threads", 0)):
            if out[name] == unknown:
                del out[name]
        return out


@dataclass
class Record:
    """The result of one cell, as stored in ``records.jsonl`` (schemas: docs/output-files.md).

    Scores are fractions (accuracy in [0, 1], MCC in [-1, 1]); ``mask`` and ``scores`` are ``[L][H]`` lists
    (1 keep, 0 prune); ``head_scales`` (``[L][H]`` or None) the kept heads' scales of a scaled mask, which the
    cell's model applies; ``predictions`` and ``labels`` are the dev set's class ids, per example (lists in
    memory; stored as :func:`compact_ids` strings from schema 4).
    """

    task: str
    seed: int
    method: str
    method_options: dict[str, Any]
    condition: str
    budget: BudgetInfo
    heads_total: int
    heads_pruned: int
    mask: list[list[int]]
    scores: list[list[float]] | None
    retrained: bool
    metrics: dict[str, float]
    primary_metric: str
    score: float
    majority_baseline: dict[str, Any]
    degenerate: bool
    degenerate_reason: str | None
    predicted_class_share: float
    predictions: list[int]
    labels: list[int]
    splits: dict[str, int]
    trace: dict[str, Any]
    cost: Cost
    provenance: dict[str, Any]
    started_at: str
    finished_at: str
    base_failed: bool = False
    weights: str = ""
    layers_emptied: int = -1
    cell: str = ""
    head_scales: list[list[float]] | None = None
    base_check: str = NOT_RECORDED
    """Whether the cell's base model was checked against the stored ``original`` record of its (task, seed), and
    how it came out (:data:`BASE_EQUAL`, ``differs:N``, :data:`BASE_NOT_COMPARED`, :data:`BASE_CHECK_FAILED`);
    :data:`NOT_RECORDED` for a record of schema < 3 (``differs:N`` where its trace holds :data:`BASE_DIFFERS`)."""
    schema: int = SCHEMA
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this version does not know (a newer writer's): kept and written back unchanged."""

    def __post_init__(self) -> None:
        if not self.weights:
            self.weights = "base" if self.condition == OWN and not self.retrained else weights_of(self.condition)
        if self.layers_emptied < 0:
            self.layers_emptied = layers_emptied(self.mask)
        if not self.cell:
            self.cell = str(CellKey.of(self.task, self.seed, self.method, self.budget.spec, self.condition,
                                       self.method_options))

    @property
    def repair(self) -> str:
        """The repair the evaluated model got (:func:`repair_of` its condition); its details, for a repair
        condition, are ``trace["repair"]``."""
        return repair_of(self.condition)

    @property
    def key(self) -> CellKey:
        """The parsed cell key."""
        return CellKey.parse(self.cell)

    @property
    def git_dirty(self) -> bool | str:
        """Whether the code's checkout differed from ``provenance.git_commit`` when the run started
        (``provenance.git_dirty``, schema 3); for an older record, that commit's ``+dirty`` suffix. ``unknown``
        where git could not tell, :data:`NOT_RECORDED` for a record without a commit."""
        if "git_dirty" in self.provenance:
            return self.provenance["git_dirty"]
        commit = self.provenance.get("git_commit")
        if not commit:
            return NOT_RECORDED
        return UNKNOWN if commit == UNKNOWN else str(commit).endswith("+dirty")

    @property
    def git_diff(self) -> str | None:
        """The hash of the uncommitted changes the run started from (``provenance.git_diff``, schema 3; None for a
        clean checkout); for an older record, None when it was clean, else :data:`NOT_RECORDED` (or ``unknown``)."""
        if "git_diff" in self.provenance:
            return self.provenance["git_diff"]
        dirty = self.git_dirty
        return None if dirty is False else NOT_RECORDED if dirty is True else dirty

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``records.jsonl`` (the runner's keys; unknown fields kept)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        if self.head_scales is None:  # only a scaled mask writes the field
            del out["head_scales"]
        if self.schema < 3 or self.base_check == NOT_RECORDED:  # derived on read: an old record writes back as read
            del out["base_check"]
        if self.schema >= COMPACT_SCHEMA:  # an older record writes back the lists it was read with
            out["predictions"], out["labels"] = compact_ids(self.predictions), compact_ids(self.labels)
        out["budget"] = dataclasses.asdict(self.budget)
        out["cost"] = self.cost.as_dict()
        return {**self.extra, **out}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        """Read a record of any schema so far, migrating old fields (docs/choices.md, "Record schemas").

        Raises:
            ValueError: a field the record cannot do without (task, seed, method, condition, score, ...) is
                missing; the message names it.
        """
        d = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        missing = [k for k in ("task", "seed", "method", "condition", "score", "primary_metric") if k not in d]
        if missing:
            raise ValueError(f"record without {', '.join(missing)}: not a cell's record")
        budget = d.get("budget") or {}
        cost = dict(d.get("cost") or {})
        schema = int(d.get("schema", 0))
        condition = d["condition"]
        if schema < 2 and condition == PRUNE_ONLY and d.get("retrained"):  # protocol 1: its own weights
            condition = OWN
        metrics = d.get("metrics") or {d["primary_metric"]: d["score"]}
        return cls(
            task=d["task"], seed=int(d["seed"]), method=d["method"], method_options=d.get("method_options") or {},
            condition=condition,
            budget=BudgetInfo(spec=budget.get("spec", NO_BUDGET), target=budget.get("target"),
                              achieved=int(budget.get("achieved", d.get("heads_pruned", 0))),
                              note=budget.get("note", "")),
            heads_total=d.get("heads_total", 0), heads_pruned=d.get("heads_pruned", budget.get("achieved", 0)),
            mask=d.get("mask") or [], scores=d.get("scores"), retrained=bool(d.get("retrained", False)),
            metrics=metrics, primary_metric=d["primary_metric"], score=float(d["score"]),
            majority_baseline=d.get("majority_baseline") or {}, degenerate=bool(d.get("degenerate", False)),
            degenerate_reason=d.get("degenerate_reason"),
            predicted_class_share=float(d.get("predicted_class_share", math.nan)),
            predictions=read_ids(d.get("predictions")), labels=read_ids(d.get("labels"), "labels"),
            splits=d.get("splits") or {}, trace=d.get("trace") or {},
            cost=Cost(**{k: cost[k] for k in ("wall_s", "prune_wall_s", "device", "forward_examples",
                                              "backward_examples", "machine", "threads") if k in cost}),
            provenance=d.get("provenance") or {}, started_at=d.get("started_at", ""),
            finished_at=d.get("finished_at", ""), base_failed=bool(d.get("base_failed", False)),
            weights=d.get("weights", "") if schema >= 2 else _protocol1_weights(d, condition),
            layers_emptied=int(d.get("layers_emptied", -1)), head_scales=d.get("head_scales"),
            base_check=str(d.get("base_check") or _old_base_check(d)),
            cell=d.get("cell") or str(CellKey(d["task"], int(d["seed"]), d["method"],
                                              budget.get("spec", NO_BUDGET), d["condition"], None)),
            schema=schema,
            extra={k: v for k, v in d.items() if k not in known},
        )
