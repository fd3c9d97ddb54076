"""Run configuration: presets, budgets, and the hashed experiment settings of a run folder (``DIR/run.json``).
See docs/choices.md ("Run configuration")."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A bad option value or a run folder whose configuration differs from the one asked for."""


@dataclass
class TrainConfig:
    """Fine-tuning hyper-parameters (one object, hashed into the run configuration; used by
    :func:`headprune_bench.benchmark.training.fine_tune`, which also exports it)."""

    lr: float = 2e-5
    """AdamW learning rate (peak of the linear warm-up / decay schedule)."""
    batch_size: int = 32
    """Examples per step."""
    epochs: float = 3.0
    """Passes over the train split; fractional values give a part of an epoch's steps."""
    # early stopping
    early_stopping: bool = False
    """Keep the best state by a score on a train-derived split, and stop after ``patience`` evaluations without
    improvement."""
    patience: int = 1
    """Evaluations without improvement before stopping."""
    evals_per_epoch: int = 1
    """Early-stopping evaluations per epoch (and one at the last step)."""
    # optimiser details
    warmup_ratio: float = 0.1
    """Share of the steps with a linear warm-up."""
    weight_decay: float = 0.01
    """AdamW weight decay (not applied to biases and LayerNorm weights)."""
    max_grad_norm: float = 1.0
    """Gradient clipping (L2 norm over all parameters)."""


@dataclass(frozen=True)
class Budget:
    """How many heads each method prunes (docs/protocol.md §3).

    kind: ``"heads"`` (value = K heads), ``"fraction"`` (value = F of all heads, rounded to the nearest
    integer), ``"matched"`` (value = the budget-setting method; every other method prunes the number of heads
    that method pruned on the same (task, seed)).
    """

    kind: str
    value: Any

    @property
    def label(self) -> str:
        """The budget as the CLI writes it (``fraction:0.3``); the budget spec of its cells' keys."""
        return f"{self.kind}:{self.value}"

    def target(self, total_heads: int) -> int | None:
        """The target count for ``heads``/``fraction``; ``None`` for ``matched`` (known only at run time).

        Raises:
            ConfigError: K or F out of range for this model.
        """
        if self.kind == "heads":
            if not 0 <= self.value <= total_heads:
                raise ConfigError(f"--budget {self.label}: the model has {total_heads} heads; K must be in "
                                  f"0..{total_heads}")
            return int(self.value)
        if self.kind == "fraction":
            return int(round(self.value * total_heads))
        return None


def parse_budget(text: str) -> Budget:
    """Parse ``heads:K``, ``fraction:F`` (0 <= F <= 1) or ``matched:METHOD``.

    Raises:
        ConfigError: naming the option and the expected forms.
    """
    m = re.fullmatch(r"(heads|fraction|matched):(.+)", text.strip())
    if not m:
        raise ConfigError(f"--budget {text!r}: expected heads:K, fraction:F or matched:METHOD")
    kind, raw = m.groups()
    if kind == "heads":
        if not (raw.isascii() and raw.isdigit()):
            raise ConfigError(f"--budget {text!r}: K must be a non-negative integer")
        return Budget("heads", int(raw))
    if kind == "fraction":
        try:
            if not raw.isascii():  # float() reads other scripts' digits: ASCII only, as --seeds
                raise ValueError(raw)
            value = float(raw)
        except ValueError:
            raise ConfigError(f"--budget {text!r}: F must be a number in [0, 1]") from None
        if not 0.0 <= value <= 1.0:  # (NaN too)
            raise ConfigError(f"--budget {text!r}: F must be in [0, 1]")
        return Budget("fraction", value)
    return Budget("matched", raw)


