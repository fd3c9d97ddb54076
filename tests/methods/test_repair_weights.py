"""The ``weights`` repair (K-prune's KPWT): the per-layer solve against a direct least-squares solve, the whole
repair against the same computation from full forward passes (float64, tiny BERT), the all-ones mask, the refusals
(singular, not finite, larger error) and their record, the recomputed-inputs path, and its option."""
from __future__ import annotations

import copy

import pytest
import torch

from headprune_bench.methods import mask_tuning
from headprune_bench.methods.base import model_inputs
from headprune_bench.methods.conformance import tiny_model
from headprune_bench.methods.heads import apply_head_mask
from headprune_bench.methods.options import OptionError
from headprune_bench.methods.repair import apply_repair
from headprune_bench.methods.repairs.conformance import check_repair, repair_context, test_mask
from headprune_bench.methods.repairs.weights import (
    ROUNDOFF,
    NormalEquations,
    WeightsRepair,
    head_columns,
    kpwt_layer,
)

L, H, D = 3, 4, 8  # the tiny model: 3 layers x 4 heads of 8 channels (hidden 32)
EPS = torch.finfo(torch.float64).eps

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _system(seed: int = 0, rows: int = 200, n: int = 12, width: int = 7):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(rows, n, generator=g, dtype=torch.float64)
    b = a @ torch.randn(n, width, generator=g, dtype=torch.float64) + 0.1 * torch.randn(rows, width, generator=g,
                                                                                          dtype=torch.float64)
    return a, b, torch.randn(n, width, generator=g, dtype=torch.float64)


def _error(a, b, w) -> float:
    return float(((a @ w - b) ** 2).sum())


def test_the_repair_conforms():
    check_repair("weights")
    check_repair("weights", damping=0.1)


def test_the_layer_solve_is_the_least_squares_solution_to_float64_round_off():
    """kpwt_layer from A^T A, A^T B, ||B||^2 against lstsq on A, B themselves (QR/SVD, no normal equations): the
    forward error of the normal equations is ~cond(A)^2 eps; the errors before and after, against direct sums."""
    a, b, w0 = _system()
    solve = kpwt_layer(NormalEquations.of(a, b), w0)
    direct = torch.linalg.lstsq(a, b, driver="gelsd").solution
    cond = float(torch.linalg.cond(a))
    assert solve.failure == "" and solve.weight is not None
    assert float((solve.weight - direct).abs().max()) <= 10 * cond ** 2 * EPS * float(direct.abs().max())
    assert solve.error_before == pytest.approx(_error(a, b, w0), rel=1e-12)
    assert solve.error_after == pytest.approx(_error(a, b, direct), rel=1e-9)
    assert solve.energy == pytest.approx(float((b ** 2).sum()), rel=1e-14) and solve.tokens == a.shape[0]


def test_damping_is_the_ridge_of_the_mean_diagonal():
    """damping d: the least squares of [A; sqrt(lambda) I] W ~ [B; 0], lambda = d * mean(diag(A^T A))."""
    a, b, w0 = _system(seed=1)
    damping = 0.05
    ridge = damping * float((a ** 2).sum(dim=0).mean())
    stacked_a = torch.cat([a, ridge ** 0.5 * torch.eye(a.shape[1], dtype=torch.float64)])
    stacked_b = torch.cat([b, torch.zeros(a.shape[1], b.shape[1], dtype=torch.float64)])
    direct = torch.linalg.lstsq(stacked_a, stacked_b, driver="gelsd").solution
    solve = kpwt_layer(NormalEquations.of(a, b), w0, damping=damping)
    assert torch.allclose(solve.weight, direct, rtol=0, atol=1e-12 * float(direct.abs().max()))
    assert solve.error_after == pytest.approx(_error(a, b, direct), rel=1e-9)  # the error is the undamped one


