"""AUBER: Automated BERT Regularization (Lee, Lee, Kang; arXiv 2009.14409; PLOS ONE 16(6):e0253241, 2021), after
the official code snudatalab/AUBER@239091f: a DQN prunes heads layer by layer with mini-dev rewards, each layer
followed by a fine-tune (paper §3, Algorithm 1). See docs/methods.md ("AUBER (Lee et al. 2020)")."""
from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from headprune_bench.methods.auber.dqn import DQNConfig, LayerSearch
from headprune_bench.methods.auber.rewards import (
    FastScorer,
    FastScorerUnsupported,
    Memo,
    NaiveScorer,
    layer_mask,
    length_sorted_batches,
)
from headprune_bench.methods.auber.state import NORMS, SOURCES, layer_state
from headprune_bench.methods.base import HeadPruner, PruningContext, PruningResult
from headprune_bench.methods.heads import get_layout
from headprune_bench.methods.options import Interval, OptionError
from headprune_bench.methods.registry import register

__all__ = ["AuberPruner", "AuberAblation", "AuberQueryPruner", "AuberKeyPruner", "AuberL2Pruner", "AuberReversePruner"]

# salts of the context's seeded generators: one stream per purpose (plus the layer)
SALT_SPLIT, SALT_DQN, SALT_FINAL, SALT_NULL = 31_000, 32_000, 33_000, 34_000
REWARD_CONTROLS = ("none", "shuffled-labels", "zero")

ScoreFunction = Callable[[int, frozenset], float]
"""Test hook: ``score(layer, pruned_heads_of_that_layer) -> metric`` replacing the model's mini-dev metric."""


class _ContextScorer:
    """Rewards through ``context.evaluate`` (used when the context has no ``compute_metrics``)."""

    def __init__(self, model, context: PruningContext, layer: int, base_mask: torch.Tensor, indices: list[int]):
        self.model, self.context, self.layer, self.base_mask, self.indices = model, context, layer, base_mask, indices
        self.evals = 0

    def score_many(self, sets):
        out = []
        for pruned in sets:
            mask = layer_mask(self.base_mask, self.layer, pruned)
            metrics = self.context.evaluate(self.model, mask, split="train", indices=self.indices)
            out.append(float(metrics[self.context.primary_metric]))
            self.evals += 1
        return out


class _ZeroScorer:
    """Every pruned set scores 0 (``reward_control="zero"``): every reward, a difference of scores, is 0."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.metric = getattr(inner, "metric", None)

    def score(self, pruned) -> float:
        return 0.0

    def score_many(self, sets):
        return [0.0 for _ in sets]


class _OverrideScorer:
    """Rewards from a test's score function."""

    def __init__(self, fn: ScoreFunction, layer: int):
        self.fn, self.layer, self.evals = fn, layer, 0

    def score_many(self, sets):
        self.evals += len(sets)
        return [float(self.fn(self.layer, frozenset(s))) for s in sets]


