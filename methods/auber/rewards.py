"""AUBER's rewards: the mini-dev metric of the current model with a head mask, forward only and in-process (the
official code runs ``run_glue.py`` per reward, ``src/lib/reward.py``). See docs/methods.md ("AUBER (Lee et al.
2020)", "Rewards")."""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from headprune_bench.methods.base import model_inputs
from headprune_bench.methods.heads import apply_head_mask, get_layout

MetricFn = Callable[[np.ndarray, np.ndarray], float]
"""``metric(predictions [N] int, labels [N] int) -> float``: the task's primary metric."""


def length_sorted_batches(batches: Callable[..., Iterable[dict]], indices: Sequence[int], batch_size: int,
                          split: str = "train") -> list[dict[str, torch.Tensor]]:
    """The examples ``indices`` of ``split`` as dynamically padded batches (tensors on the context's device), sorted
    by length (stable); ``batches`` is the context's ``batches(split, batch_size=, indices=)``."""
    indices = [int(i) for i in indices]
    if not indices:
        return []
    lengths: list[int] = []
    for batch in batches(split, batch_size=max(batch_size, 256), indices=indices):
        lengths.extend(batch["attention_mask"].sum(dim=1).tolist())
    order = np.argsort(np.asarray(lengths), kind="stable")
    sorted_indices = [indices[i] for i in order]
    return [{k: v for k, v in b.items()} for b in batches(split, batch_size=batch_size, indices=sorted_indices)]


def layer_mask(base_mask: torch.Tensor, layer: int, pruned: Iterable[int]) -> torch.Tensor:
    """``base_mask`` with row ``layer`` = 1 except 0 at ``pruned`` (float32 ``[L, H]``, a copy)."""
    mask = base_mask.detach().to("cpu", torch.float32).clone()
    mask[layer] = 1.0
    heads = sorted(int(h) for h in pruned)
    if heads:
        mask[layer, heads] = 0.0
    return mask


class Scorer:
    """Scores pruned sets of one layer's heads on fixed mini-dev batches, given the heads already pruned.

    Args:
        model: a sequence classifier of a supported family (put in eval mode here).
        batches: mini-dev batches (``input_ids``, ``attention_mask``, ``token_type_ids``, ``labels``).
        base_mask: ``[L, H]`` heads already pruned in the other layers (row ``layer`` is ignored).
        autocast: the forward passes' context (``PruningContext.autocast``: bf16 under ``--precision bf16``).

    ``evals`` counts the pruned sets evaluated (forwards over the mini-dev), ``seconds`` their time.
    """

    def __init__(self, model: nn.Module, batches: list[dict[str, torch.Tensor]], layer: int,
                 base_mask: torch.Tensor, metric: MetricFn, autocast=contextlib.nullcontext) -> None:
        self.model = model.eval()
        self.autocast = autocast
        self.layout = get_layout(model)
        self.batches = batches
        self.layer = int(layer)
        self.base_mask = base_mask.detach().to("cpu", torch.float32).clone()
        self.metric = metric
        self.labels = np.concatenate([b["labels"].cpu().numpy() for b in batches]) if batches else np.zeros(0, int)
        self.evals = 0
        self.seconds = 0.0

    def logits(self, pruned: Iterable[int]) -> torch.Tensor:
        """Logits ``[N, C]`` of the mini-dev (in batch order) with ``pruned`` heads of the layer masked."""
        raise NotImplementedError

    def score(self, pruned: Iterable[int]) -> float:
        """The metric (e.g. accuracy in [0, 1]) of the mini-dev with the layer's ``pruned`` heads masked."""
        start = time.perf_counter()
        preds = self.logits(pruned).argmax(dim=-1).cpu().numpy()
        value = float(self.metric(preds, self.labels))
        self.evals += 1
        self.seconds += time.perf_counter() - start
        return value

    def score_many(self, sets: Sequence[Iterable[int]]) -> list[float]:
        """:meth:`score` of each pruned set, in order."""
        return [self.score(s) for s in sets]


class NaiveScorer(Scorer):
    """A full forward of the masked model per reward."""

    @torch.inference_mode()
    def logits(self, pruned: Iterable[int]) -> torch.Tensor:
        """Logits ``[N, C]`` from a full masked forward per batch."""
        mask = layer_mask(self.base_mask, self.layer, pruned)
        device = next(self.model.parameters()).device
        out = []
        with apply_head_mask(self.model, mask.to(device)), self.autocast():
            for batch in self.batches:
                out.append(self.model(**model_inputs(batch)).logits)
        return torch.cat(out) if out else torch.zeros(0)


class FastScorerUnsupported(RuntimeError):
    """The model is not one :class:`FastScorer` knows (the caller falls back to :class:`NaiveScorer`)."""


class _Captured(Exception):
    """Stops the forward pass once layer ``l``'s inputs are captured."""


