"""The repair stage (issue 62): the interface and registry, and the exactness of the repairs ``none``, ``bias``
(FLAP's bias compensation), ``scales`` (Kwon et al.'s tuning, as ``kwon`` ran it) and ``finetune``. Exactness is
shown on float64 models, where the two sides of each equality differ by summation order alone (~1e-15 of the
values' size), so a tolerance of 1e-10 leaves no room for a wrong formula."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from headprune_bench.methods import mask_tuning as stages
from headprune_bench.methods.base import lowest_k_mask, model_inputs
from headprune_bench.methods.conformance import masked_logits, synthetic_context, tiny_model
from headprune_bench.methods.heads import get_layout
from headprune_bench.methods.kwon import KwonPruner
from headprune_bench.methods.options import OptionError
from headprune_bench.methods.registry import UnknownRepairError, available_repairs, create_repair, get_repair_class
from headprune_bench.methods.repair import RepairContext, RepairResult, apply_repair, calibration_indices
from headprune_bench.methods.repairs.bias import output_input_means
from headprune_bench.methods.repairs.conformance import FAMILIES, check_repair, repair_context, test_mask
from headprune_bench.methods.repairs.scales import tune_heads

TOL = 1e-10


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


def _float64(seed: int = 0, family: str = "bert"):
    return tiny_model(seed=seed, family=family).double().eval()


@pytest.mark.parametrize("name", ["none", "bias", "scales", "finetune"])
def test_each_shipped_repair_passes_the_conformance_check(name):
    check_repair(name)


@pytest.mark.parametrize("family", FAMILIES)
def test_bias_and_scales_conform_on_every_family(family):
    check_repair("bias", family=family)
    check_repair("scales", family=family)


def test_an_unknown_repair_is_refused_with_the_registered_names():
    with pytest.raises(UnknownRepairError, match=r"unknown repair 'bais' \(did you mean 'bias'\?\); known repairs: "
                                                 r"bias, .*none, .*scales"):
        get_repair_class("bais")
    assert {"none", "bias", "scales", "finetune"} <= set(available_repairs())


def test_repair_options_are_checked_like_method_options():
    with pytest.raises(OptionError, match=r"unknown option\(s\) \['teachr'\] for repair 'scales'"):
        create_repair("scales", teachr="sqrt")
    with pytest.raises(OptionError, match="teacher must be one of"):
        create_repair("scales", teacher="half")
    assert create_repair("scales", lsmr_maxiter="0").get_options() == {"teacher": "sqrt", "lsmr_maxiter": 0}


def _layer_io(model, batches, layer: int):
    """Per batch: the unpruned model's input hidden states of ``layer``, and the token mask."""
    layers = get_layout(model).encoder_layers()
    seen = []
    handle = layers[layer].register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(args[0] if args else kwargs["hidden_states"]), with_kwargs=True)
    with torch.no_grad():
        for batch in batches:
            model(**model_inputs(batch))
    handle.remove()
    return seen


def _attention_output_mean(model, mask, batches, layer: int, inputs) -> torch.Tensor:
    """Mean over non-padding tokens of ``layer``'s attention output projection ``W_O u + b_O`` when the layer runs
    on ``inputs`` (the unpruned model's) under ``mask``."""
    chain = stages.LayerChain(model, batches)
    dense = get_layout(model).output_dense(layer)
    outs = []
    handle = dense.register_forward_hook(lambda m, args, out: outs.append(out))
    total = torch.zeros(dense.out_features, dtype=torch.float64)
    tokens = 0
    for i, batch in enumerate(batches):
        chain.run(layer, i, inputs[i], mask)
        keep = batch["attention_mask"].bool()
        total += outs[-1][keep].sum(dim=0)
        tokens += int(keep.sum())
    handle.remove()
    return total / tokens


@pytest.mark.parametrize("layer", [1, 2])
def test_bias_keeps_each_layers_mean_attention_output_on_its_calibration_inputs(layer):
    """On the unpruned model's inputs of a layer, the repaired layer's attention output (W_O (m * u) + b_O') has
    the unpruned layer's mean over the sample's non-padding tokens; unrepaired, it does not."""
    model = _float64()
    mask = test_mask()
    context = repair_context(model)
    inputs = _layer_io(model, context.batches, layer)
    dense_mean = _attention_output_mean(model, torch.ones_like(mask), context.batches, layer, inputs)
    result = create_repair("bias").repair(model, mask, context)
    repaired, eval_mask = apply_repair(_float64(), mask, result)
    after = _attention_output_mean(repaired, eval_mask, context.batches, layer, inputs)
    before = _attention_output_mean(model, mask, context.batches, layer, inputs)
    assert float((after - dense_mean).abs().max()) < TOL * float(dense_mean.abs().max())
    assert float((before - dense_mean).abs().max()) > 1e-3 * float(dense_mean.abs().max())
    assert sorted(result.output_biases) == [1, 2]  # layer 0 keeps every head: untouched