@register
class AuberPruner(HeadPruner):
    """AUBER (Lee et al. 2020): layer-wise DQN head pruning with mini-dev rewards and per-layer fine-tuning.

    Options (sources and reasons: docs/methods.md, "AUBER (Lee et al. 2020)"):
        episodes (150) per layer; state ("value", "query" or "key"), norm ("l1" or "l2"): the state's projection
            and norm (§3.3); reverse (False): process the layers top to bottom (§4.3.3).
        minidev_fraction (0.25): per-layer share of the train pool drawn into the mini-dev; minidev_max_examples,
            minitrain_max_examples (0 = no cap): seeded caps, for CPU sizing.
        layer_finetune_epochs (3.0; 0 = none), layer_finetune_lr (2e-6), finetune_batch_size (32),
            finetune_warmup_ratio (0.0), finetune_weight_decay (0.0): the fine-tune after a layer with pruned heads.
        final_finetune (True), final_holdout_fraction (0.1), final_epochs (3.0), final_lr (2e-6), final_patience
            (2), final_evals_per_epoch (2): the final fine-tune, early-stopped on a held-out slice of the pool.
        hidden_size, replay_capacity, dqn_batch_size, gamma, dqn_lr, dqn_momentum, grad_clamp, eps_start, eps_end,
            eps_decay, target_update, stop_q, learned_stop, pruned_q, reward_scale: the
            :class:`~headprune_bench.methods.auber.dqn.DQNConfig` fields (defaults there).
        fast_rewards (True): cached-prefix rewards (same decisions as full forwards); memoize (True): one score per
            pruned set and layer; reward_batch_size (16): mini-dev examples per forward.
        reward_control ("none", "shuffled-labels" or "zero"): null-reward controls (ours; ``auber-null``).

    Returns ``retrained=True`` with the fine-tuned copy when any fine-tune ran; ``scores`` = each layer's initial
    state ``[L, H]`` (rows sum to 1); ``trace["layers"]``: one entry per layer (rewards, epsilon, pruned heads,
    mini-dev metric before / after / after the fine-tune, seconds, reward evaluations, cache hits, ...).

    Precision: the reward passes (:mod:`.rewards`) under ``context.autocast`` and the per-layer and final
    fine-tunes and held-out evaluations through the context, all in bf16 under ``--precision bf16``; the DQN (a
    small MLP) always in float32.

    Raises:
        OptionError: an option out of range (at construction).
    """

    name = "auber"
    report_order, report_color = 70, "#D55E00"
    conformance_options = {"episodes": 2, "final_finetune": False, "layer_finetune_epochs": 1.0}
    constraints = {
        "state": SOURCES, "norm": NORMS, "reward_control": REWARD_CONTROLS,
        "minidev_fraction": Interval(0, 1, closed="neither"),
        "final_holdout_fraction": Interval(0, 1, closed="neither"),
        **{key: Interval(1, None) for key in ("hidden_size", "replay_capacity", "dqn_batch_size", "target_update",
                                              "reward_batch_size", "finetune_batch_size", "final_patience",
                                              "final_evals_per_epoch")},
        **{key: Interval(0, None) for key in ("episodes", "minidev_max_examples", "minitrain_max_examples",
                                              "layer_finetune_epochs", "final_epochs", "grad_clamp",
                                              "layer_finetune_lr", "final_lr", "finetune_weight_decay", "dqn_lr")},
        "eps_decay": Interval(0, None, closed="neither"), "finetune_warmup_ratio": Interval(0, 1),
        "gamma": Interval(0, 1), "dqn_momentum": Interval(0, 1, closed="left"),
        "eps_start": Interval(0, 1), "eps_end": Interval(0, 1),
        "stop_q": Interval(), "pruned_q": Interval(), "reward_scale": Interval(0, None, closed="neither"),
    }
    summary = "AUBER (Lee et al. 2020): layer-wise DQN head pruning, mini-dev rewards, per-layer fine-tuning"
    exact_budget = False
    needs_target = False
    own_budget = True  # never reads context.target_heads: one cell per (task, seed) for every budget
    defaults = {
        "episodes": 150, "state": "value", "norm": "l1", "reverse": False,
        "minidev_fraction": 0.25, "minidev_max_examples": 0, "minitrain_max_examples": 0,
        "layer_finetune_epochs": 3.0, "layer_finetune_lr": 2e-6, "finetune_batch_size": 32,
        "finetune_warmup_ratio": 0.0, "finetune_weight_decay": 0.0,
        "final_finetune": True, "final_holdout_fraction": 0.1, "final_epochs": 3.0, "final_lr": 2e-6,
        "final_patience": 2, "final_evals_per_epoch": 2,
        "hidden_size": 512, "replay_capacity": 5000, "dqn_batch_size": 128, "gamma": 1.0, "dqn_lr": 0.03,
        "dqn_momentum": 0.9, "grad_clamp": 1.0, "eps_start": 1.0, "eps_end": 0.05, "eps_decay": 256.0,
        "target_update": 35, "stop_q": 0.2, "learned_stop": False, "pruned_q": -5.0, "reward_scale": 100.0,
        "fast_rewards": True, "memoize": True, "reward_batch_size": 16, "reward_control": "none",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._score_fn: ScoreFunction | None = None

    def changes_weights(self) -> bool:
        """True unless both the per-layer and the final fine-tune are off."""
        return bool(self.options["final_finetune"] or self.options["layer_finetune_epochs"] > 0)

    def check_options(self) -> None:
        """Raises OptionError: ``dqn_batch_size`` above ``replay_capacity``."""
        if self.options["dqn_batch_size"] > self.options["replay_capacity"]:
            raise OptionError(f"{self.name}: option dqn_batch_size ({self.options['dqn_batch_size']}) must not exceed "
                              f"replay_capacity ({self.options['replay_capacity']})")

    def set_score_function(self, fn: ScoreFunction | None) -> AuberPruner:
        """Test hook: replace the mini-dev metric by ``fn(layer, pruned_heads) -> float`` (no model evaluation).
        Returns ``self``."""
        self._score_fn = fn
        return self

    def dqn_config(self) -> DQNConfig:
        """The :class:`~headprune_bench.methods.auber.dqn.DQNConfig` of the options (``dqn_`` prefixes dropped)."""
        o = self.options
        return DQNConfig(hidden_size=o["hidden_size"], replay_capacity=o["replay_capacity"],
                         batch_size=o["dqn_batch_size"], gamma=o["gamma"], lr=o["dqn_lr"],
                         momentum=o["dqn_momentum"], grad_clamp=o["grad_clamp"], eps_start=o["eps_start"],
                         eps_end=o["eps_end"], eps_decay=o["eps_decay"], target_update=o["target_update"],
                         stop_q=o["stop_q"], learned_stop=o["learned_stop"], pruned_q=o["pruned_q"],
                         reward_scale=o["reward_scale"])

    def layer_split(self, context: PruningContext, pool_size: int, layer: int) -> tuple[list[int], list[int]]:
        """(mini-dev, mini-train) pool indices for ``layer``: each example in the mini-dev with probability
        ``minidev_fraction``, seeded per layer, then the caps; both non-empty for a pool of 2 or more."""
        o = self.options
        gen = context.generator(salt=SALT_SPLIT + layer)
        draws = torch.rand(pool_size, generator=gen)
        dev = torch.nonzero(draws < o["minidev_fraction"]).flatten().tolist()
        train = torch.nonzero(draws >= o["minidev_fraction"]).flatten().tolist()
        if pool_size >= 2 and not dev:
            moved = int(torch.argmin(draws))
            dev, train = [moved], [i for i in train if i != moved]
        if pool_size >= 2 and not train:
            moved = int(torch.argmax(draws))
            train, dev = [moved], [i for i in dev if i != moved]
        for key, part in (("minidev_max_examples", dev), ("minitrain_max_examples", train)):
            cap = o[key]
            if cap and len(part) > cap:
                keep = torch.randperm(len(part), generator=gen)[:cap].tolist()
                part[:] = sorted(part[i] for i in keep)
        return dev, train

    def final_split(self, context: PruningContext, pool_size: int) -> tuple[list[int], list[int]]:
        """(train, held-out) indices of the pool for the final fine-tune (a seeded ``final_holdout_fraction``)."""
        perm = torch.randperm(pool_size, generator=context.generator(salt=SALT_FINAL)).tolist()
        k = min(pool_size - 1, max(1, int(round(self.options["final_holdout_fraction"] * pool_size))))
        return sorted(perm[k:]), sorted(perm[:k])

    def _scorer(self, model: nn.Module, context: PruningContext, layer: int, mask: torch.Tensor,
                dev_idx: list[int]):
        """(scorer, kind: "override", "fast", "naive" or "context", plus "+zero" / "+shuffled-labels", batches).
        Raises ValueError: "shuffled-labels" with a scorer that has no labels."""
        scorer, kind, batches = self._reward_scorer(model, context, layer, mask, dev_idx)
        control = self.options["reward_control"]
        if control == "zero":
            return _ZeroScorer(scorer), f"{kind}+zero", batches
        if control == "shuffled-labels":
            if not isinstance(getattr(scorer, "labels", None), np.ndarray):
                raise ValueError(f"auber: reward_control='shuffled-labels' needs a scorer with mini-dev labels; the "
                                 f"{kind} scorer has none")
            perm = torch.randperm(len(scorer.labels), generator=context.generator(salt=SALT_NULL + layer)).numpy()
            scorer.labels = scorer.labels[perm]
            return scorer, f"{kind}+shuffled-labels", batches
        return scorer, kind, batches

    def _reward_scorer(self, model: nn.Module, context: PruningContext, layer: int, mask: torch.Tensor,
                       dev_idx: list[int]):
        """:meth:`_scorer` on the true labels."""
        if self._score_fn is not None:
            return _OverrideScorer(self._score_fn, layer), "override", None
        if context.compute_metrics is None:
            return _ContextScorer(model, context, layer, mask, dev_idx), "context", None
        batches = length_sorted_batches(context.batches, dev_idx, self.options["reward_batch_size"])
        primary = context.primary_metric

        def metric(preds, labels) -> float:
            return float(context.compute_metrics(preds, labels)[primary])

        if self.options["fast_rewards"]:
            try:
                return FastScorer(model, batches, layer, mask, metric, context.autocast), "fast", batches
            except FastScorerUnsupported as exc:
                context.log(f"{self.name}: fast rewards unavailable ({exc}); using full forward passes")
        return NaiveScorer(model, batches, layer, mask, metric, context.autocast), "naive", batches

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """Algorithm 1: every layer in turn (:meth:`prune_layer`), then :meth:`final_finetune`, on a deep copy.

        Raises:
            ValueError: the train pool has fewer than 2 examples (no mini-dev / mini-train split).
        """
        o = self.options
        work = copy.deepcopy(model).eval()
        layout = get_layout(work)
        num_layers, num_heads = layout.num_layers, layout.num_heads
        pool = int(context.num_examples("train"))
        if pool < 2:
            raise ValueError(f"auber: the train pool has {pool} example(s); need at least 2 for the splits")
        cfg = self.dqn_config()
        order = list(range(num_layers))[::-1] if o["reverse"] else list(range(num_layers))
        mask = torch.ones(num_layers, num_heads)
        states = torch.zeros(num_layers, num_heads)
        layers_trace: list[dict[str, Any]] = []
        retrained = False
        start_all = time.perf_counter()
        for step, layer in enumerate(order, start=1):
            context.log(f"{self.name}: layer {layer} ({step} of {len(order)}): {o['episodes']} episodes")
            work, entry, tuned = self.prune_layer(work, context, layer, mask, states, pool, cfg)
            retrained = retrained or tuned
            layers_trace.append(entry)
        final: dict[str, Any] = {"ran": False}
        if o["final_finetune"]:
            work, final = self.final_finetune(work, context, mask, pool)
            retrained = True
        trace = {
            "layers": layers_trace,
            "order": order,
            "heads_pruned": int((mask == 0).sum()),
            "per_layer": [int((mask[layer] == 0).sum()) for layer in range(num_layers)],
            "final_finetune": final,
            "seconds": round(time.perf_counter() - start_all, 3),
        }
        return PruningResult(mask=mask, scores=states, retrained=retrained, model=work if retrained else None,
                             trace=trace)


    def search_layer(self, work: nn.Module, context: PruningContext, layer: int, mask: torch.Tensor,
                     state0: torch.Tensor, dev_idx: list[int], cfg: DQNConfig) -> dict[str, Any]:
        """The DQN episodes for ``layer`` from ``state0`` (``[H]``) with memoised mini-dev rewards, then the greedy
        policy (paper §3.4; code ``train.py``). Returns ``{"chosen": pruned heads in order, "before" / "after": the
        mini-dev metric without / with them, "kind", "batches", "metric", "build_seconds", and the trace fields}``."""
        o = self.options
        scorer, kind, batches = self._scorer(work, context, layer, mask, dev_idx)
        memo = Memo(scorer, enabled=o["memoize"])
        before = memo.score(())
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=context.generator(salt=SALT_DQN + layer)))
        search = LayerSearch(state0, memo.score_many, before, cfg, seed=seed)
        search.run(o["episodes"])
        chosen = search.greedy()
        after = memo.score(chosen) if chosen else before
        return {"chosen": chosen, "before": before, "after": after, "kind": kind, "batches": batches,
                "metric": getattr(scorer, "metric", None), "build_seconds": getattr(scorer, "build_seconds", None),
                "rewards": [round(e.total_reward, 6) for e in search.episodes], "epsilon": search.epsilon,
                "evals": memo.evals, "hits": memo.hits, "steps": search.steps_done, "optim_steps": search.optim_steps,
                "reward_seconds": getattr(scorer, "seconds", None)}

    def prune_layer(self, work: nn.Module, context: PruningContext, layer: int, mask: torch.Tensor,
                    states: torch.Tensor, pool: int, cfg: DQNConfig) -> tuple[nn.Module, dict[str, Any], bool]:
        """One layer: its split, state, search and, when heads were pruned, the fine-tune on its mini-train. Sets
        ``mask[layer]`` (``[L, H]``, 0 = pruned) and ``states[layer]`` in place. Returns (the model, the layer's
        ``trace["layers"]`` entry, whether it was fine-tuned)."""
        o = self.options
        start = time.perf_counter()
        dev_idx, train_idx = self.layer_split(context, pool, layer)
        state0 = layer_state(work, layer, o["state"], o["norm"])
        states[layer] = state0
        found = self.search_layer(work, context, layer, mask, state0, dev_idx, cfg)
        search_seconds = time.perf_counter() - start
        chosen = found["chosen"]
        mask[layer, chosen] = 0.0
        after_ft, finetune_seconds, tuned = None, 0.0, False
        if chosen and o["layer_finetune_epochs"] > 0:
            t_ft = time.perf_counter()
            work = context.fine_tune(
                work, mask.clone(), split="train", indices=train_idx, eval_split="train", eval_indices=dev_idx,
                epochs=o["layer_finetune_epochs"], lr=o["layer_finetune_lr"], batch_size=o["finetune_batch_size"],
                early_stopping=False, warmup_ratio=o["finetune_warmup_ratio"],
                weight_decay=o["finetune_weight_decay"]) or work
            work.eval()
            tuned = True
            finetune_seconds = time.perf_counter() - t_ft
            if found["kind"] in ("fast", "naive"):
                after_ft = NaiveScorer(work, found["batches"], layer, mask, found["metric"],
                                       context.autocast).score(chosen)
            elif found["kind"] == "context":
                after_ft = _ContextScorer(work, context, layer, mask, dev_idx).score_many([chosen])[0]
        entry = {
            "layer": layer, "episodes": o["episodes"], "rewards": found["rewards"], "epsilon": found["epsilon"],
            "pruned": sorted(int(h) for h in chosen), "pruned_order": [int(h) for h in chosen],
            "minidev_before": found["before"], "minidev_after": found["after"], "minidev_after_finetune": after_ft,
            "seconds": round(time.perf_counter() - start, 3), "search_seconds": round(search_seconds, 3),
            "finetune_seconds": round(finetune_seconds, 3), "reward_evals": found["evals"],
            "cache_hits": found["hits"], "reward_path": found["kind"], "steps": found["steps"],
            "optim_steps": found["optim_steps"], "minidev_size": len(dev_idx), "minitrain_size": len(train_idx),
            "state": [round(float(v), 6) for v in state0],
        }
        if found["build_seconds"] is not None:
            entry["cache_build_seconds"] = round(found["build_seconds"], 3)
        if found["reward_seconds"] is not None:  # (the rest of search_seconds: the DQN and the episodes' loop)
            entry["reward_seconds"] = round(found["reward_seconds"], 3)
        context.log(f"{self.name}: layer {layer}: pruned {entry['pruned']} (mini-dev {found['before']:.4f} -> "
                    f"{found['after']:.4f}; {found['evals']} evals, {found['hits']} memo hits, "
                    f"{entry['seconds']:.1f} s)")
        return work, entry, tuned

    def final_finetune(self, work: nn.Module, context: PruningContext, mask: torch.Tensor,
                       pool: int) -> tuple[nn.Module, dict[str, Any]]:
        """Fine-tune on the pool minus a seeded held-out slice, early-stopped on it, ``mask`` fixed (paper §3.2).
        Returns (the model in eval mode, ``trace["final_finetune"]``: sizes, held-out metric before/after, seconds)."""
        o = self.options
        t_final = time.perf_counter()
        train_idx, held_idx = self.final_split(context, pool)
        primary = context.primary_metric
        held_before = float(context.evaluate(work, mask.clone(), split="train", indices=held_idx)[primary])
        work = context.fine_tune(
            work, mask.clone(), split="train", indices=train_idx, eval_split="train", eval_indices=held_idx,
            epochs=o["final_epochs"], lr=o["final_lr"], batch_size=o["finetune_batch_size"], early_stopping=True,
            patience=o["final_patience"], evals_per_epoch=o["final_evals_per_epoch"],
            warmup_ratio=o["finetune_warmup_ratio"], weight_decay=o["finetune_weight_decay"]) or work
        work.eval()
        held_after = float(context.evaluate(work, mask.clone(), split="train", indices=held_idx)[primary])
        return work, {"ran": True, "train_examples": len(train_idx), "heldout_examples": len(held_idx),
                      "heldout_before": held_before, "heldout_after": held_after,
                      "seconds": round(time.perf_counter() - t_final, 3)}


