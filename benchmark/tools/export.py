"""``bench export``: the model one cell evaluated, computed again from the folder's cached base model with the
runner's code, checked against the record's dev predictions, and written physically pruned as a Hugging Face
folder. See docs/export-speed.md and docs/choices.md ("Export").
"""
from __future__ import annotations

import importlib.util
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from headprune_bench.benchmark import models, tasks
from headprune_bench.benchmark.cells import bench as cell
from headprune_bench.benchmark.cells.work import PruneState
from headprune_bench.benchmark.config.presets import ConfigError, Preset, TrainConfig, parse_budget
from headprune_bench.benchmark.config.run import RunConfig
from headprune_bench.benchmark.provenance import now_utc
from headprune_bench.benchmark.store.jsonl import read_jsonl
from headprune_bench.benchmark.store.records import CONTROL, ORIGINAL, OWN, PRUNE_ONLY, Record
from headprune_bench.benchmark.training import Counter
from headprune_bench.methods.heads import export_pruned

log = logging.getLogger("benchmark")


@dataclass
class ExportInfo:
    """What ``bench export`` wrote (also saved as ``export_info.json`` in the folder).

    Attributes:
        cell: the record's cell key. run_folder: where it came from. folder: the exported folder.
        heads_per_layer: heads each layer kept. heads_pruned: of ``heads_total``.
        record_metrics / metrics: the record's dev metrics and the recomputed model's (fractions).
        predictions_differ: dev examples whose recomputed prediction differs from the record's (0: reproduced).
        dev_examples: size of the dev split. exported_at: UTC time.
        onnx: with ``--onnx``, the graph's file name and ``max_abs_diff``, the largest difference between
            onnxruntime's logits and the exported folder's (torch) on the first dev batch, with its shape.
    """

    cell: str
    run_folder: str
    folder: str
    heads_per_layer: list[int]
    heads_pruned: int
    heads_total: int
    record_metrics: dict[str, float]
    metrics: dict[str, float]
    predictions_differ: int
    dev_examples: int
    exported_at: str
    onnx: dict[str, Any] | None = None


def find_record(records: list[Record], task: str, seed: int, method: str, condition: str,
                budget: str | None) -> Record:
    """The one record of (task, seed, method, condition[, budget spec]).

    Raises:
        ConfigError: none or several match; the message lists what the folder holds for that (task, seed, method).
    """
    same = [r for r in records if (r.task, r.seed, r.method) == (task, seed, method)]
    found = [r for r in same if r.condition == condition and (budget is None or r.budget.spec == budget)]
    if len(found) == 1:
        return found[0]
    what = "no record" if not found else f"{len(found)} records (give --budget)"
    where = f"{what} of {method} on {task} seed {seed} with condition {condition}" + (
        f" and budget {budget}" if budget else "")
    if same:
        held = "; ".join(sorted({f"--condition {r.condition} --budget {r.budget.spec}" for r in same}))
        hint = " (the fine-tuning control is --method original --condition control)" if condition == CONTROL else ""
        raise ConfigError(f"{where}; for {method} there the folder holds: {held}{hint}")
    tasks = sorted({r.task for r in records})
    seeds = sorted({r.seed for r in records if r.task == task})
    methods = sorted({r.method for r in records if (r.task, r.seed) == (task, seed)})
    raise ConfigError(f"{where}; the folder holds tasks {', '.join(tasks) or 'none'}"
                      + (f"; {task} has seeds {', '.join(map(str, seeds))}" if seeds else "")
                      + (f"; {task} seed {seed} has methods {', '.join(methods)}" if methods else ""))


def _plan_budget(run_dir: Path, key: str) -> str:
    """The budget label of the plan (``runs.jsonl``) that holds cell ``key``.

    Raises:
        ConfigError: no plan holds it (a folder from an older runner).
    """
    for plan in reversed(read_jsonl(run_dir / "runs.jsonl") if (run_dir / "runs.jsonl").exists() else []):
        if key in plan.get("cells", []):
            return plan["budget"]
    raise ConfigError(f"{run_dir}/runs.jsonl: no run planned the cell {key}; its budget cannot be rebuilt")


def _cell_level(plan_label: str, spec: str) -> str:
    """The budget level a record of budget ``spec`` ran at, among a plan's comma-separated level labels: its own
    spec, or (the unpruned model, an own-count method) the plan's ``matched:`` level, else its first."""
    labels = plan_label.split(",")
    if spec in labels:
        return spec
    return next((label for label in labels if label.startswith("matched:")), labels[0])


def rebuild_config(run_dir: Path, record: Record, setter: Record | None, label: str, data_dir: str | None,
                   device: str) -> RunConfig:
    """The :class:`RunConfig` of a one-cell run that computes ``record``'s cell again, from ``run.json`` (the
    experiment), the record (method options) and ``label`` (the plan's budget label).

    Raises:
        ConfigError: ``run.json`` is missing.
    """
    path = run_dir / "run.json"
    if not path.exists():
        raise ConfigError(f"{run_dir}: no run.json; not a run folder")
    exp = json.loads(path.read_text())["experiment"]
    parts = label.split("/")
    floor = next((int(p.split(":", 1)[1]) for p in parts if p.startswith("floor:")), 0)
    options = {record.method: record.method_options}
    if setter is not None:
        options[setter.method] = setter.method_options
    preset = Preset(name="run.json", description=f"rebuilt from {path}", model=exp["model"], seeds=[record.seed],
                    budget=parts[0], train=TrainConfig(**exp["train"]), recover=TrainConfig(**exp["recover"]),
                    max_length=exp["max_length"], max_train_examples=exp["max_train_examples"],
                    max_dev_examples=exp["max_dev_examples"], mini_dev_fraction=exp["mini_dev_fraction"])
    methods = [m for m in (setter.method if setter else None, record.method) if m not in (None, ORIGINAL)]
    return RunConfig(out=run_dir, preset=preset, methods=methods, tasks=[record.task], seeds=[record.seed],
                     budgets=[parse_budget(parts[0])], model=models.normalize_model(exp["model"]), device=device,
                     data_dir=data_dir, recover=True, match_per_layer="per-layer" in parts,
                     min_heads_per_layer=floor, method_options=options, progress=False,
                     precision=exp.get("extra", {}).get("precision", "fp32"))


