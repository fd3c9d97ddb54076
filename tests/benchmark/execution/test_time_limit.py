"""``--time-limit`` (headprune_bench.benchmark.execution.time_limit): durations, the estimates read from a folder's
records, the fit rule.
The runs that use it (serial and on Ray) are tested in test_parallel.py."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from headprune_bench.benchmark.cli import main
from headprune_bench.benchmark.config.presets import ConfigError, parse_duration
from headprune_bench.benchmark.execution.ray.status_board import StatusBoard
from headprune_bench.benchmark.execution.time_limit import MARGIN, CellTimes, MachineTimes, TimeLimit, machine_of


@pytest.mark.parametrize("text, seconds", [("2h30m", 9000), ("90m", 5400), ("1.5h", 5400), ("45m30s", 2730),
                                           ("5400s", 5400), ("5400", 5400), (" 2H ", 7200), ("0.5m", 30)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "2h30", "1d", "-5m", "0", "0h0m", "m", "h5m3"])
def test_bad_durations_are_refused_naming_the_option(text):
    with pytest.raises(ConfigError, match="--time-limit"):
        parse_duration(text)


def test_a_bad_time_limit_stops_bench_run_before_anything_loads(tmp_path):
    res = CliRunner().invoke(main, ["run", "--time-limit", "2 hours", "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "--time-limit '2 hours': expected a duration" in res.output
    assert not (tmp_path / "run").exists()


def _record(task, seed, method, condition, wall, prune):
    return {"task": task, "seed": seed, "method": method, "condition": condition,
            "cost": {"wall_s": wall, "prune_wall_s": prune}}


RECORDS = [
    _record("mrpc", 0, "auber", "prune-only", 1860.0, 1856.0),
    _record("mrpc", 0, "auber", "prune+recover", 154.0, 1856.0),  # reused (shorter than its step)
    _record("mrpc", 0, "auber", "own-fine-tuning", 1889.0, 1885.0),  # pruned again
    _record("mrpc", 0, "michel", "prune-only", 86.0, 80.0),
    _record("mrpc", 0, "michel", "prune+recover", 428.0, 80.0),  # reused, yet longer than the step
    _record("mrpc", 1, "michel", "prune-only", 90.0, 85.0),
    _record("mrpc", 1, "michel", "prune+recover", 400.0, 85.0),
    _record("mrpc", 0, "original", "control", 205.0, 0.0),
    _record("rte", 0, "voita", "prune+recover", 900.0, 700.0),  # no prune-only record: pruned (wall >= step)
    _record("rte", 0, "random", "prune-only", 3.0, 0.0),  # a prune step rounded to 0.0 s is known: 0
    _record("rte", 0, "original", "prune-only", 2.0, 0.0),  # the unpruned model has none
]


def test_cell_times_split_prune_steps_from_the_rest(tmp_path):
    """A reused prune step carries its prune-only cell's time (all of the cell is 'rest', even when it is longer
    than that step); a cell that pruned again (another number) has it taken off; the longest of each kind is kept."""
    records = RECORDS
    base = tmp_path / "base"
    (base / "mrpc-seed0").mkdir(parents=True)
    (base / "mrpc-seed0" / "train_info.json").write_text(json.dumps({"wall_s": 580.0}))
    (base / "mrpc-seed1").mkdir()
    (base / "mrpc-seed1" / "train_info.json").write_text("{not json")  # left out
    times = CellTimes.of_folder(records, base)
    assert times.prune == {"mrpc|auber": 1885.0, "mrpc|michel": 85.0, "rte|voita": 700.0, "rte|random": 0.0}
    assert times.cell("rte", "random", "prune-only", prunes=True) == 3.0
    assert times.rest["mrpc|auber|prune+recover"] == 154.0
    assert times.rest["mrpc|auber|own-fine-tuning"] == pytest.approx(4.0)
    assert times.rest["mrpc|michel|prune+recover"] == 428.0
    assert times.rest["mrpc|michel|prune-only"] == pytest.approx(6.0)
    assert times.rest["mrpc|original|control"] == 205.0
    assert times.base == {"mrpc": 580.0}
    assert times.longest == 1889.0
    assert times.cell("mrpc", "auber", "own-fine-tuning", prunes=False) == pytest.approx(4.0)
    assert times.cell("mrpc", "auber", "own-fine-tuning", prunes=True) == pytest.approx(1889.0)
    # the longest prune step (1885, own-fine-tuning's) plus the longest rest of a prune-only cell (4)
    assert times.cell("mrpc", "auber", "prune-only", prunes=True) == pytest.approx(1889.0)
    assert times.cell("cola", "auber", "prune-only", prunes=True) is None  # another task, no cola base to scale by
    assert times.cell("rte", "voita", "own-fine-tuning", prunes=False) is None


def test_a_cell_fits_when_its_estimate_times_the_margin_is_left():
    times = CellTimes(prune={"t|m": 100.0}, rest={"t|m|prune-only": 4.0, "t|m|prune+recover": 50.0},
                      base={"t": 300.0}, longest=400.0)
    limit = TimeLimit(deadline=1000.0, times=times)
    assert limit.fits_cell("t", "m", "prune-only", True, now=1000.0 - MARGIN * 104.0)
    assert not limit.fits_cell("t", "m", "prune-only", True, now=1000.0 - MARGIN * 104.0 + 1)
    assert limit.fits_cell("t", "m", "prune+recover", False, now=1000.0 - MARGIN * 50.0)
    assert not limit.fits_cell("t", "m", "prune+recover", True, now=1000.0 - MARGIN * 50.0)  # + its prune step
    assert limit.fits_base("t", now=1000.0 - MARGIN * 300.0) and not limit.fits_base("t", now=1000.0 - 300.0)
    # unknown: only while the longest recorded work (times the margin) still fits
    assert limit.fits_cell("u", "m", "prune-only", True, now=1000.0 - MARGIN * 400.0)
    assert not limit.fits_cell("u", "m", "prune-only", True, now=1000.0 - MARGIN * 400.0 + 1)
    assert not limit.fits_base("u", now=1000.0 - 399.0)
    empty = TimeLimit(deadline=1000.0, times=CellTimes())  # nothing recorded: anything starts while time is left
    assert empty.fits_cell("t", "m", "prune-only", True, now=999.0) and not empty.fits_base("t", now=1000.0)


def test_a_run_learns_its_records_one_by_one_as_the_folder_would_give_them(tmp_path):
    """add_record / add_base in the order a run finishes its work (a prune-only cell before the cells reusing its
    step) give the same estimates as of_folder over the finished folder, whose order does not matter (of_folder
    is built on add_record: the values themselves are checked by test_cell_times_split_prune_steps_from_the_rest)."""
    base = tmp_path / "base"
    (base / "mrpc-seed0").mkdir(parents=True)
    (base / "mrpc-seed0" / "train_info.json").write_text(json.dumps({"wall_s": 580.0, "examples": 3668}))
    folder = CellTimes.of_folder(RECORDS, base)
    assert CellTimes.of_folder(list(reversed(RECORDS)), base) == folder
    learned = CellTimes()
    learned.add_base("mrpc", {"wall_s": 580.0, "examples": 3668})
    for record in RECORDS:
        learned.add_record(record)
    assert learned == folder
    assert learned.base_shortest == {"mrpc": (580.0, pytest.approx(580.0 / 3668))}


def _two_tasks(cola_info, mrpc_infos=({"wall_s": 600.0, "examples": 3668}, {"wall_s": 900.0, "examples": 3668})):
    times = CellTimes()
    for info in mrpc_infos:
        times.add_base("mrpc", info)
    if cola_info is not None:
        times.add_base("cola", cola_info)
    for record in RECORDS[:3]:  # mrpc auber: prune step 1885 s, rest 4 s (prune-only), 154 s (prune+recover)
        times.add_record(record)
    return times


@pytest.mark.parametrize("cola_info, scale", [
    ({"wall_s": 540.0, "examples": 8551}, 1.0),  # shorter fine-tune, shorter per example: never scaled down
    ({"wall_s": 1500.0, "examples": 8551}, 1500.0 / 600.0),  # the shortest MRPC fine-tune (600 s), not 900
    ({"wall_s": 500.0, "examples": 635}, (500.0 / 635) / (600.0 / 3668)),  # longer per example
    ({"wall_s": 700.0}, 700.0 / 600.0),  # no example count: seconds alone
])
def test_a_cell_new_to_its_task_is_estimated_from_another_task_scaled_up_never_down(cola_info, scale):
    """... and never above the longest work recorded (1889 s here: the rule for an unestimated cell)."""
    times = _two_tasks(cola_info)
    assert times.longest == 1889.0
    assert times.scale("cola", "mrpc") == pytest.approx(scale)
    assert times.cell("cola", "auber", "prune-only", prunes=True) == pytest.approx(min(1889.0 * scale, 1889.0))
    assert times.cell("cola", "auber", "prune+recover", prunes=False) == pytest.approx(154.0 * scale)
    assert times.cell("cola", "michel", "prune-only", prunes=True) is None  # no task has it
    times.add_record(_record("cola", 0, "auber", "prune-only", 30.0, 25.0))  # its own task's record wins
    assert times.cell("cola", "auber", "prune-only", prunes=True) == 30.0


def test_of_several_tasks_the_smallest_scaled_estimate_is_taken():
    """CoLA's cheap examples make RTE look 4x longer per example; MRPC's say 1.6x: MRPC's estimate is taken."""
    times = CellTimes()
    for task, wall, examples in (("mrpc", 569.0, 3668), ("cola", 536.0, 8551), ("rte", 628.0, 2490)):
        times.add_base(task, {"wall_s": wall, "examples": examples})
    times.add_record(_record("mrpc", 0, "voita", "prune-only", 758.0, 750.0))
    times.add_record(_record("cola", 0, "voita", "prune-only", 610.0, 600.0))
    times.add_record(_record("mrpc", 0, "auber", "prune-only", 2864.0, 2860.0))
    mrpc_scale = (628.0 / 2490) / (569.0 / 3668)
    assert times.cell("rte", "voita", "prune-only", prunes=True) == pytest.approx(758.0 * mrpc_scale)
    assert 610.0 * times.scale("rte", "cola") > 758.0 * mrpc_scale


