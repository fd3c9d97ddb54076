"""Kwon et al. 2022 run as the official code runs it (issue 61, part 4): the Fisher minibatches are random subsets
of the split, not runs of neighbouring rows; the mask tuning carries each layer's inputs to the next (O(L) layer
passes) and gives the scales that recomputing them from the embeddings gives. (``lsmr_maxiter=0``: test_kwon.py.)"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from headprune_bench.methods import mask_tuning as stages
from headprune_bench.methods.conformance import FAMILIES, collate, synthetic_context, synthetic_split, tiny_model
from headprune_bench.methods.heads import get_layout
from headprune_bench.methods.kwon import KwonPruner, KwonSearchPruner

ROWS, SAMPLE, BATCH = 5000, 2000, 32


def _sample(seed: int) -> list[int]:
    context = dataclasses.replace(synthetic_context(tiny_model(), seed=seed), num_examples=lambda split: ROWS)
    return KwonPruner(sample_size=SAMPLE, batch_size=BATCH).sample(context)


def test_fisher_minibatches_are_random_subsets_not_runs_of_neighbouring_rows():
    """2000 of 5000 rows in batches of 32. Drawn and then sorted (the code before issue 61), each batch was a run of
    ~80 neighbouring rows (span ~32 * 5000 / 2000) in increasing order. In the order drawn, each batch is a
    uniform subset: its span exceeds half the file unless all 32 rows fall in one half-file window, probability
    <= 32 * 2^-31 ~ 1.5e-8 a batch (~1e-6 for the 63), and it is increasing with probability 1/32! ~ 4e-36. So
    neither assertion can pass by chance for the sorted sample, nor fail by chance for a random one."""
    sample = _sample(seed=0)
    assert len(sample) == SAMPLE and len(set(sample)) == SAMPLE and all(0 <= i < ROWS for i in sample)
    assert _sample(seed=0) == sample and _sample(seed=1) != sample  # deterministic given the cell's seed
    batches = [sample[i:i + BATCH] for i in range(0, SAMPLE, BATCH)]
    assert all(max(b) - min(b) > ROWS / 2 for b in batches)
    assert not any(b == sorted(b) for b in batches)
    # the mean distance of consecutive rows of the sample: ~5000 / 3 when random, ~2.5 when sorted
    gaps = [abs(a - b) for a, b in zip(sample, sample[1:])]
    assert sum(gaps) / len(gaps) > ROWS / 4


def test_sample_order_sorted_gives_the_same_rows_sorted_and_a_new_option_set():
    """``sample_order="sorted"`` reproduces the records made before issue 61 (the same drawn rows, sorted); the
    default's options hash differs from those records' (which had no such option), so a run into their folder plans
    the official order's cells anew instead of taking the old records for them."""
    from headprune_bench.benchmark.store.records import options_hash

    context = dataclasses.replace(synthetic_context(tiny_model(), seed=0), num_examples=lambda split: ROWS)
    drawn = KwonPruner(sample_size=SAMPLE, batch_size=BATCH).sample(context)
    old = KwonPruner(sample_size=SAMPLE, batch_size=BATCH, sample_order="sorted").sample(context)
    assert old == sorted(drawn) and old != drawn
    before = {k: v for k, v in KwonPruner().options.items() if k != "sample_order"}
    assert options_hash("kwon", KwonPruner().options) != options_hash("kwon", before)
    with pytest.raises(Exception, match="sample_order"):
        KwonPruner(sample_order="random")


def test_the_fisher_pass_batches_the_sample_in_the_order_drawn():
    """``prune`` asks the context for the sample's rows in the order :meth:`sample` gives (the context batches
    ``indices`` in order), not sorted."""
    model = tiny_model().double()
    context = synthetic_context(model, target_heads=3)
    asked = []
    batches = context.batches

    def recording(split, batch_size=32, shuffle=False, seed=None, indices=None):
        asked.append(list(indices))
        return batches(split, batch_size=batch_size, shuffle=shuffle, seed=seed, indices=indices)

    pruner = KwonSearchPruner(sample_size=40, batch_size=8)
    pruner.prune(model, dataclasses.replace(context, batches=recording))
    assert asked == [pruner.sample(context)] and asked[0] != sorted(asked[0])


