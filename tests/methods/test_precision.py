"""--precision bf16 reaches every method's own forward passes (PruningContext.autocast): AUBER's rewards, Michel's
and Kwon's gradient passes, Voita's and DSP's gate training, the attention maps of confidence and redundancy. Under
fp32 nothing runs in bf16 (the autocast is disabled, so fp32 decisions are those of before, which the methods' own
tests pin)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from headprune_bench import methods
from headprune_bench.methods.conformance import synthetic_context, tiny_model
from headprune_bench.methods.registry import shipped_methods

NO_PASSES = {"random"}  # draws its mask without looking at the model


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("name", sorted(shipped_methods()))
def test_a_methods_own_forward_passes_run_in_the_runs_precision(name):
    """A hook on every linear layer sees the dtype of every forward pass the method runs itself
    (the synthetic context's own evaluate and fine_tune stay in float32 here; the runner's follow the precision)."""
    cls = methods.get_method_class(name)
    seen: dict[str, set[torch.dtype]] = {}
    for precision in ("fp32", "bf16"):
        model = tiny_model(seed=0)
        context = dataclasses.replace(synthetic_context(model, target_heads=3), precision=precision)
        dtypes: set[torch.dtype] = set()

        def hook(module, args, out, dtypes=dtypes):
            if isinstance(module, torch.nn.Linear):
                dtypes.add(out.dtype)

        handle = torch.nn.modules.module.register_module_forward_hook(hook)  # (any model: AUBER's is a copy)
        try:
            cls(**cls.conformance_options).prune(model, context)
        finally:
            handle.remove()
        seen[precision] = dtypes
    assert torch.bfloat16 not in seen["fp32"]
    assert (torch.bfloat16 in seen["bf16"]) == (name not in NO_PASSES), seen


def test_the_context_autocast_is_bf16_only_under_bf16():
    model = tiny_model(seed=0)
    fp32, bf16 = (dataclasses.replace(synthetic_context(model), precision=p) for p in ("fp32", "bf16"))
    x = torch.randn(2, 4)
    layer = torch.nn.Linear(4, 3)
    with fp32.autocast():
        assert layer(x).dtype == torch.float32
    with bf16.autocast():
        assert layer(x).dtype == torch.bfloat16
