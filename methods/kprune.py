"""K-prune (Park, Choi, Kang, "Accurate Retraining-free Pruning for Pretrained Encoder-based Language Models",
ICLR 2024; official code snudm-starlab/K-prune ``src/prune.py``), attention heads only: bottom-up over the layers,
the heads of layers l..L-1 are re-scored on the current, partly pruned and tuned model by their predictive and
representational knowledge, the best of them are kept under the remaining head budget, layer l's part is
committed, and layer l's output weights are re-solved (KPWT, the ``weights`` repair's per-layer step) before the
next layer. See docs/methods.md ("K-prune (Park et al. 2024)")."""
from __future__ import annotations

import contextlib
import copy
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from headprune_bench.methods.base import (
    SPLITS,
    Batch,
    HeadPruner,
    PruningContext,
    PruningResult,
    autograd_batch,
    autograd_enabled,
    lowest_k_mask,
    model_inputs,
)
from headprune_bench.methods.heads import apply_head_mask, get_layout
from headprune_bench.methods.kwon import flops_removed
from headprune_bench.methods.options import Interval, OptionError
from headprune_bench.methods.registry import register
from headprune_bench.methods.repair import CALIBRATION_DEFAULTS, CALIBRATION_SALT, calibration_indices
from headprune_bench.methods.repairs.weights import (
    SOLVER,
    OutputWeightTuner,
    failure_note,
    layer_trace,
)

DEPARTURES = ("heads_only", "head_budget_exact_k", "calibration_sample", "empty_layer_keeps_bias",
              "float64_statistics_and_solve", "solve_refusals", "mu_f_head_dropped")
"""Departures from the official code that always apply (docs/methods.md, "K-prune", says why)."""


def _soft_kl(logits: torch.Tensor, labels: list[torch.Tensor], index: int, own: bool, temperature: float):
    """``T^2 * KL(labels[index] || softmax(logits / T))``, batch mean; with ``own``, this pass's soft labels are
    appended to ``labels`` first (the teacher's step). Raises ValueError: fewer than 2 logits."""
    if logits.dtype != torch.float64:
        logits = logits.float()
    if logits.shape[-1] < 2:
        raise ValueError("kprune: the soft labels need a classifier with at least 2 labels (the official "
                         "regression branch, an MSE to the teacher's output, is not ported)")
    if own:
        labels.append(F.softmax(logits.detach() / temperature, dim=-1))
    return F.kl_div(F.log_softmax(logits / temperature, dim=-1), labels[index],
                    reduction="batchmean") * temperature ** 2


