"""Zero-shot pruning from attention redundancy, after Bian, Huang, Cai, Yuan, Church, "On Attention Redundancy: A
Comprehensive Study", NAACL 2021. A RECONSTRUCTION (no official code; only the abstract was read): cluster the heads
by the distance between their attention maps on random tokens, keep one medoid per cluster. See docs/methods.md
("Redundancy (Bian et al. 2021)")."""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from headprune_bench.methods.attention import attention_maps
from headprune_bench.methods.base import HeadPruner, PruningContext, PruningResult
from headprune_bench.methods.heads import LAYOUTS, get_layout
from headprune_bench.methods.options import Interval, OptionError
from headprune_bench.methods.registry import register

DISTANCES = ("js", "cosine")
LINKAGES = ("average", "complete", "single", "weighted")
SOURCES = ("pretrained", "finetuned")

_CACHE: dict[tuple, torch.Tensor] = {}


def clear_cache() -> None:
    """Forget every cached redundancy matrix."""
    _CACHE.clear()



def random_token_batches(tokenizer_info: dict[str, Any], num_sequences: int, seq_length: int, batch_size: int,
                         generator: torch.Generator,
                         device: torch.device | str = "cpu") -> Iterator[dict[str, torch.Tensor]]:
    """Batches of ``[CLS] t_1 .. t_{T-2} [SEP]``, tokens uniform over the vocabulary minus the special ids: yields
    ``input_ids``, ``attention_mask`` (ones), ``token_type_ids`` (zeros), each ``[B, seq_length]``. Raises
    ValueError: no ``vocab_size``/``cls_token_id``/``sep_token_id``, ``seq_length < 3``, no ordinary token."""
    for key in ("vocab_size", "cls_token_id", "sep_token_id"):
        if tokenizer_info.get(key) is None:
            raise ValueError(f"redundancy: tokenizer_info has no {key!r}")
    if seq_length < 3:
        raise ValueError(f"redundancy: seq_length must be >= 3, got {seq_length}")
    special = {int(i) for i in tokenizer_info.get("special_ids") or []}
    special |= {int(tokenizer_info["cls_token_id"]), int(tokenizer_info["sep_token_id"])}
    if tokenizer_info.get("pad_token_id") is not None:
        special.add(int(tokenizer_info["pad_token_id"]))
    allowed = torch.tensor([i for i in range(int(tokenizer_info["vocab_size"])) if i not in special], dtype=torch.long)
    if allowed.numel() == 0:
        raise ValueError("redundancy: the vocabulary has no ordinary (non-special) token")
    done = 0
    while done < num_sequences:
        b = min(batch_size, num_sequences - done)
        body = allowed[torch.randint(0, allowed.numel(), (b, seq_length - 2), generator=generator)]
        ids = torch.cat([torch.full((b, 1), int(tokenizer_info["cls_token_id"])), body,
                         torch.full((b, 1), int(tokenizer_info["sep_token_id"]))], dim=1)
        yield {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device),
               "token_type_ids": torch.zeros_like(ids).to(device)}
        done += b



