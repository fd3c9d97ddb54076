"""``weights``: K-prune's knowledge-preserving weight tuning (KPWT; Park, Choi, Kang, ICLR 2024; official
``src/prune.py`` ``knowledge_reconstruction``), heads only. Layer by layer, earlier layers already masked and tuned,
the kept heads' columns of the attention output projection W_O are re-solved by least squares so that the pruned
layer's pre-LayerNorm sum matches the unpruned model's over the calibration sample's non-padding tokens; the bias
stays. ``kprune`` runs the same steps (:class:`OutputWeightTuner`, :func:`kpwt_layer`) inside its search. See
docs/methods.md ("K-prune (Park et al. 2024)")."""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from headprune_bench.methods.base import Batch
from headprune_bench.methods.heads import get_layout
from headprune_bench.methods.mask_tuning import LayerCapture, LayerChain, capture_layer
from headprune_bench.methods.options import Interval
from headprune_bench.methods.registry import register_repair
from headprune_bench.methods.repair import Repair, RepairContext, RepairResult

SOLVER = "float64 normal equations; eigenvalue rank check, then Cholesky (torch.linalg)"
"""What solves each layer's least squares (the trace's ``solver``)."""

ROUNDOFF = 1e-12
"""A solution whose sample error exceeds the untuned columns' by more than ``ROUNDOFF`` times the target's energy
``||B||^2`` is refused as an increase; below that the difference is the float64 round-off of the normal equations."""


@dataclass
class NormalEquations:
    """``A^T A`` ``[n, n]``, ``A^T B`` ``[n, D]`` and ``||B||^2`` (float64) of a least-squares problem ``A W ~ B``
    summed over rows (tokens), and the number of rows."""

    gram: torch.Tensor
    cross: torch.Tensor
    energy: torch.Tensor
    tokens: int = 0

    @classmethod
    def zeros(cls, n: int, width: int, device: torch.device | str = "cpu") -> NormalEquations:
        """Empty equations for ``n`` unknown rows of W and ``width`` right-hand sides, accumulated on ``device``."""
        return cls(torch.zeros(n, n, dtype=torch.float64, device=device),
                   torch.zeros(n, width, dtype=torch.float64, device=device),
                   torch.zeros((), dtype=torch.float64, device=device))

    @classmethod
    def of(cls, a: torch.Tensor, b: torch.Tensor) -> NormalEquations:
        """The equations of the rows ``a`` ``[N, n]`` and ``b`` ``[N, D]``."""
        equations = cls.zeros(a.shape[1], b.shape[1], a.device)
        equations.add(a, b)
        return equations

    def add(self, a: torch.Tensor, b: torch.Tensor) -> None:
        """Add the rows ``a`` ``[N, n]`` and ``b`` ``[N, D]`` (any float dtype; summed in float64)."""
        a, b = a.double(), b.double()
        self.gram += a.t() @ a
        self.cross += a.t() @ b
        self.energy += (b * b).sum()
        self.tokens += int(a.shape[0])