@pytest.mark.parametrize("defect", ["duplicated", "zero"])
def test_a_singular_system_is_refused_and_keeps_the_untuned_columns(defect):
    a, b, w0 = _system(seed=2)
    a[:, 3] = a[:, 5] if defect == "duplicated" else 0.0
    solve = kpwt_layer(NormalEquations.of(a, b), w0)
    assert solve.weight is None and solve.failure.startswith("singular") and "rank 11 of 12" in solve.failure
    assert solve.error_after == solve.error_before == pytest.approx(_error(a, b, w0), rel=1e-12)
    assert kpwt_layer(NormalEquations.of(a, b), w0, damping=1e-3).weight is not None  # the ridge makes it regular


def test_a_non_finite_system_and_a_larger_error_are_refused():
    a, b, w0 = _system(seed=3)
    bad = a.clone()
    bad[0, 0] = float("nan")
    assert kpwt_layer(NormalEquations.of(bad, b), w0).failure == "the normal equations are not finite"
    best = torch.linalg.lstsq(a, b, driver="gelsd").solution
    solve = kpwt_layer(NormalEquations.of(a, b), best, damping=1e3)  # a heavy ridge pulls W far from the optimum
    assert solve.weight is None and solve.failure.startswith("the solution increases the sample error")
    with pytest.raises(ValueError, match="do not fit"):
        kpwt_layer(NormalEquations.of(a, b), w0[:, :3])


def _captures(model, batch, mask, layer):
    """(x = the input of layer ``layer``'s query projection, u = its self-attention's output, the heads' contexts
    before W_O, y = x + W_O u + b_O) from one full forward pass under ``mask``."""
    seen = {}
    block = model.bert.encoder.layer[layer].attention
    handles = [block.self.query.register_forward_hook(lambda m, args, out: seen.__setitem__("x", args[0])),
               block.self.register_forward_hook(lambda m, args, out: seen.__setitem__("u", out[0])),
               block.output.dense.register_forward_hook(lambda m, args, out: seen.__setitem__("o", out))]
    with torch.no_grad(), apply_head_mask(model, mask):
        model(**model_inputs(batch))
    for handle in handles:
        handle.remove()
    return seen["x"], seen["u"], seen["x"] + seen["o"]


def _reference(model, batches, mask) -> dict[int, torch.Tensor]:
    """R1 written out with full forward passes (O(L^2)): per layer in order, A = the student's u on the kept
    channels, B = y_T - x_S - b_O over the non-padding tokens, W = lstsq(A, B), written into the student."""
    student = copy.deepcopy(model)
    ones = torch.ones_like(mask)
    tuned = {}
    for layer in range(L):
        kept = [h for h in range(H) if mask[layer, h] == 1]
        if not kept:
            continue
        cols = head_columns(kept, D)
        a_rows, b_rows = [], []
        for batch in batches:
            tokens = batch["attention_mask"].bool()
            _, _, y_teacher = _captures(model, batch, ones, layer)
            x_student, u_student, _ = _captures(student, batch, mask, layer)
            bias = student.bert.encoder.layer[layer].attention.output.dense.bias
            a_rows.append(u_student[tokens][:, cols])
            b_rows.append((y_teacher - x_student - bias)[tokens])
        w = torch.linalg.lstsq(torch.cat(a_rows), torch.cat(b_rows), driver="gelsd").solution
        dense = student.bert.encoder.layer[layer].attention.output.dense
        with torch.no_grad():
            dense.weight[:, cols] = w.t()
        tuned[layer] = dense.weight.detach().clone()
    return tuned


def test_the_repair_equals_the_layer_by_layer_least_squares_of_full_forward_passes():
    """float64 tiny BERT, the conformance mask (layer 0 keeps all, layer 1 loses two, layer 2 all): the cached
    chain's weights equal the full-forward reference's; the empty layer is skipped, its bias kept; the sample error
    falls; apply_repair writes exactly these weights."""
    model = tiny_model().double()
    mask = test_mask(L, H)
    batches = repair_context(model).batches
    result = WeightsRepair().repair(model, mask, repair_context(model))
    reference = _reference(model, batches, mask)
    assert sorted(result.output_weights) == sorted(reference) == [0, 1] and not result.failed_layers
    for layer, weight in reference.items():
        assert torch.allclose(result.output_weights[layer], weight, rtol=0, atol=1e-9 * float(weight.abs().max()))
    trace = result.trace
    assert trace["cached_layer_inputs"] is True and trace["layers"]["2"]["status"].startswith("skipped")
    assert trace["layers"]["1"]["error_after"] < 0.01 * trace["layers"]["1"]["error_before"]
    assert trace["tokens"] == sum(int(b["attention_mask"].sum()) for b in batches)
    repaired, _ = apply_repair(copy.deepcopy(model), mask, result)
    dense = repaired.bert.encoder.layer[1].attention.output.dense
    assert torch.equal(dense.weight, result.output_weights[1])
    assert torch.equal(dense.bias, model.bert.encoder.layer[1].attention.output.dense.bias)