def _masks(layers: int, heads: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    student = torch.ones(layers, heads)
    student[1, 0] = student[2, 1] = student[2, 2] = 0
    student[layers - 1, :2] = 0
    teacher = torch.ones(layers, heads)
    teacher[2, 1] = 0
    return student, teacher


def _batches(n: int = 20, size: int = 8) -> list[dict[str, torch.Tensor]]:
    examples = synthetic_split(n, seed=5)
    return [collate(examples[i:i + size]) for i in range(0, n, size)]


def _recomputed(model, batches, mask, teacher, maxiter: int = 0) -> stages.Tuning:
    """The tuning as it ran before issue 61: each layer's inputs recomputed from the embeddings, by a forward pass
    of the teacher and one of the student under its scales so far, stopped at the layer (O(L^2) layer passes)."""
    layout = get_layout(model)
    scales = mask.detach().cpu().double().clone()
    result = stages.Tuning(scales=scales, cached_inputs=False)
    for layer in range(1, mask.shape[0]):
        kept = [int(h) for h in torch.nonzero(mask[layer]).flatten()]
        if not kept:
            result.skipped.append(layer)
            continue
        ata = torch.zeros(len(kept) + 1, len(kept) + 1, dtype=torch.float64)
        atb = torch.zeros(len(kept) + 1, dtype=torch.float64)
        for batch in batches:
            a, b = stages.layer_normal_equations(layout.output_dense(layer),
                                                 stages.capture_layer(model, batch, teacher, layer),
                                                 stages.capture_layer(model, batch, scales, layer), teacher[layer],
                                                 kept, batch["attention_mask"], layout.head_size)
            ata += a
            atb += b
        solution, istop = stages.solve_scales(ata, atb, maxiter=maxiter)
        result.istop[layer] = istop
        if istop >= 3 or float(solution[:-1].abs().max()) > stages.MAX_SCALE:
            result.stopped_at = layer
            break
        scales[layer, kept] = solution[:-1]
        result.tuned.append(layer)
    return result


@pytest.mark.parametrize("family, overrides", [*[(f, {}) for f in FAMILIES], ("deberta-v2", {"conv_kernel_size": 3})],
                         ids=[*FAMILIES, "deberta-v2-conv"])
def test_tuning_with_cached_layer_inputs_equals_recomputing_them(family, overrides):
    """In float64, on every family: the scales equal, bit for bit, those of recomputing each layer's inputs from the
    embeddings. Not a tolerance: layer l's cached input is the tensor a full forward pass computes, by the same
    operations in the same order, and the normal equations and the solve are then the same calls. DeBERTa-v2 with
    a convolution after layer 0 (``conv_kernel_size``) is one the chain of layers does not reproduce: it is
    detected, and the inputs are recomputed."""
    model = tiny_model(0, family=family, num_hidden_layers=4, **overrides).double()
    batches = _batches()
    student, teacher = _masks(4)
    cached = stages.tune_scales(model, batches, student, teacher)
    reference = _recomputed(model, batches, student, teacher)
    assert cached.cached_inputs is (family != "deberta-v2" or not overrides)
    assert cached.tuned == reference.tuned == [1, 2, 3] and cached.istop == reference.istop
    assert torch.equal(cached.scales, reference.scales)
    assert float((cached.scales - student.double()).abs().max()) > 1e-6  # (the tuning moved the scales)


def test_tuning_with_cached_layer_inputs_stops_where_recomputing_stops(monkeypatch):
    """A failed solve at layer 2 of 4: the same scales (layer 1 tuned, layers 2 and 3 at 1) either way."""
    model = tiny_model(0, num_hidden_layers=4).double()
    batches = _batches()
    student, teacher = _masks(4)
    real = stages.solve_scales

    def fails_at_the_second(ata, atb, **kwargs):
        fails_at_the_second.calls += 1
        solution, istop = real(ata, atb, **kwargs)
        return solution, (7 if fails_at_the_second.calls % 2 == 0 else istop)

    fails_at_the_second.calls = 0
    monkeypatch.setattr(stages, "solve_scales", fails_at_the_second)
    cached = stages.tune_scales(model, batches, student, teacher)
    reference = _recomputed(model, batches, student, teacher)
    assert cached.tuned == reference.tuned == [1] and cached.stopped_at == reference.stopped_at == 2
    assert torch.equal(cached.scales, reference.scales) and bool((cached.scales[2:] == student[2:]).all())


def _layer_passes(run, model, *args) -> int:
    """How many times ``run(model, *args)`` enters one of the model's encoder layers (partial passes included)."""
    count = [0]
    handles = [layer.register_forward_pre_hook(lambda m, a: count.__setitem__(0, count[0] + 1))
               for layer in get_layout(model).encoder_layers()]
    try:
        run(model, *args)
    finally:
        for handle in handles:
            handle.remove()
    return count[0]


def test_tuning_costs_a_linear_number_of_layer_passes():
    """With B batches and L layers: recomputing the inputs costs sum over the tuned layers l = 1..L-1 of 2 (l + 1)
    passes a batch, L^2 + L - 2; carrying them costs at most 3 a layer and batch (the teacher's pass, the student's
    up to W_O and again under its tuned scales) plus one pass to layer 0 a batch and a check of the chain on one
    batch (2 L - 1): 3 L - 1 a batch here, every layer tuned."""
    batches = _batches()
    counts = {}
    for layers in (3, 6, 12):
        model = tiny_model(0, num_hidden_layers=layers)
        student, teacher = _masks(layers)
        new = _layer_passes(stages.tune_scales, model, batches, student, teacher)
        old = _layer_passes(_recomputed, model, batches, student, teacher)
        assert old == len(batches) * (layers ** 2 + layers - 2), layers
        assert new == len(batches) * (3 * layers - 1) + 2 * layers - 1, layers
        counts[layers] = new
    assert counts[12] - counts[6] == 2 * (counts[6] - counts[3])  # linear in L
