"""A run's configuration: presets, budgets and the hashed experiment (:mod:`.presets`); the checked options of
one ``bench run`` (:mod:`.run`)."""
from __future__ import annotations

from headprune_bench.benchmark.config.presets import (
    PRECISIONS,
    PRESETS,
    PROTOCOL,
    Budget,
    ConfigError,
    Experiment,
    Preset,
    TrainConfig,
    config_hash,
    diff_dicts,
    get_preset,
    parse_budget,
    parse_duration,
)

__all__ = [
    "ConfigError",
    "TrainConfig",
    "Budget",
    "parse_budget",
    "Preset",
    "PRESETS",
    "get_preset",
    "PRECISIONS",
    "PROTOCOL",
    "Experiment",
    "config_hash",
    "diff_dicts",
    "parse_duration",
]
