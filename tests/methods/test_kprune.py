"""K-prune (``kprune``): the whole search against a transcription of the official computation (float64, tiny BERT),
exact K at the edges, the first step's vanishing predictive term, the tuned weights (the ``weights`` repair's, on a
copy), and its options."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from headprune_bench.methods.base import model_inputs
from headprune_bench.methods.conformance import check_pruner, synthetic_context, tiny_model
from headprune_bench.methods.heads import apply_head_mask
from headprune_bench.methods.kprune import KPrunePruner
from headprune_bench.methods.options import OptionError
from headprune_bench.methods.repair import RepairContext
from headprune_bench.methods.repairs.weights import WeightsRepair

L, H, D = 3, 4, 8  # the tiny model: 3 layers x 4 heads of 8 channels (hidden 32)
MU = 64.0  # the official head factor; f_head is taken as 1 (both cancel in the ranking)
SAMPLE, BATCH = 24, 8
LAM_REP = 5e-10  # (this tiny model's pred and lam_rep * rep are then of one size: both move its ranking)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(seed: int = 0):
    """A float64 tiny BERT whose logits are O(1) (a random classifier's are ~0.01, and so would be the KL's
    gradients), so that the predictive term weighs in the ranking."""
    model = tiny_model(seed=seed).double()
    with torch.no_grad():
        model.classifier.weight.mul_(100.0)
    return model


def _batches(pruner: KPrunePruner, context) -> list[dict[str, torch.Tensor]]:
    return list(context.batches("train", batch_size=pruner.options["batch_size"], indices=pruner.sample(context)))


def _add(total: torch.Tensor, value: torch.Tensor) -> None:
    total += value  # (returns None: a forward hook's return value would replace the module's output)


def official(model, batches, target: int, temperature: float, lam_pred: float, lam_rep: float, tuning: bool):
    """methods-2024 §1.2-1.3 written out as the official ``kprune`` / ``compute_scores`` / ``find_mask`` /
    ``knowledge_reconstruction`` do it, heads only, with §1.7's remaining count and the benchmark's masking in
    place of physical removal: per step a full forward and backward pass per batch with a per-channel mask at W_O's
    input of the layers >= the target; the teacher's soft labels and pre-LayerNorm sums (query input + W_O output)
    recorded at the first step; the target's features and query inputs kept and solved by lstsq on the normal
    equations. Returns (mask, per-step pred and rep pools, the committed scores, the model)."""
    model = copy.deepcopy(model)
    model.requires_grad_(False)
    layers = model.bert.encoder.layer
    mask = torch.ones(L, H)
    keep_left = L * H - target
    kd_labels, kd_outputs = [], {}
    scores = torch.zeros(L, H, dtype=torch.float64)
    pools = []
    for step in range(L):
        head_masks = torch.ones(L, H * D, dtype=torch.float64, requires_grad=True)
        features = {sl: [] for sl in range(step, L)}
        s_inputs, sl_features, handles = [], [], []
        for sl in range(step, L):
            query, dense = layers[sl].attention.self.query, layers[sl].attention.output.dense
            if sl == step:
                handles.append(query.register_forward_hook(lambda m, i, o, seen=s_inputs: seen.append(i[0].clone())))
            if step == 0:
                kd_outputs[sl] = []
                handles.append(query.register_forward_hook(lambda m, i, o, seen=kd_outputs[sl]:
                                                           seen.append(i[0].clone())))
                handles.append(dense.register_forward_hook(lambda m, i, o, seen=kd_outputs[sl]: _add(seen[-1], o)))
            handles.append(dense.register_forward_hook(lambda m, i, o, seen=features[sl]: seen.append(i[0].clone())))
            handles.append(dense.register_forward_pre_hook(lambda m, i, g=head_masks, sl=sl: (g[sl] * i[0],)))
        label_ks = torch.zeros(L, H, dtype=torch.float64)
        rep_ks = torch.zeros(L, H, dtype=torch.float64)
        num_tokens = num_samples = 0
        for b, batch in enumerate(batches):
            att = batch["attention_mask"].bool()
            num_tokens += int(att.sum())
            num_samples += att.shape[0]
            with apply_head_mask(model, mask):
                logits = model(**model_inputs(batch)).logits
            if step == 0:
                kd_labels.append(F.softmax(logits / temperature, dim=1).detach())
            kl = F.kl_div(F.log_softmax(logits / temperature, dim=1), kd_labels[b],
                          reduction="batchmean") * temperature ** 2
            kl.backward()
            s_inputs[-1] = s_inputs[-1][att]
            for sl in range(step, L):
                feats = features[sl][-1][att].detach()
                if step == 0:
                    kd_outputs[sl][-1] = kd_outputs[sl][-1][att].detach()
                if sl == step:
                    sl_features.append(feats)
                weight = layers[sl].attention.output.dense.weight
                rep_ks[sl] += ((feats ** 2).sum(dim=0) * (weight ** 2).mean(dim=0)).view(-1, D).mean(dim=1)
                label_ks[sl] += ((head_masks.grad[sl] ** 2) * 0.5).view(-1, D).mean(dim=1)
            head_masks.grad = None
        for handle in handles:
            handle.remove()
        label_ks, rep_ks = label_ks / num_samples, rep_ks / num_tokens
        head_scores = MU * (rep_ks * lam_rep + label_ks * lam_pred) / 1.0
        pools.append((label_ks[step:], rep_ks[step:]))
        pool = sorted((float(head_scores[sl, h]), sl, h) for sl in range(step, L) for h in range(H))
        pruned = {(sl, h) for _, sl, h in pool[:len(pool) - keep_left]}
        row = torch.tensor([0.0 if (step, h) in pruned else 1.0 for h in range(H)])
        mask[step] = row
        keep_left -= int(row.sum())
        scores[step] = head_scores[step] / MU
        if tuning and int(row.sum()):
            cols = torch.repeat_interleave(row.bool(), D)
            dense = layers[step].attention.output.dense
            a = torch.cat(sl_features)[:, cols]
            rhs = torch.cat(kd_outputs[step]) - torch.cat(s_inputs) - dense.bias
            solution = torch.linalg.lstsq(a.t() @ a, a.t() @ rhs, rcond=0.0).solution
            with torch.no_grad():
                dense.weight[:, cols] = solution.t()
    return mask, pools, scores, model


@pytest.mark.parametrize("tuning", [True, False])
def test_kprune_conforms(tuning):
    result = check_pruner("kprune", **KPrunePruner.conformance_options, tuning=tuning)
    assert result.retrained is tuning and (result.model is not None) is tuning


@pytest.mark.parametrize("tuning", [True, False])
def test_the_search_is_the_official_computation(tuning):
    """Same mask, same pred and rep at every step (the whole pool), same committed scores (the official ones over
    mu, f_head = 1), and with tuning the same W_O, against :func:`official` on the same batches. lam_rep is
    chosen so that both terms move the ranking of this tiny model."""
    model = _model()
    options = dict(sample_size=SAMPLE, batch_size=BATCH, lam_rep=LAM_REP, tuning=tuning)
    context = synthetic_context(model, target_heads=5)
    pruner = KPrunePruner(**options)
    result = pruner.prune(model, context)
    mask, pools, scores, tuned = official(model, _batches(pruner, context), 5, 2.0, 1.0, LAM_REP, tuning)
    assert torch.equal(result.mask, mask) and result.heads_pruned == 5
    for step, (pred, rep) in zip(result.trace["steps"], pools, strict=True):
        assert torch.allclose(torch.tensor(step["pred"], dtype=torch.float64), pred, rtol=1e-9, atol=0)
        assert torch.allclose(torch.tensor(step["rep"], dtype=torch.float64), rep, rtol=1e-9, atol=0)
    assert torch.allclose(result.scores, scores, rtol=1e-9, atol=0)
    rep_only = KPrunePruner(**{**options, "lam_pred": 0.0}).prune(model, context).mask
    pred_only = KPrunePruner(**{**options, "lam_rep": 0.0}).prune(model, context).mask
    assert not torch.equal(rep_only, mask) and not torch.equal(pred_only, mask)  # both terms matter here
    if tuning:
        for layer in range(L):
            ours = result.model.bert.encoder.layer[layer].attention.output.dense.weight
            theirs = tuned.bert.encoder.layer[layer].attention.output.dense.weight
            assert torch.allclose(ours, theirs, rtol=0, atol=1e-9 * float(theirs.abs().max()))


@pytest.mark.parametrize("target", [0, 1, L * H - 1, L * H])
def test_exactly_k_heads_are_pruned(target):
    """§1.7's count: R_0 = L*H - K kept, R_{l+1} = R_l - k_l, the last pool is the last layer alone."""
    model = _model()
    result = KPrunePruner(sample_size=16, batch_size=8).prune(model, synthetic_context(model, target_heads=target))
    assert result.heads_pruned == target
    steps = result.trace["steps"]
    assert [s["heads_to_keep"] for s in steps] == [L * H - target - sum(s["kept"] for s in steps[:i])
                                                   for i in range(L)]
    assert [s["kept"] for s in steps] == result.mask.sum(dim=1).int().tolist()