@dataclass
class LayerSolve:
    """One layer's KPWT solve (:func:`kpwt_layer`).

    Attributes:
        weight: float64 ``[n, D]`` solution W (``W_O[:, kept channels] = W^T``), or None when refused.
        error_before, error_after: the sample error ``||A W - B||^2`` of the untuned columns and of the solution
            (equal when refused). energy: ``||B||^2``. tokens: rows of A.
        failure: why the solution was refused ("" when accepted).
    """

    weight: torch.Tensor | None
    error_before: float
    error_after: float
    energy: float
    tokens: int
    failure: str = ""

    def trace(self) -> dict[str, Any]:
        """The JSON summary the traces store (errors ``None`` where not finite)."""
        out = {"error_before": _finite(self.error_before), "error_after": _finite(self.error_after),
               "target_energy": _finite(self.energy), "tokens": self.tokens,
               "status": "tuned" if self.weight is not None else "failed"}
        if self.failure:
            out["failure"] = self.failure
        return out


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def kpwt_layer(equations: NormalEquations, untuned: torch.Tensor, damping: float = 0.0) -> LayerSolve:
    """KPWT's per-layer solve: ``W = argmin ||A W - B||^2`` from its normal equations (official
    ``torch.linalg.lstsq(A^T A, A^T B)``), in float64: with ``damping`` > 0 the ridge ``damping * mean(diag(A^T A))``
    is added to the diagonal (0: none, the official code). The solution is refused, and the layer keeps
    ``untuned`` (``[n, D]``, the current ``W_O[:, kept]^T``), when the equations are not finite, the system is
    numerically singular (an eigenvalue at most ``n * eps * the largest``, numpy's rank rule; e.g. a duplicated or
    zero column of A), the Cholesky factorisation fails, the solution is not finite, or it increases the sample
    error over the untuned columns by more than :data:`ROUNDOFF` of ``||B||^2``. The errors come from the normal
    equations: ``||B||^2 - 2 <W, A^T B> + <W, A^T A W>``, the increase as ``<D, A^T A D> - 2 <D, A^T B - A^T A
    W_0>`` with ``D = W - W_0`` (no cancellation when ``W`` is near ``W_0``).

    Returns:
        :class:`LayerSolve` (``weight`` None and ``failure`` set when refused).

    Raises:
        ValueError: no unknown, or shapes that do not fit together.
    """
    gram = equations.gram.detach().to("cpu", torch.float64)
    cross = equations.cross.detach().to("cpu", torch.float64)
    energy = float(equations.energy)
    w0 = untuned.detach().to("cpu", torch.float64)
    n = gram.shape[0]
    if n == 0 or gram.shape != (n, n) or cross.shape[0] != n or w0.shape != cross.shape:
        raise ValueError(f"kpwt_layer: A^T A {list(gram.shape)}, A^T B {list(cross.shape)} and the untuned "
                         f"columns {list(w0.shape)} do not fit (n >= 1 unknowns needed)")
    gram = (gram + gram.t()) / 2
    before = energy - 2 * float((w0 * cross).sum()) + float((w0 * (gram @ w0)).sum())

    def refuse(reason: str) -> LayerSolve:
        return LayerSolve(None, before, before, energy, equations.tokens, reason)

    if not (bool(torch.isfinite(gram).all()) and bool(torch.isfinite(cross).all()) and math.isfinite(energy)):
        return refuse("the normal equations are not finite")
    ridge = damping * float(gram.diagonal().mean()) if damping else 0.0
    system = gram + ridge * torch.eye(n, dtype=torch.float64)
    eig = torch.linalg.eigvalsh(system)
    top = float(eig[-1])
    rank = int((eig > n * torch.finfo(torch.float64).eps * top).sum()) if top > 0 else 0
    if rank < n:
        what = "A^T A + ridge" if ridge else "A^T A"
        return refuse(f"singular: {what} has numerical rank {rank} of {n} (smallest eigenvalue {float(eig[0]):.3g}, "
                      f"largest {top:.3g})")
    factor, info = torch.linalg.cholesky_ex(system)
    if int(info):
        return refuse(f"the Cholesky factorisation failed at pivot {int(info)}")
    weight = torch.cholesky_solve(cross, factor)
    if not bool(torch.isfinite(weight).all()):
        return refuse("the solution is not finite")
    step = weight - w0
    increase = float((step * (gram @ step)).sum()) - 2 * float((step * (cross - gram @ w0)).sum())
    after = before + increase
    if increase > ROUNDOFF * max(energy, 0.0):
        return refuse(f"the solution increases the sample error from {before:.6g} to {after:.6g}")
    return LayerSolve(weight, before, after, energy, equations.tokens)


def head_columns(heads: list[int], head_size: int) -> torch.Tensor:
    """The channels of W_O's input (long ``[len(heads) * head_size]``) of ``heads``, in order."""
    if not heads:
        return torch.zeros(0, dtype=torch.long)
    return torch.cat([torch.arange(h * head_size, (h + 1) * head_size) for h in heads])


