"""Does each base model under ``DIR/base`` predict the dev set as the ``original`` prune-only record of its
(task, seed) says? A clean clone fine-tunes the git-ignored base weights again, possibly on another CPU, while
the records of earlier sittings were computed with the first fine-tune's weights; equal dev predictions are the
check that both are the same model as far as any record can tell.

Prints, per base model with weights present and a record to compare, how many of the dev set's predicted classes
differ and the dev score now and as recorded. One torch thread, fp32, the run's tokenisation (``max_length`` of
``run.json``); the dev set in full (this folder's preset caps no dev split).

    python results/quick-protocol2/check_bases.py [DIR] [--data-dir GLUE_DIR]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from headprune_bench.benchmark.store.records import read_ids
from headprune_bench.benchmark.tasks import load_task
from headprune_bench.benchmark.tasks.metrics import compute_metrics
from headprune_bench.benchmark.tasks.specs import get_task
from headprune_bench.benchmark.training import encode, predict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--data-dir", default="../shared/data/glue")
    args = parser.parse_args()
    torch.set_num_threads(1)
    experiment = json.loads((args.folder / "run.json").read_text())["experiment"]
    if experiment.get("max_dev_examples"):  # 0: the whole dev split
        raise SystemExit(f"{args.folder}/run.json: max_dev_examples is set; this check compares the full dev set")
    originals = {}
    for line in (args.folder / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["method"] == "original" and r["condition"] == "prune-only":
            originals[(r["task"], r["seed"])] = r
    for base in sorted((args.folder / "base").iterdir()):
        task, _, seed = base.name.rpartition("-seed")
        record = originals.get((task, int(seed)))
        if record is None or not (base / "config.json").exists():
            continue
        spec = get_task(task)
        tokenizer = AutoTokenizer.from_pretrained(base)
        model = AutoModelForSequenceClassification.from_pretrained(base, dtype=torch.float32)
        dev = encode(load_task(spec, args.data_dir)["validation"], spec, tokenizer, experiment["max_length"])
        preds = predict(model, dev, tokenizer, torch.device("cpu"))
        old = np.asarray(read_ids(record["predictions"]))  # a list, or compact (schema 4)
        score = compute_metrics(spec, preds, np.asarray(read_ids(record["labels"], "labels")))[record["primary_metric"]]
        print(f"{base.name}: {int((preds != old).sum())} of {len(old)} dev predictions differ from the record's; "
              f"{record['primary_metric']} {score:.6f} now, {record['score']:.6f} recorded")


if __name__ == "__main__":
    main()