class FastScorer(Scorer):
    """Scoring from cached inputs and per-head outputs of layer ``l``; a change to the weights invalidates it.

    Args (besides :class:`Scorer`'s):
        cls_only: the last layer for the [CLS] position only (eager or SDPA attention; off otherwise).
        check: compare with a full forward on the first batch within :meth:`rounding_tolerance`.

    Raises:
        FastScorerUnsupported: not a BERT-family classifier with a pooler and ``.classifier``, a decoder, or a
            failed check.
    """

    def __init__(self, model: nn.Module, batches: list[dict[str, torch.Tensor]], layer: int,
                 base_mask: torch.Tensor, metric: MetricFn, autocast=contextlib.nullcontext, *, cls_only: bool = True,
                 check: bool = True) -> None:
        super().__init__(model, batches, layer, base_mask, metric, autocast)
        start = time.perf_counter()
        layout = self.layout
        base = layout.base
        config = layout.config
        if getattr(base, "pooler", None) is None or not isinstance(getattr(model, "classifier", None), nn.Module):
            raise FastScorerUnsupported("fast rewards need an encoder with a pooler and a .classifier "
                                        "(BertForSequenceClassification); this model scores with full forward passes")
        if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
            raise FastScorerUnsupported("fast rewards support encoder (non-decoder) BERT models only")
        if layout.is_pruned():
            raise FastScorerUnsupported("fast rewards need the unpruned model (heads are masked, not removed)")
        self.num_layers, self.num_heads, self.head_size = layout.num_layers, layout.num_heads, layout.head_size
        self.layers = layout.encoder_layers()
        self.interface = None
        if cls_only:
            self.interface = _attention_interface(config)
        self.cls_only = self.interface is not None
        self.cache: list[dict[str, Any]] = []
        with torch.inference_mode(), autocast():
            capture_mask = layer_mask(self.base_mask, self.layer, ())
            device = next(model.parameters()).device
            with apply_head_mask(model, capture_mask.to(device)):
                inputs = [self._capture(b) for b in batches]
            last = self.num_layers - 1
            for hidden, attn in inputs:
                if self.layer == last and self.cls_only:
                    ctx, resid = self._cls_attention(self.layers[self.layer], hidden, attn), hidden[:, :1]
                else:
                    ctx, resid = self.layers[self.layer].attention.self(hidden, attention_mask=attn)[0], hidden
                self.cache.append({"ctx": ctx, "resid": resid, "attn": attn})
        self.build_seconds = time.perf_counter() - start
        if check and batches:
            self._self_check()

    # ------------------------------------------------------------------ construction helpers

    def _capture(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Any]:
        """(hidden states entering layer ``l``, the attention-mask argument the encoder passes to it)."""
        store: dict[str, Any] = {}

        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            attn = args[1] if len(args) > 1 else kwargs.get("attention_mask")
            store["hidden"], store["attn"] = hidden, attn
            raise _Captured

        handle = self.layers[self.layer].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            self.model(**model_inputs(batch))
        except _Captured:
            pass
        finally:
            handle.remove()
        if "hidden" not in store:
            raise FastScorerUnsupported(f"layer {self.layer} was not called by the model's forward")
        return store["hidden"], store["attn"]

    def _self_check(self) -> None:
        batch = self.batches[0]
        mask = layer_mask(self.base_mask, self.layer, ())
        device = next(self.model.parameters()).device
        with torch.inference_mode(), apply_head_mask(self.model, mask.to(device)), self.autocast():
            full = self.model(**model_inputs(batch)).logits
        with torch.inference_mode(), self.autocast():
            fast = self._batch_logits(0, mask)
        diff = float((full.double() - fast.double()).abs().max()) if full.numel() else 0.0
        tol = self.rounding_tolerance(full, batch["input_ids"].shape[-1])
        if not diff <= tol:
            raise FastScorerUnsupported(f"fast rewards differ from a full forward by {diff:.3g} on layer {self.layer} "
                                        f"(rounding allows {tol:.3g})")

    def rounding_tolerance(self, logits: torch.Tensor, tokens: int) -> float:
        """Largest rounding gap between fast and full logits, ``2 * 8 * u * sqrt(N) * max(1, max|logit|)``: ``u``
        the dtype's unit roundoff, ``N`` the summed reduction lengths (Higham & Mary 2019)."""
        config = self.layout.config
        h, i = config.hidden_size, config.intermediate_size
        terms = 4 * h + self.num_layers * (7 * h + i + self.head_size + 2 * tokens)
        u = float(torch.finfo(logits.dtype).eps) / 2
        scale = max(1.0, float(logits.detach().abs().max())) if logits.numel() else 1.0
        return 2 * 8 * u * math.sqrt(terms) * scale

    # ------------------------------------------------------------------ the layer pieces

    def _gated_tail(self, layer_module: nn.Module, ctx: torch.Tensor, resid: torch.Tensor,
                    gate: torch.Tensor) -> torch.Tensor:
        """Head gate before W_O, then W_O + residual + LayerNorm and the feed-forward."""
        shape = ctx.shape
        gated = (ctx.reshape(*shape[:-1], self.num_heads, self.head_size) * gate[:, None]).reshape(shape)
        attention_output = layer_module.attention.output(gated, resid)
        return layer_module.feed_forward_chunk(attention_output)

    def _cls_attention(self, layer_module: nn.Module, hidden: torch.Tensor, attn: Any) -> torch.Tensor:
        """Self-attention output ``[B, 1, H*d]`` of the [CLS] query over every key."""
        sa = layer_module.attention.self
        batch, tokens, _ = hidden.shape
        heads, size = self.num_heads, self.head_size
        query = sa.query(hidden[:, :1]).view(batch, 1, heads, size).transpose(1, 2)
        key = sa.key(hidden).view(batch, tokens, heads, size).transpose(1, 2)
        value = sa.value(hidden).view(batch, tokens, heads, size).transpose(1, 2)
        mask = attn[:, :, :1, :] if isinstance(attn, torch.Tensor) and attn.dim() == 4 else attn
        out, _ = self.interface(sa, query, key, value, mask, dropout=0.0,
                                scaling=getattr(sa, "scaling", size ** -0.5))
        return out.reshape(batch, 1, heads * size)

    def _batch_logits(self, index: int, mask: torch.Tensor) -> torch.Tensor:
        entry = self.cache[index]
        ctx, resid, attn = entry["ctx"], entry["resid"], entry["attn"]
        gates = mask.to(device=ctx.device, dtype=ctx.dtype)
        last = self.num_layers - 1
        hidden = self._gated_tail(self.layers[self.layer], ctx, resid, gates[self.layer])
        for j in range(self.layer + 1, self.num_layers):
            module = self.layers[j]
            if j == last and self.cls_only:
                ctx_j, resid_j = self._cls_attention(module, hidden, attn), hidden[:, :1]
            else:
                ctx_j, resid_j = module.attention.self(hidden, attention_mask=attn)[0], hidden
            hidden = self._gated_tail(module, ctx_j, resid_j, gates[j])
        pooled = self.layout.base.pooler(hidden)
        dropout = getattr(self.model, "dropout", None)
        if isinstance(dropout, nn.Module):
            pooled = dropout(pooled)
        return self.model.classifier(pooled)

    @torch.inference_mode()
    def logits(self, pruned: Iterable[int]) -> torch.Tensor:
        """Logits ``[N, C]``, equal to :class:`NaiveScorer`'s up to float rounding."""
        mask = layer_mask(self.base_mask, self.layer, pruned)
        with self.autocast():
            out = [self._batch_logits(i, mask) for i in range(len(self.cache))]
        return torch.cat(out) if out else torch.zeros(0)


