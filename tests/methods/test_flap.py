"""FLAP's head selection (``flap``): the scores against the formulas of its attention metric computed another way,
in float64 on a tiny BERT, invariance to padding, exact K under AL and UL, and its options."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from headprune_bench.methods import flap
from headprune_bench.methods.base import PruningResult, lowest_k_mask, model_inputs
from headprune_bench.methods.conformance import check_pruner, synthetic_context, tiny_model
from headprune_bench.methods.flap import FlapPruner
from headprune_bench.methods.options import OptionError

L, H, D = 3, 4, 8  # the tiny model: 3 layers x 4 heads of 8 channels (hidden 32)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _with_batches(context, transform):
    """``context`` whose batches pass through ``transform``."""
    original = context.batches

    def batches(*args, **kwargs):
        for batch in original(*args, **kwargs):
            yield transform(batch)
    return dataclasses.replace(context, batches=batches)


def _extra_padding(batch, columns: int = 9):
    pad = {k: torch.zeros(v.shape[0], columns, dtype=v.dtype) for k, v in batch.items() if k != "labels"}
    return {k: torch.cat([v, pad[k]], dim=1) if k in pad else v for k, v in batch.items()}


def _formula_scores(model, context, sample_size: int, batch_size: int, padding: bool = False) -> np.ndarray:
    """methods-2024.md §3.5 written out: u taken as the output of each layer's BertSelfAttention (the context
    vectors, i.e. W_O's input), all tokens gathered, then numpy in float64: mu, the unbiased variance, a_j =
    (sigma^2_j sum_i W_O[i, j]^2)^2, z over the layer's channels (unbiased std), S = mean of z per head.
    ``padding``: keep the padding tokens too (what the method must not do)."""
    n = context.num_examples("train")
    indices = torch.randperm(n, generator=context.generator(salt=flap.SALT_SAMPLE))[:sample_size].tolist()
    layers = model.bert.encoder.layer
    seen: dict[int, list[np.ndarray]] = {i: [] for i in range(L)}
    keep = {}
    handles = [layers[i].attention.self.register_forward_hook(
        lambda m, a, out, i=i: seen[i].append(out[0][keep["rows"]].double().numpy())) for i in range(L)]
    with torch.no_grad():
        for batch in context.batches("train", batch_size=batch_size, indices=indices):
            keep["rows"] = torch.ones_like(batch["attention_mask"], dtype=torch.bool) if padding else \
                batch["attention_mask"] == 1
            model(**model_inputs(batch))
    for handle in handles:
        handle.remove()
    scores = []
    for i in range(L):
        u = np.concatenate(seen[i])
        variance = u.var(axis=0, ddof=1)
        weight = layers[i].attention.output.dense.weight.detach().double().numpy()
        a = (variance * (weight ** 2).sum(axis=0)) ** 2
        z = (a - a.mean()) / a.std(ddof=1)
        scores.append(z.reshape(H, D).mean(axis=1))
    return np.stack(scores)


def test_flap_conforms_under_al_and_ul():
    check_pruner("flap", **FlapPruner.conformance_options)
    check_pruner("flap", target_heads=6, structure="UL", **FlapPruner.conformance_options)
    assert FlapPruner().ranks_once() and not FlapPruner(structure="UL").ranks_once()


def test_scores_equal_the_formulas_computed_from_the_self_attention_output():
    """The method (a pre-hook on W_O, moments merged batch by batch) against the formulas on every token at once:
    equal to float64 round-off; the mask prunes the K lowest."""
    model = tiny_model()
    context = synthetic_context(model, target_heads=5)
    result = FlapPruner(sample_size=40, batch_size=8).prune(model, context)
    expected = _formula_scores(model, context, sample_size=40, batch_size=8)
    assert result.scores.dtype == torch.float64
    np.testing.assert_allclose(result.scores.numpy(), expected, rtol=0, atol=1e-12)
    assert torch.equal(result.mask, lowest_k_mask(torch.from_numpy(expected), 5))
    tokens = sum(int(b["attention_mask"].sum()) for b in context.batches(
        "train", batch_size=8, indices=FlapPruner(sample_size=40).sample(context)))
    assert result.trace["sample"] == 40 and result.trace["tokens"] == tokens
    assert "non_padding_tokens" in result.trace["departures"] and "zero_spread_layers" not in result.trace


def test_scores_do_not_depend_on_padding_or_batch_size_but_would_with_padding_counted():
    """Nine extra padding columns per batch, or other batches: the same scores up to the float32 round-off of
    the forward pass; counting the padding tokens (as the method must not) moves them by far more."""
    model = tiny_model()
    context = synthetic_context(model, target_heads=3)
    base = FlapPruner(sample_size=48, batch_size=16).prune(model, context).scores
    padded = FlapPruner(sample_size=48, batch_size=16).prune(model, _with_batches(context, _extra_padding)).scores
    rebatched = FlapPruner(sample_size=48, batch_size=5).prune(model, context).scores
    torch.testing.assert_close(padded, base, rtol=0, atol=1e-6)  # measured 1.8e-8
    torch.testing.assert_close(rebatched, base, rtol=0, atol=1e-6)  # measured 2.4e-8
    with_padding = _formula_scores(model, _with_batches(context, _extra_padding), 48, 16, padding=True)
    assert np.abs(with_padding - base.numpy()).max() > 1e-2


def test_labels_are_never_read():
    model = tiny_model()
    context = synthetic_context(model, target_heads=3)
    unlabelled = _with_batches(context, lambda b: {k: v for k, v in b.items() if k != "labels"})
    assert torch.equal(FlapPruner().prune(model, unlabelled).scores, FlapPruner().prune(model, context).scores)


@pytest.mark.parametrize("k", [0, 1, L * H - 1, L * H])
def test_al_prunes_exactly_k_of_lowest_score(k):
    model = tiny_model()
    pruner = FlapPruner(sample_size=32)
    result = pruner.prune(model, synthetic_context(model, target_heads=k))
    assert result.heads_pruned == k
    assert torch.equal(result.mask, lowest_k_mask(result.scores, k))
    assert torch.equal(pruner.mask_at(result, k).mask, result.mask)


@pytest.mark.parametrize("k", [0, L, L * H - L, L * H])
def test_ul_prunes_k_over_l_of_lowest_score_in_each_layer(k):
    model = tiny_model()
    result = FlapPruner(sample_size=32, structure="UL").prune(model, synthetic_context(model, target_heads=k))
    assert result.heads_pruned == k and (result.mask == 0).sum(dim=1).tolist() == [k // L] * L
    for layer in range(L):
        assert torch.equal(result.mask[layer], lowest_k_mask(result.scores[layer:layer + 1], k // L)[0])


def test_ul_refuses_a_target_that_the_layers_do_not_divide_naming_the_option():
    pruner = FlapPruner(structure="UL")
    with pytest.raises(OptionError, match="structure"):
        pruner.check_setup(L, H, 4, None)
    pruner.check_setup(L, H, 6, None)
    pruner.check_setup(L, H, None, None)  # a matched budget, known later
    model = tiny_model()
    with pytest.raises(OptionError, match="structure"):
        pruner.prune(model, synthetic_context(model, target_heads=4))
    scores = torch.arange(L * H, dtype=torch.float64).view(L, H)
    with pytest.raises(OptionError, match="structure"):
        pruner.mask_at(PruningResult(mask=torch.ones(L, H), scores=scores), 5)


@pytest.mark.parametrize("options, option", [({"structure": "AM"}, "structure"), ({"sample_size": 0}, "sample_size"),
                                             ({"batch_size": 0}, "batch_size"), ({"structure": 1}, "structure")])
def test_bad_options_are_refused_naming_the_option(options, option):
    with pytest.raises(OptionError, match=option):
        FlapPruner(**options)


def test_no_target_an_empty_sample_and_a_flat_layer_are_handled():
    model = tiny_model()
    with pytest.raises(ValueError, match="needs a budget"):
        FlapPruner().prune(model, synthetic_context(model, target_heads=None))
    single = _with_batches(synthetic_context(model, target_heads=2),
                           lambda b: {**b, "attention_mask": torch.zeros_like(b["attention_mask"])})
    with pytest.raises(ValueError, match="variance needs 2"):
        FlapPruner(sample_size=4).prune(model, single)
    with torch.no_grad():  # layer 1's W_O without weights: every a_j is 0, no spread to standardise by
        model.bert.encoder.layer[1].attention.output.dense.weight.zero_()
    result = FlapPruner(sample_size=16).prune(model, synthetic_context(model, target_heads=2))
    assert result.trace["zero_spread_layers"] == [1] and torch.equal(result.scores[1], torch.zeros(H).double())
