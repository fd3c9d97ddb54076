"""scripts/gpu_check.py (issue 41, item 4), which a session with a lent GPU runs once: its --dry-run on the CPU
prints every step's command and the cells each set of steps plans, and writes nothing."""
from __future__ import annotations

import os
import subprocess
import sys

from repo_paths import REPO_ROOT


def test_the_gpu_check_dry_run_prints_each_step_and_its_cells_and_writes_nothing(glue_dir, tmp_path):
    out = tmp_path / "gpu-check"
    res = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_check.py"), "--dry-run", "--out", str(out)],
                         capture_output=True, text=True, cwd=REPO_ROOT, env={**os.environ, "GLUE_DIR": str(glue_dir)},
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    steps = [line.split("]")[0][1:] for line in lines if line.startswith("[")]
    assert steps == ["cuda-tests", "bases-fp32", *(f"packed-fp32-{n}" for n in (1, 4, 8, 16)), "bases-bf16",
                     *(f"packed-bf16-{n}" for n in (1, 4, 8, 16)), "auber-1", "auber-8"]
    packed = next(line for line in lines if line.startswith("[packed-bf16-16]"))
    assert "(window 12 s, then Ctrl-C)" in packed and "--workers 16 --gpus-per-cell 0.0625" in packed
    assert "--precision bf16" in packed and "--methods random,confidence,michel,dsp,redundancy,voita,kwon" in packed
    # 2 tasks x 4 seeds x (original: prune-only, control; 7 methods x 2 conditions; voita's own fine-tuning)
    assert "bench run --dry-run: 136 cells planned, 136 to do; nothing is run or written" in lines
    assert "bench run --dry-run: 24 cells planned, 24 to do; nothing is run or written" in lines  # AUBER at 8
    assert lines[-1].startswith("expected: about 8 min (96 s of windows")
    assert not out.exists()
