"""Provenance of a record (issue 61, item 3): the checkout's state as ``bench run`` starts (``git_dirty`` and a hash of
the uncommitted diff, from real temporary git repositories), the base-model check of a resumed seed
(``base_check``), and old records read with what their schema allows."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from smoke_runs import run_smoke
from synthetic_runs import make_records

from headprune_bench.benchmark import provenance
from headprune_bench.benchmark.cells.work import CellWork
from headprune_bench.benchmark.provenance import GIT_UNKNOWN, UNKNOWN, git_state
from headprune_bench.benchmark.store.jsonl import RecordStore
from headprune_bench.benchmark.store.records import (
    BASE_CHECK_FAILED,
    BASE_DIFFERS,
    BASE_EQUAL,
    BASE_NOT_COMPARED,
    NOT_RECORDED,
    SCHEMA,
    Record,
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git repository with two committed files (``code.py``, ``runs/keep.txt``) and a clean checkout."""
    root = tmp_path / "repo"
    (root / "runs").mkdir(parents=True)
    (root / "code.py").write_text("x = 1\n")
    (root / "runs" / "keep.txt").write_text("a\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    return root


def test_a_clean_checkout_is_not_dirty_and_has_no_diff(repo):
    head = _git(repo, "rev-parse", "HEAD").strip()
    assert git_state(root=repo) == provenance.GitState(head, False, None)
    assert git_state(root=repo).as_provenance() == {"git_commit": head, "git_dirty": False, "git_diff": None}


def test_the_diff_hash_is_stable_for_the_same_changes_and_moves_with_them(repo):
    head = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "code.py").write_text("x = 2\n")
    first = git_state(root=repo)
    assert first.commit == head + "+dirty" and first.dirty is True
    assert len(first.diff) == 16 and int(first.diff, 16) >= 0
    assert git_state(root=repo) == first  # asked again: the same
    _git(repo, "add", "code.py")  # staged or not, the same change against HEAD
    assert git_state(root=repo).diff == first.diff
    # settings that change what `git diff` prints by default change nothing in the hash
    for key, value in (("diff.noprefix", "true"), ("color.ui", "always"), ("core.abbrev", "12"),
                       ("diff.mnemonicPrefix", "true")):
        _git(repo, "config", key, value)
    assert git_state(root=repo).diff == first.diff
    (repo / "code.py").write_text("x = 3\n")
    other = git_state(root=repo)
    assert other.dirty is True and other.diff != first.diff
    (repo / "code.py").write_text("x = 2\n")  # back to the first change
    assert git_state(root=repo).diff == first.diff
    (repo / "code.py").write_text("x = 1\n")  # the code that runs is HEAD's again (a change only staged is not)
    assert git_state(root=repo) == provenance.GitState(head, False, None)


def test_the_run_folder_and_untracked_files_leave_the_checkout_clean(repo):
    head = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "runs" / "keep.txt").write_text("b\n")  # a tracked file inside the run folder
    (repo / "new.py").write_text("y = 1\n")  # untracked
    assert git_state(repo / "runs", root=repo) == provenance.GitState(head, False, None)
    assert git_state(root=repo).dirty is True  # without the exclusion the run folder's change counts
    (repo / "code.py").write_text("x = 2\n")
    outside = git_state(repo / "runs", root=repo)
    (repo / "runs" / "keep.txt").write_text("c\n")
    assert git_state(repo / "runs", root=repo) == outside  # the run folder's content is not in the hash


def test_git_that_cannot_tell_gives_unknown_and_never_raises(repo, tmp_path, monkeypatch):
    plain = tmp_path / "not-a-repo"
    plain.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above it either
    assert git_state(root=plain) == GIT_UNKNOWN

    def missing(*a, **k):
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", missing)
    assert git_state(root=repo) == GIT_UNKNOWN
    assert provenance.git_commit() == UNKNOWN

    def hangs(*a, **k):
        raise subprocess.TimeoutExpired(a[0], 30)

    monkeypatch.setattr(provenance.subprocess, "run", hangs)
    assert git_state(root=repo) == GIT_UNKNOWN


def test_a_diff_git_cannot_make_leaves_the_commit_known_and_the_rest_unknown(repo, monkeypatch):
    (repo / "code.py").write_text("x = 2\n")
    real = subprocess.run

    def no_diff(args, **kw):
        if args[1] == "diff":
            return subprocess.CompletedProcess(args, 128, stdout=b"", stderr=b"fatal")
        return real(args, **kw)

    monkeypatch.setattr(provenance.subprocess, "run", no_diff)
    head = _git(repo, "rev-parse", "HEAD").strip()
    assert git_state(root=repo) == provenance.GitState(head, UNKNOWN, UNKNOWN)


# --------------------------------------------------------------------------- records


def _raw(**provenance_fields) -> dict:
    """A whole schema-2 record (written before ``base_check``, ``git_dirty`` and ``git_diff``) with ``provenance``."""
    made = make_records(tasks=("mrpc",), seeds=(0,), methods={"original": ["none"]})[0]
    raw = Record.from_dict({**made, "predicted_class_share": 0.5}).to_dict()
    return {**raw, "schema": 2, "weights": "base", "layers_emptied": 0, "provenance": provenance_fields}


