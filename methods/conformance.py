"""A reusable conformance check for :class:`~headprune_bench.methods.base.HeadPruner` implementations: call
:func:`check_pruner` from your own test (``check_pruner(MyPruner)`` or ``check_pruner("my-method", option=3)``).
It raises ``AssertionError`` naming the broken rule. See docs/heads.md ("The conformance check") for the rules.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from headprune_bench.methods.base import (
    SPLITS,
    HeadPruner,
    PruningContext,
    PruningResult,
    check_head_scales,
    model_inputs,
)
from headprune_bench.methods.heads import apply_head_mask
from headprune_bench.methods.options import Interval, OptionError
from headprune_bench.methods.registry import available_methods, get_method_class

TINY = dict(vocab_size=64, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=40)
CLS, SEP, PAD = 1, 2, 0

FAMILIES = ("bert", "roberta", "xlm-roberta", "electra", "distilbert", "deberta-v2")
"""The ``model_type`` of each encoder family :func:`tiny_config` builds."""


def tiny_config(family: str = "bert", **overrides: Any):
    """The config of a tiny random classifier of ``family`` (3 layers x 4 heads, hidden 32, pad id 0, 2 labels;
    DeBERTa-v2 set up like v3), ``overrides`` replacing any field (docs/heads.md, "The conformance check").

    Raises:
        ValueError: an unknown family (the message lists :data:`FAMILIES`).
    """
    import transformers

    common = {**TINY, "pad_token_id": PAD, "num_labels": 2}
    if family == "bert":
        return transformers.BertConfig(**{**common, **overrides})
    if family == "roberta":
        return transformers.RobertaConfig(**{**common, **overrides})
    if family == "xlm-roberta":
        return transformers.XLMRobertaConfig(**{**common, **overrides})
    if family == "electra":
        return transformers.ElectraConfig(**{**common, "embedding_size": 16, **overrides})
    if family == "distilbert":
        fields = dict(vocab_size=TINY["vocab_size"], dim=TINY["hidden_size"], n_layers=TINY["num_hidden_layers"],
                      n_heads=TINY["num_attention_heads"], hidden_dim=TINY["intermediate_size"],
                      max_position_embeddings=TINY["max_position_embeddings"], pad_token_id=PAD, num_labels=2)
        return transformers.DistilBertConfig(**{**fields, **overrides})
    if family == "deberta-v2":
        fields = dict(relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=8,
                      max_relative_positions=-1, share_att_key=True, position_biased_input=False, type_vocab_size=0,
                      norm_rel_ebd="layer_norm")
        return transformers.DebertaV2Config(**{**common, **fields, **overrides})
    raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")


def tiny_model(seed: int = 0, family: str = "bert", **overrides: Any) -> nn.Module:
    """A tiny random sequence classifier of ``family`` (:func:`tiny_config`) in eval mode, weights drawn under
    ``seed``."""
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(seed)
    return AutoModelForSequenceClassification.from_config(tiny_config(family, **overrides)).eval()


def synthetic_split(n: int, seed: int, vocab_size: int = 64, max_len: int = 16) -> list[dict[str, torch.Tensor]]:
    """``n`` random [CLS] ... [SEP] examples (``input_ids`` ``[T]``, ``labels`` ``[]``: whether token 5 occurs)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(4, max_len - 1, (1,), generator=g))
        body = torch.randint(3, vocab_size, (length,), generator=g)
        ids = torch.cat([torch.tensor([CLS]), body, torch.tensor([SEP])])
        out.append({"input_ids": ids, "labels": torch.tensor(int((body == 5).any()))})
    return out


