"""The repair step of a repair condition's cell (``prune+<repair>``, docs/protocol.md §4): the selector's mask on
the base weights, repaired by a registered :class:`~headprune_bench.methods.repair.Repair` from the (task, seed)'s
calibration sample, which every repair cell of that bench shares with its activations."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from typing import Any

import torch
from torch import nn

from headprune_bench.benchmark import training
from headprune_bench.benchmark.cells.bench import Pruned, SeedBench
from headprune_bench.benchmark.store.records import repair_of
from headprune_bench.benchmark.training import Counter
from headprune_bench.methods.registry import create_repair
from headprune_bench.methods.repair import (
    CALIBRATION_DEFAULTS,
    CALIBRATION_SALT,
    RepairContext,
    apply_repair,
    calibration_indices,
)

log = logging.getLogger("benchmark")

REPAIR_TRACE = "repair"
"""``Record.trace`` key of a repair cell's repair: name, options, seconds, what it changed, failed layers, the
calibration sample, its own trace, and a hash of the repaired output projections (``output_hash``)."""


def calibration(bench: SeedBench, counter: Counter) -> RepairContext:
    """The (task, seed)'s calibration context, built once per bench: :data:`CALIBRATION_DEFAULTS` examples of the
    ``train`` split drawn by :func:`calibration_indices` with the cell's seed (Kwon et al.'s sample), in fixed
    batches on the bench's device; its ``shared`` activations live as long as the bench. The examples are counted
    as forward passes in ``counter`` of the cell that builds it."""
    if bench.calibration is None:
        ctx = bench.context(counter, None, None)
        split = CALIBRATION_DEFAULTS["split"]
        indices = calibration_indices(ctx.num_examples(split), ctx.generator(salt=CALIBRATION_SALT),
                                      CALIBRATION_DEFAULTS["sample_size"])
        batches = list(ctx.batches(split, batch_size=CALIBRATION_DEFAULTS["batch_size"], indices=indices))
        bench.calibration = RepairContext(batches=batches, seed=bench.seed, device=bench.device,
                                          precision=bench.precision, log=ctx.log)
    return bench.calibration


def output_hash(model: nn.Module) -> str:
    """sha256 (16 hex) of every layer's attention output projection (weight and bias, float32 bytes) and the value
    projections (where head scales fold): equal for the model a cell evaluated and its export's source."""
    from headprune_bench.methods.heads import get_layout

    layout = get_layout(model)
    digest = hashlib.sha256()
    for layer in range(layout.num_layers):
        for linear in (layout.output_dense(layer), layout.value(layer)):
            for tensor in (linear.weight, linear.bias):
                if tensor is not None:
                    digest.update(tensor.detach().cpu().float().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def repair_step(bench: SeedBench, pruned: Pruned, condition: str, counter: Counter) -> tuple[nn.Module, Pruned]:
    """The model a ``prune+<repair>`` cell evaluates (a repaired copy of the base model; the base is untouched)
    and ``pruned`` with the repair in its trace (:data:`REPAIR_TRACE`) and, for a repair with head scales, those
    scales as the cell's ``head_scales``. A layer whose repair failed is logged with what was used instead.

    Raises:
        UnknownRepairError: the condition names no registered repair. ValueError: the repair refuses the input.
    """
    name = repair_of(condition)
    repair = create_repair(name)
    context = calibration(bench, counter) if repair.needs_calibration else RepairContext(batches=[])
    scores = None if pruned.scores is None else torch.tensor(pruned.scores, dtype=torch.float64)
    fine_tune = bench.context(counter, pruned.budget.target, None).fine_tune
    context = dataclasses.replace(context, scores=scores, fine_tune=fine_tune)  # (the same shared activations)
    start = time.time()
    result = repair.repair(bench.base, pruned.mask, context)
    seconds = time.time() - start
    model, _ = apply_repair(training.clone_model(bench.base), pruned.mask, result)
    for layer, why in sorted(result.failed_layers.items()):
        log.warning("[%s s%d] repair %s, layer %d: %s", bench.data.spec.name, bench.seed, name, layer, why)
    info: dict[str, Any] = {
        "name": name, "options": repair.get_options(), "wall_s": round(seconds, 3), "changes": result.changes,
        "failed_layers": {str(k): v for k, v in sorted(result.failed_layers.items())},
        "calibration": {**CALIBRATION_DEFAULTS, "examples": sum(int(b["input_ids"].shape[0]) for b in context.batches),
                        "batches": len(context.batches)},
        "output_hash": output_hash(model), "trace": result.trace,
    }
    scales = None if result.head_scales is None else result.head_scales.double().tolist()
    return model, dataclasses.replace(pruned, trace={**pruned.trace, REPAIR_TRACE: info}, head_scales=scales)