class AuberAblation(AuberPruner):
    """Base of AUBER's ablations (not registered): report place and colour come from AUBER's, options given to AUBER
    reach them too, and only ``auber-null`` is in ``--methods all``."""

    ablation_of = "auber"
    report_order = None
    report_color = None


#: The ablations of paper Table 3: registry name -> (class name, AUBER defaults they change, summary, paper section).
ABLATIONS: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "auber-query": ("AuberQueryPruner", {"state": "query"}, "state from the query-projection norms", "§4.3.1"),
    "auber-key": ("AuberKeyPruner", {"state": "key"}, "state from the key-projection norms", "§4.3.1"),
    "auber-l2": ("AuberL2Pruner", {"norm": "l2"}, "L2 norm of the value weights, the official code's norm", "§4.3.2"),
    "auber-reverse": ("AuberReversePruner", {"reverse": True}, "layers processed from the top down", "§4.3.3"),
}


def _register_ablation(name: str, class_name: str, changes: dict[str, Any], what: str,
                       section: str, in_methods_all: bool | None = None) -> type[AuberAblation]:
    """Register ``name``: an :class:`AuberAblation` with AUBER's defaults updated by ``changes``."""
    summary = f"AUBER ablation: {what}" + (" (paper Table 3)" if section.startswith("§") else "")
    namespace = {"__doc__": f"{summary}, {section}.", "__module__": __name__, "__qualname__": class_name,
                 "name": name, "summary": summary, "defaults": {**AuberPruner.defaults, **changes},
                 "in_methods_all": in_methods_all}
    return register(type(class_name, (AuberAblation,), namespace))


AuberQueryPruner, AuberKeyPruner, AuberL2Pruner, AuberReversePruner = (
    _register_ablation(name, *spec) for name, spec in ABLATIONS.items())

AuberNullPruner = _register_ablation(
    "auber-null", "AuberNullPruner", {"reward_control": "shuffled-labels"},
    "null-reward control, rewards from shuffled mini-dev labels (ours, not in the paper)",
    "[OURS]: the count AUBER reaches without information in its rewards, printed beside AUBER's by the report",
    in_methods_all=True)
