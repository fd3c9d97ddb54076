"""Hard-concrete (L0) head gates (Voita, Talbot, Moiseev, Sennrich, Titov, "Analyzing Multi-Head Self-Attention:
Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned", ACL 2019, §6; the
hard-concrete gates of Louizos, Welling, Kingma, "Learning Sparse Neural Networks through L0 Regularization",
ICLR 2018). Equations below are written from the official code (lena-voita/the-story-of-heads, read through
shared/reference/methods.md §5); the paper texts were not available, so no equation numbers are cited.

Every head h gets a scalar gate g_h that multiplies its output before the attention output projection (official
``lib/layers/attn.py::MultiHeadAttnConcrete``; here through :func:`methods.heads.apply_head_mask`). The gate is a
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
* ``joint`` -- False (default): only ``log_a`` trains, the base model is frozen (the DSP port's ``run_voita.py``
  default, and the same protocol as our default DSP, since both start from the fine-tuned base model). True:
  every parameter trains as in Voita's procedure (continue training a converged model with gates); the result
  then carries the re-trained model (``retrained=True``).
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
  was reached. The count is then *not* guaranteed to equal K, so ``exact_budget`` is False; with
  ``selection="topk"`` the result always prunes exactly K heads. Without a target the method runs once at
  ``l0_lambda`` and decides the count itself (it can then set a matched budget).

Training [INFERRED where the sources are silent]: a deep copy of the base model, in train mode (dropout on, as in
the official Trainer), on ``mini_train`` batches (shuffled, seeded); AdamW (betas 0.9/0.999, eps 1e-8) with the
gates in their own group at ``gate_lr`` (0.1, the DSP port's ``--pruning_lr``) and, when joint, the model at ``lr``
(2e-5); linear decay of both learning rates to 0 without warm-up (the HF Trainer default the port relies on);
gradient-norm clipping at 1.0 over every trained parameter, gates included (HF Trainer). ``log_a`` starts
xavier-uniform as in the port (``U(+-sqrt(6 / (H + 1)))`` for its ``[1, H, 1, 1]`` tensor, so gates start about
half open). Early stopping (Voita trains to convergence, stopped by hand): every ``1/evals_per_epoch`` epoch the
regularised objective (mean cross-entropy on ``mini_dev`` with deterministic gates + lambda * R) is computed; the
best state is kept and training stops after ``patience`` evaluations without improvement. The objective, rather
than accuracy, is the criterion because accuracy alone would always prefer the least pruned state.

Step budget [OURS, a diagnostic]: Adam moves ``log_a`` by about ``gate_lr`` per step whatever lambda is, so a short
run can leave gates unable to reach the selection's cutoff (the pitfall "gates that never close if the training
is too short", shared/reference/methods.md §5.4). Each trace gives ``travel`` (:func:`max_travel` up to the kept
step), ``cutoff`` (:func:`prune_threshold`) and ``closable_heads`` (heads whose initial ``log_a`` is within
``travel`` of the cutoff), with a warning when fewer than all heads can close.

Every random draw (gate init, gate noise, data order, dropout) derives from ``context.seed``; the global RNG state
of the caller is restored afterwards.
"""
from __future__ import annotations

import copy
import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from methods.base import HeadPruner, PruningContext, PruningResult, lowest_k_mask, model_inputs, seeded_torch_rng
from methods.heads import apply_head_mask
from methods.options import Interval
from methods.registry import register

SELECTIONS = ("closed", "threshold", "topk")
REDUCTIONS = ("sum", "mean")


# --------------------------------------------------------------------------------------------- the gate


def hard_concrete(log_a: torch.Tensor, u: torch.Tensor, beta: float = 0.33, gamma: float = -0.1,
                  zeta: float = 1.1) -> torch.Tensor:
    """Training gate from uniform noise ``u`` (Louizos et al. 2018; official ``get_gates(True)``).

    ``g = clip(sigmoid((log u - log(1-u) + log_a) / beta) * (zeta - gamma) + gamma, 0, 1)``; differentiable in
    ``log_a`` (zero gradient where clipped). Shapes broadcast.
    """
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_a) / beta)
    return torch.clamp(s * (zeta - gamma) + gamma, 0.0, 1.0)


