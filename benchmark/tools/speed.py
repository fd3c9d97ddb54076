"""``bench speed``: latency and throughput of the dense, the masked and the physically pruned model, beside the
speed-up the removed FLOPs imply; rows go to ``DIR/speed.jsonl``. See docs/export-speed.md and docs/choices.md
("Speed").
"""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from headprune_bench.benchmark.provenance import machine_name, now_utc
from headprune_bench.benchmark.store.jsonl import append_jsonl, read_jsonl
from headprune_bench.benchmark.store.records import Record
from headprune_bench.methods.heads import apply_head_mask, forward_flops, remove_heads

SPEED_FILE = "speed.jsonl"
DENSE, MASKED, PRUNED = "dense", "masked", "pruned"


@dataclass
class SpeedRow:
    """One timing (a line of ``speed.jsonl``).

    Attributes:
        kind: ``dense``, ``masked`` or ``pruned``. heads_per_layer: the heads the model computes per layer (the
            masked model: the heads its mask keeps, though it computes all of them).
        batch, seq_len: the input shape. device, threads, dtype: where and how it ran.
        median_s, iqr_s: seconds per forward pass (median and interquartile range over the rounds).
        blocks: rounds timed. flops: matmul FLOPs per forward pass (the whole batch).
        implied_speedup: FLOPs(dense) / flops. measured_speedup: median over rounds of time(dense) / time(model),
            each pair from the same round.
        machine: CPU or GPU name. torch: its version. measured_at: UTC time.
    """

    kind: str
    heads_per_layer: list[int]
    batch: int
    seq_len: int
    device: str
    threads: int
    dtype: str
    median_s: float
    iqr_s: float
    blocks: int
    flops: int
    implied_speedup: float
    measured_speedup: float
    machine: str
    torch: str
    measured_at: str


def head_profiles(records: list[Record], per_mask: bool = False) -> dict[tuple[int, ...], list[str]]:
    """Cells by the heads-per-layer profile timed for them: their own (``per_mask``) or the first profile (in cell
    key order) with their head count. Unpruned cells are left out (the dense model is timed anyway)."""
    pruned = sorted((r for r in records if r.heads_pruned > 0), key=lambda r: r.cell)
    chosen: dict[Any, tuple[int, ...]] = {}
    out: dict[tuple[int, ...], list[str]] = {}
    for r in pruned:
        profile = tuple(int(sum(row)) for row in r.mask)
        key = profile if per_mask else sum(profile)
        chosen.setdefault(key, profile)
        out.setdefault(chosen[key], []).append(r.cell)
    return out


ROUNDS = 5
"""Default number of rounds: each round times every model of a shape once, in turn."""


def time_rounds(runs: list[Callable[[], Any]], rounds: int, min_run_time: float,
                device: torch.device) -> list[list[float]]:
    """Seconds per call of each of ``runs`` in each round (``[len(runs)][rounds]``).

    Each run is warmed up and timed once to choose its calls per block (about ``min_run_time / rounds`` seconds,
    at least one call); then every round times each run once, in turn (``torch.utils.benchmark.Timer``).
    """
    from torch.utils import benchmark

    timers, numbers = [], []
    with torch.no_grad():
        for run in runs:
            run()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            timer = benchmark.Timer(stmt="run()", globals={"run": run})
            once = timer.timeit(1).median
            timers.append(timer)
            numbers.append(max(1, int(min_run_time / rounds / once)))
        times: list[list[float]] = [[] for _ in runs]
        for _ in range(rounds):
            for i, timer in enumerate(timers):
                times[i].append(float(timer.timeit(numbers[i]).median))
    return times


def _median_iqr(values: list[float]) -> tuple[float, float]:
    import numpy as np

    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return float(median), float(q3 - q1)


def _mask_of(profile: tuple[int, ...], heads: int) -> torch.Tensor:
    """A ``[L, H]`` mask keeping the first ``profile[l]`` heads of layer l (which heads does not change the time)."""
    mask = torch.zeros(len(profile), heads)
    for layer, kept in enumerate(profile):
        mask[layer, :kept] = 1
    return mask


def expected_seconds(profiles: int, shapes: int, min_run_time: float, masked: bool = True) -> float:
    """A lower bound on :func:`measure`'s time: ``min_run_time`` of timed calls per model (dense, masked, one per
    profile) and shape; loading, warm-up and the first call that sizes the blocks come on top."""
    return shapes * (1 + int(masked and profiles > 0) + profiles) * min_run_time


