"""AUBER (methods/auber): DQN pieces, state vector, fast rewards, the learned policy, determinism, data flow.

Everything runs on tiny random models or on a synthetic score function (a few seconds in all, one CPU thread).
"""
from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from tolerances import assert_within, bert_path_terms, logit_scale, rounding_tolerance

from headprune_bench import methods
from headprune_bench.methods.auber import AuberPruner
from headprune_bench.methods.auber.dqn import (
    DQNConfig,
    LayerSearch,
    QNetwork,
    ReplayMemory,
    Transition,
    epsilon,
    greedy_action,
    optimize,
    select_action,
)
from headprune_bench.methods.auber.rewards import (
    FastScorer,
    FastScorerUnsupported,
    Memo,
    NaiveScorer,
    layer_mask,
    length_sorted_batches,
)
from headprune_bench.methods.auber.state import head_norms, layer_state, standardize, state_from_norms
from headprune_bench.methods.conformance import check_pruner, collate, synthetic_context, synthetic_split, tiny_model
from headprune_bench.methods.heads import apply_head_mask, get_layout

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def accuracy(preds, labels) -> float:
    return float((np.asarray(preds) == np.asarray(labels)).mean())


# --------------------------------------------------------------------------- registry and conformance


def test_auber_conforms_and_is_deterministic():
    result = check_pruner("auber", episodes=4)  # runs twice under a scrambled global RNG: same mask
    assert result.retrained and result.model is not None  # the final fine-tune always runs by default
    layers = result.trace["layers"]
    assert [entry["layer"] for entry in layers] == [0, 1, 2]
    for entry in layers:
        assert {"layer", "episodes", "rewards", "epsilon", "pruned", "minidev_before", "minidev_after", "seconds",
                "reward_evals", "cache_hits"} <= set(entry)
        assert len(entry["rewards"]) == 4 and entry["reward_path"] == "fast"
        assert 0.05 < entry["epsilon"] <= 1.0
    final = result.trace["final_finetune"]
    assert final["ran"] and {"heldout_before", "heldout_after", "train_examples", "heldout_examples"} <= set(final)
    assert torch.allclose(result.scores.sum(dim=1), torch.ones(3))


@pytest.mark.parametrize("name", ["auber-query", "auber-key", "auber-l2", "auber-reverse"])
def test_ablations_conform(name):
    result = check_pruner(name, episodes=2, final_finetune=False, layer_finetune_epochs=1.0)
    order = result.trace["order"]
    assert order == ([2, 1, 0] if name == "auber-reverse" else [0, 1, 2])


def test_ablation_defaults_and_flags():
    base = methods.get_method_class("auber")
    assert base.needs_target is False and base.exact_budget is False
    expected = {"auber-query": ("state", "query"), "auber-key": ("state", "key"), "auber-l2": ("norm", "l2"),
                "auber-reverse": ("reverse", True)}
    for name, (key, value) in expected.items():
        opts = methods.create(name).get_options()
        assert opts[key] == value
        assert {k: v for k, v in opts.items() if k != key} == {k: v for k, v in base.defaults.items() if k != key}
    opts = methods.create("auber").get_options()
    assert (opts["episodes"], opts["state"], opts["norm"], opts["layer_finetune_lr"]) == (150, "value", "l1", 2e-6)
    json.dumps(opts)


@pytest.mark.parametrize("options, message", [
    ({"state": "output"}, "state must be one of"),
    ({"norm": "l3"}, "norm must be one of"),
    ({"minidev_fraction": 1.0}, "minidev_fraction"),
], ids=["state", "norm", "minidev_fraction"])
def test_bad_options_fail_at_construction(options, message):
    with pytest.raises(ValueError, match=message):
        methods.create("auber", **options)


# --------------------------------------------------------------------------- DQN pieces


