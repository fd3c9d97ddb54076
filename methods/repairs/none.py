"""``none``: the pruned heads are zeroed and nothing else changes (the prune-only condition)."""
from __future__ import annotations

import torch
from torch import nn

from headprune_bench.methods.registry import register_repair
from headprune_bench.methods.repair import Repair, RepairContext, RepairResult


@register_repair
class NoRepair(Repair):
    """No repair: the masked base model as it is (docs/protocol.md §9: a pruned head contributes zero, the output
    bias stays)."""

    name = "none"
    summary = "no repair: the pruned heads are zeroed, nothing else changes (prune-only)"
    needs_calibration = False

    def repair(self, model: nn.Module, mask: torch.Tensor, context: RepairContext) -> RepairResult:
        """An empty :class:`RepairResult`."""
        return RepairResult()
