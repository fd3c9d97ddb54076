"""Voita's L0 gates, differentiable subset pruning (DSP) and zero-shot redundancy pruning (issue 4).

Everything runs on tiny random BERTs (headprune_bench.methods.conformance.tiny_model) with small training lengths.
"""
from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from headprune_bench import methods
from headprune_bench.methods.base import lowest_k_mask
from headprune_bench.methods.conformance import CLS, SEP, check_pruner, collate, synthetic_context, tiny_model
from headprune_bench.methods.dsp import (
    TINY,
    gumbel_noise,
    gumbel_soft_top_k,
    hard_top_k,
    soft_top_k,
    ste_top_k,
    temperature,
)
from headprune_bench.methods.hard_concrete import (
    close_threshold,
    deterministic_gates,
    gate_counts,
    hard_concrete,
    l0_penalty,
    max_travel,
    prob_fully_open,
    prob_open,
    prune_threshold,
    sample_gates,
    select_heads,
)
from headprune_bench.methods.heads import apply_head_mask, get_layout, scale_value_heads
from headprune_bench.methods.redundancy import (
    clear_cache,
    cluster_medoid_mask,
    model_digest,
    pairwise_head_distances,
    random_token_batches,
    redundancy_matrix,
)
from headprune_bench.methods.voita import VoitaPruner, train_gates

pytestmark = pytest.mark.usefixtures("one_torch_thread")


FAST_VOITA = {"max_steps": 4, "batch_size": 16, "evals_per_epoch": 1}
FAST_DSP = {"max_steps": 4, "batch_size": 16, "epochs": 2.0}
FAST_REDUNDANCY = {"num_sequences": 6, "seq_length": 12, "batch_size": 3}


# =========================================================================================== DSP


def test_soft_top_k_sums_to_k_for_random_logits_and_temperatures():
    g = torch.Generator().manual_seed(0)
    for _ in range(60):
        n = int(torch.randint(2, 150, (1,), generator=g))
        k = int(torch.randint(1, n + 1, (1,), generator=g))
        w = torch.randn(n, generator=g, dtype=torch.float64) * float(torch.rand(1, generator=g) * 10)
        for tau in (1e3, 10.0, 1.0, 0.1, 1e-3, 1e-8):
            mask = gumbel_soft_top_k(w, k, tau, g)
            assert mask.dtype == torch.float64
            assert torch.isfinite(mask).all() and (mask >= 0).all()
            assert abs(float(mask.sum()) - k) <= 1e-9 * k, (n, k, tau, float(mask.sum()))


def test_soft_top_k_tends_to_the_hard_top_k_and_keeps_the_layer_shape():
    g = torch.Generator().manual_seed(1)
    r = torch.randn(3, 4, generator=g, dtype=torch.float64)
    for k in (1, 5, 11):
        relaxed = soft_top_k(r, k, 1e-8)
        assert relaxed.shape == (3, 4)
        assert torch.equal(relaxed, hard_top_k(r, k))
    # entries are not bounded by 1 at moderate temperatures (the relaxation of Xie & Ermon only fixes the sum)
    assert soft_top_k(r, 12, 1.0).max() > 1 and soft_top_k(r, 12, 1.0).sum().item() == pytest.approx(12.0)
    assert torch.equal(soft_top_k(r, 0, 1.0), torch.zeros(3, 4, dtype=torch.float64))


def _naive_float32_soft_top_k(w, k, tau, u):
    """The same relaxation computed in float32, as a port that drops the float64 would: tiny underflows to 0."""
    eps = torch.tensor(TINY, dtype=torch.float32)
    r = w - torch.log(-torch.log(u * (1 - eps) + eps))
    p = torch.softmax(r / tau, 0)
    total = p
    for _ in range(1, k):
        r = r + torch.log(torch.maximum(1 - p, eps))
        p = torch.softmax(r / tau, 0)
        total = total + p
    return total