def test_qnetwork_forces_pruned_heads_low_and_stop_fixed():
    torch.manual_seed(0)
    net = QNetwork(4, hidden_size=32)
    state = torch.tensor([[0.1, 0.0, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]])
    q = net(state)
    assert q.shape == (2, 5)
    assert q[0, 1] == -5.0 and q[0, 3] == -5.0
    assert bool((q[1, :4] != -5.0).all())
    assert bool((q[:, 4] == 0.2).all())
    learned = QNetwork(4, hidden_size=32, learned_stop=True)
    assert bool((learned(state)[:, 4] != 0.2).all())
    assert learned(state)[0, 1] == -5.0
    # no gradient reaches the overwritten entries
    q[0, 1].backward()
    assert all(p.grad is None or float(p.grad.abs().sum()) == 0.0 for p in net.parameters())


def test_epsilon_schedule_values():
    assert epsilon(0) == pytest.approx(1.0)
    assert epsilon(256) == pytest.approx(0.05 + 0.95 * math.exp(-1))
    assert epsilon(512) == pytest.approx(0.05 + 0.95 * math.exp(-2))
    assert epsilon(100_000) == pytest.approx(0.05)
    values = [epsilon(s) for s in range(0, 2000, 50)]
    assert values == sorted(values, reverse=True)


def test_random_actions_skip_pruned_heads_and_greedy_respects_q():
    torch.manual_seed(0)
    net = QNetwork(4, hidden_size=16)
    rng = random.Random(0)
    state = torch.tensor([0.3, 0.0, 0.4, 0.0])
    drawn = {select_action(net, state, [1, 3], 0, rng) for _ in range(500)}  # eps = 1 at step 0: all random
    assert drawn == {0, 2, 4}
    with torch.no_grad():  # make head 2 clearly best: greedy takes it, then stops once its Q is below 0.2
        net.fc4.weight.zero_()
        net.fc4.bias.copy_(torch.tensor([-1.0, 3.0, 2.0, 5.0, 0.0]))
    assert greedy_action(net, state, [1, 3]) == 2
    assert greedy_action(net, torch.tensor([0.3, 0.2, 0.0, 0.5]), [2]) == 3  # 5.0 > 0.2
    with torch.no_grad():
        net.fc4.bias.copy_(torch.tensor([0.1, 0.1, 0.1, 0.1, 0.0]))
    assert greedy_action(net, state, [1, 3]) == 4  # every head below Q(stop) = 0.2: stop


def test_forced_stop_after_h_minus_one_heads():
    cfg = DQNConfig(hidden_size=16, eps_decay=1e9)  # always random: long episodes
    always_better = lambda sets: [float(len(s)) for s in sets]  # noqa: E731 - each prune raises the score
    search = LayerSearch(torch.full((4,), 0.25), always_better, 0.0, cfg, seed=1)
    search.run(60)
    assert any(e.forced_stop for e in search.episodes)
    for episode in search.episodes:
        assert episode.actions[-1] == 4 and 4 not in episode.actions[:-1]
        assert len(episode.actions) - 1 <= 3
        assert episode.forced_stop == (len(episode.actions) - 1 == 3)
        assert episode.rewards[-1] == 0.0
        assert all(r == pytest.approx(100.0) for r in episode.rewards[:-1])
    for t in search.memory.memory:
        if int((t.state == 0).sum()) == 3:
            assert t.action == 4 and t.next_state is None
    with torch.no_grad():  # a policy that wants every head: the greedy pass still keeps one
        search.policy.fc4.weight.zero_()
        search.policy.fc4.bias.copy_(torch.tensor([9.0, 8.0, 7.0, 6.0, 0.0]))
    assert search.greedy() == [0, 1, 2]


def test_target_update_every_35_episodes_and_no_update_before_batch():
    cfg = DQNConfig(hidden_size=16)
    search = LayerSearch(torch.tensor([0.1, 0.2, 0.3, 0.4]), lambda sets: [0.5] * len(sets), 0.5, cfg, seed=0)
    initial = {k: v.clone() for k, v in search.policy.state_dict().items()}
    lengths, losses = [], []
    for _ in range(71):
        episode = search.run_episode()
        lengths.append(len(search.memory))
        losses.append(episode.loss)
        if len(search.memory) < 128:
            assert all(torch.equal(initial[k], v) for k, v in search.policy.state_dict().items())
    assert search.target_syncs == [0, 35, 70]
    assert [loss is None for loss in losses] == [n < 128 for n in lengths]
    assert search.optim_steps == sum(n >= 128 for n in lengths) > 0
    # right after the sync of episode 70 the target equals the policy; one more optimised episode separates them
    assert all(torch.equal(search.target.state_dict()[k], v) for k, v in search.policy.state_dict().items())
    search.run_episode()
    assert search.target_syncs == [0, 35, 70]
    assert not all(torch.equal(search.target.state_dict()[k], v) for k, v in search.policy.state_dict().items())