def test_no_estimate_from_another_task_without_a_base_fine_tune_of_both():
    """Nor with a base fine-tune of 0 s (rounded, or edited by hand): nothing to divide by."""
    assert _two_tasks({"wall_s": 0.0, "examples": 8551}).cell("cola", "auber", "prune-only", prunes=True) is None
    times = _two_tasks(None)
    assert times.scale("cola", "mrpc") is None
    assert times.cell("cola", "auber", "prune-only", prunes=True) is None
    assert CellTimes(rest={"mrpc|auber|prune-only": 4.0}, prune={"mrpc|auber": 1885.0},
                     base_shortest={"cola": (500.0, None)}).cell("cola", "auber", "prune-only", True) is None


def test_a_refusal_says_the_estimate_or_that_there_is_none():
    limit = TimeLimit(deadline=1000.0, times=_two_tasks({"wall_s": 540.0, "examples": 8551}))
    assert limit.cell_refusal("mrpc", "auber", "prune-only", True, now=1000.0 - MARGIN * 1889.0) is None
    assert limit.cell_refusal("mrpc", "auber", "prune-only", True, now=1000.0 - 2000.0) == (
        f"time limit: expected 1889 s x {MARGIN} > 2000 s left")
    assert limit.cell_refusal("mrpc", "voita", "prune-only", True, now=1000.0 - 2000.0) == (
        f"time limit: no recorded time estimates it, and 2000 s left < {MARGIN} x the longest recorded work (1889 s)")
    assert limit.base_refusal("mrpc", now=1000.0 - 1000.0) == f"time limit: expected 900 s x {MARGIN} > 1000 s left"


