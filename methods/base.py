"""The one interface every head-pruning method implements.

A method is a :class:`HeadPruner` subclass in one file of this package (or in a third-party package that
registers it through the entry-point group ``headprune_bench.methods``). The runner hands it a fine-tuned model
and a :class:`PruningContext`; it returns a :class:`PruningResult` whose ``mask`` is a float tensor
``[num_layers, num_heads]`` with 1 = keep and 0 = prune.

What a method may see is exactly what the context carries: the task's name and primary metric, the seed, the
target number of heads (or ``None``), the train-derived splits (``mini_train``, ``mini_dev``; never the GLUE dev
split, see ``shared/reference/protocol.md`` §2) as batch iterators, and callables to evaluate and fine-tune a
masked model. A method never imports ``benchmark``.

Design borrowed from scikit-learn estimators: the constructor only stores hyper-parameters (``options``), they
are plain JSON values with documented defaults, and all the work happens in :meth:`HeadPruner.prune`.
"""
from __future__ import annotations

import abc
import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from headprune_bench.methods.options import Interval, OptionError, check_constraints

Batch = dict[str, torch.Tensor]
"""One batch on the run's device: ``input_ids``, ``attention_mask``, ``token_type_ids`` (all ``[B, T]`` long)
and ``labels`` (``[B]`` long)."""

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
"""The keys of a :data:`Batch` that the model's forward takes (``labels`` is left to the method)."""

SPLITS = ("mini_train", "mini_dev", "train")
"""Splits a method may read: ``train`` is the whole train-derived pool (= mini_train + mini_dev), for methods
that draw their own held-out slices (AUBER redraws 25% / 75% per layer). Never the GLUE dev split."""


@dataclass
class PruningContext:
    """Everything a method may use besides the model (built by the runner, or by a test).

    Attributes:
        task: GLUE task name (``"mrpc"``, ``"cola"``, ...). Methods must not branch on it except through
            ``primary_metric``.
        primary_metric: name of the metric that ``evaluate`` returns first and that rewards/early stopping use
            (``"accuracy"``, or ``"matthews_correlation"`` for CoLA).
        seed: the cell's seed; every random choice of the method derives from it.
        num_layers, num_heads: the mask's shape ``[num_layers, num_heads]``.
        target_heads: number of heads to prune (``None`` when the method decides itself, e.g. AUBER).
        target_per_layer: optional per-layer counts (length ``num_layers``) for per-layer matched budgets.
        batches: ``batches(split, batch_size=32, shuffle=False, seed=None, indices=None) -> Iterator[Batch]``
            over ``"mini_train"``, ``"mini_dev"`` or ``"train"`` (see :data:`SPLITS`), optionally restricted to
            the example ``indices`` of that split (in that order); dynamic padding; tensors on ``device``.
        num_examples: ``num_examples(split) -> int``.
        evaluate: ``evaluate(model, mask=None, split="mini_dev", indices=None) -> dict[str, float]`` of the
            task's metrics (fractions; MCC in [-1, 1]), primary metric first; eval mode, no gradients; ``mask``
            is a ``[L, H]`` head mask applied for the duration of the call.
        fine_tune: ``fine_tune(model, mask=None, split="mini_train", indices=None, eval_split="mini_dev",
            eval_indices=None, **overrides) -> nn.Module`` trains the model in place with the mask held fixed,
            and returns it. ``overrides`` may set the fields of the runner's recovery recipe: ``epochs``, ``lr``,
            ``batch_size``, ``early_stopping`` (bool; on ``eval_split``/``eval_indices``), ``patience``,
            ``evals_per_epoch``, ``warmup_ratio``, ``weight_decay``.
        compute_metrics: ``compute_metrics(predictions [N] int, labels [N] int) -> dict[str, float]``, the
            task's GLUE metrics, for methods that compute predictions themselves (AUBER's fast rewards).
        load_pretrained: ``load_pretrained() -> nn.Module``, the pre-trained (not fine-tuned) encoder with a
            classification head, for zero-shot methods; ``None`` when the runner cannot provide it.
        tokenizer_info: ``{"vocab_size", "cls_token_id", "sep_token_id", "pad_token_id", "special_ids"}``.
        device: the run's torch device.
        count_backward: ``count_backward(n)``: a method that runs backward passes itself (outside
            ``fine_tune``) reports the number of examples they covered, for the cost columns of the record.
        log: ``log(message: str)``; goes to the run's log.
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
        mask: float32 tensor ``[num_layers, num_heads]``, 1 = keep, 0 = prune (CPU or any device).
        scores: optional per-head scores ``[num_layers, num_heads]`` (higher = more important), for reports.
        retrained: True when the method changed the model's weights (AUBER, joint Voita/DSP); then ``model``
            holds that model and the runner evaluates it with ``mask``.
        model: the re-trained model, or None.
        trace: JSON-serialisable details of the run (per-layer curves, lambda search, ...), stored in the record.
    """

    mask: torch.Tensor
    scores: torch.Tensor | None = None
    retrained: bool = False
    model: nn.Module | None = None
    trace: dict[str, Any] = field(default_factory=dict)

    @property
    def heads_pruned(self) -> int:
        """Number of zeros in ``mask``."""
        return int((self.mask == 0).sum().item())


