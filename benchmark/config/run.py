"""What ``bench run`` is asked to do: :class:`RunConfig`, resolved from the CLI's strings over a preset by
:func:`make_run_config`, which checks every option (methods, tasks, seeds, budget, method options) before any
model loads or trains.
"""
from __future__ import annotations

import importlib.util
import os
import re
import socket
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headprune_bench import methods
from headprune_bench.benchmark import models, tasks
from headprune_bench.benchmark.config.presets import (
    PRECISIONS,
    Budget,
    ConfigError,
    Preset,
    get_preset,
    parse_budgets,
    parse_duration,
)
from headprune_bench.methods.registry import in_methods_all

MAX_SEED = 2**31 - 1
"""Largest seed: a seed feeds numpy's default_rng, torch.manual_seed and context.generator (seed * 1_000_003)."""
MAX_SEED_COUNT = 1000  # a seed is a base fine-tune: more than this is a typo, and 0..N-1 would be built in memory
_DIGITS = re.compile(r"[0-9]+")
_SEED_ITEM = re.compile(r"[0-9]+(-[0-9]+)?")


@dataclass
class RunConfig:
    """Everything ``bench run`` needs (CLI options resolved over a preset).

    Attributes:
        out: the run folder.
        preset: the preset the defaults came from.
        methods: method names, in the order given.
        tasks: task names.
        seeds: the seeds, each one paired replicate.
        budgets: the budget levels of every method that needs a head count, in the order given (one, or a sweep's
            levels; at most one ``matched:``).
        model: model alias, hub name or folder.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        data_dir: the GLUE folder, or None (``$GLUE_DIR``, else the hub).
        recover: also run the ``prune+recover`` and ``control`` conditions (the headline; default).
        repairs: the training-free repairs of ``--repair`` whose ``prune+<repair>`` cells repair every selector's
            mask at every level (``none`` and ``finetune`` are the prune-only and prune+recover conditions, never
            listed here); empty: none.
        match_per_layer: with ``matched:METHOD``, match the setter's per-layer counts too.
        min_heads_per_layer: the per-layer floor every method's mask is moved to after it prunes (0: none;
            :func:`headprune_bench.methods.base.apply_layer_floor`); part of the budget (cell keys say ``/floor:M``).
        method_options: per method, its options (the preset's, overridden by the CLI's).
        progress: show progress bars.
        precision: ``fp32`` or ``bf16`` (bfloat16 autocast of the forward passes of every fine-tune and
            evaluation; :func:`benchmark.training.autocast`). Part of the experiment: folders never mix them.
        workers: run cells on a local Ray, this many at a time (None: serial; :mod:`benchmark.execution.resolve`).
        auto_workers: ``--workers auto`` (the CLI's default): one cell per CPU core on a local Ray where that is
            possible, else serial (``execution.resolve.auto_workers`` says which and why).
        ray_address: run cells on the Ray cluster at this address (``auto``: ``RAY_ADDRESS``), or None.
        threads_per_cell: CPU threads (and Ray CPUs) of one cell on Ray; None: the default of
            :func:`headprune_bench.benchmark.execution.resolve.resolve_execution`.
        gpus_per_cell: the share of a GPU one cell reserves on Ray; None: that function's default.
        time_limit_s: ``--time-limit`` in seconds: start only the cells that should finish within it
            (:mod:`headprune_bench.benchmark.execution.time_limit`); None: no limit. Not part of the experiment.
        wait_for_base: on the first Ctrl-C, let a running base fine-tune finish (``--wait-for-base``); else it stops
            at its next step (:mod:`headprune_bench.benchmark.execution.stopping`). Not part of the experiment.
    """

    out: Path
    preset: Preset
    methods: list[str]
    tasks: list[str]
    seeds: list[int]
    budgets: list[Budget]
    model: str
    device: str = "auto"
    data_dir: str | None = None
    recover: bool = True
    repairs: tuple[str, ...] = ()
    match_per_layer: bool = False
    min_heads_per_layer: int = 0
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    progress: bool = True
    precision: str = "fp32"
    workers: int | None = None
    auto_workers: bool = False
    ray_address: str | None = None
    threads_per_cell: int | None = None
    gpus_per_cell: float | None = None
    time_limit_s: float | None = None
    wait_for_base: bool = False

    @property
    def matched(self) -> Budget | None:
        """The ``matched:METHOD`` level, or None."""
        return next((b for b in self.budgets if b.kind == "matched"), None)

    def level_label(self, budget: Budget) -> str:
        """The budget spec cells of ``budget``'s level are keyed and recorded with (``fraction:0.3``,
        ``matched:auber/per-layer``, ``heads:8/floor:2``)."""
        per_layer = "/per-layer" if self.match_per_layer and budget.kind == "matched" else ""
        return budget.label + per_layer + (f"/floor:{self.min_heads_per_layer}" if self.min_heads_per_layer else "")

    @property
    def level_labels(self) -> list[str]:
        """:meth:`level_label` of every level, in order."""
        return [self.level_label(b) for b in self.budgets]


