"""Attention-head pruning methods behind one interface (:class:`HeadPruner`); head masks and removal in
:mod:`headprune_bench.methods.heads`, the conformance check in :mod:`headprune_bench.methods.conformance`.
See docs/heads.md."""
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
