"""The stages of Kwon et al. 2022, "A Fast Post-Training Pruning Framework for Transformers" (NeurIPS 2022), for
heads: mask gradients and their diagonal Fisher (§4.1), Fisher-based rearrangement (§4.2) and mask tuning by
least squares (§4.3). Official code: WoosukKwon/retraining-free-pruning. See docs/methods.md ("Kwon et al. 2022").
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from scipy.sparse.linalg import lsmr
from torch import nn

from headprune_bench.methods.base import Batch, autograd_batch, autograd_enabled, model_inputs
from headprune_bench.methods.heads import apply_head_mask, get_layout

MAX_SCALE = 10.0
"""Tuning stops when a solved scale leaves [-10, 10] (``prune/rescale.py`` ``rescale_mask``)."""


def mask_gradients(model: nn.Module, batches: Iterable[Batch], num_layers: int, num_heads: int,
                   autocast=contextlib.nullcontext) -> torch.Tensor:
    """One gradient of the mean cross-entropy of each minibatch with respect to an all-ones ``[L, H]`` head mask
    (official ``prune/fisher.py`` ``collect_mask_grads``: eval mode, weights frozen, labels in the loss); the
    forward passes under ``autocast`` (``PruningContext.autocast``), the loss and gradient in float32.

    Gradients are enabled inside, so a caller's ``torch.no_grad()`` or ``inference_mode()`` does not matter; the
    weights get none.

    Returns:
        float64 ``[num_batches, L, H]``.

    Raises:
        ValueError: ``batches`` is empty.
    """
    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    grads = []
    try:
        with autograd_enabled():
            for batch in map(autograd_batch, batches):
                gates = torch.ones(num_layers, num_heads, device=batch["input_ids"].device, requires_grad=True)
                with apply_head_mask(model, gates), autocast():
                    logits = model(**model_inputs(batch)).logits
                loss = F.cross_entropy(logits.float(), batch["labels"])
                (grad,) = torch.autograd.grad(loss, gates)
                grads.append(grad.detach().double().cpu())
    finally:
        for p in frozen:
            p.requires_grad_(True)
    if not grads:
        raise ValueError("kwon: the sample gave no batch")
    return torch.stack(grads)


def fisher_information(grads: torch.Tensor) -> torch.Tensor:
    """Diagonal empirical Fisher ``I_h = sum_b g_bh^2`` of ``[B, ...]`` minibatch gradients (official
    ``compute_fisher_info``; Eq. 6 of the paper with one gradient per minibatch). Returns ``grads.shape[1:]``."""
    return grads.pow(2).sum(dim=0)


def rearrange_objective(pruned: list[int], grads: torch.Tensor) -> float:
    """``sum_b (sum_{i in pruned} g_bi)^2``, the block-diagonal Fisher form ``z^T F z`` of one layer (§4.2) for
    ``grads`` ``[B, H]`` and the pruned heads' indices."""
    if not pruned:
        return 0.0
    return float(grads[:, pruned].sum(dim=1).pow(2).sum())


