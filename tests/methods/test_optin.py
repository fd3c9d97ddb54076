"""OPTIN's head ranking (``optin``): the scores against a transcription of the official per-head loop
(``prune/head_pruning.py`` ``Prune``, ``prune/loss_components.py``) on a tiny BERT, with and without the mask
carry-over, exact K, the tie order, and its options."""
from __future__ import annotations

import dataclasses
from queue import PriorityQueue

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from headprune_bench.methods import optin
from headprune_bench.methods.base import PruningResult, model_inputs
from headprune_bench.methods.conformance import check_pruner, synthetic_context, tiny_model
from headprune_bench.methods.heads import UnsupportedArchitectureError
from headprune_bench.methods.optin import OptinPruner, balance_kl, keep_most_damaging
from headprune_bench.methods.options import OptionError

L, H, D = 3, 4, 8  # the tiny model: 3 layers x 4 heads of 8 channels
POOL = 72  # the synthetic train split: 72 examples of up to 16 tokens, more than the 768 positions MD draws

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ----------------------------------------------------------------------- the official code, transcribed


class Args:
    aggregate, temp, loss_type, task_name, head_include_fin_layer_mmd = "sum", 4, "MMD+KL", "language", True
    head_fin_decay_bool, head_fin_decay_val, head_metric_decay = True, 0.5, 0.5


def official_md(args, teacher, student, generator, positions=None):
    """``manifold_Distillation``, its ``torch.randperm`` drawn from ``generator``, in float64 (our departure);
    ``positions``: the non-padding variant's candidate positions (None: all B*T, as coded)."""
    F_s = F.normalize(student.double(), dim=-1)
    F_t = F.normalize(teacher.double(), dim=-1)
    K = 768
    bsz, patch_num, _ = F_s.shape
    if positions is None:
        sampler = torch.randperm(bsz * patch_num, generator=generator)[:K]
    else:
        sampler = positions[torch.randperm(len(positions), generator=generator)[:K]]
    f_s = F_s.reshape(bsz * patch_num, -1)[sampler]
    f_t = F_t.reshape(bsz * patch_num, -1)[sampler]
    M_diff = f_t.mm(f_t.T) - f_s.mm(f_s.T)
    return -1 * (M_diff * M_diff).sum()


def official_kl(teacher_logits, student_logits, temp=4):
    T = temp
    kl_div = F.kl_div(F.log_softmax(student_logits.double(), dim=1), F.log_softmax(teacher_logits.double(), dim=1),
                      reduction="sum", log_target=True) * (T * T)
    return -1 * torch.clamp(kl_div, min=0)


def official_balance(MMDLayerResults, KLErr, averageScaling, lam=10):
    if MMDLayerResults < KLErr:
        try:
            with np.errstate(divide="ignore"):
                ratio = np.log10(-1 * float(MMDLayerResults)) - np.log10(-1 * float(KLErr))
            scaling = 10 ** int(ratio - np.log10(lam))
            averageScaling.append(scaling)
            KLErr *= scaling  # (torch raises OverflowError for an int of 2^64 or more)
        except (OverflowError, ValueError):  # the official code's bare except
            meanScaling = np.mean(averageScaling) if averageScaling else np.nan
            if np.isnan(meanScaling):
                meanScaling = 1
            KLErr *= meanScaling
    else:
        meanScaling = np.mean(averageScaling) if averageScaling else np.nan
        if np.isnan(meanScaling):
            meanScaling = 1
        KLErr *= meanScaling
    return KLErr


def official_forward(model, batch, mask):
    """``ModelHooking.forwardPass``: the outputs of every module named ``*output*dense*`` outside ``attention``
    (BERT's FFN output dense), in call order; the head mask at W_O's input (one pre-hook per layer, channels
    repeated per head), where transformers 4 multiplied the attention probabilities by ``head_mask``."""
    outputs, handles = [], []
    for name, module in model.named_modules():
        if "output" in name and "dense" in name and "attention" not in name:
            handles.append(module.register_forward_hook(lambda m, a, out: outputs.append(out)))
    for layer, block in enumerate(model.bert.encoder.layer):
        gate = mask[layer].repeat_interleave(D)
        handles.append(block.attention.output.dense.register_forward_pre_hook(
            lambda m, a, gate=gate: (a[0] * gate,)))
    with torch.no_grad():
        logits = model(**model_inputs(batch)).logits
    for handle in handles:
        handle.remove()
    return logits, outputs


