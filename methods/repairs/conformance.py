"""A reusable conformance check for :class:`~headprune_bench.methods.repair.Repair` implementations: call
:func:`check_repair` from your own test (``check_repair(MyRepair)`` or ``check_repair("bias")``). It raises
``AssertionError`` naming the broken rule. See docs/heads.md ("Repairs")."""
from __future__ import annotations

import json
from typing import Any

import torch

from headprune_bench.methods.base import check_head_scales
from headprune_bench.methods.conformance import (
    FAMILIES,
    check_option_constraints,
    collate,
    masked_logits,
    model_state,
    synthetic_context,
    synthetic_split,
    tiny_model,
)
from headprune_bench.methods.registry import available_repairs, get_repair_class
from headprune_bench.methods.repair import Repair, RepairContext, RepairResult, apply_repair

__all__ = ["FAMILIES", "check_repair", "repair_context", "test_mask"]


def test_mask(num_layers: int = 3, num_heads: int = 4) -> torch.Tensor:
    """The conformance mask: layer 0 keeps every head, the last layer loses every head, the others lose some."""
    mask = torch.ones(num_layers, num_heads)
    mask[-1] = 0
    for layer in range(1, num_layers - 1):
        mask[layer, layer % num_heads] = 0
        mask[layer, (layer + 2) % num_heads] = 0
    return mask


test_mask.__test__ = False  # (a helper, not a test, where a test module imports it)


def repair_context(model, seed: int = 0, n: int = 24, batch_size: int = 8) -> RepairContext:
    """A :class:`RepairContext` over ``n`` synthetic examples in batches of ``batch_size``, seeded scores and the
    conformance fine-tune of :func:`~headprune_bench.methods.conformance.synthetic_context`."""
    rows = synthetic_split(n, seed=2000 + seed)
    batches = [collate(rows[i:i + batch_size]) for i in range(0, n, batch_size)]
    layout_shape = (model.config.num_hidden_layers, model.config.num_attention_heads)
    scores = torch.rand(*layout_shape, generator=torch.Generator().manual_seed(seed))
    return RepairContext(batches=batches, seed=seed, scores=scores, fine_tune=synthetic_context(model, seed).fine_tune)


def _outcome(result: RepairResult) -> list[Any]:
    return [result.head_scales, {k: v for k, v in result.output_weights.items()},
            {k: v for k, v in result.output_biases.items()}, result.failed_layers, json.dumps(result.trace)]


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def check_repair(repair: type[Repair] | str, seed: int = 0, family: str = "bert", **options: Any) -> RepairResult:
    """Run the conformance checks on a repair (class or registered name) with ``options``, twice, on a tiny model
    of ``family`` and :func:`test_mask`: registered with a summary; options declared, constrained and
    round-tripping; a :class:`RepairResult` with a JSON trace; the base model untouched (a re-training repair
    returns its own model); deterministic under the seed; scales 0 at pruned heads; :func:`apply_repair` accepts it,
    keeps the mask and gives finite logits. Returns the first run's result.

    Raises:
        AssertionError: naming the rule that the repair breaks.
    """
    cls = get_repair_class(repair) if isinstance(repair, str) else repair
    assert isinstance(cls, type) and issubclass(cls, Repair), f"{cls!r} is not a Repair subclass"
    assert cls.name and available_repairs().get(cls.name) is cls, (
        f"repair {cls.name!r} is not registered (decorate it with @register_repair, or add an entry point)")
    assert cls.summary, f"repair '{cls.name}' has no one-line summary"
    check_option_constraints(cls)
    opts = cls(**options).get_options()
    assert cls(**opts).get_options() == opts, "options do not round-trip through the constructor"
    results = []
    for run in range(2):
        model = tiny_model(seed=seed, family=family).eval()
        mask = test_mask(model.config.num_hidden_layers, model.config.num_attention_heads)
        before = model_state(model)
        context = repair_context(model, seed)
        if not cls.needs_calibration:
            context.batches = []
        torch.manual_seed(7_000 + run)  # a repair's randomness must come from context.seed
        result = cls(**options).repair(model, mask.clone(), context)
        assert isinstance(result, RepairResult), f"repair() returned {type(result).__name__}, not RepairResult"
        json.dumps(result.trace)
        after = model_state(model)
        changed = [k for k in before if not torch.equal(before[k], after[k])]
        assert not changed, f"repair '{cls.name}' changed the model it was given: {changed[:3]}"
        assert (result.model is not None) == cls.retrains, (
            f"repair '{cls.name}': retrains={cls.retrains} but the result {'has' if result.model else 'has no'} model")
        if result.head_scales is not None:
            scales = check_head_scales(result.head_scales, mask, where=f"repair '{cls.name}' head_scales")
            assert torch.equal(scales, result.head_scales.double()), "head_scales are not 0 at the pruned heads"
        evaluated, eval_mask = apply_repair(tiny_model(seed=seed, family=family).eval(), mask, result)
        assert torch.equal(eval_mask, mask), f"repair '{cls.name}' changed the mask"
        with torch.no_grad():
            logits = torch.cat([masked_logits(evaluated, b, eval_mask) for b in repair_context(model, seed).batches])
        assert bool(torch.isfinite(logits).all()), f"repair '{cls.name}' gives logits that are not finite"
        results.append(result)
    assert all(_equal(a, b) for a, b in zip(_outcome(results[0]), _outcome(results[1]))), (
        f"repair '{cls.name}' is not deterministic under a seed")
    return results[0]
