"""The ``bench`` command line: ``bench run``, ``bench list``, ``bench report``, ``bench export``,
``bench speed``."""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import click

from headprune_bench import methods
from headprune_bench.benchmark import tasks
from headprune_bench.benchmark.config.presets import PRECISIONS, PRESETS, ConfigError
from headprune_bench.benchmark.store.records import CONDITIONS, is_repair_condition, repair_of
from headprune_bench.methods.heads import LAYOUTS
from headprune_bench.methods.registry import available_repairs

log = logging.getLogger("benchmark")


def _parse_method_options(values: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """``--option michel.mode=iterative`` -> ``{"michel": {"mode": "iterative"}}``."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for item in values:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise click.BadParameter(f"{item!r}: expected METHOD.OPTION=VALUE, e.g. michel.mode=iterative",
                                     param_hint="--option")
        left, value = item.split("=", 1)
        method, option = left.split(".", 1)
        out[method][option] = value
    return dict(out)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """headprune-bench: compare attention-head pruning methods on small GLUE tasks."""


@main.command("list")
def list_cmd() -> None:
    """List methods, tasks, task groups, model families and presets."""
    click.echo("methods:")
    for name, cls in methods.available_methods().items():
        tag = "  [reconstruction: no official code]" if cls.reconstruction else ""
        click.echo(f"  {name:<14} {cls.summary}{tag}")
        if cls.defaults:
            click.echo(f"  {'':<14} options: " + ", ".join(f"{k}={v!r}" for k, v in cls.defaults.items()))
    click.echo("tasks:")
    for name, spec in tasks.TASKS.items():
        click.echo(f"  {name:<14} metrics: {', '.join(spec.metrics)} (primary: {spec.primary_metric})")
    click.echo("task groups:")
    for name, members in tasks.TASK_GROUPS.items():
        click.echo(f"  {name:<14} {', '.join(members)}")
    click.echo("model families (--model):")
    for cls in dict.fromkeys(LAYOUTS.values()):
        click.echo(f"  {cls.family:<14} model types: {', '.join(cls.model_types)}; attention: "
                   f"{', '.join(cls.attn_implementations)}")
    click.echo("repairs (bench run --repair):")
    for name, cls in available_repairs().items():
        click.echo(f"  {name:<14} {cls.summary}")
    click.echo("presets:")
    for name, p in PRESETS.items():
        click.echo(f"  {name:<14} {p.description}")
        for method, opts in p.method_options.items():  # the preset's sizing, over the defaults listed above
            click.echo(f"  {'':<14} {method}: " + ", ".join(f"{k}={v!r}" for k, v in opts.items()))


@main.command("run")
@click.option("--methods", "methods_spec", default="all", show_default=True,
              help="'all' or a comma-separated list of method names (see `bench list`).")
@click.option("--tasks", "tasks_spec", default="glue-small", show_default=True,
              help="'glue-small' or a comma-separated list of GLUE tasks (mrpc, cola, rte, wnli).")
@click.option("--seeds", default=None, help="N (seeds 0..N-1), or a list of seeds and inclusive ranges: 3,7 or 5-9 "
              "or 5-5 (seed 5 alone). Default: the preset's.")
@click.option("--model", default=None,
              help="Hub name (bert-base-cased, roberta-base, ...), local folder, or 'minilm-l6' (packaged); families: "
                   "`bench list`. Default: the preset's.")
@click.option("--budget", default=None,
              help="heads:K | fraction:F | matched:METHOD, or a list of levels (a curve): fraction:0.1,0.5,0.9, "
                   "heads:8,16, fraction:0.3,0.5,matched:auber; 'sweep' = the preset's levels. Default: the "
                   "preset's budget.")
@click.option("--preset", default="quick", show_default=True, type=click.Choice(list(PRESETS)))
@click.option("--device", default="auto", show_default=True, help="auto | cpu | cuda | cuda:N")
@click.option("--precision", default="fp32", show_default=True, type=click.Choice(list(PRECISIONS)),
              help="bf16: bfloat16 autocast of the forward passes of fine-tuning and evaluation (part of the "
                   "experiment: a folder never mixes precisions).")
@click.option("--out", default="runs/latest", show_default=True, type=click.Path(file_okay=False),
              help="Run folder: records.jsonl, summary, cached base models. Rerunning resumes it.")
@click.option("--data-dir", default=None, type=click.Path(),
              help="GLUE folder in the original TSV layout. Default: $GLUE_DIR, else the HF hub.")
@click.option("--recover/--no-recover", default=True, show_default=True,
              help="Also run the prune+recover condition (the headline) and the fine-tuning control (protocol "
                   "§4); --no-recover: prune-only (and a re-training method's own weights) alone.")
@click.option("--repair", default=None, metavar="R1,R2,...",
              help="Repairs of every selector's mask at every level, each a cell prune+<repair> that reuses the "
                   "prune-only mask: none, bias, scales, weights (`bench list`). none = prune-only, finetune = "
                   "prune+recover. A method that repairs its own mask (kwon) is skipped, said on screen.")
@click.option("--min-heads-per-layer", "min_heads_per_layer", type=int, default=0, show_default=True,
              help="A per-layer floor applied to every method's mask alike after it prunes: a layer left with fewer "
                   "heads gets its best-scored pruned heads back, and as many lowest-scored heads elsewhere are "
                   "pruned instead (same count). 0: no floor.")
@click.option("--match-per-layer/--match-total", default=False, show_default=True,
              help="With --budget matched:METHOD, also match METHOD's per-layer counts (used by random).")
@click.option("--option", "options", multiple=True, metavar="METHOD.OPTION=VALUE",
              help="A method option, e.g. --option michel.mode=iterative (repeatable).")
@click.option("--workers", default="auto", show_default=True, envvar="BENCH_WORKERS", metavar="auto|N|0",
              help="Run N cells at a time on a local Ray started in-process (the 'ray' extra). auto: one cell per "
                   "CPU core with one thread each when Ray is installed and no GPU is used, else one at a time; 0: "
                   "one cell at a time in this process. Environment: BENCH_WORKERS.")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="Run cells on an existing Ray cluster (host:port, ray://host:port, or 'auto' for $RAY_ADDRESS).")
@click.option("--threads-per-cell", type=int, default=None,
              help="On Ray: CPU threads (and Ray CPUs) per cell. Default: 1 when cells share the machine.")
@click.option("--gpus-per-cell", type=float, default=None,
              help="On Ray: the share of a GPU per cell, e.g. 0.25 runs four cells on one GPU. Default with "
                   "--workers N and a visible GPU: GPUs/N (at most 1); else 0 (CPU).")
@click.option("--time-limit", default=None, metavar="DURATION",
              help="Start only the cells that should finish within DURATION (2h30m, 90m, 5400) of the start, as the "
                   "folder's finished cells of the same kind estimate them; then stop (exit status 75) and let the "
                   "same command resume. For a job's walltime or a session's end.")
@click.option("--wait-for-base", is_flag=True, default=False,
              help="On the first Ctrl-C, let a running base fine-tune finish and be saved. Default: it stops at its "
                   "next training step (cheap to redo), as no cell starts after a Ctrl-C.")
@click.option("--dry-run", is_flag=True, default=False,
              help="Print the cells to do, each with its expected time, and the total; run and write nothing.")
@click.option("--progress/--no-progress", default=True, show_default=True)
@click.option("--report/--no-report", default=True, show_default=True,
              help="Run `bench report` on the folder at the end.")
@click.option("--plots/--no-plots", default=True, show_default=True, help="Plots in the final report.")
def run_cmd(methods_spec, tasks_spec, seeds, model, budget, preset, device, precision, out, data_dir, recover,
            repair, min_heads_per_layer, match_per_layer, options, workers, ray_address, threads_per_cell,
            gpus_per_cell, time_limit, wait_for_base, dry_run, progress, report, plots) -> None:
    """Run (or resume) a benchmark; finished cells in --out are never recomputed."""
    from headprune_bench.benchmark.run.runner import Runner, make_run_config

    try:
        cfg = make_run_config(out=out, preset=preset, methods_spec=methods_spec, tasks_spec=tasks_spec, seeds=seeds,
                              model=model, budget=budget, device=device, data_dir=data_dir, recover=recover,
                              match_per_layer=match_per_layer, method_options=_parse_method_options(options),
                              progress=progress, precision=precision, workers=workers, ray_address=ray_address,
                              threads_per_cell=threads_per_cell, gpus_per_cell=gpus_per_cell,
                              min_heads_per_layer=min_heads_per_layer, time_limit=time_limit,
                              wait_for_base=wait_for_base, repair=repair)
        # first line: where the tasks come from (reading the hub offline takes a while to fail)
        click.echo(f"bench run: tasks {','.join(cfg.tasks)} from {tasks.describe_data_source(cfg.data_dir)}")
        runner = Runner(cfg, dry_run=dry_run)
    except (ConfigError, tasks.DataError, methods.UnknownMethodError, methods.OptionError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    start = time.time()
    click.echo(f"bench run -> {cfg.out} | model {cfg.model} | device {runner.device} | tasks {','.join(cfg.tasks)} "
               f"| seeds {cfg.seeds} | methods {','.join(runner.method_names)} | budget {runner.budget_label} "
               f"| precision {cfg.precision} | {runner.execution.summary()}")
    if dry_run:
        from headprune_bench.benchmark.run.plan import dry_run_lines

        click.echo("\n".join(dry_run_lines(runner)))
        return
    try:
        with plain_warnings():  # a method's or the report's warning as one line, not Python's form
            runner.run()
            if not runner.not_run:
                _finish(cfg, runner, report, plots)
    except ConfigError as exc:  # Ray cannot be joined (--ray-address)
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:  # the run folder cannot be written (disk full, permissions): one line, no traceback
        message = _folder_error(exc, cfg.out)
        log.error(message)  # into run.log too, while its handler is open
        raise click.ClickException(message) from exc
    finally:
        runner.close()
    click.echo(f"wall time this invocation: {time.time() - start:.0f} s; records: {cfg.out}/records.jsonl")
    if runner.not_run:  # the first Ctrl-C or --time-limit: the cells that ran are written, the others wait
        why = "stopped on request" if runner.stop.requested else "time limit"
        click.echo(f"{why}: {runner.not_run} cell(s) not run (no report written); the same command resumes", err=True)
        sys.exit(130 if runner.stop.requested else 75)
    if runner.failures:
        click.echo(f"{len(runner.failures)} cell(s) failed (see {cfg.out}/failures.jsonl); rerun to retry them:",
                   err=True)
        for f in runner.failures:
            click.echo(f"  {f['cell']}: {f['error']}", err=True)
        sys.exit(1)


def _folder_error(exc: OSError, out: Path) -> str:
    """One line for an OS error during a run: the path, the reason, what is kept and what to do (the advice
    follows the error number: free space for a full disk, permissions for a refused write, else the cause)."""
    where = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    fix = {errno.ENOSPC: "Free space on the disk", errno.EDQUOT: "Free space (disk quota)",
           errno.EACCES: "Fix the folder's permissions", errno.EPERM: "Fix the folder's permissions",
           errno.EROFS: "Use a writable --out folder"}.get(cause.errno, "Fix the cause")
    return (f"{where}. bench run stopped; every finished cell is kept in {out}/records.jsonl. {fix}, then rerun "
            f"the same command to resume.")


@contextlib.contextmanager
def plain_warnings():
    """Inside the block, a warning is printed once to stderr as ``warning: MESSAGE`` (not Python's form with the
    source line), for command-line users."""
    def show(message, category, filename, lineno, file=None, line=None):
        click.echo(f"warning: {message}", err=True)

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        yield


def _finish(cfg, runner, report: bool, plots: bool) -> None:
    """Write the folder's summary (and report) after a run."""
    from headprune_bench.benchmark.report.summary import markdown, write_summary

    header = (f"# bench run summary\n\nEvery record of the folder. Written by the last command: "
              f"`bench {' '.join(sys.argv[1:])}` (all commands: runs.jsonl)  \n"
              f"Preset: {cfg.preset.name}; model: {cfg.model}; config hash: {runner.config_hash}; "
              f"git: {runner.provenance['git_commit']}")
    table = write_summary(cfg.out, header=header)
    click.echo(markdown(table))
    if report:
        from headprune_bench.benchmark.report import build_report

        build_report([cfg.out], plots=plots, echo=False)
        click.echo(f"report (tables, significance tests{', plots' if plots else ''}): {cfg.out}/report/")


@main.command("report")
@click.argument("folders", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--against", default="original,auber", show_default=True,
              help="Reference methods to compare every row with (comma-separated), or 'all' for every pair.")
@click.option("--format", "formats", default="md,csv,tex", show_default=True, help="Any of md, csv, tex.")
@click.option("--plots/--no-plots", default=True, show_default=True, help="PNG and PDF plots in REPORT_DIR/plots.")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="Report folder. Default: FIRST_DIR/report.")
def report_cmd(folders, against, formats, plots, out) -> None:
    """Significance tests, tables and plots of one or more run folders (combined)."""
    from headprune_bench.benchmark.report import build_report

    try:
        with plain_warnings():
            build_report(list(folders), against=against, formats=formats, plots=plots, out=out)
    except (OSError, ValueError) as exc:  # a missing folder, or a report folder that cannot be written
        raise click.ClickException(str(exc)) from exc