def parse_budgets(text: str, sweep: str | None = None) -> list[Budget]:
    """The levels of ``--budget``: one budget, or a comma-separated list whose bare items continue the kind before
    them (``fraction:0.1,0.5,0.9``, ``heads:8,16``, ``fraction:0.3,0.5,matched:auber``); ``sweep`` stands for the
    preset's levels (``sweep``, a list in this syntax). At most one ``matched:`` item.

    Raises:
        ConfigError: an empty item, an item that is not a level, a level given twice, a second ``matched:``, or
            ``sweep`` without preset levels; the message quotes the item.
    """
    items = [item.strip() for item in text.split(",")]
    levels: list[Budget] = []
    kind = None
    for position, item in enumerate(items, 1):
        if not item:
            raise ConfigError(f"--budget {text!r}: item {position} is empty; expected a comma-separated list such "
                              f"as fraction:0.1,0.5,0.9")
        if item == "sweep":
            if not sweep:
                raise ConfigError(f"--budget {text!r}: this preset has no sweep levels; list them, e.g. "
                                  f"fraction:0.1,0.3,0.5,0.7,0.9")
            new = parse_budgets(sweep)
        elif ":" not in item and kind in ("heads", "fraction"):
            new = [parse_budget(f"{kind}:{item}")]
        elif ":" not in item:
            raise ConfigError(f"--budget {text!r}: item {item!r} has no kind; write heads:K, fraction:F or "
                              f"matched:METHOD (a bare number continues a heads: or fraction: item)")
        else:
            new = [parse_budget(item)]
        for budget in new:
            if budget in levels:
                raise ConfigError(f"--budget {text!r}: level {budget.label} is given twice")
            if budget.kind == "matched" and any(b.kind == "matched" for b in levels):
                raise ConfigError(f"--budget {text!r}: {budget.label}: at most one matched: level")
            levels.append(budget)
        kind = levels[-1].kind
    return levels


def check_levels(levels: list[Budget], total_heads: int) -> None:
    """Refuse fixed levels out of range for a model of ``total_heads`` heads, or two that prune the same count.

    Raises:
        ConfigError: naming the ``--budget`` items.
    """
    counts: dict[int, str] = {}
    for budget in levels:
        count = budget.target(total_heads)
        if count is None:
            continue
        if count in counts:
            raise ConfigError(f"--budget: {counts[count]} and {budget.label} both prune {count} of the model's "
                              f"{total_heads} heads; give each level once")
        counts[count] = budget.label


@dataclass
class Preset:
    """A named bundle of defaults for ``bench run`` (every field can be overridden on the command line)."""

    name: str
    description: str
    model: str
    seeds: list[int]
    budget: str
    train: TrainConfig
    recover: TrainConfig
    max_length: int = 128
    # per-method option defaults of this preset (CLI --option values win); they size costly methods for the preset
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_train_examples: int = 0  # 0 = the whole train split
    max_dev_examples: int = 0  # 0 = the whole dev split
    mini_dev_fraction: float = 0.25
    sweep: str = ""  # the levels of --budget sweep (docs/running.md, "Curves")


PRESETS: dict[str, Preset] = {
    "paper": Preset(
        name="paper",
        description=("bert-base-cased, full data, lr 2e-5, batch 32, len 128, 3 epochs, 10 seeds, matched:auber "
                     "(for a GPU)"),
        model="bert-base-cased",
        seeds=list(range(10)),
        budget="matched:auber",  # the AUBER paper's protocol: every method prunes as many heads as AUBER
        sweep="fraction:0.1,0.3,0.5,0.7,0.9",
        train=TrainConfig(lr=2e-5, batch_size=32, epochs=3.0),
        recover=TrainConfig(lr=2e-5, batch_size=32, epochs=3.0, early_stopping=True, evals_per_epoch=2, patience=2),
    ),
    "quick": Preset(
        name="quick",
        description=("packaged MiniLM-L6, 4 tasks, 3 seeds, whole train splits, prune+recover, AUBER at a CPU sizing "
                     "(its fair sizing: the paper preset on a GPU) (CPU: hours; see README)"),
        model="minilm-l6",
        seeds=[0, 1, 2],
        budget="fraction:0.3",
        sweep="fraction:0.1,0.3,0.5,0.7,0.9",
        train=TrainConfig(lr=5e-5, batch_size=32, epochs=3.0),
        recover=TrainConfig(lr=5e-5, batch_size=32, epochs=1.0, early_stopping=True, evals_per_epoch=2, patience=2),
        max_length=128,
        # the whole train split (why: docs/choices.md, "The quick preset")
        max_train_examples=0,
        # CPU sizing of the costly methods, with the measurements behind each value: docs/methods.md ("Presets")
        method_options={
            "auber": {"episodes": 150, "minidev_max_examples": 256, "minitrain_max_examples": 500,
                      "layer_finetune_epochs": 1.0, "layer_finetune_lr": 2e-5, "final_epochs": 1.0},
            "voita": {"epochs": 1.0, "search_runs": 3, "gate_lr": 0.4},
            "dsp": {"epochs": 1.0},
            "redundancy": {"num_sequences": 32, "seq_length": 64},
            **{name: {"sample_size": 1024} for name in ("kwon", "kwon-search", "kwon-rearrange")},
        },
    ),
    "smoke": Preset(
        name="smoke",
        description="packaged MiniLM-L6, at most 64 train / 64 dev examples per task, 1 seed (tests, < 3 minutes)",
        model="minilm-l6",
        seeds=[0],
        budget="fraction:0.3",
        sweep="fraction:0.1,0.5,0.9",
        train=TrainConfig(lr=5e-5, batch_size=16, epochs=1.0),
        recover=TrainConfig(lr=5e-5, batch_size=16, epochs=1.0, early_stopping=True, evals_per_epoch=1, patience=1),
        max_length=64,
        max_train_examples=64,
        max_dev_examples=64,
        method_options={
            "auber": {"episodes": 4, "minidev_max_examples": 16, "layer_finetune_epochs": 1.0, "final_epochs": 1.0},
            "voita": {"epochs": 1.0, "search_runs": 2},
            "dsp": {"epochs": 1.0},
            "redundancy": {"num_sequences": 8, "seq_length": 32},
            **{name: {"sample_size": 32, "batch_size": 16} for name in ("kwon", "kwon-search", "kwon-rearrange")},
        },
    ),
}


