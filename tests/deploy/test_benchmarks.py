"""The benchmarks run (a short form, so they cannot rot); their numbers are read in docs, not asserted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_micro_benchmark_runs() -> None:
    """Each SDK's per-event path alone, with the verdict against the targets."""
    out = subprocess.run([sys.executable, str(BENCH / "micro.py"), "--events", "200", "--repeat", "4"],
                         capture_output=True, text=True, timeout=180, cwd=BENCH)
    assert out.returncode == 0, out.stderr
    for sdk in ("anthropic", "openai-chat", "openai-responses"):
        line = rf"^{sdk}: observe-only at most [+-][0-9.]+ µs .*budgets at most [+-]"
        assert re.search(line, out.stdout, re.M), out.stdout
    cells = re.findall(r"(observe-only|budgets) [+-][0-9.]+ \[", out.stdout)
    assert len(cells) == 12, out.stdout  # sync and async, each SDK


def test_micro_benchmark_measures_the_wrapped_fallback() -> None:
    """`--wrapped`: the path an SDK release whose layers streamscope does not know takes; the same
    table, with streamscope over the SDK's layers instead of in their place."""
    base = [sys.executable, str(BENCH / "micro.py"), "--sdk", "anthropic", "--events", "200", "--repeat", "4"]
    in_place = subprocess.run(base, capture_output=True, text=True, timeout=180, cwd=BENCH)
    wrapped = subprocess.run([*base, "--wrapped"], capture_output=True, text=True, timeout=180, cwd=BENCH)
    assert in_place.returncode == 0 == wrapped.returncode, in_place.stderr + wrapped.stderr
    assert "streamscope runs in place of them" in in_place.stdout, in_place.stdout  # the installed SDK is known
    assert "streamscope runs over them" in wrapped.stdout, wrapped.stdout
    assert "every SDK layer wrapped" in wrapped.stdout, wrapped.stdout
    assert re.search(r"^anthropic: observe-only at most [+-][0-9.]+ µs", wrapped.stdout, re.M), wrapped.stdout


def test_micro_benchmark_gives_its_verdict_on_the_worst_process() -> None:
    """`--processes`: one table per fresh interpreter, the verdict on the worst of them."""
    out = subprocess.run([sys.executable, str(BENCH / "micro.py"), "--sdk", "openai-chat", "--events", "200",
                          "--repeat", "4", "--processes", "2"], capture_output=True, text=True, timeout=180, cwd=BENCH)
    assert out.returncode == 0, out.stderr
    worst = {label: [float(v) for v in re.findall(rf"^openai-chat: {label} at most ([+-][0-9.]+)", out.stdout, re.M)]
             for label in ("observe-only",)}
    assert "-- process 2 of 2" in out.stdout and len(worst["observe-only"]) == 2, out.stdout
    verdict = re.search(r"^openai-chat, worst of 2 processes: observe-only at most ([+-][0-9.]+) µs", out.stdout, re.M)
    assert verdict and float(verdict.group(1)) == max(worst["observe-only"]), out.stdout


def test_openai_fast_path_benchmark_times_each_test() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "openai_fast_path.py"), "--chunks", "200", "--layouts", "0"],
                         capture_output=True, text=True, timeout=180, cwd=BENCH)
    assert out.returncode == 0, out.stderr
    for name in ("installed", "plain reads", "attributes"):
        assert re.search(rf"^  {name} +[0-9-]+ +[0-9-]+$", out.stdout, re.M), out.stdout


def test_watchdog_work_is_per_stream_not_per_event() -> None:
    """wall_time.py: the watchdog's wake-ups, checks and heap pushes are the same for a short and
    a long stream, read at full speed or stretched in wall time: nothing of it is per event (its
    exit status says so)."""
    out = subprocess.run([sys.executable, str(BENCH / "wall_time.py"), "--small", "50", "--large", "400",
                          "--pace", "0.002"], capture_output=True, text=True, timeout=180, cwd=BENCH)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the same for both lengths" in out.stdout, out.stdout
    assert re.search(r"^ +400 +0\.002 ", out.stdout, re.M), out.stdout


