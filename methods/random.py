"""Random pruning, the baseline every method must beat (no official code). See docs/methods.md ("Random")."""
from __future__ import annotations

import torch
from torch import nn

from headprune_bench.methods.base import HeadPruner, PruningContext, PruningResult
from headprune_bench.methods.options import Interval
from headprune_bench.methods.registry import register


@register
class RandomPruner(HeadPruner):
    """Prune ``context.target_heads`` heads drawn uniformly without replacement; the mask depends on the seed only.

    Options: min_heads_per_layer (int, 0): never leave a layer with fewer heads. per_layer (bool, True): with
    ``context.target_per_layer``, draw that many heads in each layer instead of one global draw.
    Precision: no pass over the model, so ``--precision`` changes nothing here.
    """

    name = "random"
    report_order, report_color = 10, "#AAAAAA"
    summary = "uniform random heads without replacement (baseline; seeded)"
    defaults = {"min_heads_per_layer": 0, "per_layer": True}
    constraints = {"min_heads_per_layer": Interval(0, None)}

    def ranks_once(self) -> bool:
        """True: the draw order does not depend on the target (a per-layer target is drawn anew)."""
        return True

    def mask_at(self, result: PruningResult, target_heads: int) -> PruningResult:
        """The first ``target_heads`` heads of ``result``'s draw (its ``scores``), skipping floored layers."""
        if result.trace.get("mode") != "global":
            raise ValueError("random: mask_at continues a global draw, not a per-layer one")
        return super().mask_at(result, target_heads)

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """The ``[L, H]`` mask; ``scores`` = each head's rank in the draw (pruned first = lowest).

        Raises:
            ValueError: no budget, or a target unreachable under ``min_heads_per_layer``.
        """
        if context.target_heads is None and context.target_per_layer is None:
            raise ValueError("method 'random' needs a budget: give --budget heads:K, fraction:F or matched:METHOD")
        gen = context.generator(salt=101)
        num_layers, num_heads = context.num_layers, context.num_heads
        mask = torch.ones(num_layers, num_heads)
        # the rank as score: a floor applied after pruning (--min-heads-per-layer) continues the same draw
        scores = torch.zeros(num_layers, num_heads)
        if context.target_per_layer is not None and self.options["per_layer"]:
            for layer, k in enumerate(context.target_per_layer):
                if not 0 <= k <= num_heads - self.options["min_heads_per_layer"]:
                    raise ValueError(f"layer {layer}: cannot prune {k} of {num_heads} heads")
                order = torch.randperm(num_heads, generator=gen)
                mask[layer, order[:k]] = 0
                scores[layer, order] = torch.arange(num_heads, dtype=torch.float32)
            return PruningResult(mask=mask, scores=scores, trace={"mode": "per-layer"})
        k = int(context.target_heads)
        floor = self.options["min_heads_per_layer"]
        if not 0 <= k <= num_layers * (num_heads - floor):
            raise ValueError(
                f"method 'random': cannot prune {k} heads of {num_layers}x{num_heads} keeping {floor} per layer"
            )
        pruned = 0
        order = torch.randperm(num_layers * num_heads, generator=gen)
        scores.view(-1)[order] = torch.arange(num_layers * num_heads, dtype=torch.float32)
        for idx in order.tolist():
            if pruned == k:
                break
            layer, head = divmod(idx, num_heads)
            if mask[layer].sum() - 1 < floor:
                continue
            mask[layer, head] = 0
            pruned += 1
        return PruningResult(mask=mask, scores=scores, trace={"mode": "global"})
