"""Attention-head masking, physical removal, FLOP and parameter counts and export for encoders of the BERT,
RoBERTa / XLM-R, ELECTRA, DistilBERT and DeBERTa-v2/v3 families; every public name is importable from here.
Masking, zeroing the value heads and removal compute the same function. See docs/heads.md.
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
