"""Shared fixtures: where the real GLUE files are ($GLUE_DIR, else ../shared/data/glue beside the checkout)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from repo_paths import GLUE_ROOT

# `bench run` defaults to --workers auto (Ray, one cell per core); the tests' runs are serial unless they ask for Ray.
os.environ["BENCH_WORKERS"] = "0"


def pytest_configure(config) -> None:
    """Under pytest-xdist (``-n N``), each of the N test processes gets its share of the cores as torch threads:
    N processes of all-core OpenMP pools would oversubscribe the machine (their threads spin waiting for cores)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))


@pytest.fixture(scope="session")
def glue_dir() -> Path:
    if not GLUE_ROOT.is_dir():
        pytest.skip(f"GLUE data folder {GLUE_ROOT} not found (set GLUE_DIR to the shared GLUE files)")
    return GLUE_ROOT


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread (OpenMP workers spin on a busy 2-core machine); restored after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