def pairwise_head_distances(attn: torch.Tensor, distance: str = "js",
                            query_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """Summed token-based distances between every pair of heads for one batch of attention maps.

    Args:
        attn: ``[L, B, H, T, T]`` attention probabilities (rows sum to 1).
        distance: ``"js"`` (Jensen-Shannon distance in bits) or ``"cosine"`` (``1 - cos``); both in [0, 1].
        query_mask: optional ``[B, T]``, 1 for the query rows to count (default: all rows).

    Returns:
        (``[N, N]`` float64 sums of ``d(A_a[i, :], A_b[i, :])`` over the counted rows, N = L*H layer-major,
        symmetric with a zero diagonal; number of rows counted).

    Raises:
        ValueError: unknown distance, or ``attn`` not 5-dimensional.
    """
    if distance not in DISTANCES:
        raise ValueError(f"redundancy: distance must be one of {DISTANCES}, got {distance!r}")
    if attn.dim() != 5:
        raise ValueError(f"redundancy: expected attention maps [L, B, H, T, T], got {list(attn.shape)}")
    num_layers, batch, num_heads, tokens, _ = attn.shape
    n = num_layers * num_heads
    rows = attn.permute(0, 2, 1, 3, 4).reshape(n, batch * tokens, tokens)
    if query_mask is not None:
        keep = query_mask.reshape(-1).bool().to(rows.device)
        rows = rows[:, keep]
    count = int(rows.shape[1])
    out = torch.zeros(n, n, dtype=torch.float64)
    if count == 0:
        return out, 0
    if distance == "cosine":
        rows = rows.double()
        unit = rows / rows.norm(dim=-1, keepdim=True).clamp_min(1e-300)
        cos = torch.einsum("art,brt->ab", unit, unit)
        out = (count - cos).cpu()
        out.fill_diagonal_(0.0)
        out = 0.5 * (out + out.T)
        return out.clamp_min(0.0), count
    # JS = (S(p) + S(q)) / 2 - S(m), S(x) = sum x log x, m = (p + q) / 2: float32 elementwise, float64 sums
    rows = rows.float()

    def neg_entropy(x: torch.Tensor) -> torch.Tensor:
        return (x * torch.log(x.clamp_min(1e-30))).sum(dim=-1)

    own = neg_entropy(rows)  # [N, R]
    for a in range(n - 1):
        m = rows[a][None] + rows[a + 1:]
        m.mul_(0.5)
        js = (0.5 * (own[a][None] + own[a + 1:]) - neg_entropy(m)) / math.log(2.0)
        dist = js.clamp_(0.0, 1.0).sqrt_().sum(dim=-1, dtype=torch.float64).cpu()
        out[a, a + 1:] = dist
        out[a + 1:, a] = dist
    return out, count


@torch.no_grad()
def redundancy_matrix(model: nn.Module, batches, distance: str = "js",
                      autocast=contextlib.nullcontext) -> torch.Tensor:
    """Mean token-based distance ``[N, N]`` (float64 in [0, 1], N = L*H layer-major, zero diagonal) between the
    attention maps of every pair of heads over ``batches``, padding queries skipped, in eval mode; the maps under
    ``autocast`` (:func:`attention_maps`), the distances in float32 and summed in float64. Raises ValueError:
    unknown distance, or the batches gave no token."""
    model.eval()
    total, rows = None, 0
    for batch in batches:
        attn = attention_maps(model, batch, autocast)
        summed, count = pairwise_head_distances(attn, distance, batch.get("attention_mask"))
        total = summed if total is None else total + summed
        rows += count
    if total is None or rows == 0:
        raise ValueError("redundancy: no tokens to compare attention maps on")
    matrix = total / rows
    matrix.fill_diagonal_(0.0)
    return matrix



def cluster_medoid_mask(matrix: torch.Tensor, num_keep: int, num_layers: int, num_heads: int,
                        linkage: str = "average") -> tuple[torch.Tensor, list[int]]:
    """Agglomerative clustering (scipy ``linkage`` method) of the heads on ``matrix`` (``[N, N]`` symmetric, N =
    L*H layer-major) into ``num_keep`` clusters; each cluster keeps its medoid (ties to the lower index).

    Returns:
        (``[L, H]`` float32 mask with exactly ``num_keep`` ones, cluster label of every head in flat order).

    Raises:
        ValueError: bad shape, ``num_keep`` outside ``[0, N]``, or unknown linkage.
    """
    from scipy.cluster.hierarchy import cut_tree
    from scipy.cluster.hierarchy import linkage as scipy_linkage
    from scipy.spatial.distance import squareform

    n = num_layers * num_heads
    if tuple(matrix.shape) != (n, n):
        raise ValueError(f"redundancy: distance matrix {list(matrix.shape)}, expected [{n}, {n}]")
    if not 0 <= num_keep <= n:
        raise ValueError(f"redundancy: cannot keep {num_keep} of {n} heads")
    if linkage not in LINKAGES:
        raise ValueError(f"redundancy: linkage must be one of {LINKAGES}, got {linkage!r}")
    mask = torch.zeros(n)
    if num_keep == 0:
        return mask.reshape(num_layers, num_heads), [0] * n
    if num_keep == n:
        return torch.ones(num_layers, num_heads), list(range(n))
    dist = matrix.detach().cpu().double().numpy().copy()
    dist = 0.5 * (dist + dist.T)
    dist[range(n), range(n)] = 0.0
    dist = dist.clip(min=0.0)
    tree = scipy_linkage(squareform(dist, checks=False), method=linkage)
    labels = [int(x) for x in cut_tree(tree, n_clusters=num_keep).reshape(-1)]
    for cluster in sorted(set(labels)):
        members = [i for i in range(n) if labels[i] == cluster]
        sums = [float(dist[i, members].sum()) for i in members]
        best = min(range(len(members)), key=lambda j: (sums[j], members[j]))
        mask[members[best]] = 1.0
    return mask.reshape(num_layers, num_heads), labels


ARCHITECTURE_FIELDS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                       "intermediate_size", "hidden_act", "layer_norm_eps", "max_position_embeddings",
                       "type_vocab_size", "position_embedding_type", "pruned_heads")