RAY_MISSING = ("Ray is not installed; --workers and --ray-address run cells on Ray. Install it with: "
               "pip install -e '.[ray]'  (or: pip install 'ray>=2.60,<3')")


def make_run_config(*, out: str | Path, preset: str, methods_spec: str, tasks_spec: str, seeds: str | None,
                    model: str | None, budget: str | None, device: str, data_dir: str | None, recover: bool,
                    match_per_layer: bool = False, method_options: dict[str, dict[str, Any]] | None = None,
                    progress: bool = True, precision: str = "fp32", workers: int | str | None = None,
                    ray_address: str | None = None, threads_per_cell: int | None = None,
                    gpus_per_cell: float | None = None, min_heads_per_layer: int = 0,
                    time_limit: str | None = None, wait_for_base: bool = False,
                    repair: str | None = None) -> RunConfig:
    """Resolve CLI strings over a preset into a :class:`RunConfig`.

    ``seeds``: ``"N"`` = seeds 0..N-1, or ``"a,b,c"`` (each in ``[0, 2**31 - 1]``, none twice); ``None`` = the
    preset's. ``workers``: a number, ``"auto"`` or ``"0"`` / None (serial; :func:`parse_workers`). ``workers`` /
    ``ray_address`` / ``threads_per_cell`` / ``gpus_per_cell``: see :func:`check_execution`.
    ``budget``: ``--budget``'s text (:func:`~headprune_bench.benchmark.config.presets.parse_budgets`), None: the
    preset's. ``time_limit``: ``--time-limit``'s text
    (:func:`~headprune_bench.benchmark.config.presets.parse_duration`), or None. ``repair``: ``--repair``'s text
    (:func:`parse_repairs`), or None.

    Raises:
        ConfigError / tasks.DataError / methods.UnknownMethodError: naming the bad option.
    """
    p = get_preset(preset)
    time_limit_s = None if time_limit is None else parse_duration(time_limit)
    workers, auto_workers = parse_workers(workers)
    auto_workers = auto_workers and ray_address is None  # a cluster decides how many cells run at once
    check_execution(workers, ray_address, threads_per_cell, gpus_per_cell, auto=auto_workers)
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    names = _method_names(methods_spec)
    try:
        task_names = [t.name for t in tasks.resolve_tasks(tasks_spec)]
    except ValueError as exc:
        raise ConfigError(f"--tasks: {exc}") from None
    seed_list = list(p.seeds) if seeds is None else parse_seeds(seeds)
    levels = parse_budgets(budget or p.budget, p.sweep)
    if min_heads_per_layer < 0:
        raise ConfigError(f"--min-heads-per-layer {min_heads_per_layer}: expected 0 (no floor) or more heads")
    if match_per_layer and not any(b.kind == "matched" for b in levels):
        raise ConfigError(f"--match-per-layer matches a budget setter's per-layer counts: it needs --budget "
                          f"matched:METHOD, not {','.join(b.label for b in levels)}")
    repairs = parse_repairs(repair, recover)
    return RunConfig(out=Path(out), preset=p, methods=names, tasks=task_names, seeds=seed_list,
                     budgets=levels, model=models.normalize_model(model or p.model), device=device,
                     data_dir=data_dir, recover=recover, repairs=repairs, match_per_layer=match_per_layer,
                     min_heads_per_layer=min_heads_per_layer,
                     method_options=_merge_options(p, names, method_options or {}), progress=progress,
                     precision=precision, workers=workers, auto_workers=auto_workers, ray_address=ray_address,
                     threads_per_cell=threads_per_cell, gpus_per_cell=gpus_per_cell, time_limit_s=time_limit_s,
                     wait_for_base=wait_for_base)