def _on(machine, threads, record):
    """``record`` as ``machine`` with ``threads`` torch threads would have written it."""
    return {**record, "cost": {**record["cost"], "machine": machine, "threads": threads}}


def _info(wall, machine=None, threads=None, examples=3668):
    info = {"wall_s": wall, "examples": examples}
    return {**info, "machine": machine, "threads": threads} if machine else info


# the same CPU model with 1 and with 8 torch threads per cell: two machines to the estimates. (Not a CPU and a GPU:
# a run folder records its device type and refuses the other, so their times never meet in one folder.)
EPYC, WIDE = ("AMD EPYC", 1), ("AMD EPYC", 8)


@pytest.mark.parametrize("what, machine", [
    ({"machine": "AMD EPYC", "threads": 1}, ("AMD EPYC", 1)),
    ({"wall_s": 3.0}, None),  # written before records named their machine
    ({"machine": "AMD EPYC"}, None), ({"threads": 2}, None), ({"machine": "", "threads": 2}, None),
    ({"machine": "AMD EPYC", "threads": 0}, None), ({"machine": "AMD EPYC", "threads": True}, None),
    ({"machine": "AMD EPYC", "threads": "2"}, None),
])
def test_machine_of_needs_a_name_and_a_positive_thread_count(what, machine):
    assert machine_of(what) == machine