@contextlib.contextmanager
def replaced_output_weights(model: nn.Module, weights: dict[int, torch.Tensor]) -> Iterator[None]:
    """Inside the block, the attention output projection of each layer of ``weights`` computes
    ``F.linear(u, weights[layer], b_O)`` instead of its own weight (a forward hook; the model is not changed)."""
    layout = get_layout(model)
    handles = []
    for layer, weight in weights.items():
        def replace(module, args, output, weight=weight):
            return F.linear(args[0], weight, module.bias)
        handles.append(layout.output_dense(layer).register_forward_hook(replace))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class OutputWeightTuner:
    """KPWT layer by layer (methods-2024 R1): :meth:`step` tunes layer 0, 1, ... in order, each with its mask row
    given then. The teacher is ``model`` with every head; the student is ``model`` under the rows given so far with
    the output weights tuned so far (:func:`replaced_output_weights`; ``model`` itself never changes). For layer l
    with kept heads P: A = the student's u (W_O's input, the channels of P) and B = y_T - x_S - b_O =
    (x_T - x_S) + W_O u_T over the non-padding tokens (y_T = x_T + W_O u_T + b_O, the teacher's pre-LayerNorm
    sum; the bias cancels, as the student's is the teacher's), in float64, summed over ``batches``; then
    :func:`kpwt_layer`.

    Each batch's inputs of the current layer, teacher's and student's, are cached and carried to the next layer
    (:class:`~headprune_bench.methods.mask_tuning.LayerChain`): per layer and batch one teacher pass of the layer,
    one student pass up to W_O and one full student pass, O(L) in all. When the chain does not reproduce a full
    forward pass, each layer's inputs are recomputed from the embeddings instead (``cached`` False, O(L^2)).
    """

    def __init__(self, model: nn.Module, batches: list[Batch], damping: float = 0.0):
        if not batches:
            raise ValueError("KPWT needs a calibration sample; the batch list is empty")
        self.model, self.batches, self.damping = model, batches, float(damping)
        self.layout = get_layout(model)
        shape = (self.layout.num_layers, self.layout.num_heads)
        self.mask = torch.ones(*shape)
        self.weights: dict[int, torch.Tensor] = {}
        self.chain = LayerChain(model, batches)
        self.cached = self.chain.reproduces_forward(torch.ones(*shape))
        first = [self.chain.first_input(i) for i in range(len(batches))] if self.cached else []
        self.inputs = [(x, x) for x in first]
        self.next_layer = 0

    def _captures(self, layer: int, index: int) -> tuple[LayerCapture, LayerCapture, torch.Tensor | None]:
        """(teacher's, student's capture of ``layer`` on batch ``index``, the teacher's next input or None)."""
        ones = torch.ones_like(self.mask)
        if self.cached:
            x_teacher, x_student = self.inputs[index]
            last = layer == self.layout.num_layers - 1
            out, teacher = self.chain.run(layer, index, x_teacher, ones, ctx=True, output=not last)
            _, student = self.chain.run(layer, index, x_student, self.mask, ctx=True, output=False)
            return teacher, student, out
        batch = self.batches[index]
        teacher = capture_layer(self.model, batch, ones, layer)
        with replaced_output_weights(self.model, self.weights):
            student = capture_layer(self.model, batch, self.mask, layer)
        return teacher, student, None

    def step(self, layer: int, row: torch.Tensor) -> LayerSolve | None:
        """Commit ``layer``'s mask row ``row`` (``[H]`` 0/1) and tune it (None when it keeps no head: skipped,
        the bias kept); an accepted solution goes into :attr:`weights` (the full ``[hidden, H*d]`` weight, the
        model's dtype and device), a refused one leaves the layer's columns untuned. Layers go in order.

        Raises:
            ValueError: ``layer`` is not the next one.
        """
        if layer != self.next_layer:
            raise ValueError(f"KPWT tunes the layers in order: expected layer {self.next_layer}, got {layer}")
        self.mask[layer] = row.detach().cpu().float()
        kept = [int(h) for h in torch.nonzero(self.mask[layer]).flatten()]
        dense = self.layout.output_dense(layer)
        last = layer == self.layout.num_layers - 1
        solve = None
        next_teacher: list[torch.Tensor | None] = [None] * len(self.inputs)
        if kept:
            cols = head_columns(kept, self.layout.head_size).to(dense.weight.device)
            teacher_weight = dense.weight.detach().double()
            equations = NormalEquations.zeros(len(cols), teacher_weight.shape[0], dense.weight.device)
            for i, batch in enumerate(self.batches):
                teacher, student, next_teacher_i = self._captures(layer, i)
                if self.cached:
                    next_teacher[i] = next_teacher_i
                tokens = batch["attention_mask"].bool()
                a = student.ctx[tokens][:, cols]
                b = (teacher.x[tokens].double() - student.x[tokens].double()
                     + teacher.ctx[tokens].double() @ teacher_weight.t())
                equations.add(a, b)
            solve = kpwt_layer(equations, teacher_weight[:, cols].t(), self.damping)
            if solve.weight is not None:
                weight = dense.weight.detach().clone()
                weight[:, cols] = solve.weight.t().to(weight.device, weight.dtype)
                self.weights[layer] = weight
        if self.cached and not last:
            carried = []
            for i, (x_teacher, x_student) in enumerate(self.inputs):
                teacher_out = next_teacher[i]
                if teacher_out is None:
                    teacher_out, _ = self.chain.run(layer, i, x_teacher, torch.ones_like(self.mask))
                with replaced_output_weights(self.model, {layer: self.weights[layer]} if layer in self.weights
                                             else {}):
                    student_out, _ = self.chain.run(layer, i, x_student, self.mask)
                carried.append((teacher_out, student_out))
            self.inputs = carried
        self.next_layer += 1
        return solve