def test_optimize_clamps_gradients_and_uses_gamma_one_targets():
    cfg = DQNConfig(hidden_size=8, batch_size=4)
    torch.manual_seed(0)
    policy, target = QNetwork(3, 8), QNetwork(3, 8)
    target.load_state_dict(policy.state_dict())
    memory = ReplayMemory(10)
    s = torch.tensor([0.2, 0.3, 0.5])
    for _ in range(3):
        memory.push(Transition(s, 0, torch.tensor([0.0, 0.3, 0.5]), 1000.0))  # large reward: large gradients
    assert optimize(memory, policy, target, torch.optim.SGD(policy.parameters(), lr=0.03, momentum=0.9),
                    random.Random(0), cfg) is None  # 3 < batch 4
    memory.push(Transition(s, 3, None, 0.0))
    before = [p.detach().clone() for p in policy.parameters()]
    loss = optimize(memory, policy, target, torch.optim.SGD(policy.parameters(), lr=0.03, momentum=0.9),
                    random.Random(0), cfg)
    assert loss is not None and loss > 0
    assert all(float(p.grad.abs().max()) <= 1.0 for p in policy.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, policy.parameters()))


def test_replay_memory_is_a_ring_buffer():
    memory = ReplayMemory(3)
    for i in range(5):
        memory.push(Transition(torch.ones(2), i, None, float(i)))
    assert len(memory) == 3 and sorted(t.action for t in memory.memory) == [2, 3, 4]
    assert len(memory.sample(2, random.Random(0))) == 2


# --------------------------------------------------------------------------- state vector


def test_head_norms_l1_and_l2_on_a_hand_built_weight():
    # H = 2 heads of size d = 2 over hidden 2: rows 0-1 are head 0, rows 2-3 head 1
    weight = torch.tensor([[1.0, -2.0], [0.0, 3.0], [0.5, 0.5], [-1.0, 0.0]])
    assert head_norms(weight, 2, "l1").tolist() == [6.0, 2.0]
    assert head_norms(weight, 2, "l2").tolist() == pytest.approx([math.sqrt(14.0), math.sqrt(1.5)])
    state = state_from_norms(head_norms(weight, 2, "l1"))  # z-scores [1, -1]
    assert state.tolist() == pytest.approx([1 / (1 + math.exp(-2)), 1 / (1 + math.exp(2))], rel=1e-6)


def test_standardize_is_population_zscore_then_softmax_sums_to_one():
    norms = torch.tensor([3.0, 1.0, 4.0, 1.5, 9.0], dtype=torch.float64)
    z = standardize(norms)
    expected = (norms.numpy() - norms.numpy().mean()) / norms.numpy().std()  # numpy std: ddof = 0 like sklearn
    assert z.numpy() == pytest.approx(expected)
    state = state_from_norms(norms)
    assert state.dtype == torch.float32 and float(state.sum()) == pytest.approx(1.0, abs=1e-6)
    assert state_from_norms(torch.full((4,), 2.5)).tolist() == pytest.approx([0.25] * 4)  # zero variance


def test_layer_state_uses_the_chosen_projection_and_norm():
    model = tiny_model()
    layout = get_layout(model)
    for source in ("value", "query", "key"):
        for norm in ("l1", "l2"):
            state = layer_state(model, 1, source, norm)
            weight = getattr(layout, source)(1).weight
            assert torch.allclose(state, state_from_norms(head_norms(weight, 4, norm)))
            assert float(state.sum()) == pytest.approx(1.0, abs=1e-6) and bool((state > 0).all())
    assert not torch.allclose(layer_state(model, 1, "value", "l1"), layer_state(model, 1, "query", "l1"))
    assert not torch.allclose(layer_state(model, 1, "value", "l1"), layer_state(model, 1, "value", "l2"))