def greedy_rearrange(layer_mask: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """One layer's mask rearranged with its count fixed (official ``prune/rearrange.py`` ``greedy_rearrange``):
    start from the lowest-Fisher heads as the pruned set; for every other head in increasing Fisher, add it and
    drop the member whose removal leaves the smallest :func:`rearrange_objective` (ties: the first).

    Args:
        layer_mask: ``[H]`` 0/1 (1 keep). grads: ``[B, H]`` minibatch gradients of that layer.

    Returns:
        float32 ``[H]`` 0/1 mask with as many zeros as ``layer_mask``.
    """
    heads = layer_mask.numel()
    n_pruned = int((layer_mask == 0).sum())
    if n_pruned in (0, heads):
        return layer_mask.detach().cpu().float().clone()
    g = grads.detach().cpu().double().t()  # [H, B]
    order = torch.sort(g.pow(2).sum(dim=1), stable=True).indices.tolist()
    pruned = order[:n_pruned]
    for head in order[n_pruned:]:
        pruned.append(head)
        vectors = g[pruned]  # [n + 1, B]
        without = vectors.sum(dim=0) - vectors  # each row: the sum with one member left out
        del pruned[int(without.pow(2).sum(dim=1).argmin())]
    mask = torch.ones(heads)
    mask[pruned] = 0.0
    return mask


def rearrange(mask: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """:func:`greedy_rearrange` of every layer of an ``[L, H]`` mask with ``[B, L, H]`` gradients (official
    ``rearrange_mask``). Returns float32 ``[L, H]``, each layer's count unchanged."""
    return torch.stack([greedy_rearrange(mask[layer], grads[:, layer]) for layer in range(mask.shape[0])])


def teacher_heads_kept(total: int, kept: int) -> int:
    """Heads the tuning teacher keeps: the search at the square root of the student's constraint (official
    ``utils/schedule.py`` ``get_pruning_schedule(c, 2)[0]``), with the constraint the share of heads kept: the
    most heads that fit under ``sqrt(kept / total)`` of them."""
    return min(total, math.floor(total * math.sqrt(kept / total) + 1e-9))


def official_lsmr_maxiter(m: int, n: int) -> int:
    """The iteration limit of the official solver: it calls CuPy's ``cupyx.scipy.sparse.linalg.lsmr`` without
    ``maxiter``, whose default is ``5 * min(m, n)`` for an ``m x n`` system (SciPy's default is ``min(m, n)``)."""
    return 5 * min(m, n)


def solve_scales(ata: torch.Tensor, atb: torch.Tensor, damp: float = 1.0,
                 maxiter: int = 0) -> tuple[torch.Tensor, int]:
    """The official solver (``utils/linalg.py`` ``lsmr_cupy_solver``): ``s = 1 + x`` with ``x`` LSMR's minimiser of
    ``||ata x - (atb - ata 1)||^2 + damp^2 ||x||^2`` (a ridge toward 1), default tolerances; ``maxiter`` LSMR
    iterations (0: the official code's limit, CuPy's default ``5 n`` for the ``n x n`` system,
    :func:`official_lsmr_maxiter`), in float64 (the official code: CuPy on A's float32).

    Returns:
        (float64 ``[n]`` s, LSMR's ``istop``; the official code accepts ``istop < 3``).
    """
    ata = ata.detach().cpu().double()
    rhs = atb.detach().cpu().double() - ata.sum(dim=1)
    if rhs.numel() == 1:
        return 1.0 + rhs / ata[0, 0], 1
    limit = maxiter or official_lsmr_maxiter(*ata.shape)
    out = lsmr(ata.numpy(), rhs.numpy(), damp=damp, maxiter=limit)
    return 1.0 + torch.from_numpy(np.asarray(out[0], dtype=np.float64)), int(out[1])


class _Stop(Exception):
    """Raised by a capture hook to end a forward pass once the layer it needs has run."""


@dataclass
class LayerCapture:
    """Layer ``layer``'s input hidden states ``x`` ``[B, T, D]`` and the head outputs that enter its attention
    output projection, before any gate, ``ctx`` ``[B, T, H*d]``, of one forward pass stopped there."""

    layer: int
    x: torch.Tensor | None = None
    ctx: torch.Tensor | None = None


def capture_layer(model: nn.Module, batch: Batch, mask: torch.Tensor, layer: int) -> LayerCapture:
    """Run ``model`` with the ``[L, H]`` (scaled) head ``mask`` up to layer ``layer``'s attention output
    projection and return what enters it (:class:`LayerCapture`), in eval mode without gradients."""
    layout = get_layout(model)
    seen = LayerCapture(layer)

    def take_input(module, args, kwargs):
        seen.x = (args[0] if args else kwargs["hidden_states"]).detach()

    def take_ctx(module, args):
        seen.ctx = args[0].detach()
        raise _Stop

    handles = [layout.encoder_layers()[layer].register_forward_pre_hook(take_input, with_kwargs=True)]
    with apply_head_mask(model, mask):
        handles.append(layout.output_dense(layer).register_forward_pre_hook(take_ctx, prepend=True))  # before the gate
        try:
            with torch.no_grad():
                model(**model_inputs(batch))
        except _Stop:
            pass
        finally:
            for handle in handles:
                handle.remove()
    return seen


def layer_normal_equations(dense: nn.Linear, teacher: LayerCapture, student: LayerCapture,
                           teacher_row: torch.Tensor, kept: list[int], token_mask: torch.Tensor,
                           head_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``A^T A`` and ``A^T B`` of one batch for one layer (official ``prune/rescale.py`` ``get_mha_lstsq``), over
    the non-padding tokens: A has a column per kept head, ``ctx_h W_O,h`` flattened over tokens and hidden units,
    and a column of ones; B = (teacher's ``W_O ctx + b_O + x``) - ``b_O`` - the student's ``x``: the pre-LayerNorm
    residual sum the kept heads should reproduce. ``teacher_row``: the teacher's ``[H]`` gates of this layer.

    Returns:
        float64 ``[k + 1, k + 1]`` and ``[k + 1]``, k = ``len(kept)``.
    """
    tokens = token_mask.bool()
    weight = dense.weight.detach().double()  # [D, H*d]
    bias = dense.bias.detach().double() if dense.bias is not None else 0.0
    heads = weight.shape[1] // head_size
    t_ctx = teacher.ctx[tokens].double().view(-1, heads, head_size) * teacher_row.double().to(weight.device)[:, None]
    target = t_ctx.reshape(t_ctx.shape[0], -1) @ weight.t() + bias + teacher.x[tokens].double()  # [N, D]
    b = target - bias - student.x[tokens].double()
    s_ctx = student.ctx[tokens].double().view(-1, heads, head_size)
    w_heads = weight.view(weight.shape[0], heads, head_size)
    outputs = torch.einsum("nkd,ekd->kne", s_ctx[:, kept], w_heads[:, kept])  # [k, N, D]
    k = len(kept)
    ata = torch.empty(k + 1, k + 1, dtype=torch.float64)
    atb = torch.empty(k + 1, dtype=torch.float64)
    ata[:k, :k] = torch.einsum("ine,jne->ij", outputs, outputs).cpu()
    ata[:k, k] = ata[k, :k] = outputs.sum(dim=(1, 2)).cpu()
    ata[k, k] = float(b.numel())
    atb[:k] = torch.einsum("ine,ne->i", outputs, b).cpu()
    atb[k] = float(b.sum())
    return ata, atb


def _hidden_of(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


class LayerChain:
    """The encoder's layers run one at a time on cached inputs, as the official code's ``collect_layer_inputs``:
    for each batch, what the encoder gives layer 0 (its hidden states and the other arguments: attention mask,
    DeBERTa's relative positions, ...) is captured once; layer ``l`` then runs on the hidden states that layer
    ``l - 1`` returned, with layer 0's other arguments. This assumes the encoder hands each layer's output to the
    next unchanged and gives every layer the same other arguments; :meth:`reproduces_forward` checks it (DeBERTa-v2
    with ``conv_kernel_size`` adds a convolution after layer 0, which breaks it). Passes run without gradients
    under the head mask each call is given; the model's mode is the caller's (eval).
    """

    def __init__(self, model: nn.Module, batches: list[Batch]):
        self.model, self.batches = model, batches
        self.layout = get_layout(model)
        self.layers = self.layout.encoder_layers()
        self.entries = [self._entry(batch) for batch in batches]

    def _entry(self, batch: Batch) -> tuple[tuple, dict]:
        seen: dict = {}

        def take(module, args, kwargs):
            seen["args"], seen["kwargs"] = args, kwargs
            raise _Stop

        handle = self.layers[0].register_forward_pre_hook(take, with_kwargs=True)
        try:
            with torch.no_grad():
                self.model(**model_inputs(batch))
        except _Stop:
            pass
        finally:
            handle.remove()
        return seen["args"], seen["kwargs"]

    def first_input(self, index: int) -> torch.Tensor:
        """Layer 0's input hidden states of batch ``index`` (the embeddings' output: no head mask acts there)."""
        return _hidden_of(*self.entries[index]).detach()

    def run(self, layer: int, index: int, hidden: torch.Tensor, mask: torch.Tensor, ctx: bool = False,
            output: bool = True) -> tuple[torch.Tensor | None, LayerCapture | None]:
        """Layer ``layer`` on batch ``index``'s input hidden states ``hidden`` under the ``[L, H]`` head ``mask``.

        Returns:
            (with ``output``, the layer's output hidden states, else None: the pass stops at the layer's attention
            output projection; with ``ctx``, :class:`LayerCapture` of ``hidden`` and what enters that projection
            before any gate, else None).
        """
        args, kwargs = self.entries[index]
        args, kwargs = ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": hidden})
        seen = LayerCapture(layer, x=hidden)

        def take_ctx(module, inputs):
            seen.ctx = inputs[0].detach()
            if not output:
                raise _Stop

        out = None
        with torch.no_grad(), apply_head_mask(self.model, mask):
            handle = None
            if ctx or not output:  # (registered after the gate's hook, prepended: it sees W_O's input ungated)
                handle = self.layout.output_dense(layer).register_forward_pre_hook(take_ctx, prepend=True)
            try:
                out = self.layers[layer](*args, **kwargs)
            except _Stop:
                pass
            finally:
                if handle is not None:
                    handle.remove()
        if out is not None:
            out = (out[0] if isinstance(out, (tuple, list)) else out).detach()
        return out, (seen if ctx else None)

    def reproduces_forward(self, mask: torch.Tensor, index: int = 0) -> bool:
        """Whether chaining the layers from batch ``index``'s layer-0 input gives every layer the input that a full
        forward pass under ``mask`` gives it. A structural check, not a numerical one: both run the same operations
        on the same values, so in float32 they agree to rounding (a few units of 1e-7 of the hidden states' size);
        an encoder that changes the hidden states between layers (a convolution, other arguments per layer) moves
        them by a share of their size. The tolerance, 1e-4 of the largest value, lies between the two."""
        expected: list[torch.Tensor] = []

        def take(module, args, kwargs):
            expected.append(_hidden_of(args, kwargs).detach())

        handles = [layer.register_forward_pre_hook(take, with_kwargs=True) for layer in self.layers]
        try:
            with torch.no_grad(), apply_head_mask(self.model, mask):
                self.model(**model_inputs(self.batches[index]))
        finally:
            for handle in handles:
                handle.remove()
        if len(expected) != len(self.layers):
            return False
        hidden = self.first_input(index)
        for layer, wanted in enumerate(expected):
            if hidden.shape != wanted.shape:
                return False
            if float((hidden - wanted).abs().max()) > 1e-4 * float(wanted.abs().max()):
                return False
            if layer + 1 < len(self.layers):
                hidden, _ = self.run(layer, index, hidden, mask)
        return True


@dataclass
class Tuning:
    """What :func:`tune_scales` did: the scaled ``[L, H]`` mask, the layers tuned, and where and why it stopped;
    ``cached_inputs``: whether the layer inputs were carried layer to layer (else recomputed per layer)."""

    scales: torch.Tensor
    tuned: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    stopped_at: int | None = None
    reason: str = ""
    istop: dict[int, int] = field(default_factory=dict)
    cached_inputs: bool = True


def tune_scales(model: nn.Module, batches: list[Batch], mask: torch.Tensor, teacher: torch.Tensor,
                maxiter: int = 0) -> Tuning:
    """Mask tuning (§4.3; official ``rescale_mask`` with FFN rescaling off): layer by layer from layer 1 (layer 0's
    attention is never tuned, as the code), the kept heads' scales of the layer solve :func:`solve_scales` on the
    normal equations of :func:`layer_normal_equations` summed over ``batches``, the student's inputs propagated
    through its already tuned layers and the teacher's through its own mask. A failed solve (``istop >= 3``) or a
    scale outside ``[-MAX_SCALE, MAX_SCALE]`` stops the tuning: that layer and the later ones keep scale 1.

    As in the official code, each batch's inputs of the current layer are cached, teacher's and student's, and
    carried to the next layer by one pass of the layer (:class:`LayerChain`): at most 3 layer passes per layer and
    batch, O(L). When the chain does not reproduce a full forward pass (:meth:`LayerChain.reproduces_forward`),
    each layer's inputs are recomputed from the embeddings instead (:func:`capture_layer`, O(L^2);
    ``Tuning.cached_inputs`` False). Both give the same inputs, hence the same normal equations.

    Args:
        model: the fine-tuned model (eval mode; its weights are not changed). batches: the sample, kept in memory;
            the cache adds two ``[B, T, D]`` hidden states per batch.
        mask: the student's ``[L, H]`` 0/1 mask. teacher: the teacher's ``[L, H]`` 0/1 mask.
        maxiter: LSMR's iterations (:func:`solve_scales`).

    Returns:
        :class:`Tuning`; ``scales`` is float64 ``[L, H]``, 0 at the pruned heads.

    Raises:
        ValueError: ``batches`` is empty.
    """
    if not batches:
        raise ValueError("kwon: the tuning got no batch")
    layout = get_layout(model)
    scales = mask.detach().cpu().double().clone()
    result = Tuning(scales=scales)
    chain = LayerChain(model, batches)
    cached = result.cached_inputs = chain.reproduces_forward(teacher)
    inputs = [(chain.first_input(i), chain.first_input(i)) for i in range(len(batches))] if cached else []
    last = mask.shape[0] - 1
    for layer in range(mask.shape[0]):
        kept = [int(h) for h in torch.nonzero(mask[layer]).flatten()]
        if layer and not kept:
            result.skipped.append(layer)
        next_teacher: list[torch.Tensor | None] = [None] * len(inputs)
        if layer and kept:
            dense = layout.output_dense(layer)
            ata = torch.zeros(len(kept) + 1, len(kept) + 1, dtype=torch.float64)
            atb = torch.zeros(len(kept) + 1, dtype=torch.float64)
            for i, batch in enumerate(batches):
                if cached:  # the teacher's pass also gives its next input; the student's waits for the scales
                    next_teacher[i], seen_t = chain.run(layer, i, inputs[i][0], teacher, ctx=True,
                                                        output=layer < last)
                    _, seen_s = chain.run(layer, i, inputs[i][1], scales, ctx=True, output=False)
                else:
                    seen_t = capture_layer(model, batch, teacher, layer)
                    seen_s = capture_layer(model, batch, scales, layer)
                a, b = layer_normal_equations(dense, seen_t, seen_s, teacher[layer], kept, batch["attention_mask"],
                                              layout.head_size)
                ata += a
                atb += b
            solution, istop = solve_scales(ata, atb, maxiter=maxiter)
            result.istop[layer] = istop
            if istop >= 3:
                result.stopped_at, result.reason = layer, f"LSMR istop {istop} >= 3"
                break
            solution = solution[:-1]
            largest = float(solution.abs().max())
            if largest > MAX_SCALE:
                result.stopped_at, result.reason = layer, f"a scale of {largest:.3g} > {MAX_SCALE:g}"
                break
            scales[layer, kept] = solution
            result.tuned.append(layer)
        if cached and layer < last:  # the next layer's inputs: the teacher's under its mask, the student's tuned
            inputs = [(chain.run(layer, i, x_teacher, teacher)[0] if next_teacher[i] is None else next_teacher[i],
                       chain.run(layer, i, x_student, scales)[0]) for i, (x_teacher, x_student) in enumerate(inputs)]
    return result
