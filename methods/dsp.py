"""Differentiable subset pruning (Li, Cotterell, Sachan, TACL 2021, arXiv 2108.04657; official code
rycolab/differentiable-subset-pruning): head logits ``w`` learned through a Gumbel soft top-K mask, then the hard
top-K of ``w`` kept. See docs/methods.md ("DSP (Li et al. 2021)")."""
from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import nn

from headprune_bench.methods.base import HeadPruner, PruningContext, PruningResult
from headprune_bench.methods.gates import GateRecipe, GateStep, plan_steps, run_gate_training, trainable_copy
from headprune_bench.methods.options import Interval, OptionError
from headprune_bench.methods.registry import register

VARIANTS = ("pipelined", "joint", "ste")
TINY = torch.finfo(torch.float64).tiny



def soft_top_k(scores: torch.Tensor, k: int, tau: float) -> torch.Tensor:
    """Relaxed top-``k`` indicator of ``scores`` (any shape; float64, same shape): ``sum_{j<=k} p_j`` with
    ``p_j = softmax((r + sum_{i<j} log max(1 - p_i, tiny)) / tau)`` (official ``gumbel_soft_top_k``). Sums to ``k``;
    tends to the k-hot top ``k`` as ``tau -> 0``; zeros for ``k = 0``. Raises ValueError: ``k`` outside
    ``[0, numel]`` or ``tau <= 0``."""
    n = scores.numel()
    if not 0 <= k <= n:
        raise ValueError(f"dsp: cannot keep {k} of {n} heads")
    if tau <= 0:
        raise ValueError(f"dsp: temperature must be positive, got {tau}")
    r = scores.reshape(-1).to(torch.float64)
    total = torch.zeros_like(r)
    for j in range(k):
        p = torch.softmax(r / tau, dim=0)
        total = total + p
        if j + 1 < k:
            r = r + torch.log(torch.clamp(1.0 - p, min=TINY))
    return total.reshape(scores.shape)