def test_the_first_steps_predictive_term_vanishes():
    """At step 0 the model is its own teacher (the soft labels come from the same pass), so the KL's gradient is 0
    up to round-off: the first decision rests on rep alone (reproduced, not fixed). Once layer 0 is pruned it is
    not 0 any more."""
    model = _model()
    result = KPrunePruner(sample_size=SAMPLE, batch_size=BATCH, tuning=False).prune(
        model, synthetic_context(model, target_heads=6))
    first = torch.tensor(result.trace["steps"][0]["pred"])
    later = torch.tensor(result.trace["steps"][1]["pred"])
    assert int(result.mask[0].sum()) < H  # layer 0 lost a head
    assert result.trace["pred_first_step_max"] == float(first.max()) < 1e-20
    assert float(later.min()) > 1e6 * float(first.max())


def test_the_tuned_weights_are_the_weights_repair_of_its_mask_on_a_copy():
    """With tuning the base model is untouched; the result's model differs from it only in the W_O weights of the
    layers that keep a head, which are what the ``weights`` repair gives its mask on the same batches (each step's
    solve depends only on the rows committed up to it); the biases are the base's."""
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    context = synthetic_context(model, target_heads=7)
    pruner = KPrunePruner(sample_size=SAMPLE, batch_size=BATCH)
    result = pruner.prune(model, context)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert pruner.changes_weights() and pruner.own_repair() == "weights"
    changed = {k for k, v in result.model.state_dict().items() if not torch.equal(before[k], v)}
    kept_layers = [layer for layer in range(L) if result.mask[layer].sum() > 0]
    assert changed == {f"bert.encoder.layer.{layer}.attention.output.dense.weight" for layer in kept_layers}
    repaired = WeightsRepair().repair(model, result.mask, RepairContext(batches=_batches(pruner, context)))
    assert sorted(repaired.output_weights) == kept_layers == result.trace["kpwt"]["tuned_layers"]
    for layer, weight in repaired.output_weights.items():
        ours = result.model.bert.encoder.layer[layer].attention.output.dense.weight
        assert torch.allclose(ours, weight, rtol=0, atol=1e-12)
    assert result.trace["kpwt"]["layers"] == repaired.trace["layers"]


