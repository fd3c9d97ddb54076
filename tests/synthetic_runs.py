"""Synthetic run folders: records shaped like the runner's (predictions, labels, masks, costs) for the report and
store tests, without running anything."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from headprune_bench.benchmark.tasks import TASKS, compute_metrics, majority_baseline

LAYERS, HEADS = 2, 4
N_DEV = 60
#: per method: mean accuracy of its predictions (before the seed's shift)
SKILL = {"original": 0.86, "random": 0.74, "michel": 0.8, "auber": 0.83}


def make_records(tasks=("mrpc", "cola"), seeds=(0, 1, 2), methods=None, conditions=("prune-only",),
                 degenerate=(), seed=0):
    """Realistic records: (task, seed, method, budget, condition) cells with predictions, labels, masks, costs.

    ``methods``: {method: [budget spec, ...]} (``original`` always has budget ``none``). ``degenerate``: cells
    (task, seed, method) whose predictions are made constant (a failed run).
    """
    methods = methods or {"original": ["none"], "random": ["fraction:0.25", "fraction:0.5"], "auber": ["matched:auber"]}
    rng = np.random.default_rng(seed)
    records = []
    for task in tasks:
        spec = TASKS[task]
        trng = np.random.default_rng(sum(map(ord, task)))
        labels = (trng.random(N_DEV) < 0.68).astype(int)
        train_labels = (trng.random(200) < 0.68).astype(int)
        majority = majority_baseline(task, train_labels, labels)
        for s in seeds:
            shift = rng.normal(0, 0.02)
            base_failed = (task, s, "original") in degenerate
            for method, budgets in methods.items():
                for budget in (["none"] if method == "original" else budgets):
                    conds = ["prune-only"] + (["control"] if method == "original" and "prune+recover" in conditions
                                              else [c for c in conditions if c != "prune-only"]
                                              if method != "original" else [])
                    for cond in conds:
                        frac = float(budget.split(":")[1]) if budget.startswith("fraction") else 0.375
                        k = 0 if method == "original" else int(round(frac * LAYERS * HEADS))
                        skill = SKILL.get(method, 0.8) - (0.03 * frac if method == "random" else 0) + shift
                        skill += 0.02 if cond in ("prune+recover", "control") else 0
                        preds = np.where(rng.random(N_DEV) < skill, labels, 1 - labels)
                        if (task, s, method) in degenerate:
                            preds = np.full(N_DEV, majority["majority_label"])
                        metrics = compute_metrics(task, preds, labels)
                        score = metrics[spec.primary_metric]
                        share = np.bincount(preds, minlength=2).max() / N_DEV
                        is_deg = bool(score <= majority[spec.primary_metric] or share > 0.95)
                        mask = np.ones(LAYERS * HEADS, dtype=int)
                        mask[rng.choice(LAYERS * HEADS, size=k, replace=False)] = 0
                        trace = {}
                        if method == "auber":
                            trace = {"layers": [{"layer": l,
                                                 "rewards": list(np.linspace(0, 1, 6) + rng.normal(0, .05, 6))}
                                                for l in range(LAYERS)]}
                        opts = "-" if method == "original" else "abc123"
                        records.append({
                            "task": task, "seed": s, "method": method, "condition": cond,
                            "budget": {"spec": budget, "target": k or None, "achieved": k, "note": budget},
                            "heads_total": LAYERS * HEADS, "heads_pruned": k,
                            "mask": mask.reshape(LAYERS, HEADS).tolist(),
                            "metrics": metrics, "primary_metric": spec.primary_metric, "score": score,
                            "majority_baseline": majority, "degenerate": is_deg,
                            "degenerate_reason": "constant" if is_deg else None, "base_failed": base_failed,
                            "predictions": preds.tolist(), "labels": labels.tolist(), "trace": trace,
                            "cost": {"wall_s": float(rng.lognormal(0 if method != "auber" else 2, 0.2)),
                                     "prune_wall_s": 0.1, "device": "cpu", "forward_examples": 100 + 10 * k,
                                     "backward_examples": 0 if cond == "prune-only" else 40},
                            "provenance": {}, "method_options": {},
                            "cell": f"{task}|seed={s}|{method}|{budget}|{cond}|opts={opts}",
                        })
    return records


def write_run(folder: Path, records, failures=()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if failures:
        (folder / "failures.jsonl").write_text("".join(json.dumps(f) + "\n" for f in failures))
    return folder
