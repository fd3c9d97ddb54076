"""``finetune``: the shared recovery fine-tune with the mask fixed (the prune+recover condition, docs/protocol.md
§4), as a repair."""
from __future__ import annotations

import copy

import torch
from torch import nn

from headprune_bench.methods.registry import register_repair
from headprune_bench.methods.repair import Repair, RepairContext, RepairResult


@register_repair
class FinetuneRepair(Repair):
    """Re-fine-tune a copy of the model with the mask fixed by ``context.fine_tune`` (the run's recovery recipe;
    its data is the caller's mini-train split, not the calibration sample). ``bench run`` records this repair as
    the ``prune+recover`` condition."""

    name = "finetune"
    summary = "the shared one-epoch recovery fine-tune with the mask fixed (prune+recover)"
    needs_calibration = False
    retrains = True

    def repair(self, model: nn.Module, mask: torch.Tensor, context: RepairContext) -> RepairResult:
        """A :class:`RepairResult` whose ``model`` is the re-trained copy.

        Raises:
            ValueError: ``context.fine_tune`` is None.
        """
        if context.fine_tune is None:
            raise ValueError("repair 'finetune' needs a fine-tune callable (RepairContext.fine_tune); none was given")
        tuned = context.fine_tune(copy.deepcopy(model), mask)
        return RepairResult(model=tuned)