def sample_gates(log_a: torch.Tensor, generator: torch.Generator, beta: float = 0.33, gamma: float = -0.1,
                 zeta: float = 1.1, eps: float = 1e-6, num_samples: int | None = None) -> torch.Tensor:
    """Draw training gates: ``u ~ U(eps, 1 - eps)`` from the CPU ``generator``, then :func:`hard_concrete`.

    Args:
        log_a: ``[L, H]`` (or any shape) gate parameters.
        num_samples: if given, ``num_samples`` independent draws stacked in a leading dimension (for tests).

    Returns:
        gates with the shape of ``log_a`` (or ``[num_samples, *log_a.shape]``), on ``log_a``'s device.
    """
    shape = tuple(log_a.shape) if num_samples is None else (num_samples, *log_a.shape)
    u = torch.rand(shape, generator=generator, dtype=torch.float64) * (1 - 2 * eps) + eps
    return hard_concrete(log_a, u.to(device=log_a.device, dtype=log_a.dtype), beta, gamma, zeta)


def deterministic_gates(log_a: torch.Tensor, gamma: float = -0.1, zeta: float = 1.1) -> torch.Tensor:
    """Test-time gate ``clip(sigmoid(log_a) * (zeta - gamma) + gamma, 0, 1)`` (official ``get_gates(False)``).

    It is exactly 0 iff ``sigmoid(log_a) <= -gamma / (zeta - gamma)`` (1/12 with the defaults) and may be
    fractional in between.
    """
    return torch.clamp(torch.sigmoid(log_a) * (zeta - gamma) + gamma, 0.0, 1.0)


def prob_open(log_a: torch.Tensor, beta: float = 0.33, gamma: float = -0.1, zeta: float = 1.1,
              eps: float = 1e-6) -> torch.Tensor:
    """``P(g > 0) = sigmoid(log_a - beta * log(-gamma / zeta))`` clipped to ``[eps, 1 - eps]`` (official
    ``get_penalty``).

    Raises:
        ValueError: ``gamma >= 0`` (the probability of a closed gate needs a negative lower stretch limit).
    """
    if gamma >= 0:
        raise ValueError(f"voita: the L0 penalty needs gamma < 0, got {gamma}")
    p = torch.sigmoid(log_a - beta * math.log(-gamma / zeta))
    return torch.clamp(p, eps, 1.0 - eps)


def prob_fully_open(log_a: torch.Tensor, beta: float = 0.33, gamma: float = -0.1, zeta: float = 1.1) -> torch.Tensor:
    """``P(g = 1) = sigmoid(log_a - beta * log((1 - gamma) / (zeta - 1)))``: the mass clipped at the upper bound
    (same derivation as :func:`prob_open`; used by the tests of the sampler)."""
    return torch.sigmoid(log_a - beta * math.log((1 - gamma) / (zeta - 1)))


def l0_penalty(log_a: torch.Tensor, beta: float = 0.33, gamma: float = -0.1, zeta: float = 1.1, eps: float = 1e-6,
               reduction: str = "sum") -> torch.Tensor:
    """Expected number of open gates of an ``[L, H]`` ``log_a``: summed over every head (``"sum"``, the BERT port)
    or per-layer sums averaged over layers (``"mean"``, the official TF code).

    Raises:
        ValueError: unknown reduction.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"voita: penalty_reduction must be one of {REDUCTIONS}, got {reduction!r}")
    per_layer = prob_open(log_a, beta, gamma, zeta, eps).sum(dim=-1)
    return per_layer.sum() if reduction == "sum" else per_layer.mean()


def close_threshold(gamma: float = -0.1, zeta: float = 1.1) -> float:
    """The ``log_a`` at and below which the deterministic gate is exactly 0: ``logit(-gamma / (zeta - gamma)) =
    log(-gamma / zeta)`` (-2.398 with the defaults)."""
    return math.log(-gamma / zeta)


def max_travel(gate_lr: float, steps: int, linear_decay: bool = True, taken: int | None = None) -> float:
    """How far (in ``log_a`` units) a gate can move in the first ``taken`` (default: all) of ``steps`` AdamW steps:
    the sum of those steps' learning rates, ``gate_lr * sum_{t < taken} (1 - t / steps)`` with linear decay
    (``gate_lr * (steps + 1) / 2`` for all steps), ``gate_lr * taken`` without. Adam moves a parameter whose
    gradient keeps its sign by about ``lr`` per step whatever the gradient's size, so this is the distance a gate
    travels when both the task loss and the penalty push it one way; an estimate (a bias-corrected Adam step can
    exceed ``lr`` when gradients shrink), used to warn when the step budget, not lambda, decides which gates can
    close."""
    n = steps if taken is None else min(int(taken), steps)
    if steps <= 0 or n <= 0:
        return 0.0
    if not linear_decay:
        return float(gate_lr) * n
    return float(gate_lr) * sum(1.0 - t / steps for t in range(n))


def prune_threshold(selection: str, gamma: float = -0.1, zeta: float = 1.1) -> float | None:
    """The ``log_a`` at and below which ``selection`` prunes a head: ``"closed"`` (deterministic gate 0):
    :func:`close_threshold`; ``"threshold"`` (gate <= 0.5): ``log((0.5 - gamma) / (zeta - 0.5))`` (0 with the
    defaults); ``"topk"``: None (a rank, not a level)."""
    if selection == "closed":
        return close_threshold(gamma, zeta)
    if selection == "threshold":
        return math.log((0.5 - gamma) / (zeta - 0.5))
    return None


def select_heads(log_a: torch.Tensor, selection: str, target: int | None = None, gamma: float = -0.1,
                 zeta: float = 1.1) -> torch.Tensor:
    """Final ``[L, H]`` 0/1 mask (1 = keep) from trained gates.

    ``"closed"``: prune deterministic gates == 0; ``"threshold"``: prune deterministic gates <= 0.5 (keep > 0.5);
    ``"topk"``: prune the ``target`` heads of lowest ``log_a`` (ties by flat index).

    Raises:
        ValueError: unknown selection, or "topk" without a target.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"voita: selection must be one of {SELECTIONS}, got {selection!r}")
    log_a = log_a.detach().cpu().double()
    if selection == "topk":
        if target is None:
            raise ValueError("voita: selection 'topk' needs a budget (--budget heads:K, fraction:F or matched:M)")
        return lowest_k_mask(log_a, int(target))
    gates = deterministic_gates(log_a, gamma, zeta)
    keep = gates > 0 if selection == "closed" else gates > 0.5
    return keep.float()