def _condition(value: str) -> str:
    """``--condition`` of ``bench export``: a condition, or ``prune+<repair>`` of a registered repair."""
    from headprune_bench.methods.registry import UnknownNameError, get_repair_class

    if value in CONDITIONS:
        return value
    if not is_repair_condition(value):
        raise click.BadParameter(f"{value!r}: expected one of {', '.join(CONDITIONS)} or prune+REPAIR")
    try:
        get_repair_class(repair_of(value))
    except UnknownNameError as exc:
        raise click.BadParameter(f"{value!r}: {exc}") from None
    return value


@main.command("export")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--task", required=True, help="GLUE task of the cell (mrpc, cola, rte, wnli).")
@click.option("--seed", required=True, type=int, help="Seed of the cell.")
@click.option("--method", required=True, help="Method of the cell ('original' for the unpruned model).")
@click.option("--condition", default="prune+recover", show_default=True, callback=lambda ctx, p, v: _condition(v),
              help=f"Which of the cell's models: {', '.join(CONDITIONS)} (the base weights, recovered, control, own), "
                   f"or prune+REPAIR (a repair cell, e.g. prune+bias).")
@click.option("--budget", default=None, help="The cell's budget spec, when the folder holds several (e.g. "
              "fraction:0.3, own, matched:auber).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="The folder to write.")
@click.option("--data-dir", default=None, type=click.Path(), help="GLUE folder. Default: $GLUE_DIR, else the hub.")
@click.option("--device", default="auto", show_default=True, help="auto | cpu | cuda | cuda:N (the run's device "
              "type: run.json must accept it).")
@click.option("--onnx", is_flag=True, help="Also OUT/model.onnx (dynamic batch and length), checked with onnxruntime "
              "against torch (needs the 'onnx' extra).")
def export_cmd(run_dir, task, seed, method, condition, budget, out, data_dir, device, onnx) -> None:
    """Export the model of one cell, heads physically removed, as a Hugging Face folder that loads with
    AutoModelForSequenceClassification.from_pretrained(OUT, trust_remote_code=True), without this package.

    The model is computed again from the folder's cached base model (recovery and a method's own fine-tuning
    run again; prune-only needs no training); export_info.json says whether its dev predictions equal the
    record's."""
    from headprune_bench.benchmark.tools.export import export_cell

    try:
        with plain_warnings():
            info = export_cell(run_dir, task=task, seed=seed, method=method, condition=condition, out=out,
                               budget=budget, data_dir=data_dir, device=device, onnx=onnx)
    except (ConfigError, tasks.DataError, methods.UnknownMethodError, methods.OptionError, ValueError,
            OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    same = ("equal to the record's" if not info.predictions_differ else
            f"{info.predictions_differ} of {info.dev_examples} differ from the record's")
    click.echo(f"exported {info.cell} -> {info.folder}: heads per layer {info.heads_per_layer} "
               f"({info.heads_pruned} of {info.heads_total} pruned); dev predictions {same}")
    if info.onnx:
        click.echo(f"ONNX: {info.folder}/{info.onnx['file']}; onnxruntime vs torch on a dev batch "
                   f"{info.onnx['batch']}: max |logit difference| {info.onnx['max_abs_diff']:.2g}")


def _int_list(option: str, text: str) -> list[int]:
    """``"1,32,128"`` as ints >= 1; a ClickException naming ``option`` otherwise."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise click.ClickException(f"{option} {text!r}: expected comma-separated whole numbers >= 1")
    return values


@main.command("speed")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--batches", default="1,32,128", show_default=True, help="Batch sizes (1: latency).")
@click.option("--lengths", default="64,128,512", show_default=True, help="Sequence lengths (tokens).")
@click.option("--device", default="auto", show_default=True, help="auto | cpu | cuda | cuda:N")
@click.option("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads). Default: torch's.")
@click.option("--min-run-time", type=float, default=1.0, show_default=True,
              help="About the seconds of timed calls per model and shape (at least one call per round).")
@click.option("--rounds", type=int, default=5, show_default=True,
              help="Rounds; each times every model of a shape once, in turn (paired speed-ups).")
@click.option("--per-mask/--per-count", default=False, show_default=True,
              help="Time every distinct mask of the run, or one mask per head count.")
@click.option("--heads-pruned", "counts", default=None,
              help="Only the cells that pruned these many heads, e.g. 22,36 (default: every count in the run).")
def speed_cmd(run_dir, batches, lengths, device, threads, min_run_time, rounds, per_mask, counts) -> None:
    """Latency and throughput of the run's dense, masked and physically pruned models, beside the speed-up the
    removed FLOPs imply; appended to RUN_DIR/speed.jsonl, which `bench report` tables and plots."""
    import torch

    from headprune_bench.benchmark import models
    from headprune_bench.benchmark.provenance import quiet_libraries
    from headprune_bench.benchmark.store.jsonl import read_jsonl
    from headprune_bench.benchmark.store.records import Record
    from headprune_bench.benchmark.tools import speed

    quiet_libraries()  # no load report for the untrained classifier head: weights do not change the time
    shapes = [(b, t) for b in _int_list("--batches", batches) for t in _int_list("--lengths", lengths)]
    if threads is not None:
        if threads < 1:
            raise click.ClickException(f"--threads {threads}: expected >= 1")
        torch.set_num_threads(threads)
    if min_run_time <= 0:
        raise click.ClickException(f"--min-run-time {min_run_time:g}: expected seconds > 0")
    if rounds < 1:
        raise click.ClickException(f"--rounds {rounds}: expected >= 1")
    folder = Path(run_dir)
    try:
        run = json.loads((folder / "run.json").read_text())["experiment"]
        records = [Record.from_dict(d) for d in read_jsonl(folder / "records.jsonl")]
        dev = models.resolve_device(device)
        model = models.load_classifier(run["model"], num_labels=2).eval()
    except (OSError, KeyError, ValueError, ConfigError) as exc:
        raise click.ClickException(f"{folder}: {exc}") from exc
    max_tokens = LAYOUTS[model.config.model_type].max_tokens(model.config)
    if max_tokens is not None and max(t for _, t in shapes) > max_tokens:
        raise click.ClickException(f"--lengths: the model takes at most {max_tokens} tokens")
    if counts is not None:
        wanted = set(_int_list("--heads-pruned", counts))
        held = {r.heads_pruned for r in records}
        if wanted - held:
            raise click.ClickException(f"--heads-pruned {counts}: no cell pruned {sorted(wanted - held)} heads "
                                       f"(the run holds {sorted(held - {0})})")
        records = [r for r in records if r.heads_pruned in wanted]
    profiles = list(speed.head_profiles(records, per_mask))
    expected = speed.expected_seconds(len(profiles), len(shapes), min_run_time)
    click.echo(f"bench speed {folder}: {run['model']} on {dev} ({speed.machine_name(dev)}, "
               f"{torch.get_num_threads()} threads); {len(profiles)} head profile(s), {len(shapes)} shape(s): at "
               f"least {expected:.0f} s of timed calls (--min-run-time {min_run_time:g} s per model and shape); each "
               f"shape's timings are appended to {folder / speed.SPEED_FILE} as they are measured")
    rows = speed.measure(model, profiles, shapes, dev, min_run_time, progress=click.echo, rounds=rounds,
                         on_rows=lambda done: speed.write_rows(folder, done))
    click.echo(f"{len(rows)} timings appended to {folder / speed.SPEED_FILE}")


if __name__ == "__main__":  # pragma: no cover
    main()
