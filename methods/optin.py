"""OPTIN's head ranking (Khaki, Plataniotis, "The Need for Speed: Pruning Transformers with One Recipe", ICLR
2024; Skhaki18/optin-transformer-pruning ``prune/head_pruning.py``, ``prune/loss_components.py``), heads only:
remove each head alone, score the damage on one train batch by manifold distillation of the later FFN outputs plus
a rescaled KL of the logits, and keep the most damaging heads. See docs/methods.md ("OPTIN (Khaki and
Plataniotis 2024)")."""
from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from headprune_bench.methods.base import HeadPruner, PruningContext, PruningResult, model_inputs
from headprune_bench.methods.heads import UnsupportedArchitectureError, apply_head_mask, get_layout
from headprune_bench.methods.options import Interval
from headprune_bench.methods.registry import register

MD_TOKENS = ("all", "non_padding")
SALT_BATCH, SALT_MD = 5_000, 5_001
MD_POSITIONS = 768  # official prune/loss_components.py: K = 768
TEMPERATURE = 4.0  # configs/language/mnli_bert.yaml: temp
LAMBDA = 10.0  # lambda_contribution
LAST_LAYER_FACTOR = 0.5  # head_fin_decay_val
METRIC_FACTOR = 0.5  # head_metric_decay
FFN_OUTPUT = {"bert": ("output", "dense"), "roberta": ("output", "dense"), "electra": ("output", "dense"),
              "deberta-v2": ("output", "dense"), "distilbert": ("ffn", "lin2")}
"""Per layout family, the path from an encoder layer to its FFN output projection (BERT's ``layer[i].output.dense``,
which the official code hooks)."""


def ffn_output_denses(model: nn.Module) -> list[nn.Linear]:
    """Each layer's FFN output projection (before dropout, residual and LayerNorm), layer by layer.

    Raises:
        UnsupportedArchitectureError: a family without a known FFN output projection."""
    layout = get_layout(model)
    path = FFN_OUTPUT.get(layout.family)
    found = []
    for block in layout.encoder_layers():
        for name in path or ():
            block = getattr(block, name, None)
        if path is None or not isinstance(block, nn.Linear):
            raise UnsupportedArchitectureError(f"optin: no FFN output projection known for the {layout.family!r} "
                                               f"family (known: {', '.join(FFN_OUTPUT)})")
        found.append(block)
    return found


def masked_pass(model: nn.Module, batch: dict, mask: torch.Tensor, ffn: list[nn.Linear],
                autocast) -> tuple[torch.Tensor, list]:
    """Logits ``[B, C]`` and the output ``[B, T, hidden]`` of each of ``ffn`` (:func:`ffn_output_denses`) under
    the ``[L, H]`` head mask ``mask``, in eval mode as the caller set it, without gradients."""
    outputs: list = [None] * len(ffn)
    handles = []
    for layer, module in enumerate(ffn):
        def hook(module, args, out, layer=layer):
            outputs[layer] = out.detach()
        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad(), apply_head_mask(model, mask), autocast():
            logits = model(**model_inputs(batch)).logits.detach()
    finally:
        for handle in handles:
            handle.remove()
    return logits, outputs


def manifold_distance(teacher: torch.Tensor, student: torch.Tensor, positions: torch.Tensor,
                      generator: torch.Generator) -> torch.Tensor:
    """OPTIN's MD (official ``manifold_Distillation``, aggregate "sum"): ``-sum (G_T - G_S)^2`` with ``G = f f^T``
    over 768 of ``positions`` (flat indices into the ``B*T`` tokens, drawn by one ``randperm`` of ``generator``;
    all of them, permuted, when fewer), ``f`` the L2-normalised token vectors; float64, <= 0."""
    drawn = positions[torch.randperm(positions.numel(), generator=generator)[:MD_POSITIONS]].to(teacher.device)
    f_t = F.normalize(teacher.reshape(-1, teacher.shape[-1])[drawn].double(), dim=-1)
    f_s = F.normalize(student.reshape(-1, student.shape[-1])[drawn].double(), dim=-1)
    diff = f_t @ f_t.T - f_s @ f_s.T
    return -(diff * diff).sum().cpu()


