"""The report's speed section, from ``DIR/speed.jsonl`` (``bench speed``): timings of the dense, masked and pruned
models per shape, and each pruned cell's score against the speed-up measured for its heads.

A cell gets the timing of its own heads-per-layer profile when that was timed (``--per-mask``), else that of
the profile timed for its head count (``--per-count``, the default); the ``profile`` column says which.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from headprune_bench.benchmark.report.load import RunData
from headprune_bench.benchmark.report.units import task_key
from headprune_bench.benchmark.tools.speed import DENSE, PRUNED, SpeedRow, read_rows

PROFILE_COLUMNS = ["device", "threads", "batch", "seq_len", "kind", "heads_pruned", "heads_kept", "median_ms", "iqr_ms",
                   "implied_speedup", "measured_speedup", "measured_over_implied_reduction"]


def _reduction(speedup: float) -> float:
    """Time saved as a fraction of the dense model's: ``1 - 1 / speedup``."""
    return 1.0 - 1.0 / speedup


def speed_rows(data: RunData) -> list[SpeedRow]:
    """The latest timings of every folder of ``data``."""
    return [row for folder in data.folders for row in read_rows(folder)]


def profile_frame(rows: list[SpeedRow]) -> pd.DataFrame:
    """One line per timing (heads pruned and kept; a masked model computes them all);
    ``measured_over_implied_reduction`` = measured time saved / time saved that the FLOPs imply (pruned models
    only; 1 = the FLOPs tell the whole story)."""
    total = max((sum(r.heads_per_layer) for r in rows if r.kind == DENSE), default=0)  # the dense model's heads
    out = []
    for r in rows:
        ratio = (_reduction(r.measured_speedup) / _reduction(r.implied_speedup)
                 if r.kind == PRUNED and r.implied_speedup > 1 else np.nan)
        out.append({"device": r.device, "threads": r.threads, "batch": r.batch, "seq_len": r.seq_len,
                    "kind": r.kind, "heads_pruned": total - sum(r.heads_per_layer),
                    "heads_kept": sum(r.heads_per_layer), "median_ms": r.median_s * 1e3,
                    "iqr_ms": r.iqr_s * 1e3, "implied_speedup": r.implied_speedup,
                    "measured_speedup": r.measured_speedup, "measured_over_implied_reduction": ratio})
    frame = pd.DataFrame(out, columns=PROFILE_COLUMNS)
    return frame.sort_values(["device", "threads", "batch", "seq_len", "kind", "heads_kept"],
                             ascending=[True, True, True, True, True, False]).reset_index(drop=True)


def cell_frame(data: RunData, rows: list[SpeedRow]) -> pd.DataFrame:
    """Every pruned cell with the timing of its profile at every timed shape: cell key, task, method, condition,
    budget, seed,
    heads_pruned, score (fraction), device, threads, batch, seq_len, implied and measured speed-up, profile
    (``own`` or ``same count``)."""
    pruned = [r for r in rows if r.kind == PRUNED]
    out = []
    for rec in data.records:
        if rec.heads_pruned == 0:
            continue
        profile = [int(sum(row)) for row in rec.mask]
        for shape in sorted({(r.device, r.threads, r.batch, r.seq_len) for r in pruned}):
            same = [r for r in pruned if (r.device, r.threads, r.batch, r.seq_len) == shape]
            own = [r for r in same if r.heads_per_layer == profile]
            match = own or [r for r in same if sum(r.heads_per_layer) == sum(profile)]
            if not match:
                continue
            device, threads, batch, seq_len = shape
            out.append({"cell": rec.cell, "task": rec.task, "method": rec.method, "condition": rec.condition,
                        "budget": rec.budget.spec, "seed": rec.seed,
                        "heads_pruned": rec.heads_pruned, "score": rec.score, "device": device, "threads": threads,
                        "batch": batch, "seq_len": seq_len, "implied_speedup": match[0].implied_speedup,
                        "measured_speedup": match[0].measured_speedup,
                        "profile": "own" if own else "same count"})
    return pd.DataFrame(out)


def reference_shape(cells: pd.DataFrame) -> tuple[int, int]:
    """(batch, seq_len) of the latency the rows are compared at: the smallest batch, the longest length timed."""
    smallest = cells[cells["batch"] == cells["batch"].min()]
    return int(smallest["batch"].iloc[0]), int(smallest["seq_len"].max())


def _model_config(data: RunData):
    """The run's model config (``run.json``), or None when it cannot be read (a hub model offline)."""
    import json

    from headprune_bench.benchmark import models

    try:
        name = json.loads((data.folders[0] / "run.json").read_text())["experiment"]["model"]
        return models.check_architecture(name)
    except Exception:  # noqa: BLE001 - the cost columns are left out, the rest of the report stands
        return None