def measure_knowledge(model: nn.Module, batches: list[Batch], mask: torch.Tensor, first: int, temperature: float,
                      teacher_labels: list[torch.Tensor] | None = None,
                      autocast=contextlib.nullcontext) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """K-prune's knowledge of each head of layers ``first``..L-1 (official ``compute_scores``, heads only) on
    ``model`` under the ``[L, H]`` 0/1 ``mask``, with an all-ones per-channel mask m multiplying W_O's input u at
    those layers:

    - predictive: per batch, g = d/dm of ``T^2 * KL(p_T || softmax(z / T))`` (the batch mean, official
      ``F.kl_div(..., reduction="batchmean")``); ``pred(l, h) = sum_b mean_{j in cols(h)} g_j^2 / 2``, divided by
      the number of examples;
    - representational: ``rep(l, h) = mean_{j in cols(h)} (sum_t u_tj^2) * mean_i W_O[i, j]^2`` over the
      non-padding tokens t, divided by their number, with the model's current W_O.

    ``teacher_labels``: the soft labels ``p_T`` per batch; None: taken from this pass's own logits (the official
    code's first step, where the model is the teacher: the predictive term is then ~0). Weights frozen during the
    pass; forward passes under ``autocast`` (the context's), loss and gradients in float32 (float64 for a float64
    model), sums in float64. Labels are never read.

    Returns:
        (pred, rep: float64 ``[L, H]``, 0 in the rows before ``first``; the soft labels used, per batch).

    Raises:
        ValueError: no batch, or a model with fewer than 2 logits (no soft labels).
    """
    if not batches:
        raise ValueError("kprune: the calibration sample gave no batch")
    layout = get_layout(model)
    num_layers, heads, size = layout.num_layers, layout.num_heads, layout.head_size
    layers = list(range(first, num_layers))
    device = next(model.parameters()).device
    mask_dtype = layout.output_dense(first).weight.dtype
    channel_masks = {layer: torch.ones(heads * size, device=device, dtype=mask_dtype, requires_grad=True)
                     for layer in layers}
    squares = {layer: torch.zeros(heads * size, dtype=torch.float64, device=device) for layer in layers}
    pred = torch.zeros(num_layers, heads, dtype=torch.float64)
    labels = [] if teacher_labels is None else teacher_labels
    state: dict[str, torch.Tensor] = {}
    examples = tokens = 0

    def hook_for(layer: int):
        def hook(module, args):
            u, *rest = args
            squares[layer] += u.detach()[state["tokens"]].double().pow(2).sum(dim=0)
            return (u * channel_masks[layer], *rest)
        return hook

    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        with autograd_enabled(), apply_head_mask(model, mask):
            handles = [layout.output_dense(layer).register_forward_pre_hook(hook_for(layer)) for layer in layers]
            try:
                for index, batch in enumerate(map(autograd_batch, batches)):
                    state["tokens"] = batch["attention_mask"].bool()
                    with autocast():
                        logits = model(**model_inputs(batch)).logits
                    kl = _soft_kl(logits, labels, index, teacher_labels is None, temperature)
                    grads = torch.autograd.grad(kl, [channel_masks[layer] for layer in layers])
                    for layer, grad in zip(layers, grads, strict=True):
                        pred[layer] += (grad.detach().double().pow(2) * 0.5).view(heads, size).mean(dim=1).cpu()
                    examples += int(batch["input_ids"].shape[0])
                    tokens += int(state["tokens"].sum())
            finally:
                for handle in handles:
                    handle.remove()
    finally:
        for p in frozen:
            p.requires_grad_(True)
    if tokens == 0:
        raise ValueError("kprune: the calibration sample has no non-padding token")
    rep = torch.zeros(num_layers, heads, dtype=torch.float64)
    for layer in layers:
        weight_energy = layout.output_dense(layer).weight.detach().double().pow(2).mean(dim=0)
        rep[layer] = (squares[layer] * weight_energy).view(heads, size).mean(dim=1).cpu() / tokens
    return pred / examples, rep, labels


def keep_best(pool_scores: torch.Tensor, keep: int) -> torch.Tensor:
    """The float32 0/1 mask of a pool ``[layers, H]`` of scores (higher = keep) that keeps its ``keep`` best: the
    ``numel - keep`` lowest pruned, ties by (layer, head), lower first (:func:`lowest_k_mask`).

    Raises:
        ValueError: ``keep`` outside ``[0, numel]``.
    """
    if not 0 <= keep <= pool_scores.numel():
        raise ValueError(f"kprune: cannot keep {keep} of a pool of {pool_scores.numel()} heads")
    return lowest_k_mask(pool_scores, pool_scores.numel() - keep)