def test_an_old_record_derives_what_its_commit_says_and_writes_back_as_read():
    dirty = _raw(git_commit="a735fb01cddb912cbd7886f3ea1900edb1278932+dirty")
    rec = Record.from_dict(dirty)
    assert (rec.git_dirty, rec.git_diff, rec.base_check) == (True, NOT_RECORDED, NOT_RECORDED)
    assert rec.to_dict() == dirty
    clean = Record.from_dict(_raw(git_commit="a735fb01cddb912cbd7886f3ea1900edb1278932"))
    assert (clean.git_dirty, clean.git_diff) == (False, None)
    assert (Record.from_dict(_raw(git_commit="unknown")).git_dirty, Record.from_dict(_raw()).git_dirty) == \
        (UNKNOWN, NOT_RECORDED)
    assert Record.from_dict(_raw()).git_diff == NOT_RECORDED
    # a resumed seed's check that found differences left its count in the trace: that much is known
    flagged = {**dirty, "trace": {BASE_DIFFERS: 3}}
    assert Record.from_dict(flagged).base_check == "differs:3" and Record.from_dict(flagged).to_dict() == flagged


def test_a_new_record_writes_its_fields_and_reads_them_back():
    raw = {**_raw(git_commit="abc+dirty", git_dirty=True, git_diff="0123456789abcdef", precision="bf16"),
           "schema": SCHEMA, "base_check": BASE_EQUAL}
    rec = Record.from_dict(raw)
    assert (rec.git_dirty, rec.git_diff, rec.base_check) == (True, "0123456789abcdef", BASE_EQUAL)
    written = rec.to_dict()
    assert written["base_check"] == BASE_EQUAL and written["provenance"] == raw["provenance"]
    assert Record.from_dict(written).to_dict() == written
    # git_dirty as written wins over the commit's suffix (a status git could not read says "unknown")
    assert Record.from_dict({**raw, "provenance": {"git_commit": "abc", "git_dirty": UNKNOWN,
                                                   "git_diff": UNKNOWN}}).git_dirty == UNKNOWN


class _Bench:
    base_checked = False
    base_differs = None
    base_failed = None


@pytest.mark.parametrize(("stored", "differ", "expected"), [
    (False, 0, BASE_NOT_COMPARED), (True, 0, BASE_EQUAL), (True, 5, "differs:5"), (True, None, BASE_CHECK_FAILED)],
    ids=["this-runs-original", "equal", "differs", "check-raised"])
def test_finish_says_whether_and_how_the_base_model_was_checked(monkeypatch, stored, differ, expected):
    original = _raw(git_commit="abc")
    monkeypatch.setattr(CellWork, "base_check", lambda self, bench, record: differ)
    work = CellWork(cfg=None, provenance={}, method_classes={}, device=torch.device("cpu"))
    record = Record.from_dict({**_raw(git_commit="abc"), "schema": SCHEMA})
    out = work.finish(record, "k", _Bench(), original, stored_original=stored)
    assert out.base_check == expected and out.to_dict()["base_check"] == expected
    assert out.trace.get(BASE_DIFFERS) == (differ if stored and differ else None)
    no_predictions = work.finish(record, "k", _Bench(), {**original, "predictions": []}, stored_original=True)
    assert no_predictions.base_check == BASE_NOT_COMPARED


# --------------------------------------------------------------------------- through bench run


def test_a_run_from_a_dirty_checkout_says_so_in_every_record_and_a_resumed_seed_says_its_check(
        repo, tmp_path, glue_dir, monkeypatch, one_torch_thread):
    """``bench run`` with the package's checkout pointed at a temporary repository: clean, then dirty (one record
    computed again); the records say which, with the diff's hash; the resumed seed's records say that its base
    model, loaded from ``base/``, predicted the dev set as the stored original record."""
    monkeypatch.setattr(provenance, "REPO_ROOT", repo)
    out = tmp_path / "run"
    run_smoke(out, glue_dir)
    head = _git(repo, "rev-parse", "HEAD").strip()
    records = RecordStore(out).records()
    assert [r["method"] for r in records] == ["original", "random"]
    for r in records:
        assert r["schema"] == SCHEMA and r["base_check"] == BASE_NOT_COMPARED  # this run's base model and original
        assert {k: r["provenance"][k] for k in ("git_commit", "git_dirty", "git_diff", "precision")} == \
            {"git_commit": head, "git_dirty": False, "git_diff": None, "precision": "fp32"}
    (repo / "code.py").write_text("x = 2\n")
    expected = git_state(out, root=repo)
    (out / "records.jsonl").write_text(json.dumps(records[0]) + "\n")  # random's cell is to do again
    run_smoke(out, glue_dir)
    again = RecordStore(out).records()
    assert again[0] == records[0]
    new = Record.from_dict(again[1])
    assert new.method == "random" and (new.git_dirty, new.git_diff) == (True, expected.diff)
    assert new.provenance["git_commit"] == head + "+dirty" and new.base_check == BASE_EQUAL
    plan = json.loads((out / "runs.jsonl").read_text().splitlines()[-1])
    assert (plan["git_commit"], plan["git_diff"]) == (head + "+dirty", expected.diff)