# --------------------------------------------------------------------------- fast rewards


def _sorted_batches(n: int = 40, size: int = 8, seed: int = 1):
    data = sorted(synthetic_split(n, seed), key=lambda e: e["input_ids"].shape[0])
    batches = [collate(data[i:i + size]) for i in range(0, n, size)]
    same = [e for e in synthetic_split(60, seed + 7) if e["input_ids"].shape[0] == 10][:3]
    assert len(same) == 3
    return batches + [collate(same)]  # a batch without padding (the encoder may pass no attention mask)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_fast_rewards_equal_a_full_forward(implementation, dtype):
    """Cached-prefix logits == a full masked forward (exact mathematically; other kernels and shapes), and the
    same rewards.

    Tolerance (tests/tolerances.py): 2 * 8 * u * sqrt(N) * scale with N = 1067 (T 16) and, the logits of a
    fresh classifier being O(0.01) sums with cancellation, the scale of their rounding errors from
    ``logit_scale`` (classifier-head norms times the largest final hidden state, 3.56): 0.70 here. That is
    ~2.2e-5 in float32 and ~4.1e-14 in float64; measured differences up to 5.6e-9 and 7e-18. The smallest gap
    between the two logits of an example (0.018) exceeds twice the tolerance, so rounding cannot flip a
    prediction: the rewards must be equal exactly."""
    model = tiny_model(seed=3).to(dtype)
    model.set_attn_implementation(implementation)
    batches = _sorted_batches()
    terms = bert_path_terms(model.config, max(b["input_ids"].shape[1] for b in batches))
    gen = torch.Generator().manual_seed(0)
    for layer in range(3):
        base = (torch.rand(3, 4, generator=gen) > 0.35).float()
        fast = FastScorer(model, batches, layer, base, accuracy)
        assert fast.cls_only
        for _ in range(4):
            pruned = [h for h in range(4) if float(torch.rand(1, generator=gen)) < 0.5][:3]
            mask = layer_mask(base, layer, pruned)
            with torch.no_grad(), apply_head_mask(model, mask):
                outs = [model(**{k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")},
                              output_hidden_states=True) for b in batches]
            full = torch.cat([out.logits for out in outs])
            hidden_max = max(float(out.hidden_states[-1].abs().max()) for out in outs)
            tol = rounding_tolerance(full, terms, scale=logit_scale(model, hidden_max))
            assert_within(fast.logits(pruned), full, tol, f"layer {layer}, pruned {pruned}: fast vs full logits")
            assert float((full[:, 0] - full[:, 1]).abs().min()) > 2 * tol  # no prediction within rounding of a tie
            labels = torch.cat([b["labels"] for b in batches])
            assert fast.score(pruned) == accuracy(full.argmax(-1), labels)
            assert fast.score(pruned) == NaiveScorer(model, batches, layer, base, accuracy).score(pruned)


def test_length_sorted_batches_and_memo():
    model = tiny_model()
    context = synthetic_context(model)
    indices = [5, 1, 30, 12, 7, 44, 60, 3]
    batches = length_sorted_batches(context.batches, indices, batch_size=3)
    lengths = torch.cat([b["attention_mask"].sum(1) for b in batches]).tolist()
    assert lengths == sorted(lengths) and sum(b["labels"].numel() for b in batches) == len(indices)
    assert [b["input_ids"].shape[1] for b in batches] == [int(b["attention_mask"].sum(1).max()) for b in batches]
    calls = []

    class Counting:
        def score_many(self, sets):
            calls.extend(sets)
            return [float(len(s)) for s in sets]

    memo = Memo(Counting())
    assert memo.score_many([{1}, {1, 2}]) == [1.0, 2.0]
    assert memo.score_many([{1}, {1, 2}, {1, 2, 3}]) == [1.0, 2.0, 3.0]
    assert (memo.evals, memo.hits, len(calls)) == (3, 2, 3)
    plain = Memo(Counting(), enabled=False)
    plain.score_many([{1}, {1}])
    assert (plain.evals, plain.hits) == (2, 0)


def test_fast_and_naive_paths_choose_the_same_masks():
    results = {}
    for path in ("fast", "naive", "context"):
        model = tiny_model(seed=5, initializer_range=1.0)  # large weights: pruning a head changes predictions
        context = synthetic_context(model, seed=2)
        if path == "context":  # no compute_metrics: rewards through context.evaluate
            context.compute_metrics = None
        # stop_q 0: the barely trained policy prunes, so the per-layer fine-tunes change the next layers' inputs
        pruner = AuberPruner(episodes=8, fast_rewards=(path == "fast"), final_finetune=False,
                             layer_finetune_epochs=1.0, stop_q=0.0)
        results[path] = pruner.prune(model, context)
    a = results["fast"]
    for path in ("naive", "context"):
        b = results[path]
        assert torch.equal(a.mask, b.mask)
        for x, y in zip(a.trace["layers"], b.trace["layers"]):
            assert (x["reward_path"], y["reward_path"]) == ("fast", path)
            for key in ("rewards", "pruned", "minidev_before", "minidev_after", "minidev_after_finetune",
                        "reward_evals"):
                assert x[key] == pytest.approx(y[key]), key
    assert any(r != 0 for entry in a.trace["layers"] for r in entry["rewards"])  # the comparison has content
    assert all(entry["pruned"] for entry in a.trace["layers"]) and a.retrained


# --------------------------------------------------------------------------- the policy learns


EFFECTS = {0: {0: -0.2, 1: 0.1, 2: -0.15, 3: 0.05},  # heads 1 and 3 help
           1: {0: 0.08, 1: -0.1, 2: -0.3, 3: -0.15},  # head 0 helps
           2: {0: -0.1, 1: -0.2, 2: -0.05, 3: -0.3}}  # nothing helps: stop at once


def synthetic_score(layer: int, pruned: frozenset) -> float:
    return 0.5 + sum(EFFECTS[layer][h] for h in pruned)


def test_policy_prunes_exactly_the_helpful_heads_and_stops():
    model = tiny_model()
    context = synthetic_context(model, seed=0)
    pruner = AuberPruner(episodes=300, final_finetune=False, layer_finetune_epochs=0.0)
    result = pruner.set_score_function(synthetic_score).prune(model, context)
    assert [entry["pruned"] for entry in result.trace["layers"]] == [[1, 3], [0], []]
    assert result.mask.tolist() == [[1, 0, 1, 0], [0, 1, 1, 1], [1, 1, 1, 1]]
    layer0 = result.trace["layers"][0]
    assert layer0["minidev_after"] == pytest.approx(0.65) and layer0["minidev_before"] == pytest.approx(0.5)
    assert layer0["cache_hits"] > layer0["reward_evals"]  # late episodes revisit the same sets
    assert layer0["reward_evals"] <= 2 ** 4  # at most every subset once
    assert not result.retrained and result.model is None  # nothing fine-tuned


# --------------------------------------------------------------------------- data flow


def test_layer_splits_are_seeded_disjoint_and_redrawn_per_layer():
    model = tiny_model()
    context = synthetic_context(model, seed=3)
    pruner = AuberPruner(minidev_max_examples=10, minitrain_max_examples=30)
    splits = [pruner.layer_split(context, 200, layer) for layer in range(3)]
    for dev, train in splits:
        assert len(dev) == 10 and len(train) == 30 and not set(dev) & set(train)
        assert dev == sorted(dev) and max(dev + train) < 200
    assert splits[0][0] != splits[1][0]
    assert pruner.layer_split(context, 200, 1) == splits[1]
    dev, train = AuberPruner().layer_split(context, 400, 0)
    assert sorted(dev + train) == list(range(400)) and 60 < len(dev) < 140  # about 25% of 400
    rest, held = pruner.final_split(context, 200)
    assert len(held) == 20 and sorted(rest + held) == list(range(200))


def test_fine_tunes_get_the_layer_mini_train_and_the_final_early_stopping(monkeypatch):
    model = tiny_model()
    context = synthetic_context(model, seed=1)
    calls = []
    plain_fine_tune = context.fine_tune

    def spy(m, mask=None, **kwargs):
        calls.append({"mask": mask.clone(), **kwargs})
        return plain_fine_tune(m, mask, **kwargs)

    context.fine_tune = spy
    monkeypatch.setattr(LayerSearch, "greedy", lambda self: [1])  # every layer prunes head 1
    pruner = AuberPruner(episodes=1, minidev_max_examples=12)
    result = pruner.prune(model, context)
    assert result.retrained and result.model is not None and result.mask[:, 1].tolist() == [0, 0, 0]
    assert len(calls) == 4
    for layer, call in enumerate(calls[:3]):
        dev, train = pruner.layer_split(context, 72, layer)
        assert call["split"] == "train" and call["indices"] == train and call["eval_indices"] == dev
        assert (call["epochs"], call["lr"], call["batch_size"], call["early_stopping"]) == (3.0, 2e-6, 32, False)
        assert (call["warmup_ratio"], call["weight_decay"]) == (0.0, 0.0)
        assert call["mask"][: layer + 1, 1].tolist() == [0] * (layer + 1)
        assert float(call["mask"].sum()) == 12 - layer - 1
    final = calls[3]
    assert final["early_stopping"] is True and final["patience"] == 2 and final["evals_per_epoch"] == 2
    assert not set(final["indices"]) & set(final["eval_indices"]) and final["split"] == final["eval_split"] == "train"
    for entry in result.trace["layers"]:
        assert entry["pruned"] == [1] and entry["minidev_after_finetune"] is not None
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), result.model.parameters()))
    assert set(context.tokenizer_info["_splits_read"]) == {"train"}