@register
class KPrunePruner(HeadPruner):
    """K-prune for heads (methods-2024 §1): knowledge measurement (§1.2) and knowledge-preserving mask search over
    the attention sub-layers, bottom-up (§1.3, §1.7), with knowledge-preserving weight tuning of each layer's kept
    W_O columns before the next one (the ``weights`` repair's step, :class:`~.repairs.weights.OutputWeightTuner`).

    Step l = 0..L-1, with R_0 = L*H - K heads to keep: re-score the heads of layers l..L-1 on the current model
    (:func:`measure_knowledge`; score = ``lam_pred * pred + lam_rep * rep``), keep the best R_l of that pool
    (:func:`keep_best`), commit layer l's part (k_l heads) and set R_{l+1} = R_l - k_l, which prunes exactly K;
    then, with ``tuning``, tune layer l's kept columns (skipped when k_l = 0).

    Options: sample_size (int, 2048), batch_size (int, 32), split (str, "train"): the calibration sample, the
    repairs' shared one (``CALIBRATION_DEFAULTS``, drawn without replacement with the cell's seed, in the order
    drawn); batch_size is also the predictive term's batch (it depends on it); temperature (float, 2.0); lam_pred
    (float, 1.0); lam_rep (float, 2.5e-4, scripts/run.sh's recipe; argparse's default is 1e-5); tuning (bool,
    True: the recipe's ``--sublayerwise_tuning``; False: the search alone, weights untouched, a plain mask that
    takes any repair); damping (float, 0.0): the solve's ridge (``weights``' option), only with tuning.

    Result: the binary mask; ``scores`` = each layer's scores at the step that committed it (float64; the official
    scores times the common factor f_head / mu); with tuning ``retrained=True`` and ``model`` = a copy of the base
    model with the tuned W_O columns (the base model is untouched), which the runner evaluates as the
    ``own-fine-tuning`` row. Precision: the scoring passes under ``context.autocast``, the statistics in float64,
    the tuning always float32 / float64. Raises OptionError at construction.
    """

    name = "kprune"
    summary = ("K-prune (Park et al. 2024): bottom-up head search by predictive + representational knowledge, "
               "with least-squares W_O tuning per layer (retraining-free)")
    report_order, report_color = 72, "#661100"  # (Paul Tol's dark red: not among the report's extra colours)
    in_methods_all = False  # not in `--methods all` until the lead adds it to the main job (name it explicitly)
    exact_budget = True
    needs_target = True
    defaults = {**CALIBRATION_DEFAULTS, "temperature": 2.0, "lam_pred": 1.0, "lam_rep": 2.5e-4, "tuning": True,
                "damping": 0.0}
    constraints = {"sample_size": Interval(1, None), "batch_size": Interval(1, None), "split": SPLITS,
                   "temperature": Interval(0.0, None, closed="neither"), "lam_pred": Interval(0.0, None),
                   "lam_rep": Interval(0.0, None), "damping": Interval(0.0, None)}
    conformance_options = {"sample_size": 16, "batch_size": 8}

    def check_options(self) -> None:
        """At least one of lam_pred and lam_rep is positive; damping only with tuning."""
        if self.options["lam_pred"] == 0 and self.options["lam_rep"] == 0:
            raise OptionError(f"{self.name}: options lam_pred and lam_rep are both 0: every score would be 0")
        if self.options["damping"] and not self.options["tuning"]:
            raise OptionError(f"{self.name}: option damping={self.options['damping']} is the weight tuning's ridge "
                              f"and needs tuning=True")

    def changes_weights(self) -> bool:
        """True with ``tuning``: the result carries the tuned model (evaluated as the own-fine-tuning row)."""
        return bool(self.options["tuning"])

    def own_repair(self) -> str | None:
        """``"weights"`` with ``tuning`` (KPWT is part of the method), else None (a plain mask)."""
        return "weights" if self.options["tuning"] else None

    def selection_alone(self) -> str:
        """The search without tuning: ``--option kprune.tuning=false``."""
        return "kprune with --option kprune.tuning=false"

    def sample(self, context: PruningContext) -> list[int]:
        """The calibration sample's indices (:func:`~headprune_bench.methods.repair.calibration_indices` with the
        repairs' salt): ``min(sample_size, n)`` of the split, without replacement, in the order drawn.

        Raises:
            ValueError: the split is empty."""
        n = context.num_examples(self.options["split"])
        if n == 0:
            raise ValueError(f"{self.name}: the split {self.options['split']!r} is empty")
        return calibration_indices(n, context.generator(salt=CALIBRATION_SALT), self.options["sample_size"])

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """The bottom-up search (and tuning) pruning exactly ``context.target_heads`` heads; ``model`` untouched.

        Raises:
            ValueError: no target, a target outside ``[0, L*H]``, an empty split, a physically pruned model, or a
                model with fewer than 2 logits.
        """
        opts = self.options
        target, total = self.require_target(context), context.total_heads
        layout = get_layout(model)
        if layout.is_pruned():
            raise ValueError(f"{self.name}: prunes the unpruned model; this one has heads removed")
        model.eval()
        indices = self.sample(context)
        batches = list(context.batches(opts["split"], batch_size=opts["batch_size"], indices=indices))
        num_layers, heads = layout.num_layers, layout.num_heads
        start = time.time()
        working = copy.deepcopy(model).eval() if opts["tuning"] else model
        working_layout = get_layout(working)
        tuner = OutputWeightTuner(model, batches, opts["damping"]) if opts["tuning"] else None
        mask = torch.ones(num_layers, heads)
        scores = torch.zeros(num_layers, heads, dtype=torch.float64)
        remaining = total - target
        labels: list[torch.Tensor] | None = None
        steps, kpwt, failed = [], {}, {}
        timings = {"score_wall_s": 0.0, "tune_wall_s": 0.0}
        for layer in range(num_layers):
            t0 = time.time()
            pred, rep, labels = measure_knowledge(working, batches, mask, layer, opts["temperature"], labels,
                                                  context.autocast)
            context.count_backward(len(indices))
            score = opts["lam_pred"] * pred + opts["lam_rep"] * rep
            row = keep_best(score[layer:], remaining)[0]
            kept = int(row.sum())
            steps.append({"layer": layer, "heads_to_keep": remaining, "kept": kept,
                          "pred": pred[layer:].tolist(), "rep": rep[layer:].tolist()})
            mask[layer], scores[layer] = row, score[layer]
            remaining -= kept
            timings["score_wall_s"] += time.time() - t0
            if tuner is not None:
                t0 = time.time()
                solve = tuner.step(layer, row)
                kpwt[str(layer)] = layer_trace(kept, solve)
                if solve is not None and solve.weight is None:
                    failed[layer] = failure_note(solve)
                if layer in tuner.weights:
                    with torch.no_grad():
                        working_layout.output_dense(layer).weight.copy_(tuner.weights[layer])
                timings["tune_wall_s"] += time.time() - t0
            context.log(f"kprune: layer {layer}: {kept} of {heads} heads kept, {remaining} left to keep above")
        if remaining != 0:  # (cannot happen: R_l <= H (L - l) and the last pool is the last layer alone)
            raise AssertionError(f"kprune: {remaining} heads left to keep after the last layer")
        tokens = sum(int(b["attention_mask"].sum()) for b in batches)
        trace: dict[str, Any] = {
            "sample": len(indices), "batches": len(batches), "tokens": tokens, "departures": list(DEPARTURES),
            "score": "lam_pred * pred + lam_rep * rep (the official mu / f_head factor is common to every head)",
            "steps": steps, "pred_first_step_max": float(torch.tensor(steps[0]["pred"]).max()),
            "empty_layers": "LN(x + b_O) (the benchmark's mask; the official code removes the sub-layer: LN(x))",
            "tuning": bool(opts["tuning"]),
            "flops": flops_removed(model.config, mask, max(1, round(tokens / len(indices)))),
        }
        if tuner is not None:
            trace["kpwt"] = {"solver": SOLVER, "damping": opts["damping"], "cached_layer_inputs": tuner.cached,
                             "tuned_layers": sorted(tuner.weights), "failed_layers": {str(k): v for k, v in
                                                                                     failed.items()},
                             "layers": kpwt, "bias": "unchanged",
                             "weights": "the result's model: the base model with these layers' tuned W_O columns"}
        trace["timings"] = {k: round(v, 3) for k, v in timings.items()}
        trace["timings"]["prune_wall_s"] = round(time.time() - start, 3)
        if tuner is None:
            return PruningResult(mask=mask, scores=scores, trace=trace)
        return PruningResult(mask=mask, scores=scores, retrained=True, model=working, trace=trace)
