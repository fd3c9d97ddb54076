"""Attention-head masking and physical head removal for encoders of the BERT, RoBERTa / XLM-R, ELECTRA,
DistilBERT and DeBERTa-v2/v3 families (one layout adapter each: :mod:`headprune_bench.methods.heads.families`).

transformers 5.x removed ``head_mask`` and ``prune_heads`` from BERT (PR #41076), so this module
provides both, with the semantics of protocol.md §9 and methods.md §0.1:

* A pruned head contributes exactly zero to the concatenated head outputs ``[B, T, H*d]`` that
  enter the attention output projection; the projection's bias stays.
* Masking there (:func:`apply_head_mask`) equals zeroing the head's value weights and bias
  (:func:`zero_value_heads`), and equals physically removing the head's Q/K/V rows and
  output-projection columns (:func:`remove_heads`).
* A layer may lose all its heads; its attention block then adds only the output-projection bias.

Head indices are always ORIGINAL indices ``0..H-1``; ``model.config.pruned_heads`` records the
physically removed heads as ``{str(layer): sorted list of original head indices}``, like
``config.pruned_heads`` in HF transformers 4.x.

Notation for shapes: L layers, H heads per layer (original), d head size, B batch, T tokens.

Modules: :mod:`headprune_bench.methods.heads.layout` (errors, the adapter interface :class:`HeadLayout`, mask <-> ``pruned_heads``
helpers), :mod:`headprune_bench.methods.heads.families` (one adapter per family, :func:`get_layout`),
:mod:`headprune_bench.methods.heads.masking` (masking hooks), :mod:`headprune_bench.methods.heads.removal` (in-place weight edits: zeroing,
removal; save/load; parameter counts), :mod:`headprune_bench.methods.heads.cost` (matmul FLOPs per example),
:mod:`headprune_bench.methods.heads.export` (a folder stock transformers loads, through
:mod:`headprune_bench.methods.heads.modeling_pruned`). Every public name is importable from ``headprune_bench.methods.heads``.
"""

from headprune_bench.methods.heads.cost import Flops, forward_flops, heads_kept
from headprune_bench.methods.heads.export import export_onnx, export_pruned
from headprune_bench.methods.heads.families import (
                                  LAYOUTS,
                                  BertLayout,
                                  DebertaV2Layout,
                                  DistilBertLayout,
                                  ElectraLayout,
                                  RobertaLayout,
                                  get_layout,
                                  layout_class,
                                  register_layout,
                                  supported_model_types,
)
from headprune_bench.methods.heads.layout import (
                                  EmptySelfAttention,
                                  HeadLayout,
                                  UnsupportedArchitectureError,
                                  mask_from_pruned_heads,
                                  pruned_heads_from_mask,
)
from headprune_bench.methods.heads.masking import HeadMask, apply_head_mask
from headprune_bench.methods.heads.removal import (
                                  closed_form_parameter_count,
                                  count_parameters,
                                  load_pruned,
                                  remove_heads,
                                  save_pruned,
                                  scale_value_heads,
                                  zero_value_heads,
)

__all__ = [
    "UnsupportedArchitectureError",
    "HeadLayout",
    "BertLayout",
    "RobertaLayout",
    "ElectraLayout",
    "DistilBertLayout",
    "DebertaV2Layout",
    "LAYOUTS",
    "register_layout",
    "layout_class",
    "supported_model_types",
    "get_layout",
    "HeadMask",
    "apply_head_mask",
    "zero_value_heads",
    "scale_value_heads",
    "remove_heads",
    "EmptySelfAttention",
    "save_pruned",
    "load_pruned",
    "export_pruned",
    "export_onnx",
    "Flops",
    "forward_flops",
    "heads_kept",
    "count_parameters",
    "closed_form_parameter_count",
    "mask_from_pruned_heads",
    "pruned_heads_from_mask",
]