def test_micro_benchmark_refuses_an_unknown_sdk() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "micro.py"), "--sdk", "opneai-chat"],
                         capture_output=True, text=True, timeout=60, cwd=BENCH)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "unknown --sdk 'opneai-chat'; choose from anthropic, openai-chat, openai-responses" in out.stderr


def test_stream_benchmark_runs() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "stream_cpu.py"), "--events", "200", "--samples", "2",
                          "--paths", "sync create,async stream()"], capture_output=True, text=True, timeout=120,
                         cwd=BENCH)
    assert out.returncode == 0, out.stderr
    assert "sync create" in out.stdout and "async stream()" in out.stdout
    assert "metrics on (an SDK MeterProvider with a reader)" in out.stdout  # the default: as users run it


def test_openai_stream_benchmark_runs() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "openai_cpu.py"), "--events", "200", "--samples", "2",
                          "--paths", "chat sync,chat stream(),responses async"], capture_output=True, text=True,
                         timeout=180, cwd=BENCH)
    assert out.returncode == 0, out.stderr
    assert "chat stream()" in out.stdout and "responses async" in out.stdout
    assert "streamscope: at most" in out.stdout and "streamscope+budgets: at most" in out.stdout
    assert "metrics on (an SDK MeterProvider with a reader)" in out.stdout


@pytest.mark.parametrize("metrics", ["sdk", "multiprocess", "off"])
@pytest.mark.parametrize("config", ["observe", "budgets", "own-observe", "wrapped-budgets", "responses-observe"])
def test_the_instruction_counts_children_record_with_metrics_on_and_off(config: str, metrics: str) -> None:
    """instructions.py's child as callgrind runs it (natively here): with metrics on, the chunk
    histogram counted every gap of both streams (the child checks), and the spans are there."""
    out = subprocess.run([sys.executable, str(BENCH / "instructions.py"), "--child", config, "--deltas", "50",
                          "--metrics", metrics], capture_output=True, text=True, timeout=120, cwd=BENCH)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["problems"] == [] and len(report["spans"]) == 2, report


def test_load_short_form() -> None:
    """benchmarks/load.py in small: every stall detected within its budget, no healthy stream
    killed, every span ended, memory flat across three rounds; async and 8 threads of sync.

    The idle budget is 3.5 s (first token 7 s) against healthy gaps of 1 s, and a stall may be
    seen 6 s past it: on a loaded 2-core CI machine the client's loop was seen 3.5-4.7 s late
    (loop lag p99, at the start and end of a round, when 200 streams open or end at once). A
    budget's check that runs that late looks again as long after before it fires (a busy loop's
    backlog is not the provider's silence), so a stall is seen up to twice the lag late; what this
    short form checks under that load is that every stall is caught and no healthy stream is."""
    out = subprocess.run([sys.executable, str(BENCH / "load.py"), "--streams", "200", "--rounds", "3",
                          "--threads", "8", "--per-thread", "1", "--idle", "3.5", "--margin", "6"],
                         capture_output=True, text=True, timeout=600, cwd=BENCH)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all checks hold" in out.stdout


@pytest.mark.timeout(1500)
def test_relay_instructions_short_form() -> None:
    """relay_instructions.py in small: the hand-written relay and streamscope's relay() under
    callgrind, instructions per relayed event and the difference in a table (each child checks
    that it relayed every token and one `done`), and what dominates (`--profile`)."""
    out = subprocess.run([sys.executable, str(BENCH / "relay_instructions.py"), "--small", "50", "--large", "250",
                          "--repeats", "1", "--configs", "baseline,relay", "--profile"],
                         capture_output=True, text=True, timeout=1500, cwd=BENCH)  # four children under valgrind
    assert out.returncode == 0, out.stdout + out.stderr
    if shutil.which("valgrind") is None or shutil.which("setarch") is None:
        assert "valgrind (or setarch) is not installed" in out.stdout, out.stdout
    else:
        for row in ("hand-written relay (article)", "streamscope relay()", "streamscope relay() - baseline"):
            assert re.search(rf"^{re.escape(row)} +[+-]?[0-9,]+", out.stdout, re.M), out.stdout
        assert re.search(r"^streamscope relay\(\) / hand-written relay \(article\): [0-9.]+x \(target <= 1\.1x\): "
                         r"(met|NOT met)$", out.stdout, re.M), out.stdout
    assert re.search(r"^streamscope\.serve +0\.0 +[0-9.]+$", out.stdout, re.M), out.stdout  # calls per relayed event


