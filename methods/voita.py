"""Hard-concrete (L0) head gates (Voita, Talbot, Moiseev, Sennrich, Titov, ACL 2019, §6; gates of Louizos, Welling,
Kingma, ICLR 2018), after lena-voita/the-story-of-heads ``lib/layers/concrete_gate.py``. The gate: docs/heads.md
("Hard-concrete gates"); training, budget and choices: docs/methods.md ("Voita et al. 2019")."""
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
from headprune_bench.methods.hard_concrete import (
    REDUCTIONS,
    SELECTIONS,
    close_threshold,
    deterministic_gates,
    gate_counts,
    l0_penalty,
    max_travel,
    prune_threshold,
    sample_gates,
    select_heads,
)
from headprune_bench.methods.heads import HeadMask, scale_value_heads
from headprune_bench.methods.options import Interval
from headprune_bench.methods.registry import register


@torch.no_grad()
def dev_objective(work: nn.Module, context: PruningContext, heads: HeadMask, log_a: torch.Tensor, lam: float,
                  options: dict[str, Any]) -> dict[str, float]:
    """The early-stopping criterion: ``mean cross-entropy + lam * R`` on ``mini_dev`` with the deterministic gates.

    Args:
        work: the model under training; in eval mode for the pass, back in train mode afterwards.
        heads: ``work``'s head mask, set here to the deterministic gates. log_a: ``[L, H]`` gate parameters.

    Returns:
        ``{"ce": mean cross-entropy (nats per example), "objective": ce + lam * R}``, plus the primary metric when
        the context has ``compute_metrics``.
    """
    opts = options
    work.eval()
    heads.set_mask(deterministic_gates(log_a.detach(), opts["gamma"], opts["zeta"]))
    ce_sum, n, preds, labels = 0.0, 0, [], []
    for batch in context.batches("mini_dev", batch_size=opts["batch_size"]):
        with context.autocast():
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
    """One gate-training run at penalty ``lam`` on a deep copy of ``model`` (left untouched): hard-concrete gates,
    objective ``cross-entropy + lam * R``, and with ``early_stopping`` the best state by :func:`dev_objective`.
    ``salt`` picks the stream of seeded randomness (the lambda search uses one salt for every run).

    Returns:
        ``{"log_a": [L, H] float32 CPU, "model": the trained copy (eval mode), "steps", "stopped_early",
        "nearly_binary" (the kept gates meet ``binary_share``), "best_objective" (float | None), "history" (each
        evaluation counts ``closed`` and ``fractional`` gates), and :func:`_reach`'s fields}``.

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
    """``planned_steps``, ``kept_step``, ``max_travel`` / ``travel`` (over the plan / up to the kept step),
    ``cutoff`` and ``closable``: heads whose initial ``log_a`` lies within ``travel`` of the cutoff."""
    cutoff = prune_threshold(opts["selection"], opts["gamma"], opts["zeta"])
    if cutoff is None:
        cutoff = close_threshold(opts["gamma"], opts["zeta"])
    travel = max_travel(opts["gate_lr"], planned, opts["linear_decay"], taken=taken)
    return {"planned_steps": planned, "kept_step": taken,
            "max_travel": max_travel(opts["gate_lr"], planned, opts["linear_decay"]), "travel": travel,
            "cutoff": cutoff, "closable": int((init.double() - travel <= cutoff).sum())}



@register
class VoitaPruner(HeadPruner):
    """Learn hard-concrete L0 head gates and prune the closed ones (Voita et al. 2019 §6; Louizos et al. 2018).

    Options (sources and reasons: docs/methods.md, "Voita et al. 2019"):
        l0_lambda (0.0015), penalty_reduction ("sum" or "mean"); beta (0.33), gamma (-0.1), zeta (1.1), eps (1e-6).
        joint (True): train the model with the gates (``retrained=True``); fold_gates (True): fold the kept heads'
            fractional test-time gates into the returned model's value rows.
        gate_lr (0.1), lr (2e-5), weight_decay (0.0), max_grad_norm (1.0; 0 = none), linear_decay (True),
            epochs (3.0), max_steps (0 = no cap), batch_size (32).
        early_stopping (True), evals_per_epoch (2), patience (2): on :func:`dev_objective`; binary_share (0.05):
            most fractional gates a kept state may have, as a share of all heads (1.0 = no demand).
        selection ("closed", "threshold" or "topk"); search_runs (6), search_factor (10.0): the lambda search;
            exact (True): complete the search's count to exactly K by the rank of ``log_a``.

    ``scores`` = trained ``log_a`` ``[L, H]`` (higher = more open); the trace records every run, the deterministic
    gates, the achieved count and how it was reached. Raises OptionError at construction for a bad option.

    Precision: the forward passes of the gate training and of its dev objective under ``context.autocast`` (bf16
    under ``--precision bf16``); the loss, the backward pass, ``log_a``, the model's parameters and the optimiser
    in float32.
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
        """Train gates and read the mask: one run at ``l0_lambda`` without a target or with ``selection="topk"``,
        else :meth:`lambda_search`.

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
        """:func:`train_gates` at ``lam`` and :func:`select_heads`; appends the run's summary to ``runs``. Returns
        :func:`train_gates`'s dict plus ``"mask"`` (``[L, H]`` 0/1), ``"pruned"`` (int) and ``"lambda"``."""
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
        """Search lambda for ``target`` pruned heads: multiply or divide it by ``search_factor`` until the count
        brackets the target, then bisect geometrically; at most ``search_runs`` runs, stopping at an exact hit.
        Returns (the run nearest to the target, the earliest on ties; how it was reached). Raises ValueError:
        ``l0_lambda`` is 0."""
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
        """``nearly_binary`` of the kept run and, when False, ``binary_warning`` (logged; also a ``UserWarning``)."""
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
        """The kept run's step-budget diagnostic (:func:`_reach`; ``cutoff`` in ``log_a`` units) and, when some heads
        cannot reach the cutoff, ``warning`` (logged; a ``UserWarning`` when fewer than ``target`` can)."""
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