def kl_term(teacher_logits: torch.Tensor, student_logits: torch.Tensor) -> torch.Tensor:
    """Official ``KLDiv``: ``-clamp(T^2 sum_examples sum_c p_T (log p_T - log p_S), 0)``, T = 4, softmax of the
    logits themselves (not divided by T); float64, <= 0."""
    kl = F.kl_div(F.log_softmax(student_logits.double(), dim=1), F.log_softmax(teacher_logits.double(), dim=1),
                  reduction="sum", log_target=True) * (TEMPERATURE * TEMPERATURE)
    return -torch.clamp(kl, min=0).cpu()


def balance_kl(mmd: float, kl: float, scalings: list) -> tuple[float, str]:
    """The official balancing of the KL term against the MD term (``Prune``), as coded: when |MD| > |KL| and
    KL != 0, the factor ``10^int(log10(|MD|/|KL|) - log10(lambda))`` is appended to ``scalings`` and multiplies
    KL ("scaled"), except that a factor of 2^64 or more, which torch cannot multiply a tensor by, falls to the
    code's bare ``except`` and KL is multiplied by ``mean(scalings)``, the new factor included
    ("scaled_overflow"); otherwise KL * ``mean(scalings)``, 1 while empty ("mean": KL = 0; "mean_small_md":
    |MD| <= |KL|). Returns (the balanced KL, the branch)."""
    if mmd < kl and kl != 0:
        scaling = 10 ** int(math.log10(-mmd) - math.log10(-kl) - math.log10(LAMBDA))
        scalings.append(scaling)
        if scaling < 2 ** 64:
            return kl * scaling, "scaled"
        return kl * float(np.mean(scalings)), "scaled_overflow"
    mean = float(np.mean(scalings)) if scalings else 1.0
    return kl * mean, "mean" if mmd < kl else "mean_small_md"


@register
class OptinPruner(HeadPruner):
    """OPTIN's one-shot head ranking (official ``prune/head_pruning.py``, ``Prune``): for each head, one forward
    pass of a train batch without it, scored against the dense model.

    Options: batch_size (int, 128): examples of the one batch, drawn from the train split with the cell's seed (all
    when fewer); carry_over (bool, False): True reproduces the official code's mask that keeps the last head of
    every earlier layer removed while a layer is scored; md_tokens (str, "all" as coded, or "non_padding"): the
    token positions MD samples from. ``scores`` = minus OPTIN's float64 score ``[L, H]`` (>= 0, unitless; higher =
    more damage = keep). Prunes the K heads whose damage is smallest. Weights untouched. Raises OptionError for a
    bad option. Precision: forward passes under ``context.autocast``; MD, KL and the score in float64.
    """

    name = "optin"
    report_order, report_color = 75, "#EE3377"  # (Paul Tol's vibrant magenta)
    summary = "OPTIN (Khaki & Plataniotis 2024): keep heads whose removal moves later FFN outputs and logits most"
    defaults = {"batch_size": 128, "carry_over": False, "md_tokens": "all"}
    constraints = {"batch_size": Interval(1, None), "md_tokens": MD_TOKENS}
    conformance_options = {"batch_size": 16}
    in_methods_all = False  # not in `--methods all` until the lead adds it to the main job (name it explicitly)

    def ranks_once(self) -> bool:
        """True: the scores do not depend on the target."""
        return True

    def mask_at(self, result: PruningResult, target_heads: int) -> PruningResult:
        """The mask at ``target_heads`` from ``result``'s scores (:func:`keep_most_damaging`), same scores/trace."""
        if result.scores is None:
            raise ValueError(f"{self.name}: mask_at needs the scores of a prune result")
        return PruningResult(mask=keep_most_damaging(-result.scores, int(target_heads)), scores=result.scores,
                             trace=copy.deepcopy(result.trace))

    def sample(self, context: PruningContext) -> list[int]:
        """The batch: ``min(batch_size, n)`` train indices drawn without replacement with the cell's seed, in
        drawn order. Raises ValueError when the split is empty."""
        n = context.num_examples("train")
        if n == 0:
            raise ValueError(f"{self.name}: the split 'train' is empty")
        order = torch.randperm(n, generator=context.generator(salt=SALT_BATCH))
        return order[: min(self.options["batch_size"], n)].tolist()

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """Score all L*H heads (1 + L*H forward passes of one batch) and prune ``context.target_heads`` of them.

        Raises:
            ValueError: no target, a target outside ``[0, L*H]``, or an empty train split.
            UnsupportedArchitectureError: a family without a known FFN output projection.
        """
        target, total = self.require_target(context), context.total_heads
        model.eval()
        indices = self.sample(context)
        batch = next(iter(context.batches("train", batch_size=len(indices), indices=indices)))
        score, details = optin_scores(model, batch, context, self.options)
        trace = {"batch": len(indices), "tokens": int(batch["attention_mask"].sum()),
                 "positions": int(batch["attention_mask"].numel()), "md_positions": MD_POSITIONS,
                 "carry_over": self.options["carry_over"], "md_tokens": self.options["md_tokens"],
                 "forward_passes": 1 + total, **details,
                 "departures": [name for name, applies in (
                     ("one_head_from_dense_model", not self.options["carry_over"]),
                     ("md_non_padding_tokens", self.options["md_tokens"] == "non_padding"),
                     ("seeded_md_sampler", True), ("float64_losses", True), ("mask_at_W_O_input", True),
                     ("heads_only_rank_exact_k", True)) if applies]}
        return PruningResult(mask=keep_most_damaging(score, target), scores=-score, trace=trace)