def official_prune(model, batch, generator, carry_over=True, positions=None):
    """``Prune``'s loop (``carry_over=False``: the row reset to ones after each layer, our fix). Returns the
    global queue popped in order, the [L, H] scores and ``averageScaling``."""
    args = Args()
    FullHeadMasking = torch.ones(L, H)
    base_logit_output, base_layer_wise_output = official_forward(model, batch, FullHeadMasking)
    PerHeadMasking = -1 * (torch.eye(H) - 1)
    globalHeadRanking = PriorityQueue()
    importance_scores = torch.zeros((L, H), dtype=torch.float64)
    averageScaling = []
    for layer in range(L):
        for head in range(H):
            if not carry_over:
                FullHeadMasking = torch.ones(L, H)
            FullHeadMasking[layer] = PerHeadMasking[head]
            current_logit_output, current_layer_wise_output = official_forward(model, batch, FullHeadMasking)
            MMDLayerResults = 0
            expFunction1 = torch.tensor(list(np.geomspace(start=1, stop=10, num=H))[::-1])
            for idx in range(len(base_layer_wise_output)):
                if idx > layer or (layer == L - 1 and layer == idx and args.head_include_fin_layer_mmd):
                    MMDLayerResults += official_md(args, base_layer_wise_output[idx],
                                                   current_layer_wise_output[idx], generator, positions)
            KLErr = official_kl(base_logit_output, current_logit_output, temp=args.temp)
            MMDResults = 0
            MMDResults += MMDLayerResults
            KLErr = official_balance(MMDLayerResults, KLErr, averageScaling)
            MMDResults += KLErr
            if args.head_fin_decay_bool and layer == L - 1:
                MMDResults *= args.head_fin_decay_val
            MMDResults *= expFunction1[head]
            MMDResults *= args.head_metric_decay
            assert MMDResults <= 0
            importance_scores[layer][head] = MMDResults
            globalHeadRanking.put((float(MMDResults), layer, head, "head"))
    ranking = [globalHeadRanking.get() for _ in range(L * H)]
    return ranking, importance_scores, averageScaling


def _batch_of(context, pruner):
    indices = pruner.sample(context)
    return next(iter(context.batches("train", batch_size=len(indices), indices=indices)))


def _with_batches(context, transform):
    original = context.batches

    def batches(*args, **kwargs):
        for batch in original(*args, **kwargs):
            yield transform(batch)
    return dataclasses.replace(context, batches=batches)


# ----------------------------------------------------------------------- tests


def test_optin_conforms_with_either_carry_over_and_either_md_tokens():
    check_pruner("optin", **OptinPruner.conformance_options)
    check_pruner("optin", target_heads=5, batch_size=16, carry_over=True, md_tokens="non_padding")


def _logits_reshaped(model, context, pruner, how: str) -> None:
    """``plain``: as drawn; ``centred``: the classifier centred on the batch's mean logits and scaled by 1000, so
    that removing a head moves the logits more than the FFN outputs (|MD| <= |KL| for some heads); ``saturated``:
    scaled by 3000, so that the KL underflows (KL = 0, and factors beyond 2^64)."""
    with torch.no_grad():
        if how == "centred":
            model.classifier.bias.sub_(model(**model_inputs(_batch_of(context, pruner))).logits.mean(0))
        scale = {"plain": 1.0, "centred": 1000.0, "saturated": 3000.0}[how]
        model.classifier.weight.mul_(scale)
        model.classifier.bias.mul_(scale)


@pytest.mark.parametrize("how, carry_over, md_tokens, branches", [
    ("plain", False, "all", {"scaled"}), ("plain", True, "all", {"scaled"}),
    ("plain", False, "non_padding", {"scaled"}), ("plain", True, "non_padding", {"scaled"}),
    ("centred", False, "all", {"scaled", "mean_small_md"}),
    ("saturated", False, "all", {"scaled_overflow", "mean"}),
])
def test_scores_and_ranking_equal_the_transcribed_official_loop(how, carry_over, md_tokens, branches):
    """Same batch, same MD sampler seed: the scores equal the transcription's to float64 round-off, the balancing
    appends the same factors (through every branch of it, over the three classifiers), and the mask at every K
    prunes the last K of the official queue."""
    model = tiny_model()
    context = synthetic_context(model, target_heads=5)
    pruner = OptinPruner(batch_size=POOL, carry_over=carry_over, md_tokens=md_tokens)
    _logits_reshaped(model, context, pruner, how)
    result = pruner.prune(model, context)
    batch = _batch_of(context, pruner)
    assert batch["attention_mask"].sum() > optin.MD_POSITIONS  # the 768 positions are a true subset
    positions = None if md_tokens == "all" else torch.nonzero(batch["attention_mask"].flatten()).flatten()
    ranking, expected, scalings = official_prune(model, batch, context.generator(salt=optin.SALT_MD), carry_over,
                                                 positions)
    torch.testing.assert_close(-result.scores, expected, rtol=1e-12, atol=0)
    assert result.trace["kl_scalings"] == scalings
    assert {name for name, count in result.trace["balancing"].items() if count} == branches
    for k in range(L * H + 1):
        pruned = {(layer, head) for _, layer, head, _ in ranking[L * H - k:]}
        mask = pruner.mask_at(result, k).mask
        assert {(int(a), int(b)) for a, b in torch.nonzero(mask == 0)} == pruned, k