@pytest.mark.slow
def test_speed_script_runs_on_mrpc(glue_dir):
    """The speed benchmark on a few MRPC examples with the packaged MiniLM (timings are not checked)."""
    from headprune_bench.benchmark.tools import auber_speed

    summary = auber_speed.main(["--task", "mrpc", "--glue-dir", str(glue_dir), "--examples", "12", "--episodes", "2",
                                "--layers", "4,5", "--threads", "1"])
    assert summary["identical_decisions"] is True and len(summary["layers"]) == 2
    assert all(row["fast_rewards"] == row["naive_rewards"] for row in summary["layers"])


def test_fast_scorer_self_check_follows_rounding_and_catches_a_wrong_logit(monkeypatch):
    """The self-check of the fast rewards allows what rounding allows on any kernel (a tolerance relative to the
    logits' magnitude, not a fixed 1e-4 that larger fine-tuned logits exceed on some CPUs) and still refuses a
    fast path that is wrong."""
    model = tiny_model(seed=3)
    batches = _sorted_batches()
    base = torch.ones(3, 4)
    fast = FastScorer(model, batches, 1, base, accuracy)  # passes its own check
    tokens = batches[0]["input_ids"].shape[-1]
    tol_small = fast.rounding_tolerance(torch.zeros(2, 2), tokens)
    assert tol_small == fast.rounding_tolerance(torch.full((2, 2), 0.5), tokens)  # scale at least 1
    assert fast.rounding_tolerance(torch.full((2, 2), 8.0), tokens) == pytest.approx(8 * tol_small)
    assert fast.rounding_tolerance(torch.zeros(2, 2, dtype=torch.float64), tokens) < 1e-11 < tol_small < 1e-4
    real = FastScorer._batch_logits
    monkeypatch.setattr(FastScorer, "_batch_logits", lambda self, i, mask: real(self, i, mask) + 1e-2)
    with pytest.raises(FastScorerUnsupported, match="rounding allows"):
        FastScorer(model, batches, 1, base, accuracy)


