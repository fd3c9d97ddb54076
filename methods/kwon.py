"""Retraining-free head pruning of Kwon, Kim, Mahoney, Hassoun, Keutzer, Gholami, "A Fast Post-Training Pruning
Framework for Transformers" (NeurIPS 2022), heads only: Fisher mask search, rearrangement, mask tuning (stages in
:mod:`headprune_bench.methods.mask_tuning`). ``kwon`` runs all three; ``kwon-search`` and ``kwon-rearrange`` are the
ablations that stop after the search and after the rearrangement. See docs/methods.md ("Kwon et al. 2022")."""
from __future__ import annotations

import time
from typing import Any, ClassVar

import torch
from torch import nn

from headprune_bench.methods import mask_tuning as stages
from headprune_bench.methods.base import (
    SPLITS,
    HeadPruner,
    PruningContext,
    PruningResult,
    apply_layer_floor,
    lowest_k_mask,
)
from headprune_bench.methods.heads import forward_flops
from headprune_bench.methods.options import Interval
from headprune_bench.methods.registry import register
from headprune_bench.methods.repair import CALIBRATION_SALT, calibration_indices
from headprune_bench.methods.repairs.scales import TEACHERS, tune_heads

SAMPLE_ORDERS = ("drawn", "sorted")


class _Kwon(HeadPruner):
    """Shared by the three names: ``stages`` says how far the pipeline runs."""

    stages: ClassVar[tuple[str, ...]] = ()
    exact_budget = True
    needs_target = True
    defaults = {"sample_size": 2048, "batch_size": 32, "split": "train", "sample_order": "drawn"}
    constraints = {"sample_size": Interval(1, None), "batch_size": Interval(1, None), "split": SPLITS,
                   "sample_order": SAMPLE_ORDERS}
    conformance_options = {"sample_size": 16, "batch_size": 8}

    def sample(self, context: PruningContext) -> list[int]:
        """The sample's example indices in the order they are batched: ``min(sample_size, n)`` of the split,
        drawn without replacement with the cell's seed, in the order drawn (each minibatch a random subset of the
        split, as in the official code; docs/methods.md says why without replacement). ``sample_order="sorted"``:
        the same rows sorted, to reproduce the records made before issue 61.

        Raises:
            ValueError: the split is empty."""
        n = context.num_examples(self.options["split"])
        if n == 0:
            raise ValueError(f"{self.name}: the split {self.options['split']!r} is empty")
        drawn = calibration_indices(n, context.generator(salt=CALIBRATION_SALT), self.options["sample_size"])
        return sorted(drawn) if self.options["sample_order"] == "sorted" else drawn

    def own_repair(self) -> str | None:
        """``"scales"`` when this name runs the mask tuning (``kwon``), else None."""
        return "scales" if "tune" in self.stages else None

    def selection_alone(self) -> str:
        """``kwon-rearrange``: the same search and rearrangement, no tuning."""
        return "kwon-rearrange"

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """Fisher search of the ``target_heads`` heads to prune, then the stages of this name; weights untouched.

        Returns:
            ``scores`` = the diagonal Fisher ``[L, H]`` (float64); with tuning, ``head_scales`` = the scaled mask.

        Raises:
            ValueError: no target, a target outside ``[0, L*H]``, or an empty split.
        """
        opts = self.options
        target = self.require_target(context)
        model.eval()
        indices = self.sample(context)
        batches = list(context.batches(opts["split"], batch_size=opts["batch_size"], indices=indices))
        timings: dict[str, float] = {}
        start = time.time()
        grads = stages.mask_gradients(model, batches, context.num_layers, context.num_heads, context.autocast)
        context.count_backward(len(indices))
        fisher = stages.fisher_information(grads)
        mask = lowest_k_mask(fisher, target)
        timings["fisher_search_wall_s"] = round(time.time() - start, 3)
        trace: dict[str, Any] = {"stages": list(self.stages), "sample": len(indices), "batches": len(batches),
                                 "searched_mask": mask.int().tolist()}
        tokens = sum(int(b["attention_mask"].sum()) for b in batches) / len(indices)
        trace["flops"] = flops_removed(model.config, mask, max(1, round(tokens)))
        head_scales = None
        if "rearrange" in self.stages:
            start = time.time()
            before = [stages.rearrange_objective(_pruned(mask[i]), grads[:, i]) for i in range(mask.shape[0])]
            mask = stages.rearrange(mask, grads)
            after = [stages.rearrange_objective(_pruned(mask[i]), grads[:, i]) for i in range(mask.shape[0])]
            trace["rearrange"] = {"objective_before": before, "objective_after": after,
                                  "heads_moved": int((mask != torch.tensor(trace["searched_mask"])).sum()) // 2}
            timings["rearrange_wall_s"] = round(time.time() - start, 3)
        if context.min_heads_per_layer and "tune" in self.stages:  # the floor first: the scales are for this mask
            mask, trace["layer_floor_before_tuning"] = apply_layer_floor(mask, fisher, context.min_heads_per_layer)
        if "tune" in self.stages:
            start = time.time()
            head_scales, trace["tune"] = tune_heads(model, batches, mask, fisher, opts["teacher"],
                                                    opts["lsmr_maxiter"])
            timings["tune_wall_s"] = round(time.time() - start, 3)
        trace["timings"] = timings
        return PruningResult(mask=mask, scores=fisher, head_scales=head_scales, trace=trace)


def _pruned(row: torch.Tensor) -> list[int]:
    return [int(h) for h in torch.nonzero(row == 0).flatten()]


def flops_removed(config, mask: torch.Tensor, seq_len: int) -> dict[str, Any]:
    """The matmul FLOPs per example the ``[L, H]`` mask removes at ``seq_len`` tokens (the suite's closed-form
    counter, :func:`methods.heads.forward_flops`): absolute, and as a share of the unpruned model's."""
    full, kept = forward_flops(config, seq_len).total, forward_flops(config, seq_len, mask).total
    return {"seq_len": seq_len, "removed": full - kept, "removed_share": round((full - kept) / full, 6)}


@register
class KwonPruner(_Kwon):
    """Kwon et al. 2022 for heads: Fisher search (§4.1), rearrangement (§4.2), mask tuning (§4.3).

    Options: sample_size (int, 2048): examples of ``split`` (str, "train") in the Fisher pass and the tuning,
    batched in the order drawn (sample_order "drawn", the official code's) or sorted ("sorted", before issue 61);
    batch_size (int, 32): examples per mask gradient (the Fisher depends on it); teacher (str, "sqrt": the search at
    the square root of the kept share, as the official code; or "unpruned"); lsmr_maxiter (int, 100000; 0: the
    official code's limit, CuPy's default of 5 n iterations for the n x n system; docs/methods.md says why the
    default differs). The result's ``head_scales`` are the tuned kept heads' scales (evaluation and recovery apply
    them; export folds them into the weights). Raises OptionError at construction.
    Precision: the Fisher pass's forward passes under ``context.autocast`` (bf16 under ``--precision bf16``), its
    loss and gradients in float32, the Fisher and the rearrangement in float64; the mask tuning (layer outputs and
    least squares) always in float32/float64: its residuals are differences of near-equal sums, which bf16's 8
    bits of mantissa would lose.
    """

    name = "kwon"
    report_order, report_color = 65, "#882255"  # (Paul Tol's wine: Okabe-Ito's eight are taken)
    stages = ("search", "rearrange", "tune")
    summary = "Kwon et al. 2022: Fisher mask search, rearrangement and least-squares mask tuning (retraining-free)"
    defaults = {**_Kwon.defaults, "teacher": "sqrt", "lsmr_maxiter": 100_000}
    constraints = {**_Kwon.constraints, "teacher": TEACHERS, "lsmr_maxiter": Interval(0, None)}


@register
class KwonRearrangePruner(_Kwon):
    """Kwon et al. 2022, stages 1-3: Fisher search and rearrangement, no tuning (binary mask). Options as ``kwon``
    without ``teacher``."""

    name = "kwon-rearrange"
    ablation_of = "kwon"
    stages = ("search", "rearrange")
    summary = "Kwon et al. 2022 without mask tuning: Fisher search and rearrangement"


@register
class KwonSearchPruner(_Kwon):
    """Kwon et al. 2022, stages 1-2: prune the ``target_heads`` heads of lowest diagonal Fisher, one global ranking
    (no per-layer normalisation). Options as ``kwon`` without ``teacher``."""

    name = "kwon-search"
    ablation_of = "kwon"
    stages = ("search",)
    summary = "Kwon et al. 2022, Fisher search only: prune the heads of lowest diagonal Fisher"

    def ranks_once(self) -> bool:
        """True: the Fisher does not depend on the target."""
        return True
