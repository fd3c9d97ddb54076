"""FLAP's head selection (An, Zhao, Yu, Tang, Wang, "Fluctuation-based Adaptive Structured Pruning for Large
Language Models", AAAI 2024; CASIA-IVA-Lab/FLAP ``lib/prune.py``, ``lib/layerwrapper.py``), heads only: the
standardised weighted fluctuation of each head's channels at the input of W_O, ranked globally (AL) or per layer
(UL). FLAP's bias compensation is a repair of its own, not applied here. See docs/methods.md ("FLAP (An et al.
2024)")."""
from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch
from torch import nn

from headprune_bench.methods.base import HeadPruner, PruningContext, PruningResult, lowest_k_mask, model_inputs
from headprune_bench.methods.heads import get_layout
from headprune_bench.methods.options import Interval, OptionError
from headprune_bench.methods.registry import register

STRUCTURES = ("AL", "UL")
SALT_SAMPLE = 4_000
DEPARTURES = ("task_train_sample", "non_padding_tokens", "exact_token_variance", "float64_statistics",
              "rank_exact_k", "heads_only", "no_bias_compensation")
"""Departures from the official code that always apply (docs/methods.md, "FLAP (An et al. 2024)", says why)."""


class ChannelMoments:
    """Token count, mean and sum of squared deviations of ``width`` channels, merged batch by batch in float64
    (Chan, Golub, LeVeque's pairwise update)."""

    def __init__(self, width: int):
        self.count = 0
        self.mean = torch.zeros(width, dtype=torch.float64)
        self.m2 = torch.zeros(width, dtype=torch.float64)

    def add(self, rows: torch.Tensor) -> None:
        """Merge ``rows`` (``[n, width]``, any float dtype) into the moments."""
        rows = rows.detach().to("cpu", torch.float64)
        n = rows.shape[0]
        if n == 0:
            return
        mean = rows.mean(dim=0)
        m2 = ((rows - mean) ** 2).sum(dim=0)
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta ** 2 * (self.count * n / total)
        self.count = total

    def variance(self) -> torch.Tensor:
        """The unbiased variance ``[width]``; needs at least 2 tokens."""
        return self.m2 / (self.count - 1)


def output_projection_moments(model: nn.Module, batches, autocast=None) -> list[ChannelMoments]:
    """Per layer, the moments of W_O's input u ``[B, T, H*d]`` over the non-padding tokens of ``batches`` (dense
    model, one forward pre-hook per layer, eval mode, no gradients; ``autocast``: the context's, or None)."""
    layout = get_layout(model)
    width = layout.num_heads * layout.head_size
    moments = [ChannelMoments(width) for _ in range(layout.num_layers)]
    current: dict[str, torch.Tensor] = {}

    def hook_for(layer: int):
        def hook(module, args):
            u = args[0]
            moments[layer].add(u[current["tokens"]].reshape(-1, u.shape[-1]))
        return hook

    handles = [layout.output_dense(layer).register_forward_pre_hook(hook_for(layer))
               for layer in range(layout.num_layers)]
    try:
        with torch.no_grad():
            for batch in batches:
                current["tokens"] = batch["attention_mask"].bool()
                with autocast() if autocast is not None else contextlib.nullcontext():
                    model(**model_inputs(batch))
    finally:
        for handle in handles:
            handle.remove()
    return moments


def head_scores(moments: list[ChannelMoments], out_weights: list[torch.Tensor],
                num_heads: int) -> tuple[torch.Tensor, list[int]]:
    """FLAP's attention metric per head, float64 ``[L, H]`` (higher = keep): per layer a_j = (sigma^2_j *
    sum_i W_O[i, j]^2)^2, standardised over the layer's channels (unbiased std), then averaged over each head's
    channels. ``out_weights``: each layer's W_O weight ``[hidden, H*d]``. Also returns the layers whose a_j are
    all equal (no spread to standardise by): their z are set to 0."""
    rows, flat = [], []
    for layer, (stats, weight) in enumerate(zip(moments, out_weights, strict=True)):
        column_energy = (weight.detach().to("cpu", torch.float64) ** 2).sum(dim=0)
        a = (stats.variance() * column_energy) ** 2
        std = a.std()
        if float(std) > 0:
            z = (a - a.mean()) / std
        else:
            z = torch.zeros_like(a)
            flat.append(layer)
        rows.append(z.view(num_heads, -1).mean(dim=1))
    return torch.stack(rows), flat


