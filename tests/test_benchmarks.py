"""The benchmarks run (a short form, so they cannot rot); their numbers are read in docs, not asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_micro_benchmark_runs() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "micro.py"), "--events", "200", "--repeat", "2"],
                         capture_output=True, text=True, timeout=120, cwd=BENCH)
    assert out.returncode == 0, out.stderr
    assert "observe-only +" in out.stdout and "budgets +" in out.stdout


def test_stream_benchmark_runs() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "stream_cpu.py"), "--events", "200", "--samples", "2",
                          "--paths", "sync create,async stream()"], capture_output=True, text=True, timeout=120,
                         cwd=BENCH)
    assert out.returncode == 0, out.stderr
    assert "sync create" in out.stdout and "async stream()" in out.stdout
