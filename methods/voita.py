"""Hard-concrete (L0) head gates (Voita, Talbot, Moiseev, Sennrich, Titov, "Analyzing Multi-Head Self-Attention:
Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned", ACL 2019, §6; the
hard-concrete gates of Louizos, Welling, Kingma, "Learning Sparse Neural Networks through L0 Regularization",
ICLR 2018). Equations below are written from the official code (lena-voita/the-story-of-heads, read through
shared/reference/methods.md §5); the paper texts were not available, so no equation numbers are cited.

Every head h gets a scalar gate g_h that multiplies its output before the attention output projection (official
``lib/layers/attn.py::MultiHeadAttnConcrete``; here through :func:`headprune_bench.methods.heads.apply_head_mask`). The gate is a
stretched and clipped binary-concrete ("hard concrete", Louizos et al.) variable with one parameter ``log_a`` per
head (official ``lib/layers/concrete_gate.py``):

    u ~ U(eps, 1 - eps)                                   (one draw per head per step, shared by the batch)
    s = sigmoid((log u - log(1 - u) + log_a) / beta)      beta = 0.33
    g = clip(s * (zeta - gamma) + gamma, 0, 1)            (gamma, zeta) = (-0.1, 1.1)

and the L0 penalty is the expected number of open gates (official ``ConcreteGate.get_penalty``):

    P(g_h > 0) = sigmoid(log_a - beta * log(-gamma / zeta))     (clipped to [eps, 1 - eps] as in the official code)
    loss = cross-entropy + lambda * R,   R = sum over heads of P(open)      (``penalty_reduction="sum"``)

At test time the gate is deterministic, ``g = clip(sigmoid(log_a) * (zeta - gamma) + gamma, 0, 1)`` (official
``get_gates(is_train=False)``); a head is pruned when that gate is exactly 0 (Voita: the heads that are "dead";
``selection="closed"``).

Choices (shared/reference/methods.md §5), each a named option:

* ``penalty_reduction`` -- ``"sum"`` (default): R summed over every head of every layer, as in the BERT port of
  the DSP repository (``modeling_gated_bert.py`` adds each layer's ``l0_penalty * sum p_open``), whose lambda
  (0.0015, README BERT/MNLI command) is the default ``l0_lambda``. ``"mean"``: per-layer sums averaged over the
  layers, as in the official TF code (``problems/concrete.py``: ``tf.reduce_mean`` of the collection); the same
  training as "sum" with lambda divided by the number of layers.
* ``joint`` -- True (default): every parameter trains with the gates, as in Voita et al.'s procedure (continue
  training a converged model with gates) and the DSP repository's BERT command; the result then carries the
  re-trained model (``retrained=True``), which the runner evaluates as the separate row "voita, own fine-tuning"
  (its mask alone is applied to the shared base weights in every other condition). False: only ``log_a`` trains,
  the base model frozen (the DSP port's ``run_voita.py`` default): a named variant.
* ``fold_gates`` -- True (default): Voita's network at test time multiplies each head by its deterministic gate,
  which may be fractional; the returned re-trained model has those gate values folded into its value rows
  (:func:`headprune_bench.methods.heads.scale_value_heads`, exact), so evaluated with the 0/1 mask it is that network (a head
  reopened by the completion to K, gate 0, stays whole). The trace
  counts the kept heads whose gate is fractional (``fractional_gates``): on the base weights the mask keeps them
  whole.
* ``selection`` -- how the final mask is read from the gates: ``"closed"`` (default, Voita: prune the heads whose
  deterministic gate is 0), ``"threshold"`` (prune gates <= 0.5; the DSP port's ``convert_gate_to_mask``), or
  ``"topk"`` (prune the ``context.target_heads`` heads of lowest ``log_a``; the DSP port's ``--num_of_heads``
  option, a deviation from Voita that gives matched budgets; ranking by ``log_a`` rather than by the clipped gate
  breaks the ties among gates saturated at 0 or 1 in the same order as the un-clipped gate).
* Budget: with ``context.target_heads = K`` and selection "closed"/"threshold", lambda is searched (Voita controls
  the count only through lambda, README of the-story-of-heads): a first run at ``l0_lambda``; while the count is
  on one side of K, lambda is multiplied (too few pruned) or divided (too many) by ``search_factor``; once K is
  bracketed, the next lambda is the geometric mean of the bracket. At most ``search_runs`` runs, every run from
  the same base model with the same seeded noise, data order and dropout (only lambda differs). The run whose
  count is nearest to K wins (the earliest on ties). The trace records every run, the achieved count and how it
  was reached. The search alone does not guarantee K; with ``exact`` (default True) the kept run's count is then
  completed to exactly K by the rank of ``log_a`` (the tie-break of the DSP port's top-K: the K lowest ``log_a``
  are pruned; since "closed" prunes exactly the heads with ``log_a`` at or below the cutoff, this adds the
  next-lowest heads when the search pruned too few and reopens the closed heads of highest ``log_a`` when it
  pruned too many), and the trace says how many the search itself pruned (``search_pruned``). Every comparison of
  the report then pairs equal counts (protocol §3). ``exact=False`` keeps the search's count (``exact_budget`` is
  False for that variant). With ``selection="topk"`` the result always prunes exactly K heads. Without a target
  the method runs once at ``l0_lambda`` and decides the count itself (it can then set a matched budget).

Training [INFERRED where the sources are silent; the loop is shared with DSP, :mod:`headprune_bench.methods.gates`]: a deep copy
of the base model, in train mode (dropout on, as in the official Trainer), on ``mini_train`` batches (shuffled,
seeded); AdamW (betas 0.9/0.999, eps 1e-8) with the gates in their own group at ``gate_lr`` (0.1, the DSP port's
``--pruning_lr``) and, when joint, the model at ``lr`` (2e-5); linear decay of both learning rates to 0 without
warm-up (the HF Trainer default the port relies on); gradient-norm clipping at 1.0 over every trained parameter,
gates included (HF Trainer). ``log_a`` starts xavier-uniform as in the port (``U(+-sqrt(6 / (H + 1)))`` for its
``[1, H, 1, 1]`` tensor, so gates start about half open). Early stopping (Voita trains to convergence, stopped by hand): every ``1/evals_per_epoch`` epoch the
regularised objective (mean cross-entropy on ``mini_dev`` with deterministic gates + lambda * R) is computed; the
best state is kept and training stops after ``patience`` evaluations without improvement. The objective, rather
than accuracy, is the criterion because accuracy alone would always prefer the least pruned state. Voita et al.
train until the gates are (nearly) binary; so only a state whose gates are nearly binary (at most ``binary_share``
of them fractional, [OURS: the 5% default]) may stop a run or be kept over another such state; a run that ends
without one keeps its best state, and its trace says ``nearly_binary: false`` with a warning to raise ``epochs``
(the step budget, not the criterion, then decided).

Step budget [OURS, a diagnostic]: Adam moves ``log_a`` by about ``gate_lr`` per step whatever lambda is, so a short
run can leave gates unable to reach the selection's cutoff (the pitfall "gates that never close if the training
is too short", shared/reference/methods.md §5.4). Each trace gives ``travel`` (:func:`max_travel` up to the kept
step), ``cutoff`` (:func:`prune_threshold`) and ``closable_heads`` (heads whose initial ``log_a`` is within
``travel`` of the cutoff), with a warning when fewer than all heads can close.

Every random draw (gate init, gate noise, data order, dropout) derives from ``context.seed``; the global RNG state
of the caller is restored afterwards.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from headprune_bench.methods.base import HeadPruner, PruningContext, PruningResult, lowest_k_mask, model_inputs
from headprune_bench.methods.gates import (
    EarlyStopping,
    GateRecipe,
    GateStep,
    plan_steps,
    run_gate_training,
    trainable_copy,
)
from headprune_bench.methods.hard_concrete import (  # noqa: F401
    REDUCTIONS,
    SELECTIONS,
    close_threshold,
    deterministic_gates,
    gate_counts,
    hard_concrete,
    l0_penalty,
    max_travel,
    prob_fully_open,
    prob_open,
    prune_threshold,
    sample_gates,
    select_heads,
)
from headprune_bench.methods.heads import HeadMask, scale_value_heads
from headprune_bench.methods.options import Interval
from headprune_bench.methods.registry import register

# --------------------------------------------------------------------------------------------- training


@torch.no_grad()
def dev_objective(work: nn.Module, context: PruningContext, heads: HeadMask, log_a: torch.Tensor, lam: float,
                  options: dict[str, Any]) -> dict[str, float]:
    """The early-stopping criterion (module docstring, "Training" [INFERRED]): the regularised objective on
    ``mini_dev`` with the deterministic gates, ``mean cross-entropy + lam * R``.

    Args:
        work: the model under training; in eval mode (no dropout) for the pass, back in train mode afterwards.
        context: gives the ``mini_dev`` batches and ``compute_metrics``.
        heads: ``work``'s head mask, set here to the deterministic gates (the next training step sets its own).
        log_a: ``[L, H]`` gate parameters. lam: the L0 coefficient lambda. options: the method's options.

    Returns:
        ``{"ce": mean cross-entropy (nats per example), "objective": ce + lam * R}``, plus the primary metric when
        the context has ``compute_metrics``.
    """
    opts = options
    work.eval()
    heads.set_mask(deterministic_gates(log_a.detach(), opts["gamma"], opts["zeta"]))
    ce_sum, n, preds, labels = 0.0, 0, [], []
    for batch in context.batches("mini_dev", batch_size=opts["batch_size"]):
        logits = work(**model_inputs(batch)).logits.float()
        ce_sum += float(F.cross_entropy(logits, batch["labels"], reduction="sum"))
        n += int(batch["labels"].shape[0])
        preds.append(logits.argmax(-1).cpu())
        labels.append(batch["labels"].cpu())
    work.train()
    penalty = l0_penalty(log_a, opts["beta"], opts["gamma"], opts["zeta"], opts["eps"], opts["penalty_reduction"])
    out = {"ce": ce_sum / max(n, 1), "objective": ce_sum / max(n, 1) + lam * float(penalty)}
    if context.compute_metrics is not None and n:
        metrics = context.compute_metrics(torch.cat(preds).numpy(), torch.cat(labels).numpy())
        out[context.primary_metric] = float(metrics[context.primary_metric])
    return out


def train_gates(model: nn.Module, context: PruningContext, options: dict[str, Any], lam: float,
                salt: int = 0) -> dict[str, Any]:
    """One gate-training run at penalty ``lam`` on a deep copy of ``model``: the shared loop
    (:func:`headprune_bench.methods.gates.run_gate_training`) with hard-concrete samples (:func:`sample_gates`), the objective
    ``cross-entropy + lam * R`` (:func:`l0_penalty`) and, with ``early_stopping``, the best state by
    :func:`dev_objective` (:class:`headprune_bench.methods.gates.EarlyStopping`; its history also records ``closed``, the number of
    deterministic gates at 0).

    Args:
        model: the base model (left untouched).
        context: gives ``mini_train`` / ``mini_dev`` batches, the seed and the device.
        options: the method's options (see :class:`VoitaPruner`).
        lam: the L0 coefficient lambda.
        salt: stream of the seeded randomness (the lambda search reuses the same salt for every run).

    Returns:
        ``{"log_a": [L, H] float32 CPU, "model": the trained copy (eval mode; hooks removed), "steps": int,
        "stopped_early": bool, "nearly_binary": bool (the kept gates meet ``binary_share``), "best_objective":
        float | None, "history": [...] (each evaluation also counts ``fractional`` gates), and from :func:`_reach`
        "planned_steps", "kept_step", "max_travel", "travel", "cutoff", "closable"}``.

    Raises:
        ValueError: empty ``mini_train``.
    """
    opts = options
    num_layers, num_heads = context.num_layers, context.num_heads
    steps_per_epoch, total = plan_steps(context, opts["batch_size"], opts["epochs"], opts["max_steps"], "voita")
    work = trainable_copy(model, opts["joint"])
    gen = context.generator(salt=1_000 + salt)
    bound = math.sqrt(6.0 / (num_heads + 1))  # xavier_uniform_ of the port's [1, H, 1, 1] log_a
    init = (torch.rand(num_layers, num_heads, generator=gen, dtype=torch.float64) * 2 - 1) * bound
    log_a = init.to(device=next(work.parameters()).device, dtype=torch.float32).requires_grad_(True)
    recipe = GateRecipe(batch_size=opts["batch_size"], total_steps=total, gate_lr=opts["gate_lr"], lr=opts["lr"],
                        weight_decay=opts["weight_decay"], max_grad_norm=opts["max_grad_norm"],
                        linear_decay=opts["linear_decay"], torch_seed=int(context.seed) * 7_919 + 17 + salt,
                        order_offset=100_000 * salt)

    def evaluate(info: GateStep) -> dict[str, float]:
        gates = deterministic_gates(log_a.detach(), opts["gamma"], opts["zeta"])
        closed, fractional = int((gates == 0).sum()), int(((gates > 0) & (gates < 1)).sum())
        return {"closed": closed, "fractional": fractional,
                **dev_objective(work, context, info.heads, log_a, lam, opts)}

    allowed = math.floor(opts["binary_share"] * num_layers * num_heads + 1e-9)
    stopper = EarlyStopping(work, log_a, evaluate, every=max(1, steps_per_epoch // max(1, opts["evals_per_epoch"])),
                            total_steps=total, patience=opts["patience"], keep_model=opts["joint"],
                            eligible=lambda values: values["fractional"] <= allowed)

    def sample(step: int) -> torch.Tensor:
        return sample_gates(log_a, gen, opts["beta"], opts["gamma"], opts["zeta"], opts["eps"])

    def objective(ce: torch.Tensor) -> torch.Tensor:
        if not lam:
            return ce
        return ce + lam * l0_penalty(log_a, opts["beta"], opts["gamma"], opts["zeta"], opts["eps"],
                                     opts["penalty_reduction"])

    run = run_gate_training(work, context, log_a, recipe, sample, objective,
                            on_step=stopper if opts["early_stopping"] else None)
    stopper.restore()
    kept = stopper.best_step if stopper.best_state is not None else run.steps
    final = deterministic_gates(log_a.detach(), opts["gamma"], opts["zeta"])
    nearly_binary = int(((final > 0) & (final < 1)).sum()) <= allowed
    return {"log_a": log_a.detach().cpu().float(), "model": work, "steps": run.steps,
            "stopped_early": run.stopped_early, "nearly_binary": nearly_binary,
            "best_objective": None if stopper.best_state is None else round(stopper.best_objective, 6),
            "history": stopper.history, **_reach(init, opts, total, kept)}


def _reach(init: torch.Tensor, opts: dict[str, Any], planned: int, taken: int) -> dict[str, Any]:
    """Which heads the step budget lets the selection prune: ``planned_steps``, ``kept_step`` (the step whose gates
    are kept), ``max_travel`` (over the planned steps) and ``travel`` (up to the kept step), ``cutoff`` (see
    :func:`prune_threshold`; the closed-gate level for "topk") and ``closable`` (heads whose initial ``log_a`` lies
    within ``travel`` of it)."""
    cutoff = prune_threshold(opts["selection"], opts["gamma"], opts["zeta"])
    if cutoff is None:
        cutoff = close_threshold(opts["gamma"], opts["zeta"])
    travel = max_travel(opts["gate_lr"], planned, opts["linear_decay"], taken=taken)
    return {"planned_steps": planned, "kept_step": taken,
            "max_travel": max_travel(opts["gate_lr"], planned, opts["linear_decay"]), "travel": travel,
            "cutoff": cutoff, "closable": int((init.double() - travel <= cutoff).sum())}


# --------------------------------------------------------------------------------------------- the method


@register
class VoitaPruner(HeadPruner):
    """Learn hard-concrete L0 head gates and prune the closed ones (Voita et al. 2019 §6; Louizos et al. 2018).

    Options (defaults; see the module docstring for sources):
        l0_lambda (float, 0.0015): lambda; the DSP port's BERT value (with ``penalty_reduction="sum"``). The
            original code's note: "YOU HAVE TO SET THIS AGAIN FOR EACH EXPERIMENT".
        penalty_reduction (str, "sum"): "sum" over all heads (BERT port) or "mean" over layers (official TF).
        beta (float, 0.33), gamma (float, -0.1), zeta (float, 1.1), eps (float, 1e-6): gate constants.
        joint (bool, True): also train the model's parameters (then ``retrained=True``), as Voita et al. did.
        gate_lr (float, 0.1): lr of ``log_a``. lr (float, 2e-5): lr of the model when joint.
        weight_decay (float, 0.0): of the model parameters when joint (the port's optimizer has none).
        max_grad_norm (float, 1.0): clipping (0 = none). linear_decay (bool, True): lr decays linearly to 0.
        epochs (float, 3.0): maximum epochs over ``mini_train`` per run (the port's 3 epochs).
        max_steps (int, 0): cap on optimiser steps per run (0 = none), to size CPU runs.
        batch_size (int, 32).
        early_stopping (bool, True), evals_per_epoch (int, 2), patience (int, 2): on the mini_dev objective.
        binary_share (float, 0.05): gates count as nearly binary when at most this share of them is fractional
            (deterministic gate strictly between 0 and 1); early stopping waits for that, and keeps the best such
            state (module docstring, "Training"). 1.0: stop on the objective alone.
        selection (str, "closed"): "closed", "threshold" or "topk".
        search_runs (int, 6): maximum runs of the lambda search (target given, selection closed/threshold).
        search_factor (float, 10.0): lambda multiplier while K is not bracketed.
        exact (bool, True): with a target and selection "closed"/"threshold", complete the search's count to exactly
            K by the rank of ``log_a`` (module docstring, "Budget").
        fold_gates (bool, True): when joint, multiply each kept head's value rows by its deterministic gate in the
            returned model, so that model with the 0/1 mask is the gated network Voita evaluates at test time.

    Returns ``scores`` = trained ``log_a`` ``[L, H]`` (higher = more open); the trace carries every run, the
    deterministic gates, the achieved count and how it was reached.

    Raises:
        OptionError: an option outside its declared constraint (at construction). ValueError: see :meth:`prune`.
    """

    name = "voita"
    report_order, report_color = 40, "#009E73"
    conformance_options = {"epochs": 1.0, "batch_size": 16, "gate_lr": 2.0, "search_runs": 2}
    constraints = {"selection": SELECTIONS, "penalty_reduction": REDUCTIONS, "l0_lambda": Interval(0, None),
                   "beta": Interval(0, None, closed="neither"), "gamma": Interval(None, 0, closed="neither"),
                   "zeta": Interval(1, None, closed="neither"), "eps": Interval(0, 0.5, closed="neither"),
                   "gate_lr": Interval(0, None, closed="neither"), "lr": Interval(0, None),
                   "weight_decay": Interval(0, None), "max_grad_norm": Interval(0, None),
                   "epochs": Interval(0, None, closed="neither"), "max_steps": Interval(0, None),
                   "batch_size": Interval(1, None), "evals_per_epoch": Interval(1, None), "patience": Interval(1, None),
                   "search_runs": Interval(1, None), "search_factor": Interval(1, None, closed="neither"),
                   "binary_share": Interval(0, 1)}
    summary = ("Voita et al. 2019: hard-concrete L0 head gates trained on mini-train; prune the closed gates "
               "(lambda search, or top-K, for a budget)")
    defaults = {"l0_lambda": 0.0015, "penalty_reduction": "sum", "beta": 0.33, "gamma": -0.1, "zeta": 1.1,
                "eps": 1e-6, "joint": True, "gate_lr": 0.1, "lr": 2e-5, "weight_decay": 0.0, "max_grad_norm": 1.0,
                "linear_decay": True, "epochs": 3.0, "max_steps": 0, "batch_size": 32, "early_stopping": True,
                "evals_per_epoch": 2, "patience": 2, "selection": "closed", "search_runs": 6,
                "search_factor": 10.0, "exact": True, "fold_gates": True, "binary_share": 0.05}
    exact_budget = False  # with exact=False the lambda search may end near K (exact=True, the default, hits K)
    needs_target = False

    def changes_weights(self) -> bool:
        """True when the gates train jointly with the model (option ``joint``)."""
        return bool(self.options["joint"])

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """Train gates and read the mask (module docstring, "Budget"): one run at ``l0_lambda`` without a target or
        with ``selection="topk"``, else the lambda search (:meth:`lambda_search`).

        Raises:
            ValueError: a target outside ``[0, L*H]``; "topk" without a target; a lambda search with
                ``l0_lambda = 0``; an empty ``mini_train``.
        """
        opts = self.options
        target = None if context.target_heads is None else int(context.target_heads)
        total = context.total_heads
        if target is not None and not 0 <= target <= total:
            raise ValueError(f"voita: cannot prune {target} of {total} heads")
        selection = opts["selection"]
        if selection == "topk" and target is None:
            raise ValueError("voita: selection 'topk' needs a budget (--budget heads:K, fraction:F or matched:M)")
        base_trace = {"selection": selection, "penalty_reduction": opts["penalty_reduction"], "joint": opts["joint"],
                      "target": target}
        if selection == "topk" and target in (0, total):
            mask = torch.ones(context.num_layers, context.num_heads) * (1.0 if target == 0 else 0.0)
            return PruningResult(mask=mask, trace={**base_trace, "achieved": target, "runs": [],
                                                   "how": f"trivial top-K ({target} of {total}); no training"})
        runs: list[dict[str, Any]] = []
        if target is None or selection == "topk":
            best = self.one_run(model, context, target, opts["l0_lambda"], runs)
            how = ("top-K of log_a after one run at lambda" if selection == "topk"
                   else "one run at lambda (no target: the method decides the count)")
        else:
            best, how = self.lambda_search(model, context, target, runs)
        search_pruned = best["pruned"]
        if opts["exact"] and target is not None and selection != "topk" and search_pruned != target:
            best["mask"] = lowest_k_mask(best["log_a"].double(), target)  # the rank of log_a decides the rest
            best["pruned"] = target
            how += f"; completed to exactly {target} by the rank of log_a (the search pruned {search_pruned})"
        gates = deterministic_gates(best["log_a"], opts["gamma"], opts["zeta"])
        trace = {**base_trace, "achieved": best["pruned"], "search_pruned": search_pruned, "how": how,
                 "lambda": best["lambda"], "runs": runs, **self.reach_report(best, context, target),
                 **gate_counts(gates, best["mask"]),
                 "deterministic_gates": [[round(float(v), 6) for v in row] for row in gates],
                 "log_a": [[round(float(v), 6) for v in row] for row in best["log_a"]],
                 **self.binary_report(gates, best, context)}
        retrained = bool(opts["joint"])
        model_out = best["model"] if retrained else None
        if model_out is not None and opts["fold_gates"]:
            # a kept head's fractional gate scales it; a head reopened by the completion to K (gate 0) stays whole
            scale_value_heads(model_out, torch.where(gates > 0, gates, torch.ones_like(gates)))
            trace["folded_gates"] = True
        return PruningResult(mask=best["mask"], scores=best["log_a"].clone(), retrained=retrained, model=model_out,
                             trace=trace)

    def one_run(self, model: nn.Module, context: PruningContext, target: int | None, lam: float,
                runs: list[dict[str, Any]]) -> dict[str, Any]:
        """:func:`train_gates` at ``lam``, then the mask of :func:`select_heads`; appends the run's summary
        (``lambda``, ``pruned``, ``steps``, ``stopped_early``, ``best_objective``, ``history``) to ``runs``.

        Returns:
            :func:`train_gates`'s dict plus ``"mask"`` (``[L, H]`` 0/1), ``"pruned"`` (int) and ``"lambda"``.
        """
        opts = self.options
        context.log(f"voita: training gates with lambda={lam:g}")
        res = train_gates(model, context, opts, lam, salt=0)
        res["mask"] = select_heads(res["log_a"], opts["selection"], target, opts["gamma"], opts["zeta"])
        res["pruned"] = int((res["mask"] == 0).sum())
        res["lambda"] = lam
        context.log(f"voita: lambda={lam:g} -> {res['pruned']} heads pruned after {res['steps']} steps")
        runs.append({key: res[key] for key in ("lambda", "pruned", "steps", "stopped_early", "nearly_binary",
                                               "best_objective", "history")})
        return res

    def lambda_search(self, model: nn.Module, context: PruningContext, target: int,
                      runs: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
        """The lambda search for ``target`` pruned heads (module docstring, "Budget"): multiply or divide lambda by
        ``search_factor`` until the count brackets the target, then bisect geometrically; at most ``search_runs``
        runs, stopping at an exact hit. Appends every run's summary to ``runs``.

        Returns:
            (the run nearest to the target, the earliest on ties; a sentence saying how it was reached).

        Raises:
            ValueError: ``l0_lambda`` is 0 (a multiplicative search cannot leave 0).
        """
        opts = self.options
        if opts["l0_lambda"] <= 0:
            raise ValueError("voita: the lambda search needs l0_lambda > 0")
        lam, lo, hi, best = opts["l0_lambda"], None, None, None
        for _ in range(opts["search_runs"]):
            res = self.one_run(model, context, target, lam, runs)
            if best is None or abs(res["pruned"] - target) < abs(best["pruned"] - target):
                best = res  # keep only the best run's model in memory
            if res["pruned"] == target:
                break
            if res["pruned"] < target:
                lo = lam if lo is None else max(lo, lam)
            else:
                hi = lam if hi is None else min(hi, lam)
            if hi is None:
                lam = lam * opts["search_factor"]
            elif lo is None:
                lam = lam / opts["search_factor"]
            else:
                lam = math.sqrt(lo * hi)
        reached = "exact" if best["pruned"] == target else f"nearest (off by {best['pruned'] - target:+d})"
        return best, f"lambda search over {len(runs)} run(s): {reached} at lambda={best['lambda']:g}"

    def binary_report(self, gates: torch.Tensor, best: dict[str, Any], context: PruningContext) -> dict[str, Any]:
        """``nearly_binary`` of the kept run (option ``binary_share``) and, when False, ``binary_warning`` (logged and
        raised as a ``UserWarning``): how many gates are still fractional, and that ``epochs`` should grow."""
        if best.get("nearly_binary", True):
            return {"nearly_binary": True}
        fractional = int(((gates > 0) & (gates < 1)).sum())
        message = (f"voita: the kept gates are not nearly binary: {fractional} of {gates.numel()} are fractional "
                   f"after {best['steps']} steps (binary_share={self.options['binary_share']:g} allows "
                   f"{math.floor(self.options['binary_share'] * gates.numel() + 1e-9)}); Voita et al. train until "
                   f"the gates are binary: raise the option epochs")
        context.log(message)
        warnings.warn(message, UserWarning, stacklevel=3)
        return {"nearly_binary": False, "binary_warning": message}

    def reach_report(self, best: dict[str, Any], context: PruningContext, target: int | None) -> dict[str, Any]:
        """The kept run's step-budget diagnostic (module docstring, "Step budget" [OURS]): ``planned_steps``,
        ``kept_step``, ``max_travel``, ``travel``, ``cutoff`` (``log_a`` units) and ``closable_heads``; ``warning``
        (logged; a ``UserWarning`` when below ``target``) when not all heads could reach the cutoff (not topk)."""
        opts, total, selection = self.options, context.total_heads, self.options["selection"]
        reach = {"planned_steps": best["planned_steps"], "kept_step": best["kept_step"],
                 "max_travel": round(best["max_travel"], 6), "travel": round(best["travel"], 6),
                 "cutoff": round(best["cutoff"], 6), "closable_heads": best["closable"]}
        if best["closable"] >= total or selection == "topk":
            return reach
        when = (f"after {best['planned_steps']} steps" if best["kept_step"] >= best["planned_steps"] else
                f"at step {best['kept_step']} of {best['planned_steps']} (the best mini-dev objective, kept by "
                f"early stopping)")
        message = (f"voita: {when} at gate_lr={opts['gate_lr']:g} a gate's log_a has moved at most about "
                   f"{best['travel']:.2f}, and selection={selection} prunes at log_a <= {best['cutoff']:.2f}: "
                   f"only {best['closable']} of {total} heads started close enough, so the initialisation, "
                   f"not lambda, caps the count"
                   + (f" below the target {target}" if target is not None and best["closable"] < target else "")
                   + "; raise the option epochs or gate_lr")
        context.log(message)
        reach["warning"] = message
        if target is not None and best["closable"] < target:
            warnings.warn(message, UserWarning, stacklevel=3)  # attributed to prune()'s caller, as before
        return reach
