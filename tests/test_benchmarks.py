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


def test_openai_stream_benchmark_runs() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "openai_cpu.py"), "--events", "200", "--samples", "2",
                          "--paths", "chat sync,chat stream(),responses async"], capture_output=True, text=True,
                         timeout=180, cwd=BENCH)
    assert out.returncode == 0, out.stderr
    assert "chat stream()" in out.stdout and "responses async" in out.stdout
    assert "streamscope: at most" in out.stdout and "streamscope+budgets: at most" in out.stdout


def test_load_short_form() -> None:
    """benchmarks/load.py in small: every stall detected within its budget, no healthy stream
    killed, every span ended, memory flat across three rounds; async and 8 threads of sync."""
    out = subprocess.run([sys.executable, str(BENCH / "load.py"), "--streams", "200", "--rounds", "3",
                          "--threads", "8", "--per-thread", "1", "--margin", "1.0"],
                         capture_output=True, text=True, timeout=600, cwd=BENCH)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all checks hold" in out.stdout