@register
class FlapPruner(HeadPruner):
    """FLAP's fluctuation metric for heads (WIFV, squared for attention, standardised per layer; official
    ``lib/prune.py`` ``prune_flap``), from one dense pass over a calibration sample of the train split.

    Options: sample_size (int, 1024): examples drawn without replacement with the cell's seed (all when the split
    is smaller); batch_size (int, 32): examples per forward pass (the scores do not depend on it beyond
    round-off); structure (str, "AL": the K lowest scores over all layers; "UL": K/L per layer, so L must divide
    K). ``scores`` = the float64 ``[L, H]`` standardised metric (a mean of z-scores, unitless). The mask is binary
    and the weights are untouched. Raises OptionError for a bad option, or for UL with K not a multiple of L.
    Precision: the forward pass under ``context.autocast``; the statistics in float64.
    """

    name = "flap"
    report_order, report_color = 80, "#225522"  # (Paul Tol's dark green)
    summary = "FLAP (An et al. 2024): prune heads of lowest standardised weighted fluctuation at W_O's input"
    defaults = {"sample_size": 1024, "batch_size": 32, "structure": "AL"}
    constraints = {"sample_size": Interval(1, None), "batch_size": Interval(1, None), "structure": STRUCTURES}
    conformance_options = {"sample_size": 32, "batch_size": 16}
    in_methods_all = False  # not in `--methods all` until the lead adds it to the main job (name it explicitly)

    def ranks_once(self) -> bool:
        """True for AL (one global ranking of target-free scores); UL's per-layer count depends on K."""
        return self.options["structure"] == "AL"

    def check_setup(self, num_layers: int, num_heads: int, target_heads: int | None, model_config: Any) -> None:
        """UL needs a target that ``num_layers`` divides."""
        super().check_setup(num_layers, num_heads, target_heads, model_config)
        self._check_target(num_layers, target_heads)

    def _check_target(self, num_layers: int, target_heads: int | None) -> None:
        if self.options["structure"] == "UL" and target_heads is not None and target_heads % num_layers:
            raise OptionError(f"{self.name}: option structure='UL' prunes K/L heads per layer, but the "
                              f"{num_layers} layers do not divide K={target_heads}; use structure='AL'")

    def select(self, scores: torch.Tensor, target_heads: int) -> torch.Tensor:
        """The float32 ``[L, H]`` mask pruning ``target_heads`` heads of lowest ``scores`` (ties by layer, then
        head), globally (AL) or K/L in each layer (UL). Raises OptionError (UL, L not dividing K) or ValueError."""
        num_layers = scores.shape[0]
        self._check_target(num_layers, target_heads)
        if self.options["structure"] == "AL":
            return lowest_k_mask(scores, target_heads)
        per_layer = target_heads // num_layers
        return torch.cat([lowest_k_mask(scores[layer:layer + 1], per_layer) for layer in range(num_layers)])

    def mask_at(self, result: PruningResult, target_heads: int) -> PruningResult:
        """The mask at ``target_heads`` from ``result``'s scores (:meth:`select`), same scores and trace."""
        if result.scores is None:
            raise ValueError(f"{self.name}: mask_at needs the scores of a prune result")
        return PruningResult(mask=self.select(result.scores, int(target_heads)), scores=result.scores,
                             trace=copy.deepcopy(result.trace))

    def sample(self, context: PruningContext) -> list[int]:
        """``min(sample_size, n)`` train indices drawn without replacement with the cell's seed, in drawn order.
        Raises ValueError when the split is empty."""
        n = context.num_examples("train")
        if n == 0:
            raise ValueError(f"{self.name}: the split 'train' is empty")
        order = torch.randperm(n, generator=context.generator(salt=SALT_SAMPLE))
        return order[: min(self.options["sample_size"], n)].tolist()

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """Score every head on the dense model and prune ``context.target_heads`` of them; weights untouched.

        Raises:
            ValueError: no target, a target outside ``[0, L*H]``, a physically pruned model, or fewer than 2
                non-padding tokens in the sample. OptionError: UL with L not dividing K.
        """
        if context.target_heads is None:
            raise ValueError(f"method '{self.name}' needs a budget: give --budget heads:K, fraction:F or matched:M")
        target, total = int(context.target_heads), context.total_heads
        if not 0 <= target <= total:
            raise ValueError(f"{self.name}: cannot prune {target} of {total} heads")
        self._check_target(context.num_layers, target)
        layout = get_layout(model)
        if layout.is_pruned():
            raise ValueError(f"{self.name}: scores the unpruned model; this one has heads removed")
        model.eval()
        indices = self.sample(context)
        batches = context.batches("train", batch_size=self.options["batch_size"], indices=indices)
        moments = output_projection_moments(model, batches, context.autocast)
        tokens = moments[0].count
        if tokens < 2:
            raise ValueError(f"{self.name}: the sample has {tokens} non-padding token(s); the variance needs 2")
        weights = [layout.output_dense(layer).weight for layer in range(layout.num_layers)]
        scores, flat_layers = head_scores(moments, weights, layout.num_heads)
        trace = {"sample": len(indices), "tokens": tokens, "structure": self.options["structure"],
                 "departures": [*DEPARTURES, *(["zero_spread_layers"] if flat_layers else [])]}
        if flat_layers:
            trace["zero_spread_layers"] = flat_layers
        return PruningResult(mask=self.select(scores, target), scores=scores, trace=trace)