def measure(model: torch.nn.Module, profiles: list[tuple[int, ...]], shapes: list[tuple[int, int]],
            device: torch.device, min_run_time: float, progress: Callable[[str], None] = lambda s: None,
            rounds: int = ROUNDS, on_rows: Callable[[list[SpeedRow]], Any] = lambda rows: None) -> list[SpeedRow]:
    """Time the dense model, the masked model (the first profile's mask) and each profile's pruned model at every
    (batch, seq_len) shape, on random token ids without padding.

    Args:
        model: a BERT classifier (fp32), in eval mode; not modified.
        profiles: heads kept per layer, one tuple per pruned model.
        shapes: (batch, seq_len) pairs.
        device: where to run. min_run_time: about the seconds of timed calls per model and shape (at least
            one call per round). rounds: rounds of :func:`time_rounds`.
        progress: called with a line per measurement. on_rows: called with each shape's rows as soon as they are
            measured (``bench speed`` appends them to ``speed.jsonl``, so an interrupted run keeps them).
    """
    config = model.config
    heads = config.num_attention_heads
    dense = copy.deepcopy(model).to(device).eval()
    pruned = {p: remove_heads(copy.deepcopy(model), _mask_of(p, heads)).to(device).eval() for p in profiles}
    mask = _mask_of(profiles[0], heads).to(device) if profiles else None
    common = {"device": str(device), "threads": torch.get_num_threads(), "dtype": "fp32",
              "machine": machine_name(device), "torch": torch.__version__}
    rows: list[SpeedRow] = []
    for batch, seq_len in shapes:
        g = torch.Generator().manual_seed(0)
        inputs = {"input_ids": torch.randint(1000, config.vocab_size, (batch, seq_len), generator=g).to(device),
                  "attention_mask": torch.ones(batch, seq_len, dtype=torch.long, device=device)}
        dense_flops = forward_flops(config, seq_len).total * batch
        runs: list[tuple[str, tuple[int, ...], Callable[[], Any], int]] = [
            (DENSE, (heads,) * config.num_hidden_layers, lambda inputs=inputs: dense(**inputs), dense_flops)]
        if mask is not None:
            def masked_run(inputs=inputs):
                with apply_head_mask(dense, mask):
                    return dense(**inputs)
            runs.append((MASKED, profiles[0], masked_run, dense_flops))
        for p, m in pruned.items():
            flops = forward_flops(config, seq_len, _mask_of(p, heads)).total * batch
            runs.append((PRUNED, p, lambda m=m, inputs=inputs: m(**inputs), flops))
        times = time_rounds([run for _, _, run, _ in runs], rounds, min_run_time, device)
        shape_rows = []
        for (kind, profile, _, flops), own in zip(runs, times):
            median, iqr = _median_iqr(own)
            speedup = _median_iqr([d / t for d, t in zip(times[0], own)])[0]  # paired by round
            row = SpeedRow(kind=kind, heads_per_layer=list(profile), batch=batch, seq_len=seq_len, median_s=median,
                           iqr_s=iqr, blocks=rounds, flops=flops, implied_speedup=dense_flops / flops,
                           measured_speedup=speedup, measured_at=now_utc(), **common)
            shape_rows.append(row)
            progress(f"{kind:6s} kept {sum(profile):3d} heads, batch {batch:3d} T {seq_len:3d}: median "
                     f"{median * 1e3:9.2f} ms (IQR {iqr * 1e3:.2f}); speed-up measured {row.measured_speedup:.3f}, "
                     f"implied by FLOPs {row.implied_speedup:.3f}")
        on_rows(shape_rows)
        rows += shape_rows
    return rows


def write_rows(run_dir: Path, rows: list[SpeedRow]) -> Path:
    """Append ``rows`` to ``DIR/speed.jsonl``; returns its path."""
    path = Path(run_dir) / SPEED_FILE
    for row in rows:
        append_jsonl(path, asdict(row))
    return path


def read_rows(run_dir: Path) -> list[SpeedRow]:
    """The latest row of each (kind, profile, shape, device, threads) in ``DIR/speed.jsonl`` (none without it)."""
    path = Path(run_dir) / SPEED_FILE
    if not path.exists():
        return []
    latest: dict[str, SpeedRow] = {}
    for d in read_jsonl(path):
        row = SpeedRow(**d)
        key = json.dumps([row.kind, row.heads_per_layer, row.batch, row.seq_len, row.device, row.threads])
        latest[key] = row
    return list(latest.values())