def row_cost_frame(data: RunData, cells: pd.DataFrame) -> pd.DataFrame:
    """Per (task, method, condition, budget): mean score (%), mean heads pruned, the cells' mean parameters and matmul
    GFLOPs per example at the reference length (:func:`reference_shape`; physically pruned), and the mean implied
    and measured latency speed-up there. Empty without timings."""
    if cells.empty:
        return pd.DataFrame()
    from headprune_bench.methods.heads import closed_form_parameter_count, forward_flops

    batch, seq_len = reference_shape(cells)
    at = cells[(cells["batch"] == batch) & (cells["seq_len"] == seq_len)]
    config = _model_config(data)
    masks = {r.cell: r.mask for r in data.records}
    rows = []
    for (task, method, condition, budget), part in at.groupby(["task", "method", "condition", "budget"], sort=False):
        row = {"task": task, "method": method, "condition": condition, "budget": budget, "seeds": len(part),
               "score": f"{100 * part['score'].mean():.2f}", "heads pruned": f"{part['heads_pruned'].mean():.1f}"}
        if config is not None:
            ms = [torch.tensor(masks[cell]) for cell in part["cell"]]
            row["params (M)"] = f"{np.mean([closed_form_parameter_count(config, m) for m in ms]) / 1e6:.2f}"
            gflops = np.mean([forward_flops(config, seq_len, m).total for m in ms]) / 1e9
            row[f"GFLOPs/example (T {seq_len})"] = f"{gflops:.3f}"
        row["implied speed-up"] = f"{part['implied_speedup'].mean():.3f}"
        row[f"measured speed-up (batch {batch}, T {seq_len})"] = f"{part['measured_speedup'].mean():.3f}"
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["task", "condition", "method", "budget"]).reset_index(drop=True)


def speed_section(profiles: pd.DataFrame, rows: pd.DataFrame | None = None) -> list[str]:
    """Markdown: the per-row cost table and the timing table (nothing without timings)."""
    if profiles.empty:
        return []
    head = []
    if rows is not None and not rows.empty:
        head = ["Per row (the pruned cells of a method, condition and budget, physically pruned): score, "
                "parameters, matmul FLOPs and speed-up (vs the dense model) at the latency shape. Cells with the "
                "same head count share one timing unless `bench speed --per-mask` timed each mask "
                "(`speed_cells.csv`, column `profile`); read a speed-up against the IQRs of the table below.\n",
                rows.to_markdown(index=False), ""]
    shown = profiles.copy()
    for col in ("median_ms", "iqr_ms"):
        shown[col] = shown[col].map(lambda v: f"{v:.2f}")
    for col in ("implied_speedup", "measured_speedup", "measured_over_implied_reduction"):
        shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:.3f}")
    return ["## Speed (speed.jsonl, `bench speed`)\n", *head,
            "Milliseconds per forward pass (median, IQR) of the dense model, the masked model (every head still "
            "computed) and the physically pruned model per head count; implied speed-up = dense FLOPs / model "
            "FLOPs (matmuls); `measured_over_implied_reduction` = measured time saved / time saved the FLOPs "
            "imply.\n", shown.to_markdown(index=False), ""]


def plot_score_vs_speedup(cells: pd.DataFrame, folder: Path, colors: dict[str, str]) -> list[Path]:
    """Per task, each pruned cell's score against its measured speed-up at batch 1 and the longest timed length
    (latency), prune-only filled, other conditions open. Returns the files written (none without timings)."""
    from headprune_bench.benchmark.report.plots import new_figure, panel_grid, save_figure

    if cells.empty:
        return []
    latency = cells[cells["batch"] == cells["batch"].min()]
    latency = latency[latency["seq_len"] == latency["seq_len"].max()]
    tasks = sorted(latency["task"].unique(), key=task_key)
    fig = new_figure(min(7.0, 0.8 + 1.9 * len(tasks)), 2.6)
    axes = panel_grid(fig, len(tasks), 4)
    for ax, task in zip(axes.flat, tasks):
        for (method, condition), part in latency[latency["task"] == task].groupby(["method", "condition"]):
            col = colors.get(method, "#888888")
            ax.plot(part["measured_speedup"], part["score"] * 100, linestyle="none", marker="o", markersize=3,
                    color=col, mfc=col if condition == "prune-only" else "white", label=f"{method}, {condition}")
        ax.axvline(1.0, color="black", linewidth=0.5)
        ax.set_title(task.upper())
        ax.set_xlabel("measured speed-up")
        ax.set_ylabel("score")
        ax.grid(linewidth=0.3, alpha=0.6)
    fig.suptitle(f"Score against the latency speed-up measured for each cell's heads (batch "
                 f"{int(latency['batch'].iloc[0])}, {int(latency['seq_len'].iloc[0])} tokens)", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=3, frameon=False, fontsize=6)
    return save_figure(fig, folder, "score_vs_speedup")