# --------------------------------------------------------------------------------------------- training


def train_gates(model: nn.Module, context: PruningContext, options: dict[str, Any], lam: float,
                salt: int = 0) -> dict[str, Any]:
    """One gate-training run at penalty ``lam`` on a deep copy of ``model``.

    Args:
        model: the base model (left untouched).
        context: gives ``mini_train`` / ``mini_dev`` batches, the seed and the device.
        options: the method's options (see :class:`VoitaPruner`).
        lam: the L0 coefficient lambda.
        salt: stream of the seeded randomness (the lambda search reuses the same salt for every run).

    Returns:
        ``{"log_a": [L, H] float32 CPU, "model": the trained copy (eval mode; hooks removed), "steps": int,
        "stopped_early": bool, "best_objective": float | None, "history": [...], and from :func:`_reach`
        "planned_steps", "kept_step", "max_travel", "travel", "cutoff", "closable"}``.

    Raises:
        ValueError: empty ``mini_train``.
    """
    opts = options
    num_layers, num_heads = context.num_layers, context.num_heads
    beta, gamma, zeta, eps = opts["beta"], opts["gamma"], opts["zeta"], opts["eps"]
    n_train = context.num_examples("mini_train")
    if n_train == 0:
        raise ValueError("voita: mini_train is empty")
    work = copy.deepcopy(model)
    device = next(work.parameters()).device
    if not opts["joint"]:
        for p in work.parameters():
            p.requires_grad_(False)
    gen = context.generator(salt=1_000 + salt)
    bound = math.sqrt(6.0 / (num_heads + 1))  # xavier_uniform_ of the port's [1, H, 1, 1] log_a
    init = (torch.rand(num_layers, num_heads, generator=gen, dtype=torch.float64) * 2 - 1) * bound
    log_a = init.to(device=device, dtype=torch.float32).requires_grad_(True)

    model_params = [p for p in work.parameters() if p.requires_grad]
    groups = [{"params": [log_a], "lr": opts["gate_lr"], "weight_decay": 0.0}]
    if model_params:
        groups.append({"params": model_params, "lr": opts["lr"], "weight_decay": opts["weight_decay"]})
    optimizer = torch.optim.AdamW(groups, betas=(0.9, 0.999), eps=1e-8)
    steps_per_epoch = math.ceil(n_train / opts["batch_size"])
    total = max(1, int(round(opts["epochs"] * steps_per_epoch)))
    if opts["max_steps"] > 0:
        total = min(total, opts["max_steps"])
    decay = (lambda step: max(0.0, 1.0 - step / total)) if opts["linear_decay"] else (lambda step: 1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, decay)
    eval_every = max(1, steps_per_epoch // max(1, opts["evals_per_epoch"]))

    def penalty() -> torch.Tensor:
        return l0_penalty(log_a, beta, gamma, zeta, eps, opts["penalty_reduction"])

    @torch.no_grad()
    def dev_objective(handle) -> dict[str, float]:
        work.eval()
        handle.set_mask(deterministic_gates(log_a.detach(), gamma, zeta))
        ce_sum, n, preds, labels = 0.0, 0, [], []
        for batch in context.batches("mini_dev", batch_size=opts["batch_size"]):
            logits = work(**model_inputs(batch)).logits.float()
            ce_sum += float(F.cross_entropy(logits, batch["labels"], reduction="sum"))
            n += int(batch["labels"].shape[0])
            preds.append(logits.argmax(-1).cpu())
            labels.append(batch["labels"].cpu())
        work.train()
        out = {"ce": ce_sum / max(n, 1), "objective": ce_sum / max(n, 1) + lam * float(penalty())}
        if context.compute_metrics is not None and n:
            metrics = context.compute_metrics(torch.cat(preds).numpy(), torch.cat(labels).numpy())
            out[context.primary_metric] = float(metrics[context.primary_metric])
        return out

    history: list[dict[str, Any]] = []
    best_obj, best_state, bad, stopped_early, best_step = math.inf, None, 0, False, 0
    step = epoch = 0
    handle = apply_head_mask(work, torch.ones(num_layers, num_heads, device=device))
    try:
        with seeded_torch_rng(int(context.seed) * 7_919 + 17 + salt, device):
            work.train()
            while step < total and not stopped_early:
                order_seed = int(context.seed) * 1_000 + epoch + 100_000 * salt
                for batch in context.batches("mini_train", batch_size=opts["batch_size"], shuffle=True,
                                             seed=order_seed):
                    gates = sample_gates(log_a, gen, beta, gamma, zeta, eps)
                    handle.set_mask(gates)
                    logits = work(**model_inputs(batch)).logits.float()
                    ce = F.cross_entropy(logits, batch["labels"])
                    loss = ce + lam * penalty() if lam else ce
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    context.count_backward(int(batch["labels"].shape[0]))
                    if opts["max_grad_norm"] > 0:
                        torch.nn.utils.clip_grad_norm_([log_a, *model_params], opts["max_grad_norm"])
                    optimizer.step()
                    scheduler.step()
                    step += 1
                    if opts["early_stopping"] and (step % eval_every == 0 or step == total):
                        ev = dev_objective(handle)
                        closed = int((deterministic_gates(log_a.detach(), gamma, zeta) == 0).sum())
                        history.append({"step": step, "train_ce": round(ce.item(), 6), "closed": closed,
                                        **{k: round(v, 6) for k, v in ev.items()}})
                        if ev["objective"] < best_obj:
                            best_obj, bad, best_step = ev["objective"], 0, step
                            best_state = {"log_a": log_a.detach().clone(),
                                          "model": ({k: v.detach().clone() for k, v in work.state_dict().items()}
                                                    if opts["joint"] else None)}
                        else:
                            bad += 1
                            if bad >= opts["patience"]:
                                stopped_early = True
                    if step >= total or stopped_early:
                        break
                epoch += 1
    finally:
        handle.remove()
    if best_state is not None:
        with torch.no_grad():
            log_a.copy_(best_state["log_a"])
        if best_state["model"] is not None:
            work.load_state_dict(best_state["model"])
    for p in work.parameters():
        p.requires_grad_(True)
    work.eval()
    return {"log_a": log_a.detach().cpu().float(), "model": work, "steps": step, "stopped_early": stopped_early,
            "best_objective": None if best_state is None else round(best_obj, 6), "history": history,
            **_reach(init, opts, total, best_step if best_state is not None else step)}


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
        joint (bool, False): also train the model's parameters (then ``retrained=True``).
        gate_lr (float, 0.1): lr of ``log_a``. lr (float, 2e-5): lr of the model when joint.
        weight_decay (float, 0.0): of the model parameters when joint (the port's optimizer has none).
        max_grad_norm (float, 1.0): clipping (0 = none). linear_decay (bool, True): lr decays linearly to 0.
        epochs (float, 3.0): maximum epochs over ``mini_train`` per run (the port's 3 epochs).
        max_steps (int, 0): cap on optimiser steps per run (0 = none), to size CPU runs.
        batch_size (int, 32).
        early_stopping (bool, True), evals_per_epoch (int, 2), patience (int, 2): on the mini_dev objective.
        selection (str, "closed"): "closed", "threshold" or "topk".
        search_runs (int, 6): maximum runs of the lambda search (target given, selection closed/threshold).
        search_factor (float, 10.0): lambda multiplier while K is not bracketed.

    Returns ``scores`` = trained ``log_a`` ``[L, H]`` (higher = more open); the trace carries every run, the
    deterministic gates, the achieved count and how it was reached.

    Raises:
        ValueError: bad option values; "topk" without a target; a lambda search with ``l0_lambda <= 0``.
    """

    name = "voita"
    constraints = {"selection": SELECTIONS, "penalty_reduction": REDUCTIONS, "l0_lambda": Interval(0, None),
                   "beta": Interval(0, None, closed="neither"), "gamma": Interval(None, 0, closed="neither"),
                   "zeta": Interval(1, None, closed="neither"), "eps": Interval(0, 0.5, closed="neither"),
                   "gate_lr": Interval(0, None, closed="neither"), "lr": Interval(0, None),
                   "weight_decay": Interval(0, None), "max_grad_norm": Interval(0, None),
                   "epochs": Interval(0, None, closed="neither"), "max_steps": Interval(0, None),
                   "batch_size": Interval(1, None), "evals_per_epoch": Interval(1, None), "patience": Interval(1, None),
                   "search_runs": Interval(1, None), "search_factor": Interval(1, None, closed="neither")}
    summary = ("Voita et al. 2019: hard-concrete L0 head gates trained on mini-train; prune the closed gates "
               "(lambda search, or top-K, for a budget)")
    defaults = {"l0_lambda": 0.0015, "penalty_reduction": "sum", "beta": 0.33, "gamma": -0.1, "zeta": 1.1,
                "eps": 1e-6, "joint": False, "gate_lr": 0.1, "lr": 2e-5, "weight_decay": 0.0, "max_grad_norm": 1.0,
                "linear_decay": True, "epochs": 3.0, "max_steps": 0, "batch_size": 32, "early_stopping": True,
                "evals_per_epoch": 2, "patience": 2, "selection": "closed", "search_runs": 6,
                "search_factor": 10.0}
    exact_budget = False  # only selection="topk" guarantees exactly K; the lambda search may end near K
    needs_target = False

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
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

        def one_run(lam: float) -> dict[str, Any]:
            context.log(f"voita: training gates with lambda={lam:g}")
            res = train_gates(model, context, opts, lam, salt=0)
            res["mask"] = select_heads(res["log_a"], selection, target, opts["gamma"], opts["zeta"])
            res["pruned"] = int((res["mask"] == 0).sum())
            res["lambda"] = lam
            context.log(f"voita: lambda={lam:g} -> {res['pruned']} heads pruned after {res['steps']} steps")
            return res

        def summary(res: dict[str, Any]) -> dict[str, Any]:
            return {"lambda": res["lambda"], "pruned": res["pruned"], "steps": res["steps"],
                    "stopped_early": res["stopped_early"], "best_objective": res["best_objective"],
                    "history": res["history"]}

        runs: list[dict[str, Any]] = []
        search = target is not None and selection != "topk"
        if not search:
            best = one_run(opts["l0_lambda"])
            runs.append(summary(best))
            how = ("top-K of log_a after one run at lambda" if selection == "topk"
                   else "one run at lambda (no target: the method decides the count)")
        else:
            if opts["l0_lambda"] <= 0:
                raise ValueError("voita: the lambda search needs l0_lambda > 0")
            lam, lo, hi, best = opts["l0_lambda"], None, None, None
            for _ in range(opts["search_runs"]):
                res = one_run(lam)
                runs.append(summary(res))
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
            how = f"lambda search over {len(runs)} run(s): {reached} at lambda={best['lambda']:g}"
        gates = deterministic_gates(best["log_a"], opts["gamma"], opts["zeta"])
        reach = {"planned_steps": best["planned_steps"], "kept_step": best["kept_step"],
                 "max_travel": round(best["max_travel"], 6), "travel": round(best["travel"], 6),
                 "cutoff": round(best["cutoff"], 6), "closable_heads": best["closable"]}
        if best["closable"] < total and selection != "topk":
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
                warnings.warn(message, UserWarning, stacklevel=2)
        trace = {**base_trace, "achieved": best["pruned"], "how": how, "lambda": best["lambda"], "runs": runs,
                 **reach,
                 "deterministic_gates": [[round(float(v), 6) for v in row] for row in gates],
                 "log_a": [[round(float(v), 6) for v in row] for row in best["log_a"]]}
        retrained = bool(opts["joint"])
        return PruningResult(mask=best["mask"], scores=best["log_a"].clone(), retrained=retrained,
                             model=best["model"] if retrained else None, trace=trace)
