"""The interface every head-pruning method implements: :class:`HeadPruner`, its :class:`PruningContext` and
:class:`PruningResult`, and mask helpers. See docs/heads.md ("The method interface")."""
from __future__ import annotations

import abc
import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from headprune_bench.methods.options import Interval, OptionError, merge_options

Batch = dict[str, torch.Tensor]
"""One batch on the run's device: ``input_ids``, ``attention_mask``, ``token_type_ids`` (all ``[B, T]`` long)
and ``labels`` (``[B]`` long)."""

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
"""The keys of a :data:`Batch` that the model's forward takes (``labels`` is left to the method)."""

SPLITS = ("mini_train", "mini_dev", "train")
"""Splits a method may read; ``train`` = mini_train + mini_dev (the train-derived pool). Never the GLUE dev split."""


@dataclass
class PruningContext:
    """Everything a method may use besides the model (built by the runner, or by a test).

    Attributes:
        task, primary_metric: GLUE task name; the metric ``evaluate`` returns first (``"accuracy"``, or
            ``"matthews_correlation"`` for CoLA). Branch on the metric, never on the task.
        seed: the cell's seed, source of every random choice. num_layers, num_heads: the mask's ``[L, H]``.
        target_heads: heads to prune, or ``None`` when the method decides. target_per_layer: optional ``[L]`` counts.
        batches: ``batches(split, batch_size=32, shuffle=False, seed=None, indices=None) -> Iterator[Batch]`` over a
            split of :data:`SPLITS` (optionally its example ``indices``, in order); tensors on ``device``.
        num_examples: ``num_examples(split) -> int``.
        evaluate: ``evaluate(model, mask=None, split="mini_dev", indices=None) -> dict[str, float]``, metrics as
            fractions (MCC in [-1, 1]), primary first; eval mode, no gradients, ``[L, H]`` ``mask`` applied.
        fine_tune: ``fine_tune(model, mask=None, split="mini_train", indices=None, eval_split="mini_dev",
            eval_indices=None, **overrides) -> nn.Module``, in place, mask fixed; ``overrides``: ``epochs``, ``lr``,
            ``batch_size``, ``early_stopping``, ``patience``, ``evals_per_epoch``, ``warmup_ratio``, ``weight_decay``.
        compute_metrics: ``compute_metrics(predictions [N] int, labels [N] int) -> dict[str, float]``.
        load_pretrained: ``() -> nn.Module``, the pre-trained encoder with a classification head, or ``None``.
        tokenizer_info: ``{"vocab_size", "cls_token_id", "sep_token_id", "pad_token_id", "special_ids"}``.
        device: the run's device. log: ``log(message)``. count_backward: ``count_backward(n)``, examples of
            backward passes run outside ``fine_tune``.
        precision: the run's ``--precision`` (``fp32`` or ``bf16``); ``evaluate`` and ``fine_tune`` use it, and a
            method's own forward passes take it through :meth:`autocast`.
        min_heads_per_layer: the run's per-layer floor (``--min-heads-per-layer``; 0: none). The runner moves every
            mask to it after the method; a method that repairs its own mask (``own_repair``) moves its mask
            before repairing (:func:`apply_layer_floor`), so that its repair belongs to the mask evaluated.
    """

    task: str
    primary_metric: str
    seed: int
    num_layers: int
    num_heads: int
    batches: Callable[..., Iterator[Batch]]
    num_examples: Callable[[str], int]
    evaluate: Callable[..., dict[str, float]]
    fine_tune: Callable[..., nn.Module]
    target_heads: int | None = None
    target_per_layer: list[int] | None = None
    load_pretrained: Callable[[], nn.Module] | None = None
    compute_metrics: Callable[..., dict[str, float]] | None = None
    tokenizer_info: dict[str, Any] = field(default_factory=dict)
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    log: Callable[[str], None] = lambda message: None
    count_backward: Callable[[int], None] = lambda examples: None
    precision: str = "fp32"
    min_heads_per_layer: int = 0

    def autocast(self) -> torch.autocast:
        """The context of a method's own forward passes (the loss included; the backward pass outside it):
        ``torch.autocast(device, bfloat16)`` under ``precision="bf16"``, a no-op under ``fp32``."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16")

    @property
    def total_heads(self) -> int:
        """``num_layers * num_heads``, the number of heads of the unpruned model."""
        return self.num_layers * self.num_heads

    def generator(self, salt: int = 0) -> torch.Generator:
        """A CPU ``torch.Generator`` seeded from ``seed`` (and ``salt``, to give independent streams)."""
        g = torch.Generator()
        g.manual_seed(int(self.seed) * 1_000_003 + int(salt))
        return g


@dataclass
class PruningResult:
    """What a method returns.

    Attributes:
        mask: float32 ``[L, H]``, 1 = keep, 0 = prune. scores: optional ``[L, H]`` (higher = more important).
        retrained: True when the method changed the weights; ``model`` then holds them (else None).
        trace: JSON-serialisable details of the run, stored in the record.
        head_scales: optional ``[L, H]`` float multiplier of each kept head's output (a scaled mask, e.g. Kwon et
            al.'s tuned mask; 0 at pruned heads); None: every kept head whole. ``mask`` stays the binary mask that
            says what was pruned; evaluation, recovery and export apply the scales.
    """

    mask: torch.Tensor
    scores: torch.Tensor | None = None
    retrained: bool = False
    model: nn.Module | None = None
    trace: dict[str, Any] = field(default_factory=dict)
    head_scales: torch.Tensor | None = None

    @property
    def heads_pruned(self) -> int:
        """Number of zeros in ``mask``."""
        return int((self.mask == 0).sum().item())


class HeadPruner(abc.ABC):
    """Base class of every pruning method: set the class attributes, implement :meth:`prune`.

    Class attributes (docs/heads.md, "Class attributes", says what each one changes):
        name: registry name (lower case, dashes). summary: one line for ``bench list``.
        defaults: ``{option: JSON default}``; the constructor accepts exactly these names and checks their types.
        constraints: ``{option: Interval | tuple of allowed values}``, required for every int, float and str option
            (``choices``: older spelling of tuple constraints).
        exact_budget: prunes exactly ``context.target_heads``. needs_target: cannot run without it.
        own_budget: never reads ``target_heads`` (one ``own`` cell per task and seed). reconstruction: no official code.
        ablation_of, in_methods_all: ablation parent; whether ``--methods all`` selects it (None: not if ablation).
        report_order, report_color: position and ``"#RRGGBB"`` in reports. conformance_options: fast check options.

    Raises:
        OptionError: unknown option, wrong type, value outside its constraint, or a broken :meth:`check_options` rule.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    exact_budget: ClassVar[bool] = True
    needs_target: ClassVar[bool] = True
    own_budget: ClassVar[bool] = False
    reconstruction: ClassVar[bool] = False
    ablation_of: ClassVar[str | None] = None
    in_methods_all: ClassVar[bool | None] = None
    choices: ClassVar[dict[str, tuple]] = {}
    constraints: ClassVar[dict[str, Interval | tuple]] = {}
    report_order: ClassVar[int | None] = None
    report_color: ClassVar[str | None] = None
    conformance_options: ClassVar[dict[str, Any]] = {}

    def __init__(self, **options: Any) -> None:
        constraints = {**{k: tuple(v) for k, v in self.choices.items()}, **self.constraints}
        self.options: dict[str, Any] = merge_options("method", self.name, self.defaults, options, constraints)
        self.check_options()

    def check_setup(self, num_layers: int, num_heads: int, target_heads: int | None, model_config: Any) -> None:
        """Checks that need the model (``[L, H]`` = ``num_layers, num_heads``; its HF ``model_config``) and the
        budget (``target_heads``, or None when not known yet), run before any training; the default checks the
        option ``min_heads_per_layer``. Override and call ``super()``. Raises OptionError naming the option."""
        floor = self.options.get("min_heads_per_layer")
        if floor is None:
            return
        if floor > num_heads:
            raise OptionError(f"{self.name}: option min_heads_per_layer ({floor}) exceeds the model's {num_heads} "
                              f"heads per layer")
        if target_heads is not None and target_heads > num_layers * (num_heads - floor):
            raise OptionError(f"{self.name}: option min_heads_per_layer={floor} cannot be met: cannot prune "
                              f"{target_heads} of {num_layers * num_heads} heads while keeping {floor} in each of "
                              f"{num_layers} layers")

    def check_options(self) -> None:  # noqa: B027 - an optional hook: no rule unless a method adds one
        """Cross-option rules, run at construction after ``constraints``; raise :class:`OptionError`."""

    def changes_weights(self) -> bool:
        """Whether :meth:`prune` with these options returns re-trained weights (``PruningResult.retrained``); the
        runner then adds the condition ``own-fine-tuning`` (docs/protocol.md §4). Default: False."""
        return False

    def own_repair(self) -> str | None:
        """The repair this method applies to its own mask with these options (``kwon``: ``"scales"``), or None
        when its prune-only result is a plain mask on the base weights; ``bench run --repair`` repairs only the
        latter and skips the former, saying so (with :meth:`selection_alone`). Default: None."""
        return None

    def selection_alone(self) -> str:
        """How to run this method's selection without its own repair, for the line ``--repair`` prints when it
        skips the method (``kwon``: ``kwon-rearrange``); empty when there is no such way. Default: empty."""
        return ""

    def ranks_once(self) -> bool:
        """Whether, with these options, :meth:`prune`'s mask at any fixed target K is :meth:`mask_at` of its
        ``scores``, and the scores do not depend on K: a sweep then scores once per (task, seed) and derives every
        level's mask (``check_pruner`` checks it against separate runs; docs/extending.md). Default: False."""
        return False

    def mask_at(self, result: PruningResult, target_heads: int) -> PruningResult:
        """The result :meth:`prune` would give at ``target_heads``, from ``result`` (a prune at another level) of a
        method that :meth:`ranks_once`: by default the ``target_heads`` lowest ``scores``
        (:func:`lowest_k_mask` with the option ``min_heads_per_layer``), same scores and trace.

        Raises:
            ValueError: ``result`` has no scores, or the target is unreachable.
        """
        if result.scores is None:
            raise ValueError(f"{self.name}: mask_at needs the scores of a prune result")
        mask = lowest_k_mask(result.scores, int(target_heads), self.options.get("min_heads_per_layer", 0))
        return PruningResult(mask=mask, scores=result.scores, trace=copy.deepcopy(result.trace))

    def require_target(self, context: PruningContext) -> int:
        """``context.target_heads`` of a method that needs a budget.

        Raises:
            ValueError: no target (the message names ``--budget``), or one outside ``[0, L*H]``.
        """
        if context.target_heads is None:
            raise ValueError(f"method '{self.name}' needs a budget: give --budget heads:K, fraction:F or matched:M")
        target, total = int(context.target_heads), context.total_heads
        if not 0 <= target <= total:
            raise ValueError(f"{self.name}: cannot prune {target} of {total} heads")
        return target

    def get_options(self) -> dict[str, Any]:
        """The method's options (defaults merged with what the constructor got), JSON-serialisable."""
        return copy.deepcopy(self.options)

    @abc.abstractmethod
    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """Choose heads to prune: a :class:`PruningResult` with an ``[L, H]`` mask. ``model`` (the fine-tuned base
        model) must stay untouched unless the result says ``retrained``; ``context``: :class:`PruningContext`."""

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}({opts})"


