"""Attention-head pruning methods behind one interface.

Public entry points::

    from headprune_bench.methods import HeadPruner, PruningContext, PruningResult, register, create, available_methods
    from headprune_bench.methods.heads import apply_head_mask, remove_heads        # head masks and physical removal
    from headprune_bench.methods.conformance import check_pruner                    # validate a new method in your own tests

This package knows torch and transformers models; it knows nothing about GLUE files, seeds of a run, result
files or the CLI (those live in ``benchmark``).
"""
from headprune_bench.methods.base import HeadPruner, PruningContext, PruningResult, check_mask, lowest_k_mask
from headprune_bench.methods.options import Interval, OptionError
from headprune_bench.methods.registry import UnknownMethodError, available_methods, create, get_method_class, register

__all__ = [
    "HeadPruner",
    "Interval",
    "OptionError",
    "PruningContext",
    "PruningResult",
    "UnknownMethodError",
    "available_methods",
    "check_mask",
    "create",
    "get_method_class",
    "lowest_k_mask",
    "register",
]
