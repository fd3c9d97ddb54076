"""The first Ctrl-C (headprune_bench.benchmark.execution.stopping): what it says is running and for how long, and a
running base fine-tune stopped at its next step (or let finish with --wait-for-base). Stops while cells run, serial
and on Ray, are tested in execution/ray/test_parallel.py."""
from __future__ import annotations

import re
import signal

import pytest
from click.testing import CliRunner

from headprune_bench.benchmark.cells.work import CellWork
from headprune_bench.benchmark.cli import main
from headprune_bench.benchmark.execution.stopping import Running, StopRequest, duration_text
from headprune_bench.benchmark.store.jsonl import RecordStore


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (89, "89 s"), (90, "2 min"), (3000, "50 min"),
                                           (5399, "90 min"), (5400, "1.5 h"), (40 * 3600, "40.0 h")])
def test_durations_read_as_a_person_says_them(seconds, text):
    assert duration_text(seconds) == text


def test_the_stop_message_names_each_running_thing_its_time_and_what_happens_to_it():
    stop = StopRequest()
    assert "nothing is running now" in stop.message()
    stop.running["a"] = Running("mrpc s3 auber fraction:0.3 prune-only", 3360.0, started=100.0)
    stop.running["b"] = Running("base fine-tune of rte seed 4", None, base=True, started=400.0)
    lines = [line.strip() for line in stop.message().splitlines()]
    assert lines[0].endswith("running now:") and lines[-1].startswith("press Ctrl-C again")
    now = 100.0 + 600
    assert Running("mrpc s3 auber fraction:0.3 prune-only", 3360.0, started=100.0).line(True, now) == (
        "mrpc s3 auber fraction:0.3 prune-only: running for 10 min, expected about 56 min in all; it finishes and "
        "is written")
    assert Running("base fine-tune of rte seed 4", None, base=True, started=400.0).line(True, now) == (
        "base fine-tune of rte seed 4: running for 5 min (no time recorded for it yet); stops at its next training "
        "step, not saved: the next run fine-tunes it again (--wait-for-base lets it finish instead)")
    assert Running("base fine-tune of rte seed 4", 1100.0, base=True, started=400.0).line(False, now) == (
        "base fine-tune of rte seed 4: running for 5 min, expected about 18 min in all; it finishes and is saved "
        "(--wait-for-base)")
    assert not stop.stops_base_now
    stop.request()
    assert stop.stops_base_now and not StopRequest(stops_bases=False).stops_base_now


def _ctrl_c_at_the_first_step(monkeypatch) -> None:
    """The base fine-tune gets a Ctrl-C (SIGINT to this process, which runs `bench run`) after its first step."""
    train_base = CellWork.train_base

    def pressed_once(self, data, seed, tokenizer, should_stop=None):
        pressed = []

        def ask() -> bool:
            if not pressed:
                pressed.append(1)
                signal.raise_signal(signal.SIGINT)  # the handler has run when this returns
            return should_stop()

        return train_base(self, data, seed, tokenizer, should_stop=ask)

    monkeypatch.setattr(CellWork, "train_base", pressed_once)


@pytest.mark.parametrize("wait", [False, True], ids=["stops-at-a-step", "wait-for-base"])
def test_a_ctrl_c_in_a_base_fine_tune_stops_it_at_its_next_step_unless_asked_to_wait(wait, monkeypatch, glue_dir,
                                                                                     tmp_path):
    """Issue 42, item 8: the Ctrl-C used to say "stopping after the running cells" while no cell ran, and the base
    fine-tune went on. Now it says the base fine-tune is running and stops it after the step (nothing saved, exit
    130, a rerun trains it); with --wait-for-base it finishes and is saved, and no cell starts."""
    _ctrl_c_at_the_first_step(monkeypatch)
    out = tmp_path / "run"
    args = ["run", "--preset", "smoke", "--methods", "random", "--tasks", "wnli", "--no-recover", "--device", "cpu",
            "--no-progress", "--no-report", "--data-dir", str(glue_dir), "--out", str(out)]
    res = CliRunner().invoke(main, args + (["--wait-for-base"] if wait else []))
    assert res.exit_code == 130, res.output
    log = (out / "run.log").read_text()
    assert re.search(r"running now:\n  base fine-tune of wnli seed 0: running for \d+ s.{1,2}no time recorded", log)
    assert RecordStore(out).records() == []  # no cell starts after a Ctrl-C
    saved = (out / "base" / "wnli-seed0" / "config.json").exists()
    if wait:
        assert saved and "it finishes and is saved (--wait-for-base)" in log
    else:
        assert not saved and "stops at its next training step, not saved" in log
        assert "base model of wnli seed 0: stopped on request after step 1 of " in res.output