def test_work_that_names_no_machine_is_estimated_exactly_as_before(tmp_path):
    """Rule 3 alone: a folder written before records named their machine gives a run on any machine (or on a
    cluster) the estimates of one pool (CellTimes), the same numbers for every cell and base fine-tune."""
    base = tmp_path / "base"
    (base / "mrpc-seed0").mkdir(parents=True)
    (base / "mrpc-seed0" / "train_info.json").write_text(json.dumps(_info(580.0)))
    pooled = CellTimes.of_folder(RECORDS, base)
    queries = [(t, m, c, p) for t in ("mrpc", "rte", "cola") for m in ("auber", "michel", "voita", "random", "original")
               for c in ("prune-only", "prune+recover", "own-fine-tuning", "control") for p in (True, False)]
    for here in (None, EPYC):
        times = MachineTimes.of_folder(RECORDS, base, here=here)
        assert times.machines == {} and times.pooled == pooled and times.longest == pooled.longest
        assert [times.cell(*q) for q in queries] == [pooled.cell(*q) for q in queries]
        assert [times.base_estimate(t) for t in ("mrpc", "rte")] == [580.0, None]


def test_a_run_estimates_from_its_own_machine_before_any_other():
    """Rule 1: this machine's record of the cell (here 1200 s) wins over a longer one of another machine (3963 s)
    or of no named machine, even with no base fine-tune to compare the machines by; a cell this machine has not
    recorded falls back to the pool (rule 3: no ratio without a base fine-tune of both)."""
    times = MachineTimes(here=EPYC)
    times.add_record(_record("rte", 0, "auber", "prune-only", 5000.0, 4990.0))  # names no machine
    times.add_record(_on("Intel Xeon", 2, _record("rte", 1, "auber", "prune-only", 3963.0, 3960.0)))
    times.add_record(_on(*EPYC, _record("rte", 2, "auber", "prune-only", 1200.0, 1195.0)))
    times.add_record(_on("Intel Xeon", 2, _record("rte", 1, "voita", "prune-only", 1030.0, 1020.0)))
    assert times.cell("rte", "auber", "prune-only", prunes=True) == 1200.0
    assert times.cell("rte", "voita", "prune-only", prunes=True) == 1030.0  # the pool's
    assert times.longest == 5000.0  # the rule for an unestimated cell: the longest anywhere
    other_threads = MachineTimes(here=("AMD EPYC", 2), machines=times.machines, pooled=times.pooled)
    assert other_threads.cell("rte", "auber", "prune-only", prunes=True) == 5000.0  # other threads, other machine