def parse_repairs(text: str | None, recover: bool) -> tuple[str, ...]:
    """``--repair``: a comma-separated list of registered repairs (``bench list``); returns the training-free ones
    in the order given, once each. ``none`` (prune-only, always run) and ``finetune`` (prune+recover, run unless
    ``--no-recover``) are conditions of their own and are dropped from the tuple.

    Raises:
        ConfigError: an empty list or item, an unknown repair (the message lists the registered ones and a close
            match), or ``finetune`` with ``--no-recover``.
    """
    if text is None:
        return ()
    from headprune_bench.methods.registry import UnknownNameError, get_repair_class

    names = [n.strip().lower() for n in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise ConfigError(f"--repair {text!r}: expected a comma-separated list of repairs (bench list), e.g. "
                          f"none,bias,scales,weights")
    for name in names:
        try:
            get_repair_class(name)
        except UnknownNameError as exc:
            raise ConfigError(f"--repair: {exc}") from None
    if "finetune" in names and not recover:
        raise ConfigError("--repair finetune is the prune+recover condition, which --no-recover turns off; drop one")
    return tuple(dict.fromkeys(n for n in names if n not in ("none", "finetune")))


def parse_workers(value: int | str | None) -> tuple[int | None, bool]:
    """``--workers``: ``auto`` -> ``(None, True)``; ``0`` or None -> ``(None, False)``, one cell at a time in this
    process; ``N`` -> ``(N, False)``, N cells at a time on a local Ray.

    Raises:
        ConfigError: anything else (ASCII digits only), naming the option.
    """
    if value is None:
        return None, False
    text = str(value).strip().lower()
    if text == "auto":
        return None, True
    if not (text.isascii() and text.isdigit()):
        raise ConfigError(f"--workers {value}: expected auto (one cell per CPU core on a local Ray), 0 (one cell at a "
                          f"time in this process) or a number of cells at a time")
    return (int(text) or None), False


def check_execution(workers: int | None, ray_address: str | None, threads_per_cell: int | None,
                    gpus_per_cell: float | None, auto: bool = False) -> None:
    """Check the Ray options before anything loads: ``workers`` >= 1, not together with ``ray_address`` (a
    cluster's CPUs and GPUs decide how many cells run at once), ``threads_per_cell`` >= 1, ``gpus_per_cell`` in
    [0, 1] or a whole number (Ray's fractional GPUs), the last two only on Ray (or with ``auto``, ``--workers
    auto``), and Ray importable where it is asked for.

    Raises:
        ConfigError: naming the option; :data:`RAY_MISSING` when Ray is asked for and not installed.
    """
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers}: expected a number of cells at a time >= 1")
    if ray_address is not None and not ray_address.strip():
        raise ConfigError("--ray-address '': expected a Ray address (host:port, ray://host:port) or 'auto'")
    if workers is not None and ray_address is not None:
        raise ConfigError("--workers with --ray-address: on a cluster its CPUs and GPUs decide how many cells run at "
                          "once (each cell takes --threads-per-cell CPUs and --gpus-per-cell GPUs); drop --workers")
    on_ray = workers is not None or ray_address is not None
    for name, value in (("--threads-per-cell", threads_per_cell), ("--gpus-per-cell", gpus_per_cell)):
        if value is not None and not (on_ray or auto):
            raise ConfigError(f"{name} applies to cells on Ray: add --workers N or --ray-address ADDR")
    if threads_per_cell is not None and threads_per_cell < 1:
        raise ConfigError(f"--threads-per-cell {threads_per_cell}: expected >= 1")
    whole = gpus_per_cell is not None and gpus_per_cell > 1 and float(gpus_per_cell).is_integer()
    if gpus_per_cell is not None and not (0 <= gpus_per_cell <= 1 or whole):
        raise ConfigError(f"--gpus-per-cell {gpus_per_cell:g}: expected a share of one GPU in [0, 1] (0.25: four "
                          f"cells per GPU) or a whole number of GPUs")
    if on_ray and importlib.util.find_spec("ray") is None:
        raise ConfigError(RAY_MISSING)
    if ray_address is not None:
        check_reachable(ray_address)


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse a ``--ray-address`` (``host:port``, ``ray://host:port``, or ``auto`` with ``$RAY_ADDRESS`` set) where
    nothing accepts a TCP connection within ``timeout_s``, before anything is created (Ray itself retries for
    minutes). ``auto`` without ``$RAY_ADDRESS`` is left to Ray, which looks for a cluster on this machine.

    Raises:
        ConfigError: naming the address and the reason.
    """
    target = os.environ.get("RAY_ADDRESS", "") if address == "auto" else address
    host, _, port = target.removeprefix("ray://").rpartition(":")
    if not target or not host or not port.isdigit():
        return  # (not host:port: Ray's own message names what is wrong)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(f"--ray-address {address}: nothing answers at {host}:{port} ({exc.strerror or exc}) within "
                          f"{timeout_s:g} s; start the cluster (`ray start --head`) or fix the address") from exc


def _method_names(methods_spec: str) -> list[str]:
    """``all`` (:func:`headprune_bench.methods.registry.in_methods_all`) or the comma-separated names, each checked.

    Raises:
        ConfigError: an unknown name (with the closest known one) or no name at all.
    """
    if methods_spec.strip() == "all":
        names = [n for n, cls in methods.available_methods().items() if in_methods_all(cls)]
    else:
        names = [m.strip() for m in methods_spec.split(",") if m.strip()]
        for name in names:
            try:
                methods.get_method_class(name)
            except methods.UnknownMethodError as exc:
                raise ConfigError(f"--methods: {exc}") from None
    if not names:
        raise ConfigError("--methods: no method given")
    return names


def parse_seeds(seeds: str) -> list[int]:
    """``"N"`` = seeds 0..N-1 (1 <= N <= :data:`MAX_SEED_COUNT`), or a comma-separated list whose items are seeds
    or inclusive ranges ``a-b`` (``"0,4"``, ``"5-5"`` for seed 5 alone, ``"3-9"``, ``"0,5-7"``): each a plain
    decimal integer (ASCII digits only: no sign, no ``_``, no empty item) in ``[0, MAX_SEED]``, a range not
    descending, none twice.

    Raises:
        ConfigError: N out of range, not integers, an empty item, no seed, a descending range, more than
            :data:`MAX_SEED_COUNT` seeds, a seed out of range or repeated; the message quotes the option.
    """
    text = seeds.strip()
    if "," not in text and "-" not in text:
        if not _DIGITS.fullmatch(text):
            raise ConfigError(f"--seeds {seeds!r}: expected N or a comma-separated list of non-negative integers "
                              f"in plain digits (N: a count, seeds 0..N-1; a list: e.g. --seeds 0,4 or 5-9)")
        count = int(text)
        if not 1 <= count <= MAX_SEED_COUNT:
            raise ConfigError(f"--seeds {seeds}: N is a count (seeds 0..N-1) and must be in [1, {MAX_SEED_COUNT}]; "
                              f"for seed 0 alone write --seeds 1, for a list of seeds a,b,c (e.g. --seeds 0,4), "
                              f"for seed 5 alone --seeds 5-5")
        return list(range(count))
    items = [item.strip() for item in text.split(",")]
    bad_items = [item for item in items if not _SEED_ITEM.fullmatch(item)]
    if bad_items:
        raise ConfigError(f"--seeds {seeds!r}: expected N or a comma-separated list of non-negative integers "
                          f"in plain digits or ranges a-b; not one: {', '.join(repr(i) for i in bad_items)}")
    seed_list: list[int] = []
    for item in items:
        first, _, last = item.partition("-")
        low, high = int(first), int(last or first)
        if high < low:
            raise ConfigError(f"--seeds {seeds}: range {item} descends; write it {high}-{low}")
        if high - low + 1 + len(seed_list) > MAX_SEED_COUNT:
            raise ConfigError(f"--seeds: at most {MAX_SEED_COUNT} seeds, got more with {item}")
        seed_list += range(low, high + 1)
    bad = [s for s in seed_list if not 0 <= s <= MAX_SEED]
    if bad:
        raise ConfigError(f"--seeds {seeds}: every seed must be an integer in [0, {MAX_SEED}] (numpy and torch seed "
                          f"generators take non-negative seeds), got {', '.join(map(str, bad))}")
    counts = Counter(seed_list)
    repeated = sorted(s for s, n in counts.items() if n > 1)
    if repeated:
        raise ConfigError(f"--seeds {seeds}: seed(s) {', '.join(map(str, repeated))} given more than once; "
                          f"a seed is one paired replicate, list each once")
    return seed_list


def _merge_options(preset: Preset, names: list[str], given: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The preset's method options overridden by the CLI's ``given`` ones. An ablation (``ablation_of`` set) also
    takes its parent's options, lowest first: the parent's preset options, its own preset options, the parent's
    given options, its own given options; never the options that define it (docs/choices.md, "Run configuration").

    Raises:
        ConfigError: an option given for a method that is not in ``names``.
    """
    for m, opts in given.items():
        if m not in names:
            shown = ", ".join(f"{m}.{k}" for k in opts)
            raise ConfigError(f"--option {shown}: method '{m}' is not in --methods ({', '.join(names)})")
    merged = {m: dict(o) for m, o in preset.method_options.items()}
    for name in names:
        cls = methods.get_method_class(name)
        parent = cls.ablation_of
        if parent is None:
            continue
        try:
            parent_defaults = methods.get_method_class(parent).defaults
        except methods.UnknownMethodError:
            parent_defaults = {}
        defining = {k for k, v in cls.defaults.items() if k not in parent_defaults or parent_defaults[k] != v}

        def inherited(options: dict[str, Any], defining: set[str] = defining) -> dict[str, Any]:
            return {k: v for k, v in options.items() if k not in defining}

        options = {**inherited(preset.method_options.get(parent, {})), **preset.method_options.get(name, {}),
                   **inherited(given.get(parent, {}))}
        if options:
            merged[name] = options
    for m, opts in given.items():
        merged.setdefault(m, {}).update(opts)
    return merged