def test_relay_load_short_form() -> None:
    """relay_load.py with 50 concurrent streams per endpoint: every stream done, memory and CPU per
    stream reported for the hand-written relay and streamscope's relay, side by side."""
    out = subprocess.run([sys.executable, str(BENCH / "relay_load.py"), "--streams", "50"],
                         capture_output=True, text=True, timeout=180, cwd=BENCH)
    assert out.returncode == 0, out.stdout + out.stderr
    for row in ("hand-written relay (article)", "streamscope relay(), budgets"):
        assert re.search(rf"^{re.escape(row)} +50/50 +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +-?[0-9.]+ +[0-9.]+ +[0-9]+$",
                         out.stdout, re.M), out.stdout
    assert "all streams done" in out.stdout


def test_relay_scale_short_form() -> None:
    """relay_scale.py at one small stream count, 1 in 10 stalling, and 20 sync threads, the answers
    held 4 s past the last arrival (about 45 s in all): every stream ended as expected and all 40
    open at once, the figures and the verdicts said (never asserted), no plots for a short run."""
    out = subprocess.run([sys.executable, str(BENCH / "relay_scale.py"), "--streams", "40", "--threads", "20",
                          "--rounds", "2", "--hold", "4"], capture_output=True, text=True, timeout=300, cwd=BENCH)
    assert out.returncode == 0, out.stdout + out.stderr
    for row in ("hand-written relay (article)", "streamscope relay(), budgets"):
        # done, one terminal event, at once, deltas per answer, ramp s ... CPU % server/sim/browsers
        assert re.search(rf"^ +40  {re.escape(row)} +40/40 +40 +40 +6 +1\.0 .* [0-9]+/[0-9]+/[0-9]+ ", out.stdout,
                         re.M), out.stdout
    assert re.search(r"^ +40 +[+-][0-9.]+ +[0-9]+/4 ", out.stdout, re.M), out.stdout  # the budgets' row
    assert re.search(r"^sync: 20 threads x 2 streams .*: 40/40 as expected", out.stdout, re.M), out.stdout
    for verdict in ("memory at 40 streams", "budgets at 40 streams, async", "every stream one terminal event",
                    "budgets, 20 sync threads"):
        assert re.search(rf"^{verdict}.*: (met|NOT met)", out.stdout, re.M), out.stdout
    assert "plots: none for a short run" in out.stdout
    assert "all streams done" in out.stdout


def test_relay_memory_short_form() -> None:
    """relay_memory.py with 40 streams held open per endpoint: every stream relayed whole after the
    snapshot (checked in the child), the bytes held per stream by component, and the difference."""
    out = subprocess.run([sys.executable, str(BENCH / "relay_memory.py"), "--streams", "40",
                          "--configs", "baseline,relay-budgets"],
                         capture_output=True, text=True, timeout=300, cwd=BENCH)
    assert out.returncode == 0, out.stdout + out.stderr
    for row in ("streamscope relay: response (disconnect watch, keep-alive and send-timeout timer)",
                "streamscope instrumentation", "the article's endpoint",
                "all but the browser"):
        assert re.search(rf"^{re.escape(row)} +[0-9,]+ +[0-9,]+$", out.stdout, re.M), out.stdout
    assert re.search(r"^streamscope relay\(\), budgets - baseline: [+-][0-9.]+ KiB per stream$", out.stdout,
                     re.M), out.stdout
