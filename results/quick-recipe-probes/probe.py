"""Does MiniLM-L6 learn MRPC, RTE and CoLA, and how many epochs does it need? (issue 13: "a quick recipe that
learns"). For each task and seed: fine-tune the packaged MiniLM on the *mini-train* part (75%) of the whole train
split, evaluating on the train-derived *mini-dev* (25%) once per epoch, lr 5e-5, batch 32, max length 128, linear
warm-up 10% / decay over EPOCHS epochs. The GLUE dev split is not read: the recipe is chosen on train-derived data
only. Writes probes.jsonl (one line per task and seed: the per-epoch mini-dev primary metric, the majority
baseline on mini-dev, wall seconds) and prints a table.

Usage: GLUE_DIR=../shared/data/glue python results/quick-recipe-probes/probe.py [--tasks cola,rte,mrpc]
       [--seeds 0] [--epochs 6] [--threads 2]
"""
import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from headprune_bench.benchmark import models, tasks, training
from headprune_bench.benchmark.cells.bench import train_splits
from headprune_bench.benchmark.config.presets import get_preset

HERE = Path(__file__).resolve().parent


def probe(task: str, seed: int, epochs: float, out) -> dict:
    spec = tasks.TASKS[task]
    raw = tasks.load_task(spec)
    tok = models.load_tokenizer("minilm-l6")
    train = training.encode(raw["train"], spec, tok, 128)
    tr_idx, dev_idx = train_splits(len(train), seed, 0.25)
    mini_train, mini_dev = train.select(tr_idx), train.select(dev_idx)
    dev_labels = np.asarray(raw["train"]["label"])[dev_idx]
    majority = tasks.majority_baseline(spec, np.asarray(raw["train"]["label"])[tr_idx], dev_labels)
    cfg = dataclasses.replace(get_preset("quick").train, epochs=epochs, early_stopping=True, patience=10_000,
                              evals_per_epoch=1)
    torch.manual_seed(seed)
    model = models.load_classifier("minilm-l6", spec.num_labels)
    device = torch.device("cpu")
    t0 = time.time()
    evaluate = lambda m: training.evaluate(m, mini_dev, spec, tok, device)[0][spec.primary_metric]  # noqa: E731
    _, log = training.fine_tune(model, mini_train, tok, device, cfg, seed=seed, eval_fn=evaluate, progress=False)
    row = {"task": task, "seed": seed, "metric": spec.primary_metric, "epochs": epochs, "lr": cfg.lr,
           "batch_size": cfg.batch_size, "mini_train": len(mini_train), "mini_dev": len(mini_dev),
           "majority_mini_dev": majority[spec.primary_metric],
           "per_epoch": [round(float(h["score"]), 4) for h in log["history"]], "wall_s": round(time.time() - t0, 1),
           "torch_threads": torch.get_num_threads()}
    out.write(json.dumps(row) + "\n")
    out.flush()
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="cola,rte,mrpc")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--epochs", type=float, default=6.0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with open(HERE / "probes.jsonl", "a") as out:
        for task in args.tasks.split(","):
            for seed in map(int, args.seeds.split(",")):
                r = probe(task, seed, args.epochs, out)
                print(f"{task} s{seed} majority {r['majority_mini_dev']:.3f} per epoch {r['per_epoch']} "
                      f"({r['wall_s']:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