def test_float64_prevents_log_zero_at_tiny_temperature():
    assert torch.tensor(TINY, dtype=torch.float32).item() == 0.0  # the float32 failure: the guard is 0
    g = torch.Generator().manual_seed(2)
    coeff = torch.arange(12, dtype=torch.float64)
    u = torch.rand(12, generator=g, dtype=torch.float64)
    w32 = torch.randn(12, generator=g).requires_grad_(True)
    (_naive_float32_soft_top_k(w32, 4, 1e-8, u.float()) * coeff.float()).sum().backward()
    assert not torch.isfinite(w32.grad).all(), "expected the float32 relaxation to give non-finite gradients"

    # Ours: float64 everywhere, same logits, same temperature: finite mask (exactly 4-hot) and finite gradients.
    w64 = w32.detach().double().requires_grad_(True)
    mask = gumbel_soft_top_k(w64, 4, 1e-8, torch.Generator().manual_seed(3))
    (mask * coeff).sum().backward()
    assert torch.isfinite(mask).all() and torch.isfinite(w64.grad).all()
    assert mask.detach().sum().item() == 4.0 and set(mask.detach().unique().tolist()) <= {0.0, 1.0}
    # Gumbel noise is finite even for u at the ends of [0, 1)
    assert torch.isfinite(gumbel_noise((10_000,), torch.Generator().manual_seed(4))).all()


def test_hard_top_k_has_exactly_k_ones_even_with_ties():
    w = torch.zeros(3, 4, dtype=torch.float64)
    for k in range(13):
        mask = hard_top_k(w, k)
        assert int(mask.sum()) == k
        assert mask.view(-1)[:k].eq(1).all()  # ties go to the lower flat index
    w = torch.tensor([[0.5, 2.0, -1.0, 2.0]], dtype=torch.float64)
    assert hard_top_k(w, 2).tolist() == [[0.0, 1.0, 0.0, 1.0]]


def test_ste_forward_is_hard_top_k_and_gradients_reach_w():
    g = torch.Generator().manual_seed(5)
    w = torch.randn(3, 4, generator=g, dtype=torch.float64).requires_grad_(True)
    mask = ste_top_k(w, 5)
    assert int(mask.sum()) == 5 and torch.equal(mask.detach(), hard_top_k(w, 5))
    coeff = torch.randn(3, 4, generator=g, dtype=torch.float64)
    (mask * coeff).sum().backward()
    assert torch.equal(w.grad, coeff)  # identity backward


def test_temperature_anneals_geometrically():
    taus = [temperature(t, 1000.0, 1e-8, 10) for t in range(12)]
    assert taus[0] == pytest.approx(1000.0) and taus[10] == pytest.approx(1e-8) and taus[11] == 1e-8
    ratios = [taus[t + 1] / taus[t] for t in range(9)]
    assert all(r == pytest.approx(ratios[0]) for r in ratios)  # geometric
    assert temperature(3, 1000.0, 0.1, 10, annealing=False) == 0.1


@pytest.mark.parametrize("variant", ["pipelined", "joint", "ste"])
def test_dsp_conforms_and_prunes_exactly_the_target(variant):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = check_pruner("dsp", target_heads=5, variant=variant, **FAST_DSP)
    assert result.heads_pruned == 5
    assert result.retrained == (variant != "pipelined")
    assert torch.equal(result.mask, hard_top_k(result.scores, 12 - 5).float())  # final mask = top-K of w


def test_dsp_warns_when_cooldown_exceeds_training_and_records_it():
    model = tiny_model()
    ctx = synthetic_context(model, target_heads=4)
    with pytest.warns(UserWarning, match="cooldown_steps=8333 exceeds"):
        result = methods.create("dsp", **FAST_DSP).prune(model, ctx)
    trace = result.trace
    assert trace["cooldown_capped"] and trace["cooldown_used"] == trace["total_steps"] - 1 == 3
    assert trace["final_tau"] == pytest.approx(1e-8)
    assert "exceeds" in trace["warning"]
    # no warning when N_cool fits
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        methods.create("dsp", cooldown_steps=2, **FAST_DSP).prune(model, ctx)


