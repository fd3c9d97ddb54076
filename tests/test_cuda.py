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
from tolerances import assert_within, bert_path_terms, float32_tolerance, rounding_tolerance

from headprune_bench import methods
from headprune_bench.benchmark.run.runner import Runner, make_run_config
from headprune_bench.benchmark.store.jsonl import RecordStore
from headprune_bench.methods.conformance import collate, synthetic_split, tiny_model
from headprune_bench.methods.heads import apply_head_mask, get_layout, remove_heads, zero_value_heads

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def full_fp32_matmuls():
    """float32 matmuls in full IEEE float32 (cuBLAS without TF32), restored after the test.

    The float32 tolerances below assume the unit roundoff u = 2**-24 (tests/tolerances.py); TF32 products keep
    10 mantissa bits (u = 2**-11) and would need tolerances 8192 times larger. ``set_float32_matmul_precision``
    is the switch that works with both the legacy ``allow_tf32`` flags and the newer ``fp32_precision`` ones
    (setting the two kinds of flags separately can raise "mix of the legacy and new APIs"). cuDNN's TF32 flag
    is left alone: BERT has no convolutions or RNNs. What no flag changes: PyTorch's memory-efficient SDPA
    kernel computes float32 products as 3xTF32 on compute capability >= 8.0 (CUTLASS
    ``OpMultiplyAddFastF32``), accurate to about 2**-22 = 4u; the tolerance counts those terms 16 times."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


def _inputs(device):
    batch = collate(synthetic_split(6, seed=3))
    return {k: v.to(device) for k, v in batch.items() if k != "labels"}


@torch.no_grad()
def _outputs(model, inputs):
    """Logits and final hidden states, flattened: the O(1) hidden states are what rounding errors are relative
    to (the logits of a fresh classifier are O(0.01) sums with heavy cancellation; tests/tolerances.py)."""
    out = model(**inputs, output_hidden_states=True)
    return torch.cat([out.logits.flatten(), out.hidden_states[-1].flatten()])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_mask_equals_zeroed_values_equals_removal_on_cuda(attn, dtype):
    """Mask == zeroed value heads == removal with CUDA kernels, and CUDA == CPU on the masked model.

    Exactness is proved in float64; float32 is checked in the benchmark's precision. The compared vector holds
    the logits AND the final hidden states, whose O(1) magnitude sets the scale of the rounding errors.
    Tolerance (tests/tolerances.py): 2 * 8 * u * sqrt(N) * max|outputs|; N = 1061 for this model (hidden 32,
    intermediate 48, 3 layers, T 15), outputs up to ~3.3: ~1.0e-4 in float32 (u = 2**-24; 1.6x that, N = 2771,
    with SDPA's 3xTF32 attention, whose d + 2T terms per layer count 16 times), ~1.9e-13 in float64 (cuBLAS
    DGEMM; SDPA falls back to its math kernel). Run on a CPU in place of the GPU, the same code measured
    differences up to 2.4e-7 (float32) and 8.9e-16 (float64). Between the GPU and the CPU the kernels differ
    entirely: the case the tolerance is made for (two independent roundings)."""
    model = tiny_model(0).to(dtype)
    model.set_attn_implementation(attn)
    model = model.to(CUDA)
    inputs = _inputs(CUDA)
    layout = get_layout(model)
    three_tf32 = attn == "sdpa" and dtype == torch.float32
    terms = bert_path_terms(model.config, inputs["input_ids"].shape[1], attention_weight=16.0 if three_tf32 else 1.0)
    reference = _outputs(model, inputs)
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        mask = (torch.rand(layout.num_layers, layout.num_heads, generator=g) > 0.5).float()
        mask[0] = 0  # a fully pruned layer
        with apply_head_mask(model, mask.to(CUDA)):
            masked = _outputs(model, inputs)
        zeroed = _outputs(zero_value_heads(copy.deepcopy(model), mask), inputs)
        pruned = _outputs(remove_heads(copy.deepcopy(model), mask), inputs)
        assert pruned.device.type == "cuda"
        tol = rounding_tolerance(masked, terms)
        assert_within(zeroed, masked, tol, "zeroed values vs mask")
        assert_within(pruned, masked, tol, "removal vs mask")
        assert float((masked - reference).abs().max()) > 10 * float32_tolerance(masked, terms)  # not vacuous
    # and the GPU agrees with the CPU on the masked model
    cpu_model = copy.deepcopy(model).cpu()
    with apply_head_mask(cpu_model, mask):
        on_cpu = _outputs(cpu_model, _inputs("cpu"))
    assert_within(masked.cpu(), on_cpu, rounding_tolerance(on_cpu, terms), "CUDA vs CPU")


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
    """`--device auto` picks CUDA; every registered method prunes and is scored there, and its records and base
    fine-tunes name the GPU (not the host's CPU); a second folder given the first one's cached base models repeats
    every mask (seeded noise, data order and the seeded CUDA dropout RNG;
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
    gpu = torch.cuda.get_device_name(0)
    for cell, rec in records["a"].items():
        assert rec["cost"]["device"].startswith("cuda"), (cell, rec["cost"])
        assert rec["cost"]["machine"] == gpu, (cell, rec["cost"])  # what --time-limit reads times by
        other = records["b"][cell]
        assert json.dumps(rec.get("mask")) == json.dumps(other.get("mask")), cell
    infos = list((tmp_path / "a" / "base").glob("*/train_info.json"))
    assert infos and all(json.loads(info.read_text())["machine"] == gpu for info in infos), infos