def test_another_machines_times_are_scaled_by_their_base_fine_tunes_of_the_same_task():
    """Rule 2: a run on 8 threads per cell that fine-tuned an MRPC base in 60 s, where 1 thread took 600 s (its
    shortest of 600 and 900 s), expects a tenth of the 1-thread cells, on every task: with 3600 s left it starts
    AUBER (1889 s on 1 thread, 188.9 s here), which the 1-thread time alone would refuse. A slower machine scales
    them up; of two other machines, the larger estimate; per train example when both fine-tunes give a count."""
    cpu = [_on(*EPYC, record) for record in RECORDS]
    times = MachineTimes(here=WIDE)
    for record in cpu:
        times.add_record(record)
    for wall in (600.0, 900.0):
        times.add_base("mrpc", _info(wall, *EPYC))
    times.add_base("rte", _info(700.0, *EPYC, examples=2490))
    limit = TimeLimit(deadline=3600.0, times=times)
    assert times.speed(EPYC) is None  # no base fine-tune here yet: the CPU's times as they are (rule 3)
    assert times.cell("mrpc", "auber", "prune-only", prunes=True) == pytest.approx(1889.0)
    assert not limit.fits_cell("mrpc", "auber", "prune-only", True, now=1600.0)
    times.add_base("mrpc", _info(60.0, *WIDE))
    assert times.speed(EPYC) == pytest.approx(0.1)
    assert times.cell("mrpc", "auber", "prune-only", prunes=True) == pytest.approx(188.9)
    assert times.cell("rte", "voita", "prune+recover", prunes=True) == pytest.approx(90.0)  # 900 s x 0.1
    assert times.base_estimate("mrpc") == 60.0 and times.base_estimate("rte") == pytest.approx(70.0)
    assert limit.fits_cell("mrpc", "auber", "prune-only", True, now=1600.0)
    assert times.cell("cola", "auber", "prune-only", prunes=True) is None  # no machine has it: the pool's rule
    # a second CPU, twice as slow as this machine on MRPC per example (its fine-tune saw half the examples)
    times.add_base("mrpc", _info(60.0, "slow CPU", 1, examples=1834))
    times.add_record(_on("slow CPU", 1, _record("mrpc", 0, "auber", "prune-only", 400.0, 396.0)))
    assert times.speed(("slow CPU", 1)) == pytest.approx(0.5)
    assert times.cell("mrpc", "auber", "prune-only", prunes=True) == pytest.approx(200.0)  # max(188.9, 400 x 0.5)
    times.add_record(_on(*WIDE, _record("mrpc", 0, "auber", "prune-only", 150.0, 146.0)))
    assert times.cell("mrpc", "auber", "prune-only", prunes=True) == 150.0  # its own now (rule 1)
    # a faster CPU than the one the records name: scaled down, by the largest ratio over shared tasks
    fast = MachineTimes(here=("fast CPU", 2), machines=times.machines, pooled=times.pooled)
    fast.add_base("mrpc", _info(300.0, "fast CPU", 2))
    fast.add_base("rte", _info(420.0, "fast CPU", 2, examples=2490))
    assert fast.speed(EPYC) == pytest.approx(max(300.0 / 600.0, 420.0 / 700.0))


def test_this_machines_estimate_wins_even_when_longer_and_a_slower_machine_scales_times_up():
    """Rule 1 over rule 2 whichever is longer (here 5000 s, the 8-thread machine's 400 or 4000 s x 2); a machine
    without example counts is compared in seconds (a machine 2x slower than the 8-thread one's 300 s: 600 s); a run
    with no machine of its own (a cluster) reads the pool whatever the records name."""
    times = MachineTimes(here=EPYC)
    times.add_base("mrpc", {"wall_s": 600.0, "machine": EPYC[0], "threads": EPYC[1]})  # no example count
    times.add_base("mrpc", {"wall_s": 300.0, "machine": WIDE[0], "threads": WIDE[1]})
    times.add_record(_on(*WIDE, _record("mrpc", 0, "auber", "prune-only", 400.0, 396.0)))
    assert times.speed(WIDE) == pytest.approx(2.0)
    assert times.cell("mrpc", "auber", "prune-only", prunes=True) == pytest.approx(800.0)  # not capped at 600
    times.add_record(_on(*EPYC, _record("mrpc", 1, "auber", "prune-only", 5000.0, 4996.0)))
    assert times.cell("mrpc", "auber", "prune-only", prunes=True) == 5000.0  # longer than the 8-thread machine's 800
    times.add_record(_on(*WIDE, _record("mrpc", 1, "auber", "prune-only", 4000.0, 3996.0)))  # scaled: 8000 s
    assert times.cell("mrpc", "auber", "prune-only", prunes=True) == 5000.0  # shorter than the 8-thread machine's 8000
    cluster = MachineTimes(here=None, pooled=times.pooled, machines=times.machines)
    assert cluster.cell("mrpc", "auber", "prune-only", prunes=True) == 5000.0 and cluster.speed(WIDE) is None
    assert cluster.base_estimate("mrpc") == 600.0


def test_a_prune_step_reused_from_another_machines_record_is_not_taken_off_this_machines_time():
    """A resumed prune+recover cell copies its stored prune-only record's step (80 s, on 1 thread): all of its
    100 s on 8 threads is recovery, and that machine's next prune+recover cell reusing a step is estimated at
    100 s, not 20."""
    times = MachineTimes(here=WIDE)
    times.add_record(_on(*EPYC, _record("rte", 0, "michel", "prune-only", 90.0, 80.0)))
    times.add_record(_on(*WIDE, _record("rte", 0, "michel", "prune+recover", 100.0, 80.0)))
    assert times.machines[WIDE].rest == {"rte|michel|prune+recover": 100.0} and times.machines[WIDE].prune == {}
    assert times.cell("rte", "michel", "prune+recover", prunes=False) == 100.0