def test_dsp_pipelined_trains_only_w():
    model = tiny_model()
    ctx = synthetic_context(model, target_heads=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = methods.create("dsp", **FAST_DSP).prune(model, ctx)
    bound = math.sqrt(6 / (3 + 4))  # xavier-uniform init of w, drawn first from the method's seeded stream
    init = (torch.rand(3, 4, generator=ctx.generator(salt=2_000), dtype=torch.float64) * 2 - 1) * bound
    assert result.model is None and not result.retrained
    assert torch.isfinite(result.scores).all() and not torch.allclose(result.scores.double(), init, atol=1e-3)
    assert len(result.trace["curve"]) >= 1 and result.trace["steps"] == 4
    assert all(p.requires_grad for p in model.parameters())  # the base model's flags are untouched


@pytest.mark.parametrize("options, context, message", [
    ({}, {"target_heads": None}, "needs a budget"),
    ({"variant": "bogus"}, {}, "variant"),
], ids=["no-budget", "variant"])
def test_dsp_needs_a_target_and_checks_options(options, context, message):
    model = tiny_model()
    with pytest.raises(ValueError, match=message):
        methods.create("dsp", **options).prune(model, synthetic_context(model, **context))


# =========================================================================================== Voita


def test_gate_samples_match_closed_form_open_probability_and_clip_boundaries():
    log_a = torch.tensor([-3.0, -1.0, 0.0, 0.5, 2.0, 4.0], dtype=torch.float64)
    n = 200_000
    gates = sample_gates(log_a, torch.Generator().manual_seed(0), num_samples=n)
    assert gates.shape == (n, 6) and (gates >= 0).all() and (gates <= 1).all()
    tol = 4 * math.sqrt(0.25 / n)
    frac_open = (gates > 0).double().mean(dim=0)
    frac_one = (gates == 1).double().mean(dim=0)
    assert torch.allclose(frac_open, prob_open(log_a, eps=0.0), atol=tol), (frac_open, prob_open(log_a, eps=0.0))
    assert torch.allclose(frac_one, prob_fully_open(log_a), atol=tol), (frac_one, prob_fully_open(log_a))
    # both clip boundaries carry mass, and values strictly inside exist
    assert frac_open[0] < 0.2 and frac_one[-1] > 0.8
    assert ((gates > 0) & (gates < 1)).any(dim=0).all()
    # the sample is the stretched, clipped concrete of the formula
    u = torch.tensor([0.3], dtype=torch.float64)
    s = 1 / (1 + math.exp(-(math.log(0.3) - math.log(0.7) + 0.5) / 0.33))
    assert hard_concrete(torch.tensor([0.5], dtype=torch.float64), u).item() == pytest.approx(
        min(1.0, max(0.0, float(s) * 1.2 - 0.1)))


def test_deterministic_gate_closes_exactly_below_one_twelfth():
    boundary = math.log((1 / 12) / (11 / 12))  # sigmoid(log_a) = 1/12
    gates = deterministic_gates(torch.tensor([boundary - 1e-3, boundary + 1e-3, 0.0, 10.0], dtype=torch.float64))
    assert gates[0] == 0 and gates[1] > 0 and gates[2] == pytest.approx(0.5) and gates[3] == 1


def test_penalty_sum_is_layers_times_mean():
    log_a = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    total = l0_penalty(log_a, reduction="sum")
    assert total == pytest.approx(prob_open(log_a).sum().item())
    assert total == pytest.approx(3 * l0_penalty(log_a, reduction="mean").item())


def test_final_mask_selections():
    log_a = torch.tensor([[-5.0, -2.0, -0.2, 3.0], [-4.0, -1.0, 1.0, 6.0]])
    assert select_heads(log_a, "closed").tolist() == [[0, 1, 1, 1], [0, 1, 1, 1]]  # gate 0 iff log_a <= -2.398
    assert select_heads(log_a, "threshold").tolist() == [[0, 0, 0, 1], [0, 0, 1, 1]]  # keep gate > 0.5
    assert select_heads(log_a, "topk", target=3).tolist() == [[0, 0, 1, 1], [0, 1, 1, 1]]
    with pytest.raises(ValueError, match="needs a budget"):
        select_heads(log_a, "topk")


def _balanced_presence_task(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Label 1 iff token 5 occurs; half the examples have it: the [CLS] output needs attention."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        length = int(torch.randint(6, 13, (1,), generator=g))
        body = torch.randint(6, 64, (length,), generator=g)
        if i % 2:
            body[int(torch.randint(0, length, (1,), generator=g))] = 5
        rows.append({"input_ids": torch.cat([torch.tensor([CLS]), body, torch.tensor([SEP])]),
                     "labels": torch.tensor(i % 2)})
    return rows


@pytest.fixture(scope="module")
def trained_tiny():
    """A tiny BERT fine-tuned to convergence on a task that needs its heads, and a context over that task."""
    data = {"mini_train": _balanced_presence_task(96, 1), "mini_dev": _balanced_presence_task(48, 2)}

    def batches(split, batch_size=32, shuffle=False, seed=None, indices=None):
        rows = data[split]
        order = list(range(len(rows)))
        if shuffle:
            order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed or 0)).tolist()
        for start in range(0, len(rows), batch_size):
            yield collate([rows[i] for i in order[start:start + batch_size]])

    model = tiny_model(0)
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for epoch in range(15):
        for batch in batches("mini_train", 32, True, epoch):
            labels = batch.pop("labels")
            loss = F.cross_entropy(model(**batch).logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    ctx = synthetic_context(model, target_heads=None)
    ctx.batches = batches
    ctx.num_examples = lambda split: len(data[split])
    return model, ctx


def test_large_lambda_closes_the_gates_and_lambda_zero_keeps_them_open(trained_tiny):
    model, ctx = trained_tiny
    opts = dict(VoitaPruner.defaults, max_steps=40, epochs=100.0, early_stopping=False, linear_decay=False)
    init = deterministic_gates(train_gates(model, ctx, dict(opts, max_steps=1, gate_lr=0.0), 0.0)["log_a"])
    open_run = deterministic_gates(train_gates(model, ctx, opts, 0.0)["log_a"])
    closed_run = deterministic_gates(train_gates(model, ctx, opts, 10.0)["log_a"])
    assert (closed_run == 0).all(), closed_run
    assert (open_run > 0).all(), open_run
    assert open_run.mean() > init.mean()  # the task loss alone opens the gates further


def test_voita_topk_conforms_and_prunes_exactly_k():
    result = check_pruner("voita", target_heads=5, selection="topk", **FAST_VOITA)
    assert result.heads_pruned == 5 and result.trace["achieved"] == 5
    assert "top-K" in result.trace["how"] and len(result.trace["runs"]) == 1


@pytest.mark.parametrize("exact", [False, True])
def test_voita_lambda_search_conforms_and_records_how_the_count_was_reached(exact):
    result = check_pruner("voita", target_heads=3, search_runs=3, search_factor=100.0, gate_lr=2.0, exact=exact,
                          **FAST_VOITA)
    trace = result.trace
    runs = trace["runs"]
    assert 1 <= len(runs) <= 3 and trace["achieved"] == result.heads_pruned
    assert trace["search_pruned"] == min((r["pruned"] for r in runs), key=lambda c: abs(c - 3))
    assert "lambda search" in trace["how"] and ("exact" in trace["how"] or "nearest" in trace["how"])
    lambdas = [r["lambda"] for r in runs]
    assert lambdas[0] == pytest.approx(0.0015) and len(set(lambdas)) == len(lambdas)
    assert not methods.get_method_class("voita").exact_budget
    if not exact:
        assert trace["achieved"] == trace["search_pruned"]
        return
    # exact: the count is K, the K lowest log_a pruned (a superset or subset of the search's closed gates)
    log_a = torch.tensor(trace["log_a"], dtype=torch.float64)
    assert trace["achieved"] == 3 and torch.equal(result.mask, lowest_k_mask(log_a, 3))
    assert ("completed to exactly 3" in trace["how"]) == (trace["search_pruned"] != 3)
    closed = torch.tensor(trace["deterministic_gates"]) == 0
    pruned = result.mask == 0
    assert bool((closed & ~pruned).any()) == (trace["search_pruned"] > 3) == (trace["kept_closed_gates"] > 0)
    assert bool((pruned & ~closed).any()) == (trace["search_pruned"] < 3) == (trace["pruned_open_gates"] > 0)


def test_gate_counts_and_folded_gates_equal_the_gated_network():
    gates = torch.tensor([[0.0, 0.3, 1.0], [1.0, 0.0, 0.7]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    assert gate_counts(gates, mask) == {"fractional_gates": 1, "kept_closed_gates": 1, "pruned_open_gates": 1}
    # the value rows scaled by a gate == the head's output scaled by it (exact in float64)
    model = tiny_model().double().eval()
    g = torch.rand(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ids = torch.randint(5, 40, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), apply_head_mask(model, g):
        gated = model(input_ids=ids).logits
    folded = scale_value_heads(copy.deepcopy(model), g)
    with torch.no_grad():
        assert torch.allclose(folded(input_ids=ids).logits, gated, rtol=0, atol=1e-12)


def test_voita_joint_folds_its_fractional_gates_into_its_own_weights():
    result = check_pruner("voita", target_heads=3, search_runs=1, **FAST_VOITA)  # the defaults: joint, fold, exact
    trace = result.trace
    assert result.retrained and trace["joint"] and trace["folded_gates"] and result.heads_pruned == 3
    assert {"fractional_gates", "kept_closed_gates", "pruned_open_gates"} <= set(trace)
    unfolded = check_pruner("voita", target_heads=3, search_runs=1, fold_gates=False, **FAST_VOITA)
    assert "folded_gates" not in unfolded.trace and torch.equal(unfolded.mask, result.mask)
    gates = torch.tensor(trace["deterministic_gates"], dtype=torch.float32)
    factor = torch.where(gates > 0, gates, torch.ones_like(gates))
    layout = get_layout(unfolded.model)
    # float32: one multiplication per weight, rounded to 0.5 ulp (6e-8 relative) on any CPU; rtol 1e-6 leaves room
    for layer in range(layout.num_layers):  # the folded value rows are the unfolded ones times the gate
        d = layout.head_size
        for h in range(layout.num_heads):
            rows = slice(h * d, (h + 1) * d)
            assert torch.allclose(get_layout(result.model).value(layer).weight[rows],
                                  layout.value(layer).weight[rows] * factor[layer, h], rtol=1e-6, atol=1e-7)


def test_gate_travel_and_prune_thresholds_known_values():
    assert close_threshold() == pytest.approx(math.log(1 / 11))
    assert prune_threshold("closed") == close_threshold() and prune_threshold("topk") is None
    assert prune_threshold("threshold") == pytest.approx(0.0)  # gate <= 0.5 <=> sigmoid(log_a) <= 0.5
    for selection in ("closed", "threshold"):
        level = torch.tensor(prune_threshold(selection))
        keep = select_heads(torch.stack([level - 1e-6, level + 1e-3]).view(1, 2), selection)
        assert keep.tolist() == [[0.0, 1.0]], selection  # pruned just below the level, kept just above it
    assert max_travel(0.1, 47) == pytest.approx(0.1 * 48 / 2)  # linear decay: lr * (steps + 1) / 2
    assert max_travel(0.1, 47, linear_decay=False) == pytest.approx(4.7)
    assert max_travel(0.1, 47, taken=10) == pytest.approx(0.1 * (10 - 45 / 47))
    assert max_travel(0.4, 15) == pytest.approx(3.2) and max_travel(0.5, 0) == 0.0


def test_voita_says_when_the_step_budget_not_lambda_caps_the_count(trained_tiny):
    model, ctx = trained_tiny
    # 3 steps at lr 0.8 without decay: a gate moves about 2.4, so roughly the heads initialised below 0 can close
    opts = dict(VoitaPruner.defaults, max_steps=3, gate_lr=0.8, linear_decay=False, early_stopping=False)
    short = train_gates(model, ctx, opts, 10.0)
    init = train_gates(model, ctx, dict(opts, gate_lr=0.0), 0.0)["log_a"].double()
    reachable = init - 2.4 <= close_threshold()
    assert short["travel"] == pytest.approx(2.4) and short["closable"] == int(reachable.sum())
    assert 0 < short["closable"] < init.numel()
    closed = deterministic_gates(short["log_a"]) == 0
    assert (closed & reachable).any()  # the penalty closes gates that can reach 0 ...
    out_of_reach = init - 1.1 * 2.4 > close_threshold()  # ... and none out of reach (10% slack: Adam's step ~ lr)
    assert out_of_reach.any() and not (closed & out_of_reach).any()
    ctx.target_heads = init.numel()
    try:
        with pytest.warns(UserWarning, match="initialisation, not lambda, caps the count below the target"):
            result = methods.create("voita", max_steps=3, gate_lr=0.8, linear_decay=False, early_stopping=False,
                                    search_runs=1, l0_lambda=10.0, exact=False).prune(model, ctx)
    finally:
        ctx.target_heads = None
    assert result.trace["closable_heads"] == short["closable"] and "raise the option epochs" in result.trace["warning"]
    assert result.heads_pruned <= short["closable"]
    # selection=threshold prunes at log_a <= 0, so more heads are in reach of the same steps
    wide = methods.create("voita", max_steps=3, gate_lr=0.8, linear_decay=False, early_stopping=False,
                          selection="threshold").prune(model, ctx)
    assert wide.trace["cutoff"] == pytest.approx(0.0) and wide.trace["closable_heads"] > short["closable"]
    long = methods.create("voita", max_steps=40, epochs=100.0, gate_lr=0.5, early_stopping=False).prune(model, ctx)
    assert long.trace["closable_heads"] == init.numel() and "warning" not in long.trace
    # with early stopping the kept gates come from the best evaluation: the travel counts up to that step only
    stopped = methods.create("voita", max_steps=40, epochs=100.0, gate_lr=0.5, patience=1).prune(model, ctx).trace
    assert stopped["kept_step"] <= stopped["planned_steps"] == 40
    assert stopped["travel"] == pytest.approx(max_travel(0.5, 40, taken=stopped["kept_step"]), abs=1e-6)


def test_voita_joint_returns_the_retrained_model_and_runs_without_target():
    result = check_pruner("voita", target_heads=3, selection="topk", joint=True, **FAST_VOITA)
    assert result.retrained and result.model is not None
    model = tiny_model()
    free = methods.create("voita", **FAST_VOITA).prune(model, synthetic_context(model, target_heads=None))
    assert free.trace["achieved"] == free.heads_pruned and "no target" in free.trace["how"]
    assert len(free.trace["deterministic_gates"]) == 3


# =========================================================================================== redundancy


def test_random_tokens_exclude_special_ids_and_are_seeded():
    info = {"vocab_size": 10, "cls_token_id": 1, "sep_token_id": 2, "pad_token_id": 0, "special_ids": [0, 1, 2, 3]}
    batches = list(random_token_batches(info, 7, 9, 3, torch.Generator().manual_seed(0)))
    assert [b["input_ids"].shape for b in batches] == [(3, 9), (3, 9), (1, 9)]
    ids = torch.cat([b["input_ids"] for b in batches])
    assert (ids[:, 0] == 1).all() and (ids[:, -1] == 2).all()
    assert ((ids[:, 1:-1] >= 4) & (ids[:, 1:-1] < 10)).all()
    again = torch.cat([b["input_ids"] for b in random_token_batches(info, 7, 9, 3, torch.Generator().manual_seed(0))])
    assert torch.equal(ids, again)


@pytest.mark.parametrize("distance", ["js", "cosine"])
def test_distance_matrix_is_symmetric_with_zero_diagonal(distance):
    model = tiny_model(3)
    info = synthetic_context(model).tokenizer_info
    matrix = redundancy_matrix(model, random_token_batches(info, 6, 12, 3, torch.Generator().manual_seed(0)), distance)
    assert matrix.shape == (12, 12) and matrix.dtype == torch.float64
    assert torch.equal(matrix, matrix.T)
    assert torch.equal(matrix.diagonal(), torch.zeros(12, dtype=torch.float64))
    assert (matrix >= 0).all() and (matrix <= 1).all() and (matrix + torch.eye(12) > 0).all()


def test_pairwise_distances_of_known_maps():
    # two heads in one layer: identical maps -> 0; disjoint one-hot rows -> JS distance 1, cosine distance 1
    same = torch.softmax(torch.randn(1, 1, 1, 4, 4), -1).repeat(1, 1, 2, 1, 1)
    for distance in ("js", "cosine"):
        summed, rows = pairwise_head_distances(same, distance)
        assert rows == 4 and summed.abs().max() < 1e-6
    disjoint = torch.zeros(1, 1, 2, 3, 3)
    disjoint[0, 0, 0, :, 0] = 1.0
    disjoint[0, 0, 1, :, 1] = 1.0
    for distance in ("js", "cosine"):
        summed, rows = pairwise_head_distances(disjoint, distance)
        assert summed[0, 1].item() == pytest.approx(3.0, abs=1e-5) and summed[1, 0] == summed[0, 1]


def _model_with_copied_head(layer: int = 1, source: int = 0, copy_to: int = 2):
    model = tiny_model(5)
    layout = get_layout(model)
    d = layout.head_size
    with torch.no_grad():
        for linear in (layout.query(layer), layout.key(layer), layout.value(layer)):
            linear.weight[copy_to * d:(copy_to + 1) * d] = linear.weight[source * d:(source + 1) * d]
            linear.bias[copy_to * d:(copy_to + 1) * d] = linear.bias[source * d:(source + 1) * d]
    return model


def test_copied_heads_fall_in_one_cluster_and_one_is_pruned():
    pretrained = _model_with_copied_head()
    a, b = 1 * 4 + 0, 1 * 4 + 2  # flat indices of the two copies
    info = synthetic_context(pretrained).tokenizer_info
    matrix = redundancy_matrix(pretrained, random_token_batches(info, 6, 12, 3, torch.Generator().manual_seed(0)))
    assert matrix[a, b] == 0.0
    off_diagonal = matrix + 9 * torch.eye(12, dtype=torch.float64)
    assert off_diagonal.min() == 0.0 and int((off_diagonal == 0).sum()) == 2  # only the copies are at distance 0
    for keep in (11, 8, 5):
        mask, labels = cluster_medoid_mask(matrix, keep, 3, 4)
        assert labels[a] == labels[b] and int(mask.sum()) == keep
        assert mask.view(-1)[[a, b]].sum() <= 1
    mask, _ = cluster_medoid_mask(matrix, 11, 3, 4)
    assert mask.view(-1)[[a, b]].sum() == 1  # one copy kept, the other pruned, nothing else pruned

    # the same through the method: the context's pre-trained model is the one with the copies
    fine_tuned = tiny_model(0)
    ctx = synthetic_context(fine_tuned, target_heads=1)
    ctx.load_pretrained = lambda: copy.deepcopy(pretrained)
    result = methods.create("redundancy", cache=False, **FAST_REDUNDANCY).prune(fine_tuned, ctx)
    assert result.heads_pruned == 1 and result.mask.view(-1)[[a, b]].sum() == 1
    assert result.trace["task_data_used"] is False and ctx.tokenizer_info["_splits_read"] == []


@pytest.mark.parametrize("options", [{"cache": False}, {"cache": False, "distance": "cosine", "linkage": "complete"}])
def test_redundancy_conforms(options):
    for target in (0, 5, 12):
        result = check_pruner("redundancy", target_heads=target, **FAST_REDUNDANCY, **options)
        assert result.heads_pruned == target


def test_redundancy_matrix_is_cached_per_model_and_seed():
    clear_cache()
    model = tiny_model()
    first = methods.create("redundancy", **FAST_REDUNDANCY).prune(model, synthetic_context(model, target_heads=4))
    second = methods.create("redundancy", **FAST_REDUNDANCY).prune(model, synthetic_context(model, target_heads=7))
    other_seed = methods.create("redundancy", **FAST_REDUNDANCY).prune(model, synthetic_context(model, seed=1,
                                                                                                  target_heads=4))
    assert first.trace["cache"] == "miss" and second.trace["cache"] == "hit" and other_seed.trace["cache"] == "miss"
    assert first.trace["model_digest"] == second.trace["model_digest"]
    assert second.heads_pruned == 7
    # the key ignores the task head: the same encoder with another classifier (another task) hits the cache
    other_task = copy.deepcopy(model)
    torch.nn.init.normal_(other_task.classifier.weight)
    assert model_digest(other_task) == model_digest(model)
    torch.nn.init.normal_(other_task.bert.encoder.layer[0].attention.self.query.weight)
    assert model_digest(other_task) != model_digest(model)
    clear_cache()


def test_redundancy_is_labelled_a_reconstruction_and_checks_its_inputs():
    cls = methods.get_method_class("redundancy")
    assert cls.reconstruction and "reconstruction" in cls.summary and "RECONSTRUCTION" in cls.__doc__
    model = tiny_model()
    ctx = synthetic_context(model)
    with pytest.raises(ValueError, match="exceeds the 40 tokens the model's position embeddings take"):
        methods.create("redundancy", seq_length=128).prune(model, ctx)
    ctx.load_pretrained = None
    with pytest.raises(ValueError, match="load_pretrained"):
        methods.create("redundancy", **FAST_REDUNDANCY).prune(model, ctx)
    result = methods.create("redundancy", model_source="finetuned", cache=False, **FAST_REDUNDANCY).prune(model, ctx)
    assert result.heads_pruned == 3


def _stopper_run(objectives, fractional, allowed, patience=2):
    """Feed EarlyStopping one evaluation per step; returns (stopper, the step that asked to stop or None)."""
    from headprune_bench.methods.gates import EarlyStopping, GateStep

    gates = torch.zeros(1, 2)
    values = iter(zip(objectives, fractional))

    def evaluate(info):
        objective, frac = next(values)
        gates.fill_(info.step)  # the kept gates tell which step was kept
        return {"objective": objective, "fractional": frac}

    eligible = None if allowed is None else (lambda v: v["fractional"] <= allowed)
    stopper = EarlyStopping(torch.nn.Linear(1, 1), gates, evaluate, every=1, total_steps=len(objectives),
                            patience=patience, keep_model=False, eligible=eligible)
    for step in range(1, len(objectives) + 1):
        if stopper(GateStep(step, torch.tensor(0.0), torch.tensor(0.0), None)):
            return stopper, step
    return stopper, None


def test_early_stopping_waits_for_nearly_binary_gates_and_keeps_the_best_such_state():
    objectives = [0.5, 0.6, 0.7, 0.8, 0.9, 0.85, 0.95, 1.0]
    fractional = [9, 9, 9, 9, 1, 0, 2, 0]
    # without a criterion: best at step 1, stop after 2 evaluations without improvement
    plain, stop = _stopper_run(objectives, fractional, None)
    assert stop == 3 and plain.best_step == 1 and plain.best_eligible
    # with "at most 2 fractional": steps 1-4 cannot stop it; step 5 replaces the ineligible best though worse,
    # step 6 improves on it, steps 7 and 8 do not: stop at 8, keep step 6
    binary, stop = _stopper_run(objectives, fractional, 2)
    assert stop == 8 and binary.best_step == 6 and binary.best_eligible and binary.best_objective == 0.85
    binary.restore()
    assert binary.gates.eq(6).all()
    assert [h["fractional"] for h in binary.history] == fractional
    # never eligible: runs to the end and keeps the best ineligible state
    never, stop = _stopper_run(objectives, fractional, -1)
    assert stop is None and never.best_step == 1 and not never.best_eligible


def test_voita_says_whether_its_kept_gates_are_nearly_binary(trained_tiny):
    model, ctx = trained_tiny
    with pytest.warns(UserWarning, match="not nearly binary"):
        short = methods.create("voita", max_steps=2, gate_lr=0.05, early_stopping=False).prune(model, ctx)
    fractional = int(((torch.tensor(short.trace["deterministic_gates"]) > 0)
                      & (torch.tensor(short.trace["deterministic_gates"]) < 1)).sum())
    assert short.trace["nearly_binary"] is False and f"{fractional} of 12 are fractional" in short.trace[
        "binary_warning"] and fractional > 0 and "raise the option epochs" in short.trace["binary_warning"]
    assert short.trace["runs"][0]["nearly_binary"] is False
    assert all("fractional" in h for h in short.trace["runs"][0]["history"])
    # binary_share=1 accepts any gates; a long run at a large lambda closes every gate, so they are binary
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lax = methods.create("voita", max_steps=2, gate_lr=0.05, early_stopping=False, binary_share=1.0)
        assert lax.prune(model, ctx).trace["nearly_binary"] is True
        closed = methods.create("voita", max_steps=40, epochs=100.0, gate_lr=0.5, l0_lambda=10.0,
                                linear_decay=False).prune(model, ctx)
    assert closed.trace["nearly_binary"] is True and "binary_warning" not in closed.trace
    assert closed.heads_pruned == 12
