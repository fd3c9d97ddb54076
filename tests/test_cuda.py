"""CUDA checks: the same properties as on CPU, on a GPU. Skipped where ``torch.cuda.is_available()`` is False
(CI, the 2-core machines); on a GPU machine run ``GLUE_DIR=... python -m pytest -m cuda tests/test_cuda.py``.

What a GPU changes: kernels (cuBLAS, fused SDPA attention, TF32), the device the runner's batches live on, the
CUDA RNG (dropout), and whether seeded runs repeat bit for bit. Each test names the property it checks there.
"""
from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch

import methods
from benchmark.runner import Runner, make_run_config
from benchmark.store import RecordStore
from methods.conformance import collate, synthetic_split, tiny_model
from methods.heads import apply_head_mask, get_layout, remove_heads, zero_value_heads

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def full_fp32_matmuls():
    """TF32 would make every comparison below a 1e-3 one; the equivalences are checked in full fp32."""
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _inputs(device):
    batch = collate(synthetic_split(6, seed=3))
    return {k: v.to(device) for k, v in batch.items() if k != "labels"}


@torch.no_grad()
def _logits(model, inputs):
    return model(**inputs).logits


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_mask_equals_zeroed_values_equals_removal_on_cuda(attn):
    model = tiny_model(0)
    model.set_attn_implementation(attn)
    model = model.to(CUDA)
    inputs = _inputs(CUDA)
    layout = get_layout(model)
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        mask = (torch.rand(layout.num_layers, layout.num_heads, generator=g) > 0.5).float()
        mask[0] = 0  # a fully pruned layer
        with apply_head_mask(model, mask.to(CUDA)):
            masked = _logits(model, inputs)
        zeroed = _logits(zero_value_heads(copy.deepcopy(model), mask), inputs)
        pruned = _logits(remove_heads(copy.deepcopy(model), mask), inputs)
        assert pruned.device.type == "cuda"
        assert (masked - zeroed).abs().max() <= 1e-5 and (masked - pruned).abs().max() <= 1e-5
    # and the GPU agrees with the CPU on the masked model
    cpu_model = copy.deepcopy(model).cpu()
    with apply_head_mask(cpu_model, mask):
        on_cpu = _logits(cpu_model, _inputs("cpu"))
    assert (on_cpu - masked.cpu()).abs().max() <= 1e-4


def test_gate_gradients_reach_a_cuda_mask():
    model = tiny_model(0).to(CUDA)
    gates = torch.full((3, 4), 0.5, device=CUDA, requires_grad=True)
    with apply_head_mask(model, gates):
        model(**_inputs(CUDA)).logits.sum().backward()
    assert gates.grad is not None and gates.grad.device.type == "cuda" and gates.grad.abs().sum() > 0


def _smoke_config(out, glue_dir, methods_spec):
    return make_run_config(out=out, preset="smoke", methods_spec=methods_spec, tasks_spec="mrpc", seeds=None,
                           model=None, budget=None, device="auto", data_dir=str(glue_dir), recover=False,
                           progress=False)


def test_every_method_runs_on_cuda_chosen_by_auto_and_repeats_under_a_seed(tmp_path, glue_dir):
    """`--device auto` picks CUDA; every registered method prunes and is scored there; a second folder given the
    first one's cached base models repeats every mask (seeded noise, data order and the seeded CUDA dropout RNG;
    the base model is shared because cuDNN/SDPA backward kernels need not repeat bit for bit across fine-tunes)."""
    names = ",".join(sorted(methods.available_methods()))
    records = {}
    for run in ("a", "b"):
        if run == "b":
            shutil.copytree(tmp_path / "a" / "base", tmp_path / "b" / "base")
        runner = Runner(_smoke_config(tmp_path / run, glue_dir, names))
        try:
            runner.run()
        finally:
            runner.close()
        assert not runner.failures, runner.failures
        records[run] = {r["cell"]: r for r in RecordStore(tmp_path / run).records()}
    assert records["a"].keys() == records["b"].keys()
    done = {r["method"] for r in records["a"].values()}
    assert done >= set(methods.available_methods()), done
    for cell, rec in records["a"].items():
        assert rec["cost"]["device"].startswith("cuda"), (cell, rec["cost"])
        other = records["b"][cell]
        assert json.dumps(rec.get("mask")) == json.dumps(other.get("mask")), cell