def test_null_reward_controls_take_the_information_out_of_the_rewards():
    """reward_control "zero": every reward is 0; "shuffled-labels": the mini-dev is scored against a seeded
    permutation of its labels (the same on every run: check_pruner runs twice), so the rewards are not AUBER's;
    the per-layer fine-tunes keep the true labels. The ablation auber-null runs "shuffled-labels"."""
    opts = dict(episodes=4, final_finetune=False, layer_finetune_epochs=0.0)
    true = check_pruner("auber", **opts).trace["layers"]
    zero = check_pruner("auber", reward_control="zero", **opts).trace["layers"]
    assert all(r == 0 for e in zero for r in e["rewards"]) and {e["reward_path"] for e in zero} == {"fast+zero"}
    shuffled = check_pruner("auber", reward_control="shuffled-labels", **opts).trace["layers"]
    assert {e["reward_path"] for e in shuffled} == {"fast+shuffled-labels"}
    assert {e["reward_path"] for e in true} == {"fast"}
    # the scorer's labels: a seeded permutation of the true mini-dev labels, another one per layer
    model = tiny_model()
    ctx = synthetic_context(model)
    dev_idx, mask = list(range(32)), torch.ones(3, 4)
    labels = lambda control, layer: AuberPruner(reward_control=control)._scorer(  # noqa: E731
        model, ctx, layer, mask, dev_idx)[0].labels
    plain, once, again = labels("none", 0), labels("shuffled-labels", 0), labels("shuffled-labels", 0)
    assert sorted(once) == sorted(plain) and list(once) != list(plain) and list(once) == list(again)
    assert list(labels("shuffled-labels", 1)) != list(once)
    null = methods.get_method_class("auber-null")
    assert null.ablation_of == "auber" and null().get_options()["reward_control"] == "shuffled-labels"
    with pytest.raises(ValueError, match="shuffled-labels.*needs a scorer with mini-dev labels"):
        model = tiny_model()
        AuberPruner(episodes=1, reward_control="shuffled-labels").set_score_function(lambda layer, pruned: 0.5).prune(
            model, synthetic_context(model))


