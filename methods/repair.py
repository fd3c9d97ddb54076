"""The repair stage, separate from selection: a :class:`Repair` takes the fine-tuned model and a selector's binary
``[L, H]`` mask and returns what evaluation and export apply on top of the mask (:class:`RepairResult`: head
scales, new attention-output weights or biases, or re-trained weights), from a calibration sample of the
train-derived split (:class:`RepairContext`), never dev. Repairs live in :mod:`headprune_bench.methods.repairs`, one
file each. See docs/heads.md ("Repairs").
"""
from __future__ import annotations

import abc
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from headprune_bench.methods.base import Batch, check_head_scales, check_mask
from headprune_bench.methods.heads import get_layout, scale_value_heads
from headprune_bench.methods.options import Interval, merge_options

CALIBRATION_SALT = 40
"""The generator salt of the calibration sample (:func:`calibration_indices`): Kwon et al.'s sample's, so that the
``scales`` repair of a ``kwon`` mask tunes on the very batches ``kwon`` did."""

CALIBRATION_DEFAULTS = {"sample_size": 2048, "batch_size": 32, "split": "train"}
"""The calibration sample every repair of a cell shares (one sample, so its activations are computed once)."""


def calibration_indices(num_examples: int, generator: torch.Generator, size: int) -> list[int]:
    """``min(size, num_examples)`` example indices drawn without replacement by ``generator``, in the order drawn
    (each batch of consecutive indices a random subset of the split).

    Raises:
        ValueError: ``num_examples`` is 0, or ``size`` < 1.
    """
    if num_examples <= 0:
        raise ValueError("the calibration split is empty")
    if size < 1:
        raise ValueError(f"a calibration sample needs at least 1 example, got sample_size={size}")
    return torch.randperm(num_examples, generator=generator)[: min(size, num_examples)].tolist()


@dataclass
class RepairContext:
    """What a repair may read besides the model and the mask (built by the runner, or by a test).

    Attributes:
        batches: the calibration sample in fixed batches (:data:`~headprune_bench.methods.base.Batch`, on
            ``device``), from the train-derived split; the same list for every repair of a cell.
        seed: the cell's seed. scores: the selector's ``[L, H]`` scores (higher = keep) or None.
        fine_tune: ``fine_tune(model, mask=None, **overrides) -> nn.Module`` (``PruningContext.fine_tune``), for a
            repair that re-trains; None where the caller offers none.
        device, precision, log: as :class:`~headprune_bench.methods.base.PruningContext`'s.
        shared: activations computed once per (model, batches) and read by several repairs (a repair stores
            what others may reuse under a documented key; :func:`shared_value`).
    """

    batches: list[Batch]
    seed: int = 0
    scores: torch.Tensor | None = None
    fine_tune: Callable[..., nn.Module] | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    precision: str = "fp32"
    log: Callable[[str], None] = lambda message: None
    shared: dict[str, Any] = field(default_factory=dict)


def shared_value(context: RepairContext, key: str, compute: Callable[[], Any]) -> Any:
    """``context.shared[key]``, computed by ``compute()`` the first time it is asked for."""
    if key not in context.shared:
        context.shared[key] = compute()
    return context.shared[key]


@dataclass
class RepairResult:
    """What a repair returns; the mask itself never changes.

    Attributes:
        head_scales: float64 ``[L, H]`` multiplier of each kept head's output (0 at pruned heads), or None.
        output_weights: ``{layer: W_O weight}``, the new weight of that layer's attention output projection in the
            unpruned layout (``[hidden, H*d]``; the pruned heads' columns are masked anyway).
        output_biases: ``{layer: b_O}``, the new bias ``[hidden]`` of that projection.
        model: re-trained weights (the model itself, the mask fixed), or None.
        failed_layers: ``{layer: what failed and what was used instead}``; empty when every layer's repair ran.
        trace: JSON-serialisable details, stored in the record.
    """

    head_scales: torch.Tensor | None = None
    output_weights: dict[int, torch.Tensor] = field(default_factory=dict)
    output_biases: dict[int, torch.Tensor] = field(default_factory=dict)
    model: nn.Module | None = None
    failed_layers: dict[int, str] = field(default_factory=dict)
    trace: dict[str, Any] = field(default_factory=dict)

    @property
    def changes(self) -> list[str]:
        """What the result changes: a sublist of ``["head scales", "output weights", "output bias", "weights"]``."""
        named = [("head scales", self.head_scales is not None), ("output weights", bool(self.output_weights)),
                 ("output bias", bool(self.output_biases)), ("weights", self.model is not None)]
        return [name for name, present in named if present]