class HeadPruner(abc.ABC):
    """Base class of every pruning method.

    Subclasses set the class attributes and implement :meth:`prune`:

    * ``name`` -- the registry name (lower-case, dashes allowed), e.g. ``"michel"``.
    * ``summary`` -- one line for ``bench list`` (paper, what it scores).
    * ``defaults`` -- ``{option: default}``; every option is a JSON scalar (or list of scalars). The
      constructor accepts exactly these names, checks types against the defaults, and stores them.
    * ``exact_budget`` -- True when the method prunes exactly ``context.target_heads`` heads (the conformance
      check then asserts it); False for methods that decide the count (AUBER) or reach it approximately.
    * ``needs_target`` -- True when the method cannot run without ``context.target_heads``.
    * ``own_budget`` -- True when the method never reads ``context.target_heads`` and decides the count itself
      (AUBER). The runner then keys its cells with budget ``own``: one cell per (task, seed) serves every budget
      of a run folder (as the budget setter of ``matched:METHOD`` too) instead of recomputing the same search.
    * ``reconstruction`` -- True when no official code exists and the implementation is a reconstruction.
    * ``constraints`` -- ``{option: Interval(...) | tuple of allowed values}``: what each numeric or string
      option may be, declared once (:mod:`headprune_bench.methods.options`) and checked by the constructor, so a bad value fails
      before any work starts. Every int, float and str option needs one (the conformance check asserts it).
    * ``choices`` -- older spelling of tuple constraints (``{option: allowed values}``); still honoured.
    * ``ablation_of`` -- the name of the method this one is an ablation of (``--methods all`` leaves ablations
      out unless ``in_methods_all`` says otherwise; name them explicitly).
    * ``in_methods_all`` -- whether ``--methods all`` selects the method (:func:`headprune_bench.methods.registry.in_methods_all`);
      ``None`` (the default): every method but the ablations. AUBER's null-reward control ``auber-null`` says
      True: it is an ablation in code, but issue 13's headline prints its count beside AUBER's on every task.
    * ``report_order`` -- where the reports list the method among the others (ascending; the built-ins use
      10, 20, ... 70, leaving room in between); ``None`` (the default): after the ordered methods.
    * ``report_color`` -- the method's colour in the report's plots, a ``"#RRGGBB"`` string (the built-ins: grey
      for random, the Okabe-Ito colour-blind-safe palette for the others); ``None`` (the default): the report
      picks one. An ablation (``ablation_of`` set) leaves both ``None``, also when it subclasses the method it
      ablates: the report places and colours it from its ``ablation_of`` method.
    * ``conformance_options`` -- ``{option: value}``: small settings under which the conformance check
      (:func:`headprune_bench.methods.conformance.check_pruner`, run by the test suite over every registered method) finishes in a
      few seconds on the check's tiny model (3 layers x 4 heads, 48 training examples), e.g. AUBER's
      ``{"episodes": 2, "final_finetune": False, "layer_finetune_epochs": 1.0}``. Empty when the defaults are
      already fast there. Each must be a valid option (the constructor checks them).

    Raises:
        OptionError: on an unknown option, a value whose type does not match the default's, a value outside its
            declared constraint, or one that breaks a rule of :meth:`check_options`.
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
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            known = ", ".join(sorted(self.defaults)) or "(none)"
            raise OptionError(f"unknown option(s) {unknown} for method '{self.name}'; known options: {known}")
        merged = copy.deepcopy(dict(self.defaults))
        for key, value in options.items():
            merged[key] = _coerce(self.name, key, value, self.defaults[key])
        check_constraints(self.name, merged, {**{k: tuple(v) for k, v in self.choices.items()}, **self.constraints})
        self.options: dict[str, Any] = merged
        json.dumps(self.options)  # options must be serialisable: they go into every record and the config hash
        self.check_options()

    def check_setup(self, num_layers: int, num_heads: int, target_heads: int | None, model_config: Any) -> None:
        """Checks that need the model and the budget, run by the runner before any training.

        Args:
            num_layers, num_heads: the model's mask shape ``[L, H]``.
            target_heads: the head count the method will be asked to prune, or None where it is only known later
                (a matched budget) or the method decides it.
            model_config: the model's Hugging Face config (e.g. ``max_position_embeddings``).

        The default checks ``min_heads_per_layer``, for methods that have that option: at most ``H``, and the
        target reachable while every layer keeps that many heads. Override (and call ``super()``) for more.

        Raises:
            OptionError: naming the option, the model's sizes and the target.
        """
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

    def check_options(self) -> None:
        """Rules that tie several options together (e.g. a batch no larger than a buffer); runs at construction
        after the per-option ``constraints``. Override and raise :class:`OptionError` naming the options."""

    def changes_weights(self) -> bool:
        """Whether :meth:`prune`, with these options, returns re-trained weights (``PruningResult.retrained``):
        AUBER always; Voita and DSP when they train jointly. Default: False.

        The runner applies every method's mask to the same base weights (prune-only, prune+recover); for a method
        that changes weights it also evaluates the method's own weights, as the separate row "METHOD, own
        fine-tuning" (condition ``own-fine-tuning``, protocol.md §4). The conformance check asserts that a method
        returning ``retrained=True`` says so here.
        """
        return False

    def get_options(self) -> dict[str, Any]:
        """The method's options (defaults merged with what the constructor got), JSON-serialisable."""
        return copy.deepcopy(self.options)

    @abc.abstractmethod
    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """Choose heads to prune.

        Args:
            model: the fine-tuned base model. A method that does not re-train must leave its weights untouched
                (deep-copy before changing anything); the runner relies on it to reuse the base model.
            context: see :class:`PruningContext`.

        Returns:
            A :class:`PruningResult` with a ``[num_layers, num_heads]`` mask.
        """

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}({opts})"