def test_bias_equals_mean_ablation():
    """The bias-repaired, masked model computes what the unpruned model computes with each pruned head's context
    replaced by its calibration mean (FLAP's repair is mean-ablation), on any input."""
    model = _float64()
    mask = test_mask()
    context = repair_context(model)
    means, _ = output_input_means(model, context.batches)
    repaired, eval_mask = apply_repair(_float64(), mask, create_repair("bias").repair(model, mask, context))
    layout = get_layout(model)

    def ablate(layer):
        def hook(module, args):
            u = args[0].clone().view(*args[0].shape[:-1], layout.num_heads, layout.head_size)
            for h in range(layout.num_heads):
                if mask[layer, h] == 0:
                    u[..., h, :] = means[layer].view(layout.num_heads, layout.head_size)[h]
            return (u.view(args[0].shape),)
        return hook

    handles = [layout.output_dense(layer).register_forward_pre_hook(ablate(layer)) for layer in range(3)]
    other = repair_context(model, seed=5).batches  # inputs the repair never saw
    with torch.no_grad():
        ablated = torch.cat([model(**model_inputs(b)).logits for b in other])
    for handle in handles:
        handle.remove()
    with torch.no_grad():
        got = torch.cat([masked_logits(repaired, b, eval_mask) for b in other])
    assert float((got - ablated).abs().max()) < TOL * float(ablated.abs().max())


def test_bias_ignores_padding():
    """Extra padding columns change no mean, so no bias."""
    model = _float64()
    mask = test_mask()
    context = repair_context(model)
    padded = []
    for b in context.batches:
        extra = {k: torch.cat([v, torch.zeros(v.shape[0], 5, dtype=v.dtype)], dim=1) for k, v in b.items()
                 if k != "labels"}
        padded.append({**extra, "labels": b["labels"]})
    a = create_repair("bias").repair(model, mask, context).output_biases
    b = create_repair("bias").repair(model, mask, dataclasses.replace(context, batches=padded, shared={}))
    assert all(float((a[k] - b.output_biases[k]).abs().max()) < TOL for k in a)


def test_bias_reads_the_shared_means_once():
    model = _float64()
    context = repair_context(model)
    create_repair("bias").repair(model, test_mask(), context)
    cached = context.shared["dense_output_input_means"]
    create_repair("bias").repair(model, torch.ones(3, 4), context)
    assert context.shared["dense_output_input_means"] is cached


def test_scales_equals_kwons_tuning_on_the_same_mask():
    """The ``scales`` repair of kwon's rearranged mask, on kwon's sample and with kwon's Fisher as the scores,
    gives the scales that kwon's own tuning gives, bit for bit, and the trace kwon records; also equal to
    tune_scales called with the teacher kwon builds (the code before the move)."""
    model = tiny_model(seed=1).eval()
    context = synthetic_context(model, seed=1, target_heads=5)
    kwon = KwonPruner(sample_size=16, batch_size=8)
    result = kwon.prune(model, context)
    batches = list(context.batches("train", batch_size=8, indices=kwon.sample(context)))
    repaired = create_repair("scales").repair(model, result.mask, RepairContext(batches=batches,
                                                                                scores=result.scores))
    assert torch.equal(repaired.head_scales, result.head_scales)
    assert repaired.trace == result.trace["tune"]
    total = result.mask.numel()
    teacher = lowest_k_mask(result.scores, total - stages.teacher_heads_kept(total, total - 5))
    assert torch.equal(stages.tune_scales(model, batches, result.mask, teacher, 100_000).scales, result.head_scales)


def test_scales_without_scores_tunes_towards_the_unpruned_model_and_says_so():
    """The square-root teacher needs the selector's scores; without them the repair uses the unpruned teacher,
    which it logs and records, and which gives what teacher='unpruned' gives."""
    model = tiny_model().eval()
    said = []
    context = dataclasses.replace(repair_context(model), scores=None, log=said.append)
    with pytest.raises(ValueError, match="teacher='sqrt' needs the selector's scores"):
        tune_heads(model, context.batches, test_mask(), None, "sqrt", 100)
    got = create_repair("scales").repair(model, test_mask(), context)
    unpruned = create_repair("scales", teacher="unpruned").repair(model, test_mask(), context)
    assert torch.equal(got.head_scales, unpruned.head_scales)
    assert got.trace["teacher"] == "sqrt" and got.trace["teacher_used"] == "unpruned"
    assert len(said) == 1 and "no scores" in said[0]


