"""Speed of AUBER's reward evaluation: one layer's DQN search run the naive way and the fast way.

    python -m headprune_bench.benchmark.tools.auber_speed --task mrpc --layers 0,3,5 --episodes 150

Prints timings (not a test). What the naive and the fast path compute: docs/choices.md ("AUBER's search speed").
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from headprune_bench.methods.auber.dqn import DQNConfig, LayerSearch
from headprune_bench.methods.auber.rewards import FastScorer, Memo, NaiveScorer
from headprune_bench.methods.auber.state import layer_state


def _load(args):
    """Model, the mini-dev as length-sorted batches (fast path) and in sampled order (naive path), metric."""
    from headprune_bench.benchmark import models, tasks, training

    spec = tasks.get_task(args.task)
    raw = tasks.load_task(spec, tasks.resolve_data_dir(args.glue_dir))
    device = models.resolve_device(args.device)
    torch.manual_seed(args.seed)  # the fresh classification head
    if args.model and Path(args.model).is_dir():
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(args.model, dtype=torch.float32)
        has_tokenizer = any((Path(args.model) / f).exists() for f in ("tokenizer.json", "vocab.txt"))
        tokenizer = models.load_tokenizer(args.model if has_tokenizer else args.tokenizer)
    else:
        name = args.model or "minilm-l6"
        model = models.load_classifier(name, spec.num_labels)
        tokenizer = models.load_tokenizer(name)
    model = model.to(device).eval()
    train = training.encode(raw["train"], spec, tokenizer, args.max_length)
    rng = np.random.default_rng(args.seed)
    chosen = [int(i) for i in rng.permutation(len(train))[: args.examples]]
    lengths = np.asarray([len(train[i]["input_ids"]) for i in chosen])
    ordered = [chosen[i] for i in np.argsort(lengths, kind="stable")]
    fast_batches = list(training.iterate(train.select(ordered), tokenizer, args.batch_size, device))
    naive_order = ordered if args.naive_order == "length" else chosen
    naive_batches = list(training.iterate(train.select(naive_order), tokenizer, args.naive_batch_size, device))

    def metric(preds, labels) -> float:
        return float(tasks.compute_metrics(spec, preds, labels)[spec.primary_metric])

    return spec, model, {"fast": fast_batches, "naive": naive_batches}, metric, int(lengths.sum())


def _search(model, batches, layer, metric, args, fast: bool) -> dict:
    """One layer's search (the fast or the naive scorer), timed: seconds, rewards, evaluations, memo hits, the
    decisions of every episode and the greedy heads."""
    base = torch.ones(model.config.num_hidden_layers, model.config.num_attention_heads)
    state = layer_state(model, layer, "value", "l1")
    start = time.perf_counter()
    if fast:
        scorer = FastScorer(model, batches, layer, base, metric)
    else:
        scorer = NaiveScorer(model, batches, layer, base, metric)
    memo = Memo(scorer, enabled=fast)
    original = memo.score(())
    search = LayerSearch(state, memo.score_many, original, DQNConfig(), seed=args.seed * 1000 + layer)
    search.run(args.episodes)
    greedy = search.greedy()
    seconds = time.perf_counter() - start
    rewards = sum(len(e.scores) for e in search.episodes)
    return {
        "seconds": seconds,
        "rewards": rewards,
        "rewards_per_s": rewards / seconds if seconds > 0 else float("inf"),
        "evals": scorer.evals,
        "memo_hits": memo.hits,
        "eval_seconds": scorer.seconds,
        "seconds_per_eval": scorer.seconds / max(1, scorer.evals),
        "build_seconds": getattr(scorer, "build_seconds", 0.0),
        "decisions": [(e.actions, e.rewards) for e in search.episodes],
        "greedy": sorted(greedy),
        "epsilon": search.epsilon,
    }


def _estimate_naive(model, batches, layer, metric, fast: dict, evals: int) -> dict:
    """The naive search's time without running it: ``evals`` timed full forwards (pruned sets of the fast run)
    times the number of evaluations the naive search makes (one per reward, plus the unpruned score), plus the
    fast run's DQN time (the same search)."""
    base = torch.ones(model.config.num_hidden_layers, model.config.num_attention_heads)
    scorer = NaiveScorer(model, batches, layer, base, metric)
    sets = [frozenset(a for a in actions[: k + 1]) for actions, _ in fast["decisions"] for k in range(len(actions) - 1)]
    for pruned in (sets or [frozenset()])[:evals]:
        scorer.score(pruned)
    per_eval = scorer.seconds / max(1, scorer.evals)
    dqn = max(0.0, fast["seconds"] - fast["eval_seconds"] - fast["build_seconds"])
    seconds = (fast["rewards"] + 1) * per_eval + dqn
    return {"seconds": seconds, "rewards": fast["rewards"], "rewards_per_s": fast["rewards"] / seconds,
            "evals": fast["rewards"] + 1, "memo_hits": 0, "eval_seconds": per_eval * (fast["rewards"] + 1),
            "seconds_per_eval": per_eval, "build_seconds": 0.0, "decisions": None, "greedy": None,
            "epsilon": fast["epsilon"], "estimated_from_evals": scorer.evals}


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m headprune_bench.benchmark.tools.auber_speed``."""
    parser = argparse.ArgumentParser(prog="python -m headprune_bench.benchmark.tools.auber_speed",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="mrpc")
    parser.add_argument("--glue-dir", default=None, help="GLUE folder (default: $GLUE_DIR, else the hub)")
    parser.add_argument("--model", default=None, help="minilm-l6 (default), a hub name, or a fine-tuned folder")
    parser.add_argument("--examples", type=int, default=200, help="mini-dev size (train examples)")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--layers", default="0", help="comma-separated layers to search (e.g. 0,3,5)")
    parser.add_argument("--batch-size", type=int, default=16,
                        help="fast path: examples per length-sorted batch (the auber default reward_batch_size)")
    parser.add_argument("--naive-batch-size", type=int, default=32,
                        help="naive path: examples per batch, padded to the batch's longest example")
    parser.add_argument("--naive-order", choices=("dataset", "length"), default="dataset",
                        help="naive path: the sampled order padded per batch (a plain loop), or length-sorted like "
                             "the fast path (isolates the cache and the memo)")
    parser.add_argument("--tokenizer", default="minilm-l6", help="tokenizer when --model is a folder without one")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--naive-estimate", type=int, default=0, metavar="K",
                        help="do not run the naive search: time K of its full forwards and extrapolate (for long "
                             "searches, e.g. 150 episodes); decisions are then not compared")
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    return parser


def main(argv: list[str] | None = None) -> dict:
    """Time AUBER's search naive and fast on the layers asked for; print a table and return the summary
    (``{"task", "model", ..., "layers": [per layer: ratios, rewards, seconds, identical decisions], "ratio",
    "identical_decisions"}``; seconds of wall-clock time). ``argv``: the command line (default ``sys.argv``)."""
    args = _parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from headprune_bench.benchmark.provenance import quiet_libraries

    quiet_libraries()
    spec, model, batches, metric, tokens = _load(args)
    padded = {p: sum(int(b["input_ids"].numel()) for b in batches[p]) for p in batches}
    layers = [int(x) for x in args.layers.split(",") if x.strip()]
    print(f"{spec.name}: {model.config.num_hidden_layers} layers x {model.config.num_attention_heads} heads, "
          f"mini-dev {sum(len(b['labels']) for b in batches['fast'])} examples, {tokens} tokens "
          f"(padded: fast {padded['fast']}, naive {padded['naive']}), {args.episodes} episodes, "
          f"device {next(model.parameters()).device}, {torch.get_num_threads()} threads")
    header = (f"{'layer':>5} {'path':>5} {'rewards':>7} {'evals':>5} {'hits':>5} {'total s':>8} {'rewards/s':>9} "
              f"{'s/eval':>7} {'build s':>7}  greedy")
    print(header)
    rows, totals = [], {"naive": 0.0, "fast": 0.0}
    all_same = True
    for layer in layers:
        result = {}
        for path in ("fast", "naive"):
            if path == "naive" and args.naive_estimate:
                r = _estimate_naive(model, batches["naive"], layer, metric, result["fast"], args.naive_estimate)
            else:
                r = _search(model, batches[path], layer, metric, args, fast=(path == "fast"))
            result[path] = r
            totals[path] += r["seconds"]
            print(f"{layer:>5} {path:>5} {r['rewards']:>7} {r['evals']:>5} {r['memo_hits']:>5} {r['seconds']:>8.2f} "
                  f"{r['rewards_per_s']:>9.2f} {r['seconds_per_eval']:>7.3f} {r['build_seconds']:>7.2f}  {r['greedy']}")
        naive, fast = result["naive"], result["fast"]
        if args.naive_estimate:
            same = None  # not compared
            print(f"{'':>5} naive time estimated from {naive['estimated_from_evals']} full forwards")
        else:
            same = naive["decisions"] == fast["decisions"] and naive["greedy"] == fast["greedy"]
            all_same &= same
        row = {"layer": layer, "ratio": naive["seconds"] / fast["seconds"],
               "per_eval_ratio": naive["seconds_per_eval"] / fast["seconds_per_eval"], "identical_decisions": same,
               **{f"{p}_{k}": v for p in ("naive", "fast") for k, v in result[p].items() if k != "decisions"}}
        rows.append(row)
        print(f"layer {layer}: fast is {row['ratio']:.1f}x faster in total ({row['per_eval_ratio']:.1f}x per "
              f"evaluation, memo {fast['memo_hits']}/{fast['rewards']} hits); identical decisions: "
              f"{'not compared' if same is None else same}")
    ratio = totals["naive"] / totals["fast"] if totals["fast"] > 0 else float("inf")
    if args.naive_estimate:
        all_same = None
    print(f"all layers: naive {totals['naive']:.2f} s{' (estimated)' if args.naive_estimate else ''}, "
          f"fast {totals['fast']:.2f} s, ratio {ratio:.1f}x; identical decisions: "
          f"{'not compared' if all_same is None else all_same}")
    summary = {"task": spec.name, "model": args.model or "minilm-l6", "examples": args.examples,
               "episodes": args.episodes, "tokens": tokens, "padded_tokens": padded,
               "naive_order": args.naive_order, "layers": rows,
               "naive_seconds": totals["naive"], "fast_seconds": totals["fast"], "ratio": ratio,
               "identical_decisions": all_same, "naive_estimated": bool(args.naive_estimate),
               "threads": torch.get_num_threads()}
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