class Repair(abc.ABC):
    """Base class of every repair: set the class attributes, implement :meth:`repair`.

    Class attributes:
        name: registry name (lower case, dashes). summary: one line for ``bench list``.
        defaults: ``{option: JSON default}``; constraints: ``{option: Interval | tuple}`` (as ``HeadPruner``'s).
        needs_calibration: reads ``context.batches`` (False: the runner builds no sample for it).
        retrains: re-trains the model (its result carries ``model``); ``needs_scores``: reads ``context.scores``.

    Raises:
        OptionError: unknown option, wrong type, or a value outside its constraint.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    constraints: ClassVar[dict[str, Interval | tuple]] = {}
    needs_calibration: ClassVar[bool] = True
    needs_scores: ClassVar[bool] = False
    retrains: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        self.options: dict[str, Any] = merge_options("repair", self.name, self.defaults, options, self.constraints)

    def get_options(self) -> dict[str, Any]:
        """The repair's options (defaults merged with what the constructor got), JSON-serialisable."""
        return copy.deepcopy(self.options)

    @abc.abstractmethod
    def repair(self, model: nn.Module, mask: torch.Tensor, context: RepairContext) -> RepairResult:
        """Repair ``model`` (the fine-tuned base model, eval mode; left untouched unless the result carries it as
        ``model``) pruned by ``mask`` (``[L, H]`` 0/1, 1 = keep) from ``context``; a :class:`RepairResult`."""

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}({opts})"


def apply_repair(model: nn.Module, mask: torch.Tensor, result: RepairResult) -> tuple[nn.Module, torch.Tensor]:
    """The model and the binary ``[L, H]`` mask that evaluation applies after ``result``: ``result.model`` when it
    re-trained, else ``model``, changed **in place** (pass a copy): the new output weights and biases written, and
    ``result.head_scales`` folded into the kept heads' value rows (as a scaled mask; the suite's evaluation of a
    scaled result since Kwon et al.'s ``kwon``). ``mask`` is returned as a float32 CPU tensor.

    Raises:
        ValueError: a weight or bias of the wrong shape, a layer out of range, or scales that do not fit the mask.
    """
    layout = get_layout(model)
    mask = check_mask(mask, layout.num_layers, layout.num_heads, "repair mask")
    target = result.model if result.model is not None else model
    target_layout = get_layout(target)
    with torch.no_grad():
        for kind, values in (("weight", result.output_weights), ("bias", result.output_biases)):
            for layer, value in values.items():
                if not 0 <= int(layer) < layout.num_layers:
                    raise ValueError(f"repair output {kind} for layer {layer}: the model has {layout.num_layers}")
                param = getattr(target_layout.output_dense(int(layer)), kind)
                if param is None or tuple(param.shape) != tuple(value.shape):
                    shape = None if param is None else list(param.shape)
                    raise ValueError(f"repair output {kind} of layer {layer}: expected shape {shape}, got "
                                     f"{list(value.shape)}")
                param.copy_(value.to(param.device, param.dtype))
    if result.head_scales is not None:
        scales = check_head_scales(result.head_scales, mask, "repair head_scales")
        scale_value_heads(target, torch.where(mask == 1, scales, 1.0))
    return target, mask