def model_inputs(batch: Batch) -> dict[str, torch.Tensor]:
    """The model's inputs of a batch (:data:`MODEL_INPUTS`), without ``labels``."""
    return {k: batch[k] for k in MODEL_INPUTS if k in batch}


@contextlib.contextmanager
def seeded_torch_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Seed torch's global RNG (dropout) inside the block; the caller's CPU (and ``device``'s CUDA) state is
    restored afterwards."""
    devices = [device] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def autograd_enabled() -> Iterator[None]:
    """Gradients on inside the block, also under a caller's ``torch.no_grad()`` or ``torch.inference_mode()`` (a
    gradient-based importance needs them by nature); pass the batches through :func:`autograd_batch`."""
    with torch.inference_mode(False), torch.enable_grad():
        yield


def autograd_batch(batch: Batch) -> Batch:
    """``batch`` with its tensors made under ``torch.inference_mode()`` cloned (autograd cannot save those)."""
    with torch.inference_mode(False):  # (a clone made in inference mode would be an inference tensor again)
        return {k: v.clone() if isinstance(v, torch.Tensor) and v.is_inference() else v for k, v in batch.items()}


def check_mask(mask: torch.Tensor, num_layers: int, num_heads: int, where: str = "mask") -> torch.Tensor:
    """``mask`` as a float32 CPU ``[num_layers, num_heads]`` tensor of 0/1; ValueError: wrong shape or values."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{where}: expected a torch.Tensor [{num_layers}, {num_heads}], got {type(mask).__name__}")
    if tuple(mask.shape) != (num_layers, num_heads):
        raise ValueError(f"{where}: expected shape [{num_layers}, {num_heads}], got {list(mask.shape)}")
    mask = mask.detach().to("cpu", torch.float32)
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{where}: expected only 0 (prune) and 1 (keep) values")
    return mask