def optin_scores(model: nn.Module, batch: dict, context: PruningContext,
                 options: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    """OPTIN's float64 score ``[L, H]`` (<= 0, more negative = more damage), heads in the official order (layer,
    then head), and the balancing's record: the factors appended and how often each branch ran."""
    num_layers, num_heads = context.num_layers, context.num_heads
    dense = torch.ones(num_layers, num_heads)
    ffn = ffn_output_denses(model)
    teacher_logits, teacher_outputs = masked_pass(model, batch, dense, ffn, context.autocast)
    flat_mask = batch["attention_mask"].reshape(-1)
    positions = (torch.arange(flat_mask.numel()) if options["md_tokens"] == "all"
                 else torch.nonzero(flat_mask.cpu()).flatten())
    generator = context.generator(salt=SALT_MD)
    head_factor = np.geomspace(1, 10, num_heads)[::-1]
    score = torch.zeros(num_layers, num_heads, dtype=torch.float64)
    scalings: list = []
    branches = {"scaled": 0, "scaled_overflow": 0, "mean": 0, "mean_small_md": 0}
    carried = dense.clone()
    last = num_layers - 1
    for layer in range(num_layers):
        for head in range(num_heads):
            mask = carried if options["carry_over"] else dense.clone()
            mask[layer] = 1.0
            mask[layer, head] = 0.0
            logits, outputs = masked_pass(model, batch, mask, ffn, context.autocast)
            later = [last] if layer == last else range(layer + 1, num_layers)
            mmd = sum(float(manifold_distance(teacher_outputs[i], outputs[i], positions, generator)) for i in later)
            kl, branch = balance_kl(mmd, float(kl_term(teacher_logits, logits)), scalings)
            branches[branch] += 1
            value = mmd + kl
            if layer == last:
                value *= LAST_LAYER_FACTOR
            score[layer, head] = value * float(head_factor[head]) * METRIC_FACTOR
        context.log(f"optin: layer {layer + 1} of {num_layers} scored")
    return score, {"kl_scalings": [int(s) for s in scalings], "balancing": branches}


def keep_most_damaging(score: torch.Tensor, target_heads: int) -> torch.Tensor:
    """Float32 ``[L, H]`` mask: rank ``score`` (``[L, H]``, OPTIN's sign: more negative = more damage) ascending
    by (score, layer, head), the official priority-queue order, keep the first ``L*H - target_heads`` and prune
    the rest. Raises ValueError for a target outside ``[0, L*H]``."""
    num_layers, num_heads = score.shape
    total = num_layers * num_heads
    if not 0 <= target_heads <= total:
        raise ValueError(f"cannot prune {target_heads} heads: expected 0 <= k <= {total}")
    flat = score.detach().cpu().double().flatten().tolist()
    order = sorted(range(total), key=lambda i: (flat[i], i))
    mask = torch.ones(total)
    mask[order[total - target_heads:]] = 0.0
    return mask.view(num_layers, num_heads)