def _max_tokens(config) -> int | None:
    """The longest input (tokens) the model of ``config`` takes; None when unknown or unlimited."""
    if config is None:
        return None
    if getattr(config, "model_type", None) in LAYOUTS:
        return LAYOUTS[config.model_type].max_tokens(config)
    return getattr(config, "max_position_embeddings", None)


TASK_HEAD_MODULES = ("pooler",)
"""Modules of an encoder (``model.base_model``) that belong to the task head and stay out of :func:`model_digest`."""


def model_digest(model: nn.Module) -> str:
    """Hex digest (cache key) of the config's architecture fields and the encoder's tensors, task head left out:
    the same pre-trained encoder gives the same digest for every task."""
    base = get_layout(model).base
    h = hashlib.blake2b(digest_size=12)
    config = getattr(model, "config", None)
    fields = {k: getattr(config, k, None) for k in ARCHITECTURE_FIELDS}
    h.update(json.dumps(fields, sort_keys=True, default=str).encode())
    for name, tensor in base.state_dict().items():
        if name.split(".", 1)[0] in TASK_HEAD_MODULES:
            continue
        # BERT-family keys relative to embeddings/encoder, so their digests equal those of earlier records
        h.update(name.split(".", 1)[1].encode() if name.startswith(("embeddings.", "encoder.")) else name.encode())
        h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()



