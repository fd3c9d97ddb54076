"""What bench run says about the machine before any training (headprune_bench.benchmark.execution.resolve): a bf16
run on a CPU without native bf16 is warned about, naming the CPU flags."""
from __future__ import annotations

import torch
from click.testing import CliRunner

from headprune_bench.benchmark.cli import main
from headprune_bench.benchmark.execution import resolve

CPU = torch.device("cpu")


def test_bf16_on_a_cpu_without_native_bf16_is_warned_about_naming_the_flags(monkeypatch, tmp_path, glue_dir):
    monkeypatch.setattr(resolve, "cpu_flags", lambda: {"avx2", "avx512f"})
    warning = resolve.bf16_warning("bf16", CPU)
    assert warning.startswith("--precision bf16 on a CPU without native bf16 (avx512_bf16 or amx_bf16 not in "
                              "/proc/cpuinfo)") and "slower than fp32" in warning
    assert resolve.bf16_warning("fp32", CPU) is None and resolve.bf16_warning("bf16", torch.device("cuda")) is None
    res = CliRunner().invoke(main, ["run", "--preset", "smoke", "--methods", "random", "--tasks", "wnli", "--precision",
                                    "bf16", "--data-dir", str(glue_dir), "--dry-run", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0 and f"warning: {warning}" in res.output
    for native in ("avx512_bf16", "amx_bf16"):
        monkeypatch.setattr(resolve, "cpu_flags", lambda native=native: {"avx2", native})
        assert resolve.bf16_warning("bf16", CPU) is None


def test_cpu_flags_are_read_from_proc_cpuinfo():
    flags = resolve.cpu_flags()
    assert not flags or "fpu" in flags  # every x86 CPU has fpu; elsewhere the file may be absent or differ
