"""AUBER: Automated BERT Regularization (Lee, Lee, Kang; arXiv 2009.14409; PLOS ONE 16(6):e0253241, 2021).

A DQN agent prunes attention heads layer by layer ("dually greedy", paper §3.1): for each layer it learns, from
rewards = 100 x the change of a mini-validation metric, which heads to prune one at a time and when to stop;
the layer's greedy policy is applied, the model is fine-tuned on a mini-training split, and the next layer's
state is computed from the fine-tuned model (paper §3.2, §3.4, Algorithm 1). The method decides how many heads
to prune, so it can set the budget of the others (``--budget matched:auber``).

Faithful to the paper and to the official code (snudatalab/AUBER@239091f; shared/reference/methods.md §1, read
line by line); written from scratch. Modules: :mod:`~headprune_bench.methods.auber.state` (state vector),
:mod:`~headprune_bench.methods.auber.dqn` (network, replay, epsilon-greedy, optimisation, one layer's episodes),
:mod:`~headprune_bench.methods.auber.rewards` (fast in-process reward evaluation).

Per layer ``l`` (bottom to top; ``reverse`` = top to bottom, the paper's AUBER-Reverse, §4.3.3):

1. Redraw a seeded split of the whole train-derived pool (context split ``"train"``): each example goes to the
   mini-dev with probability ``minidev_fraction`` (0.25), otherwise to the mini-train (code
   ``utils.split_train``: ``random.uniform(0, 1) < 0.25`` per row, redrawn for every layer). Never the GLUE dev
   split (the code prints dev scores; we do not read them at all).
2. State ``s_l`` = softmax(z-score(per-head norm of the layer's value weights)), :mod:`headprune_bench.methods.auber.state`.
3. ``episodes`` episodes of the DQN search with rewards on the mini-dev (forward only, head masks on the current
   model, memoised per pruned set), :mod:`headprune_bench.methods.auber.dqn`.
4. The greedy policy from ``s_l`` gives the layer's pruned heads; when there is at least one, fine-tune the
   masked model on the mini-train (code: ``run_glue.py --do_train``, 3 epochs, batch 32, lr = ``-lr``; the
   demo script uses 2e-6, the CLI default is 2e-5; the paper: "fine-tuned with a smaller learning rate").
After the last layer: the final fine-tune with early stopping (paper §3.2 "When all layers are pruned by AUBER,
the final model is fine-tuned with the entire training dataset with early stopping"; not in the code, see
``final_finetune``).

Paper/code discrepancies and the choice made (each is an option):

* state norm: paper L1 (§3.3), code Frobenius/L2 -> ``norm="l1"`` default, ``"l2"`` = ``auber-l2``;
* Q(stop): the paper calls the stop reward a hyper-parameter; the code gives stop reward 0 and overwrites Q(stop)
  with 0.2 (never learned) -> ``stop_q=0.2``, ``learned_stop=False``;
* final fine-tune with early stopping: paper only -> ``final_finetune=True``; its held-out slice, patience and lr
  are not given (the numbers are lost from the paper text we have): a seeded ``final_holdout_fraction`` of the
  pool, ``final_patience``, ``final_lr`` [INFERRED];
* fine-tune recipe of the code (HF ``run_glue`` v3.5 Trainer defaults): AdamW, linear decay, no warmup, no
  weight decay -> ``finetune_warmup_ratio=0``, ``finetune_weight_decay=0``;
* episodes: code CLI default 1, demo and paper 150 -> ``episodes=150``.
"""
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