def _coerce(method: str, key: str, value: Any, default: Any) -> Any:
    """Check/convert ``value`` to the type of ``default`` (ints are accepted for floats; strings from the CLI
    are parsed)."""
    if default is None or value is None:
        return value
    target = type(default)
    if isinstance(value, str) and target is not str:
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise OptionError(f"option '{key}' of method '{method}': cannot parse {value!r} as {target.__name__}") from exc
    if target is bool:
        if isinstance(value, bool):
            return value
    elif target is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif target is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, target):
        return value
    raise OptionError(
        f"option '{key}' of method '{method}' expects {target.__name__} (default {default!r}), got {value!r}"
    )


def model_inputs(batch: Batch) -> dict[str, torch.Tensor]:
    """The model's inputs of a batch (:data:`MODEL_INPUTS`), without ``labels``."""
    return {k: batch[k] for k in MODEL_INPUTS if k in batch}


@contextlib.contextmanager
def seeded_torch_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Seed torch's global RNG (dropout) inside the block; the caller's RNG state (and the CUDA one of
    ``device``) is restored afterwards, so a method's randomness depends on its seed only."""
    devices = [device] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def check_mask(mask: torch.Tensor, num_layers: int, num_heads: int, where: str = "mask") -> torch.Tensor:
    """Validate a head mask and return it as a float32 CPU tensor ``[num_layers, num_heads]`` of 0/1.

    Raises:
        ValueError: wrong shape, or values other than 0 and 1.
    """
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{where}: expected a torch.Tensor [{num_layers}, {num_heads}], got {type(mask).__name__}")
    if tuple(mask.shape) != (num_layers, num_heads):
        raise ValueError(f"{where}: expected shape [{num_layers}, {num_heads}], got {list(mask.shape)}")
    mask = mask.detach().to("cpu", torch.float32)
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{where}: expected only 0 (prune) and 1 (keep) values")
    return mask


