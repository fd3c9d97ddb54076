"""``bias``: FLAP's bias compensation for heads (An et al., AAAI 2024; official ``lib/prune.py`` ``compress``,
heads only): each pruned head's mean contribution to the attention output, over the calibration sample's
non-padding tokens of the unpruned model, is added to the output projection's bias."""
from __future__ import annotations

import torch
from torch import nn

from headprune_bench.methods.base import Batch, model_inputs
from headprune_bench.methods.heads import get_layout
from headprune_bench.methods.registry import register_repair
from headprune_bench.methods.repair import Repair, RepairContext, RepairResult, shared_value

MEANS_KEY = "dense_output_input_means"
"""``RepairContext.shared`` key of :func:`output_input_means` of the unpruned model."""


def output_input_means(model: nn.Module, batches: list[Batch]) -> tuple[dict[int, torch.Tensor], int]:
    """The mean ``mu_l`` (float64 ``[H*d]``) of what enters each layer's attention output projection (the
    concatenated head contexts u, before any gate), over the non-padding tokens of ``batches``, in one forward pass
    of ``model`` as it is (no mask), without gradients; and the number of tokens. Sums in float64."""
    layout = get_layout(model)
    sums: dict[int, torch.Tensor] = {}
    tokens = 0
    current: dict[str, torch.Tensor] = {}

    def hook(layer: int):
        def take(module, args):
            u = args[0][current["keep"]].double().sum(dim=0).cpu()
            sums[layer] = u if layer not in sums else sums[layer] + u
        return take

    handles = [layout.output_dense(layer).register_forward_pre_hook(hook(layer), prepend=True)
               for layer in range(layout.num_layers)]
    try:
        with torch.no_grad():
            for batch in batches:
                current["keep"] = batch["attention_mask"].bool()
                tokens += int(current["keep"].sum())
                model(**model_inputs(batch))
    finally:
        for handle in handles:
            handle.remove()
    if tokens == 0:
        raise ValueError("the calibration sample has no non-padding token")
    return {layer: total / tokens for layer, total in sums.items()}, tokens


@register_repair
class BiasRepair(Repair):
    """FLAP's bias compensation (methods-2024 R2, docs/methods.md "FLAP"): for each layer l with pruned heads P_l,
    ``b_O,l += W_O,l[:, cols(P_l)] mu_l[cols(P_l)]``, with ``mu_l`` the unpruned model's mean of the attention
    output projection's input over the calibration sample's non-padding tokens. Equivalent to mean-ablation
    (each pruned head's context replaced by its calibration mean). Added to the existing bias (the official code
    assigns it, with LLaMA's zero biases); layers that keep every head are untouched. Computed in float64, written
    in the bias's dtype."""

    name = "bias"
    summary = "FLAP's bias compensation: the pruned heads' mean output (calibration sample) folded into the bias"

    def repair(self, model: nn.Module, mask: torch.Tensor, context: RepairContext) -> RepairResult:
        """``output_biases`` of the layers that lose heads; trace: the tokens, the layers and the norm of each change.

        Raises:
            ValueError: the calibration sample is empty or has no non-padding token.
        """
        if not context.batches:
            raise ValueError("repair 'bias' needs a calibration sample; RepairContext.batches is empty")
        layout = get_layout(model)
        means, tokens = shared_value(context, MEANS_KEY, lambda: output_input_means(model, context.batches))
        biases, norms, failed = {}, {}, {}
        for layer in range(layout.num_layers):
            pruned = [h for h in range(layout.num_heads) if float(mask[layer, h]) == 0.0]
            if not pruned:
                continue
            dense = layout.output_dense(layer)
            if dense.bias is None:
                failed[layer] = "the output projection has no bias: left unrepaired"
                continue
            cols = torch.cat([torch.arange(h * layout.head_size, (h + 1) * layout.head_size) for h in pruned])
            weight = dense.weight.detach().double().cpu()
            delta = weight[:, cols] @ means[layer][cols]
            biases[layer] = (dense.bias.detach().double().cpu() + delta).to(dense.bias.dtype)
            norms[str(layer)] = round(float(delta.norm()), 6)
        trace = {"tokens": tokens, "sample": sum(int(b["input_ids"].shape[0]) for b in context.batches),
                 "layers": sorted(biases), "bias_change_norm": norms}
        return RepairResult(output_biases=biases, failed_layers=failed, trace=trace)