@pytest.mark.parametrize("options, message", [
    ({"lam_rep": -1.0}, r"option lam_rep must be >= 0"),
    ({"lam_pred": float("inf")}, r"option lam_pred must be >= 0"),
    ({"temperature": 0.0}, r"option temperature must be > 0"),
    ({"damping": -0.5}, r"option damping must be >= 0"),
    ({"batch_size": 0}, r"option batch_size must be >= 1"),
    ({"split": "dev"}, r"option split must be one of"),
    ({"tuning": "maybe"}, r"'tuning'"),
    ({"lam_pred": 0.0, "lam_rep": 0.0}, r"options lam_pred and lam_rep are both 0"),
    ({"damping": 0.1, "tuning": False}, r"option damping=0.1 .*needs tuning=True"),
    ({"lamrep": 1.0}, r"unknown option.*'lamrep'"),
])
def test_bad_options_are_refused_naming_the_option(options, message):
    with pytest.raises(OptionError, match=message):
        KPrunePruner(**options)


def test_a_missing_or_impossible_budget_is_refused():
    model = _model()
    with pytest.raises(ValueError, match="needs a budget"):
        KPrunePruner().prune(model, synthetic_context(model, target_heads=None))
    with pytest.raises(ValueError, match="cannot prune 13 of 12"):
        KPrunePruner().prune(model, synthetic_context(model, target_heads=13))
