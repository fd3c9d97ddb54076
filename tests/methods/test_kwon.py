"""Kwon et al. 2022 (``kwon``, ``kwon-rearrange``, ``kwon-search``): each stage against a direct implementation of
its equation, in float64 on a tiny BERT, and the scaled mask end to end (record, recovery start, export)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from headprune_bench.methods import mask_tuning as stages
from headprune_bench.methods.base import check_head_scales, lowest_k_mask, model_inputs
from headprune_bench.methods.conformance import collate, synthetic_context, synthetic_split, tiny_model
from headprune_bench.methods.heads import apply_head_mask, get_layout, remove_heads, scale_value_heads
from headprune_bench.methods.kwon import KwonPruner, KwonSearchPruner

L, H = 3, 4


def _batches(n: int = 20, size: int = 8, seed: int = 5) -> list[dict[str, torch.Tensor]]:
    examples = synthetic_split(n, seed=seed)
    return [collate(examples[i:i + size]) for i in range(0, n, size)]


def _loss(model, batch, mask) -> float:
    with torch.no_grad(), apply_head_mask(model, mask):
        return float(F.cross_entropy(model(**model_inputs(batch)).logits, batch["labels"]))


def test_mask_gradients_equal_central_differences_and_fisher_sums_their_squares():
    """Stage 1: the gradient of each minibatch's mean loss with respect to each gate, against central differences
    of the loss itself (float64: truncation ~eps^2 * L''' ~1e-10, rounding ~1e-16 / eps ~1e-10), and I = sum_b g^2."""
    model = tiny_model().double()
    batches = _batches()
    with torch.no_grad():  # a caller's no_grad must not matter (the pass enables gradients itself)
        grads = stages.mask_gradients(model, batches, L, H)
    assert grads.shape == (len(batches), L, H) and grads.dtype == torch.float64
    eps = 1e-5
    for b, batch in enumerate(batches):
        for layer, head in [(0, 0), (1, 2), (2, 3)]:
            up, down = torch.ones(L, H, dtype=torch.float64), torch.ones(L, H, dtype=torch.float64)
            up[layer, head] += eps
            down[layer, head] -= eps
            numeric = (_loss(model, batch, up) - _loss(model, batch, down)) / (2 * eps)
            assert abs(grads[b, layer, head].item() - numeric) < 1e-8, (b, layer, head)
    assert torch.equal(stages.fisher_information(grads), (grads ** 2).sum(dim=0))
    assert all(p.requires_grad for p in model.parameters()) and all(p.grad is None for p in model.parameters())


def test_search_keeps_the_top_k_heads_by_fisher_globally():
    model = tiny_model().double()
    context = synthetic_context(model, target_heads=5)
    result = KwonSearchPruner(sample_size=16, batch_size=8).prune(model, context)
    assert torch.equal(result.mask, lowest_k_mask(result.scores, 5))
    assert result.head_scales is None and result.trace["sample"] == 16
    fisher = result.scores.flatten()
    assert fisher[result.mask.flatten() == 0].max() <= fisher[result.mask.flatten() == 1].min()


def test_rearrangement_known_example_and_objective_never_increases():
    """Stage 3 by hand: heads 0 and 1 have equal and opposite gradients, head 2 a small one. The search prunes
    the two lowest-Fisher heads {2, 0} (objective 2 * 1.5^2 = 4.5); the greedy swap brings in head 1 and drops
    head 2, whose removal leaves {0, 1} with objective 0."""
    grads = torch.tensor([[1.0, -1.0, 0.5], [1.0, -1.0, 0.5]], dtype=torch.float64)
    searched = torch.tensor([0.0, 1.0, 0.0])
    assert stages.rearrange_objective([0, 2], grads) == 4.5
    assert torch.equal(stages.greedy_rearrange(searched, grads), torch.tensor([0.0, 0.0, 1.0]))
    g = torch.Generator().manual_seed(0)
    for trial in range(50):
        grads = torch.randn(16, 6, 12, generator=g, dtype=torch.float64) * torch.rand(1, 6, 12, generator=g)
        fisher = stages.fisher_information(grads)
        mask = lowest_k_mask(fisher, int(torch.randint(0, 73, (1,), generator=g)))
        moved = stages.rearrange(mask, grads)
        assert torch.equal(moved.sum(dim=1), mask.sum(dim=1)), trial
        for layer in range(6):
            before = stages.rearrange_objective([int(h) for h in torch.nonzero(mask[layer] == 0)], grads[:, layer])
            after = stages.rearrange_objective([int(h) for h in torch.nonzero(moved[layer] == 0)], grads[:, layer])
            assert after <= before + 1e-12 * max(1.0, before), (trial, layer)


def test_teacher_keeps_the_heads_under_the_square_root_of_the_kept_share():
    assert stages.teacher_heads_kept(72, 50) == 60  # 72 * sqrt(50/72) = 60.0
    assert stages.teacher_heads_kept(72, 18) == 36  # 72 * sqrt(0.25) = 36 exactly: not 35 by rounding
    assert stages.teacher_heads_kept(144, 144) == 144
    assert stages.teacher_heads_kept(12, 0) == 0


def _direct_normal_equations(model, batch, teacher, student, layer, kept):
    """A and B of one layer written out: a full forward per mask with output_hidden_states (the layer's input is
    hidden_states[layer]) and a plain hook for W_O's input, one column of A per kept head and one of ones."""
    layout = get_layout(model)
    dense, d = layout.output_dense(layer), layout.head_size

    def run(mask):
        seen = {}
        with torch.no_grad(), apply_head_mask(model, mask):  # (its gate runs before the hook registered next)
            handle = dense.register_forward_pre_hook(lambda m, args: seen.setdefault("ctx", args[0].clone()))
            hidden = model(**model_inputs(batch), output_hidden_states=True).hidden_states[layer]
        handle.remove()
        return hidden, seen["ctx"]  # the gated input of W_O

    tokens = batch["attention_mask"].bool()
    x_t, ctx_t = run(teacher)
    x_s, ctx_s = run(student)
    target = dense(ctx_t)[tokens] + x_t[tokens]
    b = (target - dense.bias - x_s[tokens]).flatten()
    columns = []
    for h in kept:
        only = torch.zeros_like(ctx_s)
        only[..., h * d:(h + 1) * d] = ctx_s[..., h * d:(h + 1) * d]
        columns.append((only @ dense.weight.t())[tokens].flatten())
    a = torch.stack([*columns, torch.ones_like(b)], dim=1)
    return a.detach(), b.detach()


def test_normal_equations_and_solution_equal_a_direct_least_squares():
    """Stage 4: A^T A and A^T B accumulated per batch equal those of the directly built A and B (float64, sums of
    ~1e3 products: 1e-9 relative is ~1e4 unit roundoffs), and the solver's scales equal numpy's lstsq on the same
    system: the damped LSMR problem min ||ATA x - (ATB - ATA 1)||^2 + ||x||^2 as one stacked least squares, to
    LSMR's tolerance 1e-6; with the ridge negligible, also min ||A s - B|| itself."""
    model = tiny_model().double()
    batches = _batches()
    student = torch.ones(L, H, dtype=torch.float64)
    student[1, 0] = student[2, 1] = student[2, 2] = 0
    teacher = torch.ones(L, H, dtype=torch.float64)
    teacher[2, 1] = 0
    layout = get_layout(model)
    for layer in (1, 2):
        kept = [h for h in range(H) if student[layer, h] == 1]
        ata = torch.zeros(len(kept) + 1, len(kept) + 1, dtype=torch.float64)
        atb = torch.zeros(len(kept) + 1, dtype=torch.float64)
        a_all, b_all = [], []
        for batch in batches:
            a, b = stages.layer_normal_equations(layout.output_dense(layer),
                                                 stages.capture_layer(model, batch, teacher, layer),
                                                 stages.capture_layer(model, batch, student, layer),
                                                 teacher[layer], kept, batch["attention_mask"], layout.head_size)
            ata += a
            atb += b
            direct_a, direct_b = _direct_normal_equations(model, batch, teacher, student, layer, kept)
            a_all.append(direct_a)
            b_all.append(direct_b)
        a_mat, b_vec = torch.cat(a_all), torch.cat(b_all)
        np.testing.assert_allclose(ata, a_mat.t() @ a_mat, rtol=1e-9, atol=1e-9 * float(ata.abs().max()))
        np.testing.assert_allclose(atb, a_mat.t() @ b_vec, rtol=1e-9, atol=1e-9 * float(atb.abs().max()))
        n = len(kept) + 1
        for damp in (1.0, 0.0):  # the official ridge, and none: then the solution is min ||A s - B|| itself
            scales, istop = stages.solve_scales(ata, atb, damp=damp)
            assert istop < 3
            if damp:
                stacked = np.vstack([ata.numpy(), damp * np.eye(n)])
                rhs = np.concatenate([(atb - ata.sum(dim=1)).numpy(), np.zeros(n)])
                reference = 1 + np.linalg.lstsq(stacked, rhs, rcond=None)[0]
                cond = np.linalg.cond(stacked)
            else:
                reference = np.linalg.lstsq(a_mat.numpy(), b_vec.numpy(), rcond=None)[0]
                cond = np.linalg.cond(ata.numpy())
            # LSMR stops at a relative residual of ~1e-6 (atol = btol = 1e-6): the solution error is within
            # cond * 1e-6 of its size (a factor 2 for the two tolerances)
            bound = 2e-6 * cond * max(1.0, float(np.abs(reference).max()))
            assert float(np.abs(scales.numpy() - reference).max()) <= bound, (layer, damp)


def test_tuning_reduces_each_layers_residual_error_and_keeps_scale_one_without_pruning():
    """Stage 4 end to end: with the teacher equal to the student every scale is 1 up to the ridge; with heads
    pruned, the tuned layer's pre-LayerNorm sum is closer to the teacher's than the untuned one (least squares)."""
    model = tiny_model().double()
    batches = _batches()
    ones = torch.ones(L, H)
    same = stages.tune_scales(model, batches, ones, ones)
    # exactly 1 without the ridge; the official ridge also pulls the ones column's coefficient (0 here) toward 1,
    # which moves the heads' scales by ~1e-3 on sums as small as this tiny model's
    assert same.tuned == [1, 2] and torch.allclose(same.scales, torch.ones(L, H, dtype=torch.float64), atol=5e-3)
    student = ones.clone()
    student[1, 0] = student[2, 1] = 0
    tuned = stages.tune_scales(model, batches, student, ones)
    assert tuned.tuned == [1, 2] and bool((tuned.scales[student == 0] == 0).all())
    assert bool((tuned.scales[0] == 1).all())  # layer 0 is never tuned

    def error(scales, layer):  # sum over tokens of ||teacher's pre-LayerNorm sum - the student's||^2
        total = 0.0
        for batch in batches:
            a, b = _direct_normal_equations(model, batch, ones, scales, layer, list(range(H)))
            total += float((b - a[:, :H].sum(dim=1)).pow(2).sum())  # a's head columns are the gated heads' W_O ctx
        return total

    partial = student.double().clone()
    partial[1] = tuned.scales[1]
    assert error(partial, 1) < error(student.double(), 1)


def test_tuning_stops_at_a_failed_solve_or_a_scale_beyond_ten(monkeypatch):
    model = tiny_model().double()
    batches = _batches()
    student = torch.ones(L, H)
    student[1, 0] = 0
    real = stages.solve_scales
    for fake, reason in [(lambda a, b, **k: (real(a, b)[0], 7), "istop 7"),
                         (lambda a, b, **k: (torch.full((b.numel(),), 11.0, dtype=torch.float64), 1), "> 10")]:
        calls: list[int] = []

        def once_then(ata, atb, fake=fake, calls=calls, **kwargs):
            calls.append(1)
            return real(ata, atb, **kwargs) if len(calls) == 1 else fake(ata, atb)

        monkeypatch.setattr(stages, "solve_scales", once_then)
        result = stages.tune_scales(model, batches, student, torch.ones(L, H))
        assert result.tuned == [1] and result.stopped_at == 2 and reason in result.reason
        assert bool((result.scales[2] == 1).all())


def test_the_default_lsmr_iterations_follow_the_paper_and_zero_gives_the_official_cupy_limit(monkeypatch):
    """``lsmr_maxiter=0`` is the official code's limit: it calls CuPy's LSMR without ``maxiter``, whose default is
    5 min(m, n), not SciPy's min(m, n). This 9 x 9 system (cond ~1e4) needs 16 iterations: more than n = 9 (SciPy's
    default stops it with istop 7), fewer than 5 n = 45."""
    assert KwonPruner().options["lsmr_maxiter"] == 100_000
    assert stages.official_lsmr_maxiter(9, 9) == 45 and stages.official_lsmr_maxiter(200, 9) == 45
    g = torch.Generator().manual_seed(0)
    a = torch.randn(200, 9, generator=g, dtype=torch.float64) * torch.logspace(0, 2, 9, dtype=torch.float64)
    ata, atb = a.t() @ a, a.t() @ torch.randn(200, generator=g, dtype=torch.float64)
    calls = []
    real = stages.lsmr

    def recording(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append((kwargs["maxiter"], out[1], out[2]))  # the limit passed, istop, iterations used
        return out

    monkeypatch.setattr(stages, "lsmr", recording)
    _, istop_official = stages.solve_scales(ata, atb, maxiter=0)
    _, istop_scipy_default = stages.solve_scales(ata, atb, maxiter=9)
    _, istop_long = stages.solve_scales(ata, atb, maxiter=100_000)
    assert [c[0] for c in calls] == [45, 9, 100_000]
    assert istop_official == 1 and 9 < calls[0][2] <= 45  # converged, after more than n iterations
    assert istop_scipy_default == 7 and calls[1][2] == 9
    assert istop_long == 1 and calls[2][2] == calls[0][2]


def test_kwon_result_scales_and_trace():
    model = tiny_model().double()
    context = synthetic_context(model, target_heads=3)
    result = KwonPruner(sample_size=24, batch_size=8).prune(model, context)
    assert result.heads_pruned == 3 and result.head_scales is not None
    assert torch.equal(check_head_scales(result.head_scales, result.mask), result.head_scales)
    trace = result.trace
    assert trace["stages"] == ["search", "rearrange", "tune"] and trace["tune"]["ffn_rescaling"] is False
    assert trace["tune"]["teacher_heads_kept"] == stages.teacher_heads_kept(12, 9)
    assert 0 < trace["flops"]["removed_share"] < 1
    unpruned = KwonPruner(sample_size=24, batch_size=8, teacher="unpruned").prune(model, context)
    assert unpruned.trace["tune"]["teacher_heads_kept"] == 12


def test_a_scaled_mask_folded_and_exported_equals_the_scaled_masked_model():
    """What the runner evaluates (the base model with the scales folded into its value heads, the binary mask
    applied) and what export writes (those heads removed) equal the base model under the scaled mask, in float64
    (one more rounding per value weight: ~1e-15 relative)."""
    model = tiny_model().double()
    context = synthetic_context(model, target_heads=4)
    result = KwonPruner(sample_size=24, batch_size=8).prune(model, context)
    # the tiny model's tuned scales are within 1e-3 of 1; scales far from 1 test the folding itself
    scaled_mask = result.mask.double() * torch.linspace(0.5, 1.5, L * H, dtype=torch.float64).view(L, H)
    batch = collate(synthetic_split(8, seed=11))

    def last_hidden(m, mask=None):  # (the O(1) final hidden states: a tiny random classifier's logits are ~0.01)
        with torch.no_grad(), apply_head_mask(m, mask) if mask is not None else torch.no_grad():
            return m(**model_inputs(batch), output_hidden_states=True).hidden_states[-1]

    reference = last_hidden(model, scaled_mask)
    folded = scale_value_heads(tiny_model().double(), torch.where(result.mask == 1, scaled_mask, 1.0))
    evaluated = last_hidden(folded, result.mask)
    physical = last_hidden(remove_heads(folded, result.mask))
    assert float((evaluated - reference).abs().max()) <= 1e-12
    assert float((physical - reference).abs().max()) <= 1e-12
    assert float((last_hidden(model, result.mask) - reference).abs().max()) > 1e-4  # the scales matter


@pytest.mark.parametrize("bad, message", [(torch.ones(2, 2), "shape"), (torch.full((3, 4), float("nan")), "finite")])
def test_head_scales_are_checked(bad, message):
    with pytest.raises(ValueError, match=message):
        check_head_scales(bad, torch.ones(3, 4))


def test_the_per_layer_floor_moves_a_scaled_mask_with_its_scales():
    """``bench run --min-heads-per-layer``: a head the floor restores comes back whole (scale 1), a head pruned
    instead loses its scale, the other kept heads keep theirs."""
    from headprune_bench.benchmark.cells.levels import with_floor
    from headprune_bench.methods.base import PruningResult

    mask = torch.tensor([[0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    scores = torch.arange(12, dtype=torch.float64).view(L, H)
    scales = mask.double() * 0.5
    floored = with_floor(PruningResult(mask=mask, scores=scores, head_scales=scales), 2)
    restored = floored.trace["layer_floor"]["restored"]
    instead = floored.trace["layer_floor"]["pruned_instead"]
    assert restored == [[0, 2]] and instead == [[1, 0]]
    assert floored.head_scales[0, 2] == 1.0 and floored.head_scales[1, 0] == 0.0
    assert floored.head_scales[0, 3] == 0.5 and floored.head_scales[2, 1] == 0.5
    assert torch.equal(check_head_scales(floored.head_scales, floored.mask), floored.head_scales)


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode], ids=["no_grad", "inference_mode"])
def test_gradient_passes_work_inside_a_callers_no_grad_or_inference_mode(mode):
    """Michel's importance and Kwon's mask gradients need gradients by nature: they enable them inside, also for
    batches made under inference mode, and give the same values as outside (issue 42, item 1)."""
    from headprune_bench.methods.michel import head_importance

    model = tiny_model().double()
    outside_michel, _ = head_importance(model, _batches(), L, H)
    outside_kwon = stages.mask_gradients(model, _batches(), L, H)
    with mode():
        batches = _batches()
        inside_michel, _ = head_importance(model, batches, L, H)
        inside_kwon = stages.mask_gradients(model, batches, L, H)
    assert torch.equal(inside_michel, outside_michel) and torch.equal(inside_kwon, outside_kwon)
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