def lowest_k_mask(scores: torch.Tensor, k: int, min_heads_per_layer: int = 0,
                  already_pruned: torch.Tensor | None = None) -> torch.Tensor:
    """Mask that prunes the ``k`` heads with the lowest ``scores`` (global ranking across layers).

    Ties are broken by the flat index (layer-major), so the result is deterministic.

    Args:
        scores: ``[L, H]`` importance (higher = keep).
        k: number of heads to prune in total (including ``already_pruned``), ``0 <= k <= L*H``.
        min_heads_per_layer: never prune a head that would leave a layer with fewer kept heads.
        already_pruned: optional ``[L, H]`` 0/1 mask of heads already pruned (kept pruned).

    Returns:
        float32 ``[L, H]`` mask with 1 = keep.

    Raises:
        ValueError: ``k`` out of range or not reachable under ``min_heads_per_layer``.
    """
    num_layers, num_heads = scores.shape
    total = num_layers * num_heads
    if not 0 <= k <= total:
        raise ValueError(f"cannot prune {k} heads: expected 0 <= k <= {total}")
    if k > total - num_layers * min_heads_per_layer:
        raise ValueError(
            f"cannot prune {k} of {total} heads while keeping at least {min_heads_per_layer} head(s) per layer"
        )
    mask = torch.ones(num_layers, num_heads) if already_pruned is None else already_pruned.detach().cpu().float().clone()
    flat = scores.detach().cpu().double().flatten()
    # stable sort: equal scores keep flat-index order
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
    """A method's ``[L, H]`` mask moved to keep at least ``floor`` heads in every layer, with the same number of
    heads pruned: the benchmark's per-layer floor (``bench run --min-heads-per-layer``), applied to every method's
    mask alike after it prunes.

    In each layer left with fewer than ``floor`` heads, the pruned heads of highest ``scores`` are restored until it
    has ``floor``; as many heads are then pruned elsewhere, the kept heads of lowest ``scores`` first, never taking a
    layer below ``floor`` and never a head just restored. For a method that prunes the lowest scores globally, this
    equals :func:`lowest_k_mask` with ``min_heads_per_layer=floor`` (tested). Ties, and a method without scores
    (``None``: every score equal), go by the flat index (layer-major): the lower index is pruned first and restored
    last.

    Args:
        mask: ``[L, H]`` 0/1 (1 keep). scores: ``[L, H]`` (higher = keep) or None. floor: heads every layer keeps.

    Returns:
        (the new float32 ``[L, H]`` mask, ``{"restored": [[layer, head], ...], "pruned_instead": [[layer, head],
        ...]}``; both lists empty when the mask already meets the floor).

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
