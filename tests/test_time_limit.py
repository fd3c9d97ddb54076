"""``--time-limit`` (benchmark.time_limit): durations, the estimates read from a folder's records, the fit rule.
The runs that use it (serial and on Ray) are tested in test_parallel.py."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from benchmark.cli import main
from benchmark.config import ConfigError
from benchmark.time_limit import MARGIN, CellTimes, TimeLimit, parse_duration


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


def test_cell_times_split_prune_steps_from_the_rest(tmp_path):
    """A reused prune step carries its prune-only cell's time (all of the cell is 'rest', even when it is longer
    than that step); a cell that pruned again (another number) has it taken off; the longest of each kind is kept."""
    records = [
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
    assert times.cell("cola", "auber", "prune-only", prunes=True) is None  # another task: unknown
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
