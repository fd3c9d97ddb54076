"""A sweep's shared score pass: a method that ranks once (``HeadPruner.ranks_once``) scores a (task, seed) in one
cell, and its cells at the other budget levels derive their masks from those scores (``HeadPruner.mask_at``)."""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

import torch

from headprune_bench.benchmark.store.records import SCORE_PASS, Record
from headprune_bench.methods.base import HeadPruner, PruningResult, apply_layer_floor

FLOOR_TRACE = "layer_floor"
"""Trace key of the per-layer floor's moves (``cells.work.with_floor``)."""


def with_floor(result: PruningResult, floor: int) -> PruningResult:
    """``result`` with its mask moved to the per-layer floor (:func:`methods.base.apply_layer_floor`; unchanged
    without a floor); the trace's ``layer_floor`` says which heads were restored and which pruned instead."""
    if not floor:
        return result
    mask, moves = apply_layer_floor(result.mask, result.scores, floor)
    scales = result.head_scales
    if scales is not None:  # a restored head comes back whole; a head pruned instead loses its scale
        scales = torch.where(mask == 1, torch.where(result.mask == 1, scales.double(), 1.0), 0.0)
    return PruningResult(mask=mask, scores=result.scores, retrained=result.retrained, model=result.model,
                         trace={**result.trace, FLOOR_TRACE: {"min_heads": floor, **moves}}, head_scales=scales)


@dataclass
class ScorePass:
    """The prune result a ranks-once method's other levels derive from.

    Attributes:
        result: the method's own result (before the per-layer floor) in the cell that scored.
        cell: that cell's key. prune_s: its prune seconds. cost: its ``forward_examples`` / ``backward_examples``.
    """

    result: PruningResult
    cell: str
    prune_s: float
    cost: dict[str, int]

    def trace(self) -> dict[str, Any]:
        """What a derived cell's record says of the pass (:data:`~benchmark.store.records.SCORE_PASS`)."""
        return {"cell": self.cell, "prune_wall_s": round(self.prune_s, 3), **self.cost}

    def derive(self, pruner: HeadPruner, target: int, floor: int) -> tuple[PruningResult, float]:
        """(the result at ``target`` heads with the floor applied and the pass named in its trace, seconds taken)."""
        start = time.time()
        result = with_floor(pruner.mask_at(self.result, target), floor)
        result.trace = {**result.trace, SCORE_PASS: self.trace()}
        return result, time.time() - start


def stored_pass(record: dict[str, Any], pruner: HeadPruner, floor: int) -> ScorePass | None:
    """The score pass a stored prune-only record of another level holds, or None when its scores do not give back
    its own mask (``mask_at`` at its own count, with the floor), e.g. scores rounded to float32 into a tie."""
    r = Record.from_dict(record)
    if r.scores is None or r.trace.get(SCORE_PASS) or r.budget.achieved is None:
        return None
    trace = {k: v for k, v in copy.deepcopy(r.trace).items() if k != FLOOR_TRACE}
    own = PruningResult(mask=torch.tensor(r.mask, dtype=torch.float32),
                        scores=torch.tensor(r.scores, dtype=torch.float32), trace=trace)
    try:
        again = with_floor(pruner.mask_at(own, r.budget.achieved), floor)
    except ValueError:
        return None
    if not torch.equal(again.mask, own.mask):
        return None
    cost = {"forward_examples": max(0, r.cost.forward_examples - int(r.splits.get("dev", 0))),
            "backward_examples": r.cost.backward_examples}
    return ScorePass(own, record.get("cell") or r.cell, float(r.cost.prune_wall_s), cost)