def collate(examples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Dynamic padding to the longest example: ``[B, T]`` ids/mask/type ids and ``[B]`` labels."""
    width = max(int(e["input_ids"].shape[0]) for e in examples)
    ids = torch.full((len(examples), width), PAD, dtype=torch.long)
    att = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        n = e["input_ids"].shape[0]
        ids[i, :n] = e["input_ids"]
        att[i, :n] = 1
    return {"input_ids": ids, "attention_mask": att, "token_type_ids": torch.zeros_like(ids),
            "labels": torch.stack([e["labels"] for e in examples])}


def masked_logits(model: nn.Module, batch: dict[str, torch.Tensor], mask: torch.Tensor | None) -> torch.Tensor:
    """``[B, num_labels]`` logits of ``model`` on ``batch`` with an optional ``[L, H]`` head mask."""
    if mask is None:
        return model(**model_inputs(batch)).logits
    with apply_head_mask(model, mask):
        return model(**model_inputs(batch)).logits


def synthetic_context(model: nn.Module, seed: int = 0, target_heads: int | None = 3,
                      n_train: int = 48, n_dev: int = 24, family: str | None = None) -> PruningContext:
    """A :class:`PruningContext` over synthetic splits with simple evaluate / fine_tune callables;
    ``tokenizer_info["_splits_read"]`` lists every split asked for."""
    from headprune_bench.methods.heads import get_layout

    layout = get_layout(model)
    family = family or model.config.model_type
    pool = synthetic_split(n_train + n_dev, seed=1000 + seed)
    data = {"mini_train": pool[:n_train], "mini_dev": pool[n_train:], "train": pool}
    read: list[str] = []

    def rows_of(split: str, indices=None) -> list[dict[str, torch.Tensor]]:
        if split not in SPLITS:
            raise AssertionError(f"a method asked for split {split!r}; only {SPLITS} exist (never the GLUE dev set)")
        read.append(split)
        rows = data[split]
        return rows if indices is None else [rows[int(i)] for i in indices]

    def batches(split: str, batch_size: int = 32, shuffle: bool = False, seed: int | None = None,
                indices=None) -> Iterator[dict]:
        rows = rows_of(split, indices)
        order = list(range(len(rows)))
        if shuffle:
            order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed or 0)).tolist()
        for start in range(0, len(rows), batch_size):
            yield collate([rows[i] for i in order[start:start + batch_size]])

    def metrics(preds, labels) -> dict[str, float]:
        preds, labels = torch.as_tensor(preds), torch.as_tensor(labels)
        return {"accuracy": float((preds == labels).float().mean())}

    @torch.no_grad()
    def evaluate(m: nn.Module, mask: torch.Tensor | None = None, split: str = "mini_dev",
                 indices=None) -> dict[str, float]:
        m.eval()
        preds, labels = [], []
        for batch in batches(split, indices=indices):
            preds.append(masked_logits(m, batch, mask).argmax(-1))
            labels.append(batch["labels"])
        return metrics(torch.cat(preds), torch.cat(labels))

    def fine_tune(m: nn.Module, mask: torch.Tensor | None = None, split: str = "mini_train", indices=None,
                  eval_split: str = "mini_dev", eval_indices=None, epochs: float = 1, lr: float = 1e-3,
                  batch_size: int = 16, early_stopping: bool = False, **_ignored) -> nn.Module:
        torch.manual_seed(seed)
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=lr)
        m.train()
        for epoch in range(max(1, int(round(epochs)))):
            for batch in batches(split, batch_size=batch_size, shuffle=True, seed=seed + epoch, indices=indices):
                loss = F.cross_entropy(masked_logits(m, batch, mask), batch["labels"])
                opt.zero_grad()
                loss.backward()
                opt.step()
        m.eval()
        return m

    return PruningContext(
        task="synthetic", primary_metric="accuracy", seed=seed, num_layers=layout.num_layers,
        num_heads=layout.num_heads, batches=batches, num_examples=lambda split: len(data[split]),
        evaluate=evaluate, fine_tune=fine_tune, target_heads=target_heads,
        load_pretrained=lambda: tiny_model(seed=123, family=family), compute_metrics=metrics,
        tokenizer_info={"vocab_size": TINY["vocab_size"], "cls_token_id": CLS, "sep_token_id": SEP,
                        "pad_token_id": PAD, "special_ids": [PAD, CLS, SEP], "_splits_read": read},
    )


def model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of every tensor of ``model``'s state dict, to compare before and after a call."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def check_option_constraints(method: type[HeadPruner] | str) -> None:
    """Every numeric and string option of ``method`` has a declared constraint that the constructor enforces.

    Raises:
        AssertionError: an option without a constraint, or a value outside one accepted or refused without naming it.
    """
    cls = get_method_class(method) if isinstance(method, str) else method
    rules = {**{k: tuple(v) for k, v in getattr(cls, "choices", {}).items()}, **cls.constraints}
    for key, default in cls.defaults.items():
        if isinstance(default, bool) or default is None or isinstance(default, (list, dict)):
            continue  # a bool's type is its whole constraint
        assert key in rules, (
            f"method '{cls.name}': option {key!r} ({type(default).__name__}) has no declared constraint; add "
            f"{key!r}: Interval(low, high) or a tuple of allowed values to {cls.__qualname__}.constraints")
        rule = rules[key]
        if isinstance(rule, Interval):
            bad_values = rule.outside(integer=isinstance(default, int))
        else:
            bad_values = ["<not-a-choice>"] if isinstance(default, str) else []
        for bad in bad_values:
            try:
                cls(**{key: bad})
            except OptionError as exc:
                assert key in str(exc), f"method '{cls.name}': the error for {key}={bad!r} does not name it: {exc}"
            else:
                raise AssertionError(f"method '{cls.name}': {key}={bad!r} is outside its constraint {rule} but the "
                                     f"constructor accepted it")


def check_pruner(method: type[HeadPruner] | str, target_heads: int = 3, seed: int = 0, family: str = "bert",
                 **options: Any) -> PruningResult:
    """Run the conformance checks on a method (class or registered name) with ``options``, twice, on a tiny model
    of ``family`` (:data:`FAMILIES`). Returns the first run's :class:`PruningResult`.

    Raises:
        AssertionError: naming the rule that the method breaks.
    """
    cls = get_method_class(method) if isinstance(method, str) else method
    assert isinstance(cls, type) and issubclass(cls, HeadPruner), f"{cls!r} is not a HeadPruner subclass"
    assert cls.name, f"{cls.__qualname__} has no name"
    assert available_methods().get(cls.name) is cls, (
        f"method '{cls.name}' is not registered (decorate it with @methods.register, or add an entry point)")
    assert cls.summary, f"method '{cls.name}' has no one-line summary"
    check_option_constraints(cls)
    pruner = cls(**options)
    opts = pruner.get_options()
    json.dumps(opts)
    assert cls(**opts).get_options() == opts, "options do not round-trip through the constructor"

    results = []
    for run in range(2):
        model = tiny_model(seed=seed, family=family)
        before = model_state(model)
        context = synthetic_context(model, seed=seed, target_heads=target_heads, family=family)
        # a method's randomness must come from context.seed, not the global RNG
        torch.manual_seed(9_000 + run)
        result = cls(**options).prune(model, context)
        assert isinstance(result, PruningResult), f"prune() returned {type(result).__name__}, not PruningResult"
        shape = (context.num_layers, context.num_heads)
        assert tuple(result.mask.shape) == shape, f"mask shape {list(result.mask.shape)}, expected {list(shape)}"
        assert bool(((result.mask == 0) | (result.mask == 1)).all()), "mask has values other than 0 and 1"
        if cls.exact_budget:
            assert result.heads_pruned == target_heads, (
                f"method '{cls.name}' has exact_budget=True (the default) but pruned {result.heads_pruned} heads, not "
                f"{target_heads}; set exact_budget = False if the method decides or only approaches the count")
        if result.scores is not None:
            assert tuple(result.scores.shape) == shape, f"scores shape {list(result.scores.shape)}"
            assert bool(torch.isfinite(result.scores).all()), "scores are not all finite"
        if result.head_scales is not None:
            check_head_scales(result.head_scales, result.mask, where=f"method '{cls.name}' head_scales")
        if result.retrained:
            assert result.model is not None, "retrained=True but no model returned"
            assert pruner.changes_weights(), (
                f"method '{cls.name}' returned retrained=True but changes_weights() is False; override "
                f"changes_weights() so that the runner evaluates its own weights as a separate row")
        else:
            after = model_state(model)
            changed = [k for k in before if not torch.equal(before[k], after[k])]
            assert not changed, (
                f"method '{cls.name}' changed the base model's weights without retrained=True: {changed[:3]}")
        json.dumps(result.trace)
        assert set(context.tokenizer_info["_splits_read"]) <= set(SPLITS)
        results.append(result)
    assert torch.equal(results[0].mask, results[1].mask), f"method '{cls.name}' is not deterministic under a seed"
    if pruner.ranks_once():
        check_ranks_once(cls, results[0], seed, family, **options)
    return results[0]


def check_ranks_once(cls: type[HeadPruner], result: PruningResult, seed: int = 0, family: str = "bert",
                     **options: Any) -> None:
    """For a method that :meth:`~HeadPruner.ranks_once`: ``mask_at(result, K)`` equals a separate ``prune`` at
    every K of the tiny model (mask and scores), ``result`` being its prune at another K.

    Raises:
        AssertionError: naming the first K where they differ.
    """
    why = ("re-trains" if result.retrained else "has no scores" if result.scores is None
           else "scales its kept heads (mask_at gives binary masks)" if result.head_scales is not None else "")
    assert not why, f"method '{cls.name}': ranks_once() is True but its result {why}"
    model = tiny_model(seed=seed, family=family)
    shape = synthetic_context(model, seed=seed, target_heads=0, family=family)
    floor = cls(**options).options.get("min_heads_per_layer", 0)
    for k in range(shape.total_heads - shape.num_layers * floor + 1):
        context = synthetic_context(model, seed=seed, target_heads=k, family=family)
        alone = cls(**options).prune(model, context)
        derived = cls(**options).mask_at(result, k)
        assert torch.equal(derived.mask, alone.mask), (
            f"method '{cls.name}' ranks_once() but mask_at(K={k}) differs from prune() at K={k}: "
            f"{int((derived.mask != alone.mask).sum())} heads differ")
        assert torch.equal(derived.scores, alone.scores), (
            f"method '{cls.name}' ranks_once() but its scores at K={k} differ from those at another K")