def gumbel_noise(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Standard Gumbel noise ``-log(-log u)``, ``u ~ U(tiny, 1)``, float64 on the CPU."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64) * (1 - TINY) + TINY
    return -torch.log(-torch.log(u))


def gumbel_soft_top_k(w: torch.Tensor, k: int, tau: float, generator: torch.Generator) -> torch.Tensor:
    """Gumbel-perturbed soft top-``k`` mask of the logits ``w`` (float64, shape of ``w``, sums to ``k``)."""
    noise = gumbel_noise(tuple(w.shape), generator).to(w.device)
    return soft_top_k(w.to(torch.float64) + noise, k, tau)


def hard_top_k(w: torch.Tensor, k: int) -> torch.Tensor:
    """0/1 float64 mask (shape of ``w``), exactly ``k`` ones at the largest entries; ties to the lower flat index."""
    flat = w.detach().reshape(-1)
    order = torch.sort(flat, descending=True, stable=True).indices[:k]
    mask = torch.zeros_like(flat, dtype=torch.float64)
    mask[order] = 1.0
    return mask.reshape(w.shape)


class StraightThroughTopK(torch.autograd.Function):
    """Forward: :func:`hard_top_k`; backward: the identity (official ``STEFunction``)."""

    @staticmethod
    def forward(ctx, w: torch.Tensor, k: int) -> torch.Tensor:
        """:func:`hard_top_k` of ``w`` in ``w``'s dtype."""
        return hard_top_k(w, k).to(w.dtype)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        """The identity to ``w`` (no gradient for ``k``)."""
        return grad_output, None


def ste_top_k(w: torch.Tensor, k: int) -> torch.Tensor:
    """Hard top-``k`` mask whose gradient passes straight through to ``w``."""
    return StraightThroughTopK.apply(w, k)


def temperature(step: int, tau0: float, tau_end: float, cooldown: int, annealing: bool = True) -> float:
    """``exp(log tau0 - (step / cooldown)(log tau0 - log tau_end))`` up to ``cooldown``, then (or without
    annealing) ``tau_end`` (official ``trainer_dsp.py``)."""
    if not annealing or cooldown <= 0 or step >= cooldown:
        return float(tau_end)
    return float(math.exp(math.log(tau0) - step / cooldown * (math.log(tau0) - math.log(tau_end))))



@register
class DSPPruner(HeadPruner):
    """Differentiable subset pruning: learn head logits through a Gumbel soft top-K, keep the top-K (Li et al. 2021).

    Options: variant ("pipelined": only ``w`` trains; "joint": every parameter; "ste": straight-through, every
    parameter); tau0 (1000.0), tau_end (1e-8), cooldown_steps (8333), annealing (True); w_lr (0.5), lr (2e-5, the
    model's); epochs (1.0), max_steps (0 = no cap), batch_size (32), max_grad_norm (1.0; 0 = none), linear_decay
    (True); log_every (0 = about 20 trace points of loss and temperature). ``scores`` = trained ``w`` ``[L, H]``
    (float32, higher = keep); ``retrained`` for joint and ste. Raises OptionError at construction.
    Precision: the training's forward passes under ``context.autocast`` (bf16 under ``--precision bf16``); the
    loss, the backward pass, ``w`` and the optimiser in float32; the soft top-K and the kept set in float64, as
    under fp32 (bf16's 8 bits of mantissa would tie close logits).
    """

    name = "dsp"
    report_order, report_color = 50, "#0072B2"
    conformance_options = {"max_steps": 4, "batch_size": 16, "cooldown_steps": 3}
    constraints = {"variant": VARIANTS, "tau0": Interval(0, None, closed="neither"),
                   "tau_end": Interval(0, None, closed="neither"), "cooldown_steps": Interval(0, None),
                   "w_lr": Interval(0, None, closed="neither"), "lr": Interval(0, None),
                   "epochs": Interval(0, None, closed="neither"), "max_steps": Interval(0, None),
                   "batch_size": Interval(1, None), "max_grad_norm": Interval(0, None), "log_every": Interval(0, None)}
    summary = ("Li, Cotterell, Sachan 2021: Gumbel soft top-K over learned head logits, exactly K kept "
               "(pipelined/joint/STE)")

    def check_options(self) -> None:
        """Raises OptionError unless ``tau_end <= tau0`` (the temperature anneals down)."""
        if self.options["tau_end"] > self.options["tau0"]:
            raise OptionError(f"{self.name}: option tau_end ({self.options['tau_end']:g}) must not exceed tau0 "
                              f"({self.options['tau0']:g}): the temperature is annealed down")
    defaults = {"variant": "pipelined", "tau0": 1000.0, "tau_end": 1e-8, "cooldown_steps": 8333, "annealing": True,
                "w_lr": 0.5, "lr": 2e-5, "epochs": 1.0, "max_steps": 0, "batch_size": 32, "max_grad_norm": 1.0,
                "linear_decay": True, "log_every": 0}
    exact_budget = True
    needs_target = True

    def changes_weights(self) -> bool:
        """True for the variants that train the model with ``w`` ("joint", "ste")."""
        return self.options["variant"] in ("joint", "ste")

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """Learn ``w`` through the variant's mask (:class:`SubsetMask`), then keep the hard top-K of ``w``.

        Raises:
            ValueError: no target, a target outside ``[0, L*H]``, or an empty ``mini_train``.
            FloatingPointError: ``w`` became non-finite.
        """
        opts = self.options
        variant = opts["variant"]
        if context.target_heads is None:
            raise ValueError("method 'dsp' needs a budget: give --budget heads:K, fraction:F or matched:METHOD")
        num_layers, num_heads, total = context.num_layers, context.num_heads, context.total_heads
        target = int(context.target_heads)
        if not 0 <= target <= total:
            raise ValueError(f"dsp: cannot prune {target} of {total} heads")
        keep = total - target
        trace: dict[str, Any] = {"variant": variant, "keep": keep, "target": target}
        if keep in (0, total):
            mask = torch.full((num_layers, num_heads), 1.0 if keep == total else 0.0)
            return PruningResult(mask=mask, trace={**trace, "note": "trivial budget; no training"})
        _, total_steps = plan_steps(context, opts["batch_size"], opts["epochs"], opts["max_steps"], "dsp")
        cooldown = self.cooldown(total_steps, context, trace)
        trains_model = variant in ("joint", "ste")
        work = trainable_copy(model, trains_model)
        gen = context.generator(salt=2_000)
        bound = math.sqrt(6.0 / (num_layers + num_heads))  # xavier_uniform_ on [L, H]
        w = (torch.rand(num_layers, num_heads, generator=gen, dtype=torch.float64) * 2 - 1) * bound
        w = w.to(next(work.parameters()).device).requires_grad_(True)
        sample = SubsetMask(w, keep, variant, opts, cooldown, gen)
        curve: list[dict[str, float]] = []
        log_every = opts["log_every"] if opts["log_every"] > 0 else max(1, total_steps // 20)

        def record(info: GateStep) -> bool:
            if info.step % log_every == 0 or info.step == total_steps:
                curve.append({"step": info.step, "loss": round(info.loss.item(), 6), "tau": sample.rounded_tau()})
            return False

        recipe = GateRecipe(batch_size=opts["batch_size"], total_steps=total_steps, gate_lr=opts["w_lr"],
                            lr=opts["lr"], weight_decay=0.0, max_grad_norm=opts["max_grad_norm"],
                            linear_decay=opts["linear_decay"], torch_seed=int(context.seed) * 7_919 + 23)
        run = run_gate_training(work, context, w, recipe, sample, on_step=record)
        if not torch.isfinite(w).all():
            raise FloatingPointError("dsp: the head logits w became non-finite during training")
        final = hard_top_k(w.detach().cpu(), keep).float()
        trace.update({"steps": run.steps, "final_tau": sample.rounded_tau(), "curve": curve,
                      "w": [[round(float(v), 6) for v in row] for row in w.detach().cpu()]})
        context.log(f"dsp ({variant}): {run.steps} steps, kept {keep} heads")
        return PruningResult(mask=final, scores=w.detach().cpu().float(), retrained=trains_model,
                             model=work if trains_model else None, trace=trace)

    def cooldown(self, total_steps: int, context: PruningContext, trace: dict[str, Any]) -> int:
        """N_cool: ``cooldown_steps`` capped at ``total_steps - 1`` when annealing, with a ``UserWarning`` (also
        logged and in ``trace["warning"]``) when it exceeds the run; the schedule's settings go into ``trace``."""
        opts = self.options
        variant = opts["variant"]
        cooldown = opts["cooldown_steps"]
        if variant != "ste" and opts["annealing"]:
            cooldown = min(opts["cooldown_steps"], max(1, total_steps - 1))
            if opts["cooldown_steps"] > total_steps:
                message = (f"dsp: cooldown_steps={opts['cooldown_steps']} exceeds the {total_steps} training steps; "
                           f"annealing over {cooldown} steps instead so that tau reaches tau_end={opts['tau_end']:g}")
                warnings.warn(message, UserWarning, stacklevel=3)  # attributed to prune()'s caller, as before
                context.log(message)
                trace["warning"] = message
        trace["total_steps"] = total_steps
        if variant != "ste":
            trace.update({"tau0": opts["tau0"], "tau_end": opts["tau_end"], "annealing": opts["annealing"],
                          "cooldown_requested": opts["cooldown_steps"], "cooldown_used": cooldown,
                          "cooldown_capped": cooldown != opts["cooldown_steps"]})
        return cooldown


class SubsetMask:
    """The ``[L, H]`` float64 mask of step ``t`` (``mask(t)``): the Gumbel soft top-K of ``w`` at ``tau_t``, or for
    "ste" the straight-through hard top-K. ``tau``: the last temperature used (``tau_end`` before the first)."""

    def __init__(self, w: torch.Tensor, keep: int, variant: str, options: dict[str, Any], cooldown: int,
                 generator: torch.Generator) -> None:
        self.w, self.keep, self.variant, self.options, self.cooldown = w, keep, variant, options, cooldown
        self.generator = generator
        self.tau = options["tau_end"]

    def __call__(self, step: int) -> torch.Tensor:
        if self.variant == "ste":
            return ste_top_k(self.w, self.keep)
        opts = self.options
        self.tau = temperature(step, opts["tau0"], opts["tau_end"], self.cooldown, opts["annealing"])
        return gumbel_soft_top_k(self.w, self.keep, self.tau, self.generator)

    def rounded_tau(self) -> float | None:
        """``tau`` to 6 significant digits for the trace; ``None`` for "ste"."""
        return None if self.variant == "ste" else float(f"{self.tau:.6g}")