def test_options_given_for_auber_reach_its_ablations_but_never_the_options_that_define_them():
    """`--option auber.X` sizes AUBER's ablations alike (the null-reward control must search as AUBER does for its
    count to mean anything), below the ablation's own `--option`; an option that defines the ablation
    (auber-null's reward_control, auber-l2's norm) is never overwritten by AUBER's."""
    from headprune_bench.benchmark.config.run import make_run_config

    def options(given):
        cfg = make_run_config(out="unused", preset="quick", methods_spec="auber,auber-null,auber-l2", tasks_spec="mrpc",
                              seeds="1", model=None, budget=None, device="cpu", data_dir=None, recover=True,
                              method_options=given)
        return {name: methods.create(name, **cfg.method_options.get(name, {})).get_options()
                for name in ("auber", "auber-null", "auber-l2")}

    plain = options({})
    assert plain["auber-null"]["episodes"] == plain["auber"]["episodes"] == 150  # the quick preset's sizing
    assert plain["auber-null"]["minidev_max_examples"] == 256
    given = options({"auber": {"episodes": 7, "norm": "l1", "reward_control": "zero"}})
    assert given["auber"]["episodes"] == given["auber-null"]["episodes"] == given["auber-l2"]["episodes"] == 7
    assert given["auber-null"]["reward_control"] == "shuffled-labels" and given["auber"]["reward_control"] == "zero"
    assert given["auber-l2"]["norm"] == "l2" and given["auber-l2"]["reward_control"] == "zero"
    own = options({"auber": {"episodes": 7}, "auber-null": {"episodes": 9}})
    assert (own["auber"]["episodes"], own["auber-null"]["episodes"], own["auber-l2"]["episodes"]) == (7, 9, 7)


def test_each_layer_says_how_much_of_its_search_went_to_rewards():
    """Issue 41, item 3: a layer's trace splits its search into the reward evaluations and the rest (the DQN and
    the episodes' loop), so an AUBER record tells where its time went."""
    model = tiny_model(seed=0)
    cls = methods.get_method_class("auber")
    trace = cls(**cls.conformance_options).prune(model, synthetic_context(model, target_heads=None)).trace
    for entry in trace["layers"]:
        assert entry["reward_path"] in ("fast", "naive")
        assert 0 < entry["reward_seconds"] <= entry["search_seconds"] <= entry["seconds"]