def check_head_scales(scales: torch.Tensor, mask: torch.Tensor, where: str = "head_scales") -> torch.Tensor:
    """``scales`` (:attr:`PruningResult.head_scales`) as a float64 CPU ``[L, H]`` tensor, 0 at the heads ``mask``
    (``[L, H]`` 0/1) prunes; ValueError: wrong shape or a value that is not finite."""
    if not isinstance(scales, torch.Tensor) or tuple(scales.shape) != tuple(mask.shape):
        shape = list(scales.shape) if isinstance(scales, torch.Tensor) else type(scales).__name__
        raise ValueError(f"{where}: expected a tensor of the mask's shape {list(mask.shape)}, got {shape}")
    scales = scales.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(scales).all()):
        raise ValueError(f"{where}: expected finite values")
    return torch.where(mask.cpu() == 1, scales, torch.zeros_like(scales))


def lowest_k_mask(scores: torch.Tensor, k: int, min_heads_per_layer: int = 0,
                  already_pruned: torch.Tensor | None = None) -> torch.Tensor:
    """Float32 ``[L, H]`` mask (1 = keep) that prunes the ``k`` heads of lowest ``scores`` (``[L, H]``, higher =
    keep) in one global ranking, ties by flat index, ``k`` counting ``already_pruned`` (``[L, H]`` 0/1, kept
    pruned), never leaving a layer under ``min_heads_per_layer``.

    Raises:
        ValueError: ``k`` outside ``[0, L*H]`` or not reachable under ``min_heads_per_layer``.
    """
    num_layers, num_heads = scores.shape
    total = num_layers * num_heads
    if not 0 <= k <= total:
        raise ValueError(f"cannot prune {k} heads: expected 0 <= k <= {total}")
    if k > total - num_layers * min_heads_per_layer:
        raise ValueError(
            f"cannot prune {k} of {total} heads while keeping at least {min_heads_per_layer} head(s) per layer"
        )
    mask = (torch.ones(num_layers, num_heads) if already_pruned is None
            else already_pruned.detach().cpu().float().clone())
    flat = scores.detach().cpu().double().flatten()
    order = torch.sort(flat, stable=True).indices.tolist()
    pruned = int((mask == 0).sum())
    for idx in order:
        if pruned >= k:
            break
        layer, head = divmod(idx, num_heads)
        if mask[layer, head] == 0:
            continue
        if mask[layer].sum() - 1 < min_heads_per_layer:
            continue
        mask[layer, head] = 0
        pruned += 1
    return mask