def layer_trace(kept: int, solve: LayerSolve | None) -> dict[str, Any]:
    """One layer's entry in a KPWT trace: ``kept_heads`` and :meth:`LayerSolve.trace` (or ``status`` skipped)."""
    if solve is None:
        return {"kept_heads": kept, "status": "skipped: keeps no head (bias kept)"}
    return {"kept_heads": kept, **solve.trace()}


def failure_note(solve: LayerSolve) -> str:
    """The ``failed_layers`` entry of a refused solve."""
    return f"KPWT refused ({solve.failure}): the untuned columns kept"


@register_repair
class WeightsRepair(Repair):
    """K-prune's knowledge-preserving weight tuning (methods-2024 R1, docs/methods.md "K-prune"): for l = 0..L-1
    in order, earlier layers masked and tuned, the kept heads' columns of W_O,l are set to the least-squares
    solution matching the unpruned model's pre-LayerNorm sum (:class:`OutputWeightTuner`); b_O is unchanged. It
    runs in every layer that keeps a head, also those that keep all of them (as the official code); a layer that
    keeps none is skipped. A refused solve (:func:`kpwt_layer`: singular, not finite, or a larger sample error)
    keeps that layer's untuned columns and is named in ``failed_layers``.

    Options: damping (float, 0.0 = none, the official code): a ridge of ``damping * mean(diag(A^T A))`` on the
    normal equations."""

    name = "weights"
    summary = "K-prune's weight tuning: the kept heads' W_O columns re-solved by least squares, layer by layer"
    defaults = {"damping": 0.0}
    constraints = {"damping": Interval(0.0, None)}

    def repair(self, model: nn.Module, mask: torch.Tensor, context: RepairContext) -> RepairResult:
        """``output_weights`` ``{layer: [hidden, H*d] weight}`` (CPU, the model's dtype) of the layers tuned; trace:
        ``layers`` (per layer: heads kept, status, sample error before/after, target energy, tokens), ``solver``,
        ``damping``, ``tokens``, ``sample``, ``cached_layer_inputs``.

        Raises:
            ValueError: the calibration sample is empty.
        """
        if not context.batches:
            raise ValueError("repair 'weights' needs a calibration sample; RepairContext.batches is empty")
        tuner = OutputWeightTuner(model, context.batches, self.options["damping"])
        layers, failed = {}, {}
        for layer in range(tuner.layout.num_layers):
            solve = tuner.step(layer, mask[layer])
            layers[str(layer)] = layer_trace(int(mask[layer].sum()), solve)
            if solve is not None and solve.weight is None:
                failed[layer] = failure_note(solve)
        tokens = sum(int(b["attention_mask"].sum()) for b in context.batches)
        trace = {"solver": SOLVER, "damping": self.options["damping"], "tokens": tokens,
                 "sample": sum(int(b["input_ids"].shape[0]) for b in context.batches),
                 "cached_layer_inputs": tuner.cached, "tuned_layers": sorted(tuner.weights),
                 "failed_layers": sorted(failed), "layers": layers, "bias": "unchanged"}
        weights = {layer: w.detach().cpu() for layer, w in tuner.weights.items()}
        return RepairResult(output_weights=weights, failed_layers=failed, trace=trace)