@pytest.mark.parametrize("wall", ["nan", "inf", "-inf"])
def test_a_base_fine_tune_of_no_finite_time_is_refused_and_a_folder_leaves_it_out(tmp_path, wall):
    info = {"wall_s": float(wall), "examples": 3668, "machine": EPYC[0], "threads": EPYC[1]}
    with pytest.raises(ValueError, match="expected a finite number of seconds"):
        MachineTimes(here=EPYC).add_base("mrpc", info)
    (tmp_path / "mrpc-seed0").mkdir()
    (tmp_path / "mrpc-seed0" / "train_info.json").write_text(json.dumps(info))  # NaN, Infinity: Python's JSON
    times = MachineTimes.of_folder([], tmp_path, here=EPYC)
    assert times.base_estimate("mrpc") is None and times.longest == 0.0


def test_machine_times_learn_their_records_one_by_one_as_the_folder_would_give_them(tmp_path):
    base = tmp_path / "base"
    for seed, info in enumerate((_info(580.0, *EPYC), _info(61.0, *WIDE), _info(700.0))):
        (base / f"mrpc-seed{seed}").mkdir(parents=True)
        (base / f"mrpc-seed{seed}" / "train_info.json").write_text(json.dumps(info))
    records = [_on(*(EPYC if i % 2 else WIDE), r) if i % 3 else r for i, r in enumerate(RECORDS)]
    folder = MachineTimes.of_folder(records, base, here=WIDE)
    assert MachineTimes.of_folder(list(reversed(records)), base, here=WIDE) == folder
    assert set(folder.machines) == {EPYC, WIDE} and folder.pooled == CellTimes.of_folder(records, base)
    learned = MachineTimes(here=WIDE)
    for info in (_info(580.0, *EPYC), _info(61.0, *WIDE), _info(700.0)):
        learned.add_base("mrpc", info)
    for record in records:
        learned.add_record(record)
    assert learned == folder


def test_the_ray_status_board_learns_what_the_driver_tells_it():
    """The board (a Ray actor in a run, a plain object here) holds the limit the workers ask; the driver tells it
    each record and base fine-tune as they return."""
    board = StatusBoard(TimeLimit.starting_now(100.0, CellTimes()))
    cell = ("t", "m", "prune-only", True)
    assert board.refusal("t|seed=0|m", "pid 1", cell=cell) is None  # an empty folder: anything while time is left
    board.learn("add_record", _record("t", 0, "m", "prune-only", 500.0, 490.0))
    assert board.refusal("t|seed=1|m", "pid 1", cell=cell).startswith("time limit: expected 500 s")
    own = ("t", "m", "own-fine-tuning", False)  # holding its prune step's weights: past the limit too
    assert board.refusal("t|seed=0|m|own", "pid 1", cell=("t", "m", "prune-only", True), after_stop=True) is None
    board.learn("add_record", _record("t", 0, "m", "own-fine-tuning", 400.0, 490.0))
    assert board.refusal("t|seed=1|m|own", "pid 1", cell=own).startswith("time limit: expected")
    assert board.refusal("t|seed=1|m|own", "pid 2", cell=own, after_stop=True) is None
    board.learn("add_base", "t", {"wall_s": 300.0, "examples": 100})
    assert board.refusal("base|t|1", "pid 1", cell=("base", "t")).startswith("time limit: expected 300 s")
    assert board.snapshot() == {"t|seed=0|m": "pid 1", "t|seed=0|m|own": "pid 1", "t|seed=1|m|own": "pid 2"}
    board.stop()
    assert board.refusal("t|seed=2|m", "pid 1", after_stop=False) == "stop requested"
    assert board.refusal("t|seed=2|m", "pid 1", after_stop=True) is None


def test_the_status_board_module_imports_neither_torch_nor_transformers():
    """Ray starts a fresh process for each run's board actor, which imports the board's module and, to unpickle
    the run's limit, the time limit's: without torch it is ready in about a second, not the 5-20 s of importing
    torch before the run's first task may start."""
    code = ("import sys, headprune_bench.benchmark.execution.ray.status_board, "
            "headprune_bench.benchmark.execution.time_limit; "
            "print(sorted({'torch', 'transformers', 'ray'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