def test_carry_over_changes_only_the_layers_after_the_first():
    """The official mask keeps the last head of every earlier layer removed, so layer 0 (nothing earlier) scores
    the same either way and the later layers do not."""
    model = tiny_model()
    context = synthetic_context(model, target_heads=3)
    fixed = OptinPruner(batch_size=32).prune(model, context)
    carried = OptinPruner(batch_size=32, carry_over=True).prune(model, context)
    assert torch.equal(fixed.scores[0], carried.scores[0])
    assert (fixed.scores[1:] - carried.scores[1:]).abs().min() > 0
    assert "one_head_from_dense_model" in fixed.trace["departures"]
    assert "one_head_from_dense_model" not in carried.trace["departures"]


def test_balancing_follows_the_official_branches():
    """Each branch of the official balancing on chosen values, one shared running list: |MD|/|KL| = 1000 gives
    100, 5 gives 1, and |MD| <= |KL| or KL = 0 multiplies by the running mean (1 while the list is empty)."""
    cases = [(-1.0, -5.0), (-1.0, 0.0), (-1000.0, -1.0), (-5.0, -1.0), (-2.0, -4.0), (-3.0, 0.0), (0.0, 0.0),
             (-1e7, -2.0)]
    ours, official = [], []
    for mmd, kl in cases:
        got, _ = balance_kl(mmd, kl, ours)
        assert got == official_balance(torch.tensor(mmd, dtype=torch.float64),
                                       torch.tensor(kl, dtype=torch.float64), official).item()
    assert ours == official == [100, 1, 100000]
    assert balance_kl(-1.0, -5.0, [])[0] == -5.0 and balance_kl(-1.0, -5.0, [1, 100])[0] == -5.0 * 50.5


@pytest.mark.parametrize("k", [0, 1, L * H - 1, L * H])
def test_prunes_exactly_k_the_heads_of_least_damage(k):
    model = tiny_model()
    pruner = OptinPruner(batch_size=16)
    result = pruner.prune(model, synthetic_context(model, target_heads=k))
    assert result.heads_pruned == k
    damage = result.scores.flatten()  # minus OPTIN's score: the pruned heads have the smallest
    pruned, kept = damage[result.mask.flatten() == 0], damage[result.mask.flatten() == 1]
    assert not len(pruned) or not len(kept) or pruned.max() <= kept.min()
    assert torch.equal(pruner.mask_at(result, k).mask, result.mask)


def test_ties_go_in_the_official_queue_order():
    """Ascending (score, layer, head), keep the first L*H - K: among equal scores the later (layer, head) go."""
    score = torch.zeros(L, H, dtype=torch.float64)
    score[0, 0] = -1.0
    mask = keep_most_damaging(score, 3)
    assert torch.nonzero(mask.flatten() == 0).flatten().tolist() == [9, 10, 11]
    derived = OptinPruner().mask_at(PruningResult(mask=torch.ones(L, H), scores=-score), L * H - 1)
    assert torch.nonzero(derived.mask.flatten()).flatten().tolist() == [0]
    with pytest.raises(ValueError, match="cannot prune"):
        keep_most_damaging(score, L * H + 1)


def test_labels_are_never_read():
    model = tiny_model()
    context = synthetic_context(model, target_heads=3)
    unlabelled = _with_batches(context, lambda b: {k: v for k, v in b.items() if k != "labels"})
    pruner = OptinPruner(batch_size=16)
    assert torch.equal(pruner.prune(model, unlabelled).scores, pruner.prune(model, context).scores)


@pytest.mark.parametrize("options, option", [({"md_tokens": "padding"}, "md_tokens"), ({"batch_size": 0}, "batch_size"),
                                             ({"carry_over": "yes"}, "carry_over"), ({"carry_over": 1}, "carry_over")])
def test_bad_options_are_refused_naming_the_option(options, option):
    with pytest.raises(OptionError, match=option):
        OptinPruner(**options)


def test_ffn_output_projections_per_family_and_an_unknown_family_refused(monkeypatch):
    bert = tiny_model()
    assert optin.ffn_output_denses(bert) == [block.output.dense for block in bert.bert.encoder.layer]
    distil = tiny_model(family="distilbert")
    assert optin.ffn_output_denses(distil) == [block.ffn.lin2 for block in distil.distilbert.transformer.layer]
    monkeypatch.delitem(optin.FFN_OUTPUT, "bert")
    with pytest.raises(UnsupportedArchitectureError, match="FFN output projection"):
        OptinPruner(batch_size=8).prune(bert, synthetic_context(bert, target_heads=1))
    with pytest.raises(ValueError, match="needs a budget"):
        OptinPruner().prune(bert, synthetic_context(bert, target_heads=None))