def get_preset(name: str) -> Preset:
    """A copy of the preset called ``name``.

    Raises:
        ConfigError: an unknown preset; the message lists the known ones.
    """
    if name not in PRESETS:
        raise ConfigError(f"--preset {name!r}: unknown preset; known: {', '.join(PRESETS)}")
    return dataclasses.replace(PRESETS[name])


PRECISIONS = ("fp32", "bf16")
"""``--precision`` values: ``fp32`` (the default: every operation in float32) or ``bf16`` (bfloat16 autocast of
the forward passes of fine-tuning and evaluation; weights, gradients, optimiser state and the loss stay float32;
:func:`headprune_bench.benchmark.training.autocast`)."""


PROTOCOL = 2
"""The version of the protocol (docs/protocol.md) a run folder follows, part of its experiment: 2 applies every
method's mask to the same base weights and evaluates a method's own weights as the ``own-fine-tuning`` row; 1
(``run.json`` without ``protocol``) evaluated a re-training method on its own weights in ``prune-only``. A folder
of another protocol is refused, never mixed."""


@dataclass
class Experiment:
    """The settings that define what a cell's number means; hashed and stored in ``DIR/run.json``."""

    model: str
    model_revision: str
    data_source: str
    data_hashes: dict[str, str]
    train: dict[str, Any]
    recover: dict[str, Any]
    max_length: int
    max_train_examples: int
    max_dev_examples: int
    mini_dev_fraction: float
    device_type: str
    subsample_seed: int = 12345
    schema: int = 1
    protocol: int = PROTOCOL
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The settings as the JSON object of ``run.json``'s ``experiment``."""
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """The hash of the settings, data file hashes left out: processes that share a folder with different
        tasks (each knowing only its own files) compute the same digest. The files are checked one by one against
        ``run.json`` and every record carries them (``provenance.data_hashes``). A local data folder enters as
        ``local``, not its path (:func:`comparable_settings`)."""
        return config_hash(comparable_settings(self.as_dict()))


def comparable_settings(experiment: dict[str, Any]) -> dict[str, Any]:
    """The settings of a ``run.json`` experiment that must agree for two runs to share a folder: all but the data
    hashes (compared file by file) and with a local ``data_source`` reduced to ``local``, since the same files
    moved, or on another machine, are the same data (their hashes say so); ``hub:...`` stays as it is."""
    out = {k: v for k, v in experiment.items() if k != "data_hashes"}
    source = out.get("data_source")
    if isinstance(source, str) and not source.startswith("hub:"):
        out["data_source"] = "local"
    return out


def config_hash(obj: Any) -> str:
    """A short stable hash (sha256 of canonical JSON, 12 hex digits)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def diff_dicts(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Human-readable differences between two nested dicts (``key: old -> new``)."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += diff_dicts(a, b, prefix=f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return out


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def parse_duration(text: str) -> float:
    """Seconds of ``--time-limit``: ``2h30m``, ``90m``, ``1.5h``, ``45m30s``, ``5400s`` or ``5400`` (seconds).

    Raises:
        ConfigError: anything else, or a duration of 0.
    """
    clean = text.strip().lower()
    match = _DURATION.fullmatch(clean)
    if not clean or match is None or not any(match.groups()) or re.search(r"[hm][\d.]+$", clean):
        raise ConfigError(f"--time-limit {text!r}: expected a duration such as 2h30m, 90m, 1.5h or 5400 (seconds)")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ConfigError(f"--time-limit {text!r}: expected a duration > 0")
    return total