def test_a_stopped_tuning_names_the_layers_that_kept_scale_1(monkeypatch):
    real = stages.solve_scales
    monkeypatch.setattr(stages, "solve_scales", lambda ata, atb, **kw: (real(ata, atb, **kw)[0], 7))
    model = tiny_model().eval()
    mask = torch.ones(3, 4)
    mask[1, 0] = mask[2, 1] = 0
    result = create_repair("scales").repair(model, mask, repair_context(model))
    assert result.trace["stopped_at_layer"] == 1
    assert sorted(result.failed_layers) == [1, 2] and "istop 7" in result.failed_layers[1]
    assert torch.equal(result.head_scales, mask.double())


def test_none_changes_nothing_and_apply_keeps_the_mask():
    model = tiny_model().eval()
    mask = test_mask()
    result = create_repair("none").repair(model, mask, RepairContext(batches=[]))
    assert result.changes == []
    evaluated, eval_mask = apply_repair(model, mask, result)
    assert evaluated is model and torch.equal(eval_mask, mask)


def test_finetune_returns_a_retrained_copy_and_needs_a_fine_tune():
    model = tiny_model().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = create_repair("finetune").repair(model, test_mask(), repair_context(model))
    assert result.model is not None and result.model is not model
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert any(not torch.equal(before[k], v) for k, v in result.model.state_dict().items())
    with pytest.raises(ValueError, match="needs a fine-tune callable"):
        create_repair("finetune").repair(model, test_mask(), RepairContext(batches=[]))


def test_apply_repair_refuses_a_weight_of_the_wrong_shape():
    model = tiny_model().eval()
    with pytest.raises(ValueError, match=r"repair output bias of layer 1: expected shape \[32\], got \[31\]"):
        apply_repair(model, test_mask(), RepairResult(output_biases={1: torch.zeros(31)}))
    with pytest.raises(ValueError, match="for layer 7: the model has 3"):
        apply_repair(model, test_mask(), RepairResult(output_weights={7: torch.zeros(32, 32)}))


def test_the_calibration_sample_is_kwons_sample():
    """kwon draws its sample with calibration_indices and the same salt: one sample serves kwon and the repairs."""
    context = dataclasses.replace(synthetic_context(tiny_model(), seed=3), num_examples=lambda split: 500)
    kwon = KwonPruner(sample_size=64)
    from headprune_bench.methods.repair import CALIBRATION_SALT

    assert kwon.sample(context) == calibration_indices(500, context.generator(salt=CALIBRATION_SALT), 64)
    with pytest.raises(ValueError, match="calibration split is empty"):
        calibration_indices(0, context.generator(), 8)


def test_kwon_moves_its_mask_to_the_floor_before_tuning_so_its_scales_are_the_evaluated_masks():
    """With a per-layer floor, kwon applies it before its tuning (PruningContext.min_heads_per_layer): the scales
    are those of the mask that is evaluated, and the runner's floor afterwards moves nothing. Applied after the
    tuning (the code before issue 62), a restored head came back with scale 1 and the other scales were tuned for
    another mask."""
    from headprune_bench.benchmark.cells.levels import with_floor

    model = tiny_model(seed=2).eval()
    kwon = KwonPruner(sample_size=16, batch_size=8)
    floored = dataclasses.replace(synthetic_context(model, seed=2, target_heads=9), min_heads_per_layer=1)
    result = kwon.prune(model, floored)
    assert all(int(row.sum()) >= 1 for row in result.mask) and int((result.mask == 0).sum()) == 9
    after = with_floor(result, 1)
    assert torch.equal(after.mask, result.mask) and after.trace["layer_floor"]["restored"] == []
    batches = list(floored.batches("train", batch_size=8, indices=kwon.sample(floored)))
    scales, _ = tune_heads(model, batches, result.mask, result.scores, "sqrt", 100_000)
    assert torch.equal(result.head_scales, scales)
    late = with_floor(kwon.prune(model, synthetic_context(model, seed=2, target_heads=9)), 1)
    assert late.trace["layer_floor"]["restored"] == [[0, 2]]  # this instance needs the floor
    assert torch.equal(late.mask, result.mask)  # the same final mask, but the old order tuned another one
    assert not torch.equal(late.head_scales, scales)