def export_cell(run_dir, *, task: str, seed: int, method: str, condition: str, out, budget: str | None = None,
                data_dir: str | None = None, device: str = "auto", onnx: bool = False) -> ExportInfo:
    """Compute the model of one cell again and export it physically pruned to ``out``; with ``onnx``, also
    ``out/model.onnx`` (:func:`onnx_check`).

    Raises:
        ConfigError: no such record; a configuration that ``run.json`` refuses or that gives another cell key;
            the cached base model is missing; ``onnx`` without onnx, onnxscript and onnxruntime installed.
    """
    from headprune_bench.benchmark.run.runner import Runner

    if onnx:
        missing = [m for m in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(m) is None]
        if missing:
            raise ConfigError(f"--onnx needs {', '.join(missing)}: pip install 'headprune-bench[onnx]'")
    run_dir, out = Path(run_dir), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out}: exists and is not empty; give a new folder (an export never writes over "
                          f"files, which could be a run's cached base model or another cell's export)")
    records = [Record.from_dict(d) for d in read_jsonl(run_dir / "records.jsonl")]
    record = find_record(records, task, seed, method, condition, budget)
    label = _cell_level(_plan_budget(run_dir, record.cell), record.budget.spec)
    setter = None
    if parse_budget(label.split("/")[0]).kind == "matched" and method not in (ORIGINAL,):
        name = parse_budget(label.split("/")[0]).value
        if name != method:
            setter = find_record(records, task, seed, name, PRUNE_ONLY, None)
    runner = Runner(rebuild_config(run_dir, record, setter, label, data_dir, device))
    try:
        return _export(runner, record, setter, Path(out), onnx)
    finally:
        runner.close()


def _export(runner, record: Record, setter: Record | None, out: Path, onnx: bool) -> ExportInfo:
    """:func:`export_cell` once the runner is built."""
    work = runner.work
    key = work.key(record.task, record.seed, record.method, record.condition)
    if key != record.cell:
        raise ConfigError(f"the rebuilt configuration gives the cell {key}, not the record's {record.cell}")
    folder = runner.base_folder(record.task, record.seed)
    if not (folder / "config.json").exists():
        raise ConfigError(f"{folder}: the cached base model is missing; `bench run` into {runner.out} with the same "
                          f"options trains it again")
    data = runner.task_data(tasks.get_task(record.task))
    bench = work.seed_bench(data, record.seed, work.load_base(folder), runner.tokenizer)
    reuse = None
    if record.method != ORIGINAL and record.condition != OWN:
        reuse = PruneState.of_record(record.to_dict())  # the recorded mask: no second prune
    log.info("export %s: computing its model again", record.cell)
    _, _, model, mask = work.cell_model(bench, record.method, record.condition, Counter(),
                                        None if setter is None else setter.to_dict(), reuse)
    dev = cell.evaluate_on_dev(bench, model, mask, Counter())
    recorded = torch.tensor(record.mask, dtype=torch.float32)
    export_pruned(model, recorded, out, tokenizer=runner.tokenizer)
    info = ExportInfo(cell=record.cell, run_folder=str(runner.out.resolve()), folder=str(out.resolve()),
                      heads_per_layer=[int(row.sum()) for row in recorded], heads_pruned=record.heads_pruned,
                      heads_total=record.heads_total, record_metrics=record.metrics, metrics=dev.metrics,
                      predictions_differ=int(sum(a != b for a, b in zip(dev.predictions.tolist(), record.predictions))),
                      dev_examples=len(record.predictions), exported_at=now_utc(),
                      onnx=onnx_check(out, bench) if onnx else None)
    (out / "export_info.json").write_text(json.dumps(asdict(info), indent=2) + "\n")
    return info


def onnx_check(folder: Path, bench) -> dict[str, Any]:
    """Export ``folder``'s model (loaded as a user loads it, ``trust_remote_code=True``) to ``folder/model.onnx``
    (:func:`methods.heads.export_onnx`) and compare onnxruntime's logits with torch's on the first dev batch
    (32 examples, padded as the runner pads them)."""
    import numpy as np
    import onnxruntime
    from transformers import AutoModelForSequenceClassification

    from headprune_bench.benchmark.training import iterate
    from headprune_bench.methods.heads import export_onnx
    from headprune_bench.methods.heads.export import onnx_inputs

    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).float().eval()
    batch = next(iter(iterate(bench.data.dev, bench.tokenizer, 32, torch.device("cpu"))))
    inputs = {name: batch[name] if name in batch else torch.zeros_like(batch["input_ids"])
              for name in onnx_inputs(model)}
    path = export_onnx(model, folder / "model.onnx", inputs)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ours = session.run(["logits"], {k: v.numpy() for k, v in inputs.items()})[0]
    with torch.no_grad():
        reference = model(**inputs).logits.numpy()
    return {"file": path.name, "max_abs_diff": float(np.abs(ours - reference).max()),
            "batch": list(inputs["input_ids"].shape)}