def test_an_all_ones_mask_gives_back_the_weights_and_never_increases_the_error():
    """With every head kept the student is the teacher: each layer's solve returns W_O up to the solver's round-off
    (~cond(A)^2 eps relative), and the error after is at most the error before (0 up to round-off)."""
    model = tiny_model().double()
    result = WeightsRepair().repair(model, torch.ones(L, H), repair_context(model))
    assert sorted(result.output_weights) == [0, 1, 2] and not result.failed_layers
    for layer in range(L):
        original = model.bert.encoder.layer[layer].attention.output.dense.weight.detach()
        entry = result.trace["layers"][str(layer)]
        assert entry["error_after"] <= entry["error_before"] + ROUNDOFF * entry["target_energy"]
        assert abs(entry["error_before"]) <= 1e-12 * entry["target_energy"]
        assert float((result.output_weights[layer] - original).abs().max()) <= 1e-8 * float(original.abs().max())


def test_a_singular_layer_is_recorded_and_keeps_its_untuned_columns():
    """Head 0 of layer 1 with zero value rows has u = 0 on its channels: A has zero columns, the solve is refused,
    failed_layers says so, layer 1 keeps its columns (absent from output_weights) and layers 0 and 2 are still
    tuned; a ridge makes layer 1 regular and tunes it."""
    model = tiny_model().double()
    value = model.bert.encoder.layer[1].attention.self.value
    with torch.no_grad():
        value.weight[:D] = 0.0
        value.bias[:D] = 0.0
    mask = torch.ones(L, H)
    mask[0, 3] = 0  # (so that the student differs from the teacher from layer 0 on)
    result = WeightsRepair().repair(model, mask, repair_context(model))
    assert sorted(result.failed_layers) == [1] and "singular" in result.failed_layers[1]
    assert "untuned columns kept" in result.failed_layers[1]
    assert sorted(result.output_weights) == [0, 2] and result.trace["failed_layers"] == [1]
    entry = result.trace["layers"]["1"]
    assert entry["status"] == "failed" and entry["error_after"] == entry["error_before"] > 0
    damped = WeightsRepair(damping=1e-6).repair(model, mask, repair_context(model))
    assert not damped.failed_layers and sorted(damped.output_weights) == [0, 1, 2]
    assert damped.trace["layers"]["1"]["error_after"] < entry["error_before"]


def test_recomputed_layer_inputs_give_the_cached_weights(monkeypatch):
    """Where the chain cannot reproduce a forward pass, each layer's inputs are recomputed from the embeddings:
    the same weights (float64 round-off) and the trace says which path ran."""
    model = tiny_model().double()
    mask = test_mask(L, H)
    cached = WeightsRepair().repair(model, mask, repair_context(model))
    monkeypatch.setattr(mask_tuning.LayerChain, "reproduces_forward", lambda self, mask, index=0: False)
    recomputed = WeightsRepair().repair(model, mask, repair_context(model))
    assert recomputed.trace["cached_layer_inputs"] is False
    for layer, weight in cached.output_weights.items():
        assert torch.allclose(recomputed.output_weights[layer], weight, rtol=0, atol=1e-12)


@pytest.mark.parametrize("options, message", [
    ({"damping": -1.0}, r"option damping must be >= 0"),
    ({"damping": float("nan")}, r"option damping must be >= 0"),
    ({"dampng": 0.1}, r"unknown option.*'dampng'"),
])
def test_bad_options_are_refused_naming_the_option(options, message):
    with pytest.raises(OptionError, match=message):
        WeightsRepair(**options)
