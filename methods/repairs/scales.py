"""``scales``: Kwon et al. 2022's mask tuning (§4.3; official ``prune/rescale.py``) as a repair: one least-squares
scale per kept head, layer by layer, that makes the pruned model's layer outputs match a teacher's on the
calibration sample. ``kwon`` is the ``kwon-rearrange`` selection with this repair (:func:`tune_heads`, shared)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from headprune_bench.methods import mask_tuning as stages
from headprune_bench.methods.base import Batch, lowest_k_mask
from headprune_bench.methods.options import Interval
from headprune_bench.methods.registry import register_repair
from headprune_bench.methods.repair import Repair, RepairContext, RepairResult

TEACHERS = ("sqrt", "unpruned")


def tune_heads(model: nn.Module, batches: list[Batch], mask: torch.Tensor, scores: torch.Tensor | None,
               teacher: str, lsmr_maxiter: int) -> tuple[torch.Tensor, dict[str, Any]]:
    """Kwon et al.'s mask tuning of the ``[L, H]`` 0/1 ``mask``: the teacher is the unpruned model
    (``teacher="unpruned"``) or, as the official code, the mask that keeps the square root of the kept share
    (``"sqrt"``: the lowest of ``scores`` ``[L, H]``, higher = keep, pruned; Kwon's Fisher for ``kwon``), then
    :func:`~headprune_bench.methods.mask_tuning.tune_scales` with ``lsmr_maxiter``.

    Returns:
        (float64 ``[L, H]`` scales, 0 at pruned heads; the trace ``kwon`` records under ``tune``).

    Raises:
        ValueError: ``teacher="sqrt"`` without ``scores``; an empty ``batches``.
    """
    total = mask.numel()
    target = int((mask == 0).sum())
    if teacher == "unpruned":
        teacher_kept, teacher_mask = total, torch.ones_like(mask, dtype=torch.float32)
    else:
        if scores is None:
            raise ValueError("the scales repair with teacher='sqrt' needs the selector's scores to build its "
                             "teacher mask; this selector gave none (use teacher='unpruned')")
        teacher_kept = stages.teacher_heads_kept(total, total - target)
        teacher_mask = lowest_k_mask(scores, total - teacher_kept)
    tuning = stages.tune_scales(model, batches, mask, teacher_mask, lsmr_maxiter)
    trace = {"teacher": teacher, "teacher_heads_kept": teacher_kept, "tuned_layers": tuning.tuned,
             "skipped_layers": tuning.skipped, "stopped_at_layer": tuning.stopped_at, "stop_reason": tuning.reason,
             "lsmr_istop": {str(k): v for k, v in tuning.istop.items()},
             "cached_layer_inputs": tuning.cached_inputs, "ffn_rescaling": False}
    return tuning.scales, trace


@register_repair
class ScalesRepair(Repair):
    """Kwon et al. 2022's mask tuning (§4.3) of any selector's mask: :func:`tune_heads` on the calibration sample.

    Options: teacher (str, "sqrt": the selector's scores at the square root of the kept share, the official code's;
    "unpruned"); lsmr_maxiter (int, 100000; 0: the official code's limit, 5 n). As the official code, layer 0 is
    never tuned, and a failed solve (LSMR ``istop >= 3``) or a scale outside [-10, 10] stops the tuning there: that
    layer and every later one keep scale 1 (``failed_layers`` names them). Scales are folded into the kept heads'
    value rows at evaluation and export."""

    name = "scales"
    summary = "Kwon et al. 2022's mask tuning: a least-squares scale per kept head, layer by layer"
    defaults = {"teacher": "sqrt", "lsmr_maxiter": 100_000}
    constraints = {"teacher": TEACHERS, "lsmr_maxiter": Interval(0, None)}
    needs_scores = True

    def repair(self, model: nn.Module, mask: torch.Tensor, context: RepairContext) -> RepairResult:
        """``head_scales`` (float64 ``[L, H]``), the trace of ``kwon``'s ``tune``. A selector without scores has no
        square-root teacher: the unpruned model teaches instead, said in the log and in the trace (``teacher_used``,
        ``teacher_note``). Raises ValueError as :func:`tune_heads`."""
        teacher, note = self.options["teacher"], None
        if teacher == "sqrt" and context.scores is None:
            teacher, note = "unpruned", "the selector gave no scores, so no square-root teacher: the unpruned model"
            context.log(f"repair scales: {note}")
        scales, trace = tune_heads(model, context.batches, mask, context.scores, teacher, self.options["lsmr_maxiter"])
        if note is not None:
            trace = {**trace, "teacher": self.options["teacher"], "teacher_used": teacher, "teacher_note": note}
        failed = {}
        if trace["stopped_at_layer"] is not None:
            stop = int(trace["stopped_at_layer"])
            for layer in range(stop, mask.shape[0]):
                failed[layer] = (f"tuning stopped at layer {stop} ({trace['stop_reason']}): scale 1 kept"
                                 if layer == stop else f"after the stop at layer {stop}: scale 1 kept")
        return RepairResult(head_scales=scales, failed_layers=failed, trace=trace)