@register
class RedundancyPruner(HeadPruner):
    """Zero-shot pruning from attention redundancy on random tokens (Bian et al. 2021; RECONSTRUCTION, no official
    code): cluster heads by attention-map distance, keep one medoid per cluster.

    Options: num_sequences (100); seq_length (128, [CLS] and [SEP] included; at most the model's positions);
    distance ("js" or "cosine"); linkage ("average", "complete", "single" or "weighted"); model_source
    ("pretrained": ``context.load_pretrained()``, or "finetuned": the given model); batch_size (8 sequences);
    cache (True: reuse the in-process matrix cache, keyed by model digest, seed and options; :func:`clear_cache`).
    ``scores`` = each head's mean distance to the others, ``[L, H]`` (higher = less redundant). Raises OptionError
    at construction for a bad option.
    Precision: the attention maps under ``context.autocast`` (bf16 under ``--precision bf16``; the precision is
    part of the cache key), the distances in float32, their sums in float64.
    """

    name = "redundancy"
    report_order, report_color = 60, "#CC79A7"
    conformance_options = {"num_sequences": 6, "seq_length": 12, "batch_size": 3, "cache": False}
    constraints = {"distance": DISTANCES, "linkage": LINKAGES, "model_source": SOURCES,
                   "num_sequences": Interval(1, None), "seq_length": Interval(3, None), "batch_size": Interval(1, None)}
    summary = ("Bian et al. 2021 (reconstruction): cluster heads by attention-map distance on random tokens of the "
               "pre-trained model; keep one medoid per cluster (zero-shot)")
    defaults = {"num_sequences": 100, "seq_length": 128, "distance": "js", "linkage": "average",
                "model_source": "pretrained", "batch_size": 8, "cache": True}
    exact_budget = True
    needs_target = True
    reconstruction = True

    def check_setup(self, num_layers: int, num_heads: int, target_heads: int | None, model_config: Any) -> None:
        """Also raises OptionError: ``seq_length`` above the tokens the model's position embeddings take."""
        super().check_setup(num_layers, num_heads, target_heads, model_config)
        max_tokens = _max_tokens(model_config)
        if max_tokens is not None and self.options["seq_length"] > max_tokens:
            raise OptionError(f"{self.name}: option seq_length ({self.options['seq_length']}) exceeds the "
                              f"{max_tokens} tokens the model's position embeddings take")

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """The redundancy matrix of the source model, clustered into ``L*H - target_heads`` clusters.

        Raises:
            ValueError: no target or one outside ``[0, L*H]``; no pre-trained model; ``seq_length`` too long.
        """
        opts = self.options
        if context.target_heads is None:
            raise ValueError("method 'redundancy' needs a budget: give --budget heads:K, fraction:F or matched:METHOD")
        target, total = int(context.target_heads), context.total_heads
        if not 0 <= target <= total:
            raise ValueError(f"redundancy: cannot prune {target} of {total} heads")

        if opts["model_source"] == "pretrained":
            if context.load_pretrained is None:
                raise ValueError("redundancy: the context cannot load the pre-trained model (load_pretrained is None); "
                                 "use model_source='finetuned' to cluster the fine-tuned model's heads instead")
            source = context.load_pretrained()
        else:
            source = model
        max_tokens = _max_tokens(getattr(source, "config", None))
        if max_tokens is not None and opts["seq_length"] > max_tokens:
            raise ValueError(f"redundancy: seq_length={opts['seq_length']} exceeds the {max_tokens} tokens the "
                             f"model's position embeddings take")
        info = context.tokenizer_info
        digest = model_digest(source)
        key = (digest, int(context.seed), opts["num_sequences"], opts["seq_length"], opts["distance"],
               opts["batch_size"], int(info.get("vocab_size") or 0), tuple(sorted(info.get("special_ids") or [])),
               context.precision)
        hit = opts["cache"] and key in _CACHE
        if hit:
            matrix = _CACHE[key]
        else:
            device = next(source.parameters()).device
            batches = random_token_batches(info, opts["num_sequences"], opts["seq_length"], opts["batch_size"],
                                           context.generator(salt=3_000), device)
            was_training = source.training
            matrix = redundancy_matrix(source, batches, opts["distance"], context.autocast)
            if source is model and was_training:
                model.train()
            if opts["cache"]:
                _CACHE[key] = matrix
        context.log(f"redundancy: distance matrix {'from cache' if hit else 'computed'} ({digest[:8]})")
        keep = total - target
        mask, labels = cluster_medoid_mask(matrix, keep, context.num_layers, context.num_heads, opts["linkage"])
        n = total
        scores = (matrix.sum(dim=1) / max(n - 1, 1)).reshape(context.num_layers, context.num_heads).float()
        sizes = sorted((labels.count(c) for c in set(labels)), reverse=True) if keep else []
        trace = {"reconstruction": True, "model_source": opts["model_source"], "distance": opts["distance"],
                 "linkage": opts["linkage"], "clusters": keep, "cluster_sizes": sizes,
                 "cache": "hit" if hit else "miss",
                 "model_digest": digest, "num_sequences": opts["num_sequences"], "seq_length": opts["seq_length"],
                 "task_data_used": False}
        return PruningResult(mask=mask, scores=scores, trace=trace)