def apply_layer_floor(mask: torch.Tensor, scores: torch.Tensor | None, floor: int) -> tuple[torch.Tensor, dict]:
    """A method's ``[L, H]`` mask moved so that every layer keeps ``floor`` heads, with as many heads pruned
    (``bench run --min-heads-per-layer``; the rule: docs/heads.md, "The per-layer floor").

    ``mask``: ``[L, H]`` 0/1 (1 keep); ``scores``: ``[L, H]`` (higher = keep) or None (all equal). Returns (the new
    float32 ``[L, H]`` mask, ``{"restored": [[layer, head], ...], "pruned_instead": [...]}``).

    Raises:
        ValueError: ``floor`` outside ``[0, H]``, or more heads pruned than the floor leaves room for.
    """
    mask = mask.detach().cpu().float().clone()
    num_layers, num_heads = mask.shape
    if not 0 <= floor <= num_heads:
        raise ValueError(f"a per-layer floor of {floor} heads needs 0 <= floor <= {num_heads}")
    pruned = int((mask == 0).sum())
    if pruned > num_layers * (num_heads - floor):
        raise ValueError(f"cannot keep {floor} head(s) in each of {num_layers} layers with {pruned} of "
                         f"{num_layers * num_heads} heads pruned")
    s = torch.zeros(num_layers, num_heads, dtype=torch.float64) if scores is None else scores.detach().cpu().double()
    rank = {int(i): r for r, i in enumerate(torch.sort(s.flatten(), stable=True).indices.tolist())}  # low first
    restored, instead = [], []
    for layer in range(num_layers):
        while int(mask[layer].sum()) < floor:
            head = max((h for h in range(num_heads) if mask[layer, h] == 0), key=lambda h: rank[layer * num_heads + h])
            mask[layer, head] = 1.0
            restored.append([layer, head])
    for flat in sorted(rank, key=rank.get):
        if len(instead) == len(restored):
            break
        layer, head = divmod(flat, num_heads)
        if mask[layer, head] == 1 and [layer, head] not in restored and int(mask[layer].sum()) > floor:
            mask[layer, head] = 0.0
            instead.append([layer, head])
    return mask, {"restored": restored, "pruned_instead": instead}
