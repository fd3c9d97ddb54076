"""Confidence pruning (Voita, Talbot, Moiseev, Sennrich, Titov, ACL 2019, §4.1 "Confident heads"): prune the heads
whose mean max attention weight is lowest. See docs/methods.md ("Confidence")."""
from __future__ import annotations

import torch
from torch import nn

from headprune_bench.methods.attention import attention_maps
from headprune_bench.methods.base import SPLITS, HeadPruner, PruningContext, PruningResult, lowest_k_mask
from headprune_bench.methods.options import Interval
from headprune_bench.methods.registry import register

EXCLUDE_CHOICES = ("sep", "none", "cls_sep")


def head_confidence(attn: torch.Tensor, attention_mask: torch.Tensor,
                    key_mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Per-head sum over valid queries of the max attention weight over the allowed keys.

    ``attn``: ``[L, B, H, T, T]`` probabilities; ``attention_mask``: ``[B, T]``, 1 = real token (valid query);
    ``key_mask``: ``[B, T]``, 1 = key allowed in the max. Returns (``[L, H]`` sums, number of valid queries).
    """
    allowed = key_mask.to(attn.dtype)[None, :, None, None, :]  # [1, B, 1, 1, T]
    peak = (attn * allowed).amax(dim=-1)  # [L, B, H, T]   (weights are >= 0, so zeroing excludes a key)
    queries = attention_mask.to(attn.dtype)[None, :, None, :]  # [1, B, 1, T]
    return (peak * queries).sum(dim=(1, 3)), int(attention_mask.sum())


@register
class ConfidencePruner(HeadPruner):
    """Prune the ``target_heads`` heads of lowest ``conf_h = mean_q max_k A_h[q, k]`` (Voita et al. 2019, §4.1).

    Options: exclude_keys (str, "sep"): keys left out of the max, "sep", "none" or "cls_sep"; split (str,
    "mini_dev" or "mini_train"); max_examples (int, 0 = all); batch_size (int, 32); min_heads_per_layer (int, 0).
    ``scores`` are the ``[L, H]`` confidences, in [0, 1]. Raises OptionError at construction for a bad option.
    Precision: the attention maps under ``context.autocast`` (bf16 under ``--precision bf16``), the maxima and
    sums in float64.
    """

    name = "confidence"
    report_order, report_color = 20, "#E69F00"
    constraints = {"exclude_keys": EXCLUDE_CHOICES, "split": SPLITS,
                   "max_examples": Interval(0, None), "batch_size": Interval(1, None),
                   "min_heads_per_layer": Interval(0, None)}
    summary = "Voita et al. 2019 §4.1: prune heads with the lowest mean max-attention weight"
    defaults = {"exclude_keys": "sep", "split": "mini_dev", "max_examples": 0, "batch_size": 32,
                "min_heads_per_layer": 0}

    def ranks_once(self) -> bool:
        """True: the confidences do not depend on the target."""
        return True

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """Average :func:`head_confidence` over the split in eval mode; prune the ``target_heads`` lowest.

        Raises:
            ValueError: no target; ``exclude_keys`` needs ``tokenizer_info["sep_token_id"]``; the split gave no token.
        """
        opts = self.options
        if context.target_heads is None:
            raise ValueError("method 'confidence' needs a budget: give --budget heads:K, fraction:F or matched:METHOD")
        sep_id = context.tokenizer_info.get("sep_token_id")
        cls_id = context.tokenizer_info.get("cls_token_id")
        if opts["exclude_keys"] != "none" and sep_id is None:
            raise ValueError("confidence: exclude_keys needs tokenizer_info['sep_token_id'] in the context")
        model.eval()
        total = torch.zeros(context.num_layers, context.num_heads, dtype=torch.float64)
        n_queries = seen = 0
        for batch in context.batches(opts["split"], batch_size=opts["batch_size"]):
            if opts["max_examples"] and seen >= opts["max_examples"]:
                break
            if opts["max_examples"]:
                batch = {k: v[: opts["max_examples"] - seen] for k, v in batch.items()}
            seen += batch["input_ids"].shape[0]
            attn = attention_maps(model, batch, context.autocast).double()
            keys = batch["attention_mask"].bool().clone()
            if opts["exclude_keys"] in ("sep", "cls_sep"):
                keys &= batch["input_ids"] != sep_id
            if opts["exclude_keys"] == "cls_sep":
                keys &= batch["input_ids"] != cls_id
            summed, count = head_confidence(attn, batch["attention_mask"], keys)
            total += summed.cpu()
            n_queries += count
        if n_queries == 0:
            raise ValueError(f"confidence: split '{opts['split']}' gave no tokens")
        scores = (total / n_queries).float()
        mask = lowest_k_mask(scores, int(context.target_heads), opts["min_heads_per_layer"])
        return PruningResult(mask=mask, scores=scores, trace={"queries": n_queries, "examples": seen})