# Salts of the context's seeded generators (independent streams per purpose and layer).
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

    Options (defaults: official code ``snudatalab/AUBER@239091f`` / paper arXiv 2009.14409; methods.md §1):
        episodes (int, 150): episodes per layer (``script/demo.sh -num_episodes 150``; CLI default 1).
        state (str, "value"): projection whose per-head norms form the state: "value" (paper §3.3),
            "query" / "key" (Table 3 AUBER-Query / AUBER-Key; code ``-state``).
        norm (str, "l1"): "l1" (paper §3.3) or "l2" (the code's Frobenius norm; Table 3 AUBER-L2).
        reverse (bool, False): process layers top to bottom (Table 3 AUBER-Reverse, §4.3.3).
        minidev_fraction (float, 0.25): per-layer share of the pool drawn into the mini-dev (code
            ``split_train``: ``x < 0.25``).
        minidev_max_examples (int, 0): cap on the mini-dev actually scored, a seeded subset (0 = all). A sizing
            knob for CPU runs; not in the paper.
        minitrain_max_examples (int, 0): cap on the per-layer fine-tune's mini-train (0 = all). Sizing knob.
        layer_finetune_epochs (float, 3.0): fine-tune epochs after a layer with pruned heads (code scripts
            ``--num_train_epochs 3.0``); 0 skips it.
        layer_finetune_lr (float, 2e-6): its learning rate (``demo.sh -lr 2e-6``; CLI default 2e-5; paper "a
            smaller learning rate").
        finetune_batch_size (int, 32): batch size of every fine-tune (``--per_gpu_train_batch_size 32``).
        finetune_warmup_ratio (float, 0.0), finetune_weight_decay (float, 0.0): HF run_glue v3.5 Trainer
            defaults used by the code (no warmup, no weight decay); the runner's recipe supplies the rest
            (AdamW, linear decay, gradient clipping 1.0).
        final_finetune (bool, True): after the last layer, fine-tune on the pool with early stopping (paper
            §3.2; not in the code).
        final_holdout_fraction (float, 0.1): seeded held-out slice of the pool for its early stopping
            [INFERRED: the paper does not say what it stops on].
        final_epochs (float, 3.0), final_lr (float, 2e-6), final_patience (int, 2), final_evals_per_epoch
            (int, 2): the final fine-tune [INFERRED: the paper's values are not in the text we have].
        hidden_size (int, 512), replay_capacity (int, 5000), dqn_batch_size (int, 128), gamma (float, 1.0),
            dqn_lr (float, 0.03), dqn_momentum (float, 0.9), grad_clamp (float, 1.0), eps_start (float, 1.0),
            eps_end (float, 0.05), eps_decay (float, 256.0), target_update (int, 35), stop_q (float, 0.2),
            learned_stop (bool, False), pruned_q (float, -5.0), reward_scale (float, 100.0): the DQN, see
            :class:`headprune_bench.methods.auber.dqn.DQNConfig` (code ``agent.py``, ``train.py``).
        fast_rewards (bool, True): cached-prefix reward evaluation (:class:`headprune_bench.methods.auber.rewards.FastScorer`);
            False = a full masked forward per reward. Both give the same decisions.
        memoize (bool, True): memoise the score per pruned set within a layer (the code's ``transitions``).
        reward_batch_size (int, 16): mini-dev examples per forward batch; the mini-dev is sorted by length, so
            small batches of neighbours carry almost no padding (raise it on a GPU).
        reward_control (str, "none"): [OURS] a null-reward control, to show how many heads AUBER prunes when its
            rewards carry no information about the heads: "shuffled-labels" (each layer's mini-dev labels
            permuted, seeded: rewards are the metric's noise around chance) or "zero" (every reward 0, the count
            comes from the DQN's stop value alone). The per-layer and final fine-tunes keep the true labels. The
            registered ablation ``auber-null`` runs "shuffled-labels"; the report prints its count beside AUBER's.

    Returns ``retrained=True`` with the fine-tuned model (a deep copy; the input model is untouched) when any
    fine-tune ran, ``scores`` = each layer's initial state ``s_l`` (``[L, H]``, rows sum to 1; higher = larger
    weight norm), and ``trace["layers"]``: per processed layer ``{"layer", "episodes", "rewards"`` (total reward
    per episode) ``, "epsilon"`` (final) ``, "pruned", "minidev_before", "minidev_after",
    "minidev_after_finetune", "seconds", "reward_evals", "cache_hits", ...}``.

    Raises:
        ValueError: an option out of range (at construction).
    """

    name = "auber"
    report_order, report_color = 70, "#D55E00"
    conformance_options = {"episodes": 2, "final_finetune": False, "layer_finetune_epochs": 1.0}
    constraints = {
        "state": SOURCES, "norm": NORMS, "reward_control": REWARD_CONTROLS,
        "minidev_fraction": Interval(0, 1, closed="neither"), "final_holdout_fraction": Interval(0, 1, closed="neither"),
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
        """AUBER fine-tunes while it searches (per layer, paper §3.4) and at the end: True unless both are off."""
        return bool(self.options["final_finetune"] or self.options["layer_finetune_epochs"] > 0)

    def check_options(self) -> None:
        """The DQN's minibatch must fit in its replay buffer."""
        if self.options["dqn_batch_size"] > self.options["replay_capacity"]:
            raise OptionError(f"{self.name}: option dqn_batch_size ({self.options['dqn_batch_size']}) must not exceed "
                              f"replay_capacity ({self.options['replay_capacity']})")

    def set_score_function(self, fn: ScoreFunction | None) -> AuberPruner:
        """Test hook: replace the mini-dev metric by ``fn(layer, pruned_heads) -> float`` (no model evaluation).
        Returns ``self``."""
        self._score_fn = fn
        return self

    def dqn_config(self) -> DQNConfig:
        """The :class:`~headprune_bench.methods.auber.dqn.DQNConfig` of the options (``dqn_batch_size`` -> ``batch_size``,
        ``dqn_lr`` -> ``lr``, ``dqn_momentum`` -> ``momentum``; the other fields by name)."""
        o = self.options
        return DQNConfig(hidden_size=o["hidden_size"], replay_capacity=o["replay_capacity"],
                         batch_size=o["dqn_batch_size"], gamma=o["gamma"], lr=o["dqn_lr"],
                         momentum=o["dqn_momentum"], grad_clamp=o["grad_clamp"], eps_start=o["eps_start"],
                         eps_end=o["eps_end"], eps_decay=o["eps_decay"], target_update=o["target_update"],
                         stop_q=o["stop_q"], learned_stop=o["learned_stop"], pruned_q=o["pruned_q"],
                         reward_scale=o["reward_scale"])

    # ------------------------------------------------------------------ data splits

    def layer_split(self, context: PruningContext, pool_size: int, layer: int) -> tuple[list[int], list[int]]:
        """(mini-dev, mini-train) indices of the pool for ``layer``: each example goes to the mini-dev with
        probability ``minidev_fraction`` (seeded by the cell seed and the layer), then the optional caps (seeded
        subsets). Both parts are non-empty when the pool has two or more examples."""
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

    # ------------------------------------------------------------------ rewards

    def _scorer(self, model: nn.Module, context: PruningContext, layer: int, mask: torch.Tensor,
                dev_idx: list[int]):
        """The reward scorer of one layer, its kind ("override", "fast", "naive" or "context"; "+zero" /
        "+shuffled-labels" under a ``reward_control``) and its mini-dev batches.

        Raises:
            ValueError: ``reward_control="shuffled-labels"`` with a scorer that has no labels to shuffle.
        """
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
        """The reward scorer of one layer on the true labels (see :meth:`_scorer`)."""
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
                return FastScorer(model, batches, layer, mask, metric), "fast", batches
            except FastScorerUnsupported as exc:
                context.log(f"auber: fast rewards unavailable ({exc}); using full forward passes")
        return NaiveScorer(model, batches, layer, mask, metric), "naive", batches

    # ------------------------------------------------------------------ the method

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """Algorithm 1 of the paper (module docstring): every layer in turn (:meth:`prune_layer`), then the final
        fine-tune (:meth:`final_finetune`). The input model is untouched (a deep copy is pruned and trained).

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
        for layer in order:
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
        """Steps 3-4 of the module docstring for ``layer``: the DQN episodes from ``state0`` (``[H]``) with memoised
        mini-dev rewards (paper §3.4; code ``train.py``), then the greedy policy. The reward scorer and its cache
        are released on return.

        Returns:
            ``{"chosen": pruned heads in pruning order, "before" / "after": the mini-dev metric without / with them,
            "kind": the reward path, "batches" and "metric": for re-scoring after the fine-tune, "build_seconds",
            and the search's trace fields "rewards", "epsilon", "evals", "hits", "steps", "optim_steps"}``.
        """
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
                "evals": memo.evals, "hits": memo.hits, "steps": search.steps_done, "optim_steps": search.optim_steps}

    def prune_layer(self, work: nn.Module, context: PruningContext, layer: int, mask: torch.Tensor,
                    states: torch.Tensor, pool: int, cfg: DQNConfig) -> tuple[nn.Module, dict[str, Any], bool]:
        """One layer of Algorithm 1 (steps 1-4 of the module docstring): the layer's split, its state, the search
        (:meth:`search_layer`), and the fine-tune on the layer's mini-train when heads were pruned. Sets
        ``mask[layer]`` (``[L, H]``, 0 = pruned) and ``states[layer]`` in place.

        Returns:
            (the model, fine-tuned or as given; the layer's entry of ``trace["layers"]``; whether it was fine-tuned).
        """
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
                after_ft = NaiveScorer(work, found["batches"], layer, mask, found["metric"]).score(chosen)
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
        context.log(f"auber: layer {layer}: pruned {entry['pruned']} (mini-dev {found['before']:.4f} -> "
                    f"{found['after']:.4f}; {found['evals']} evals, {found['hits']} memo hits, "
                    f"{entry['seconds']:.1f} s)")
        return work, entry, tuned

    def final_finetune(self, work: nn.Module, context: PruningContext, mask: torch.Tensor,
                       pool: int) -> tuple[nn.Module, dict[str, Any]]:
        """The final fine-tune with early stopping (paper §3.2; not in the code): on the pool minus a seeded held-out
        slice (:meth:`final_split`), early stopping on that slice [INFERRED], with ``mask`` held fixed.

        Returns:
            (the fine-tuned model in eval mode, ``trace["final_finetune"]``: ``ran``, ``train_examples``,
            ``heldout_examples``, ``heldout_before`` / ``heldout_after`` (primary metric), ``seconds``).
        """
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
    """Base of AUBER's ablations (paper Table 3; not registered itself): ``ablation_of = "auber"`` (left out of
    ``--methods all``, but for ``auber-null``, whose ``in_methods_all`` is True: a subclass of it inherits that), and
    no report place or colour of its own (``None``), so the report derives them from AUBER's; the options given for
    AUBER reach them too (the runner merges them; ``--option auber.X``). The ablations are defined from
    :data:`ABLATIONS`."""

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
    """Define and register the ablation ``name``: an :class:`AuberAblation` whose defaults are AUBER's changed by
    ``changes`` (``in_methods_all``: see :class:`~headprune_bench.methods.base.HeadPruner`)."""
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