def _attention_interface(config) -> Callable | None:
    """The eager or SDPA attention function for the [CLS]-only last layer; None for other implementations."""
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if impl not in ("eager", "sdpa"):
        return None
    try:
        from transformers.models.bert.modeling_bert import eager_attention_forward
    except ImportError:  # pragma: no cover - other transformers layouts
        return None
    if impl == "eager":
        return eager_attention_forward
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        return ALL_ATTENTION_FUNCTIONS.get_interface(impl, eager_attention_forward)
    except (ImportError, KeyError, AttributeError):  # pragma: no cover
        return None


class Memo:
    """The score of each pruned set within one layer (the code's ``transitions``), from ``scorer.score_many``;
    ``enabled=False`` evaluates every request. ``evals``: sets evaluated; ``hits``: requests answered from the memo.
    """

    def __init__(self, scorer, enabled: bool = True) -> None:
        self.scorer = scorer
        self.enabled = enabled
        self.table: dict[frozenset, float] = {}
        self.evals = 0
        self.hits = 0

    def score_many(self, sets: Sequence[Iterable[int]]) -> list[float]:
        """The score of each pruned set; the sets not seen before are evaluated in one ``scorer.score_many`` call."""
        keys = [frozenset(int(h) for h in s) for s in sets]
        if not self.enabled:
            self.evals += len(keys)
            return [float(v) for v in self.scorer.score_many(keys)]
        missing = list(dict.fromkeys(k for k in keys if k not in self.table))
        if missing:
            for key, value in zip(missing, self.scorer.score_many(missing)):
                self.table[key] = float(value)
            self.evals += len(missing)
        self.hits += len(keys) - len(missing)
        return [self.table[k] for k in keys]

    def score(self, pruned: Iterable[int]) -> float:
        """The score of one pruned set (:meth:`score_many`)."""
        return self.score_many([pruned])[0]
