"""What the budgets do per second rather than per event: the sync watchdog's wake-ups on a healthy stream.

The instructions-per-event figures (instructions.py) are slopes between two stream lengths, taken
under callgrind, which runs the program 50-100 times slower than natively. Work that grows with
wall time rather than with events (a timer that wakes every so often, thread switches it causes)
would be stretched with the run and land in the slope as if it were per event. This counts that
work directly, natively, on the same replayed streams as instructions.py: the watchdog thread's
wake-ups (its condition's waits that return), its checks and the entries pushed on its heap, for a
short and a long stream, each read at full speed and stretched in wall time (`--pace`: the body
sleeps before each chunk). Reported per stream and per second of streaming.

A healthy stream is armed when its headers arrive and checked at once (the check finds the caller
not reading yet and parks the budget until its first read, which re-arms it), and re-armed at its
first content (the idle budget). The counts are per stream, the same for 500 events as for 5,500
once both outlast the interpreter's switch interval (5 ms), as every stream does under callgrind;
at full speed a short stream may end before the watchdog thread runs, and its check lands after it.

    python benchmarks/wall_time.py [--small 500] [--large 5500] [--pace 0.002]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

import anthropic
import httpx2
from opentelemetry.sdk.trace import TracerProvider

import streamscope
from instructions import PACE_ENV, ReplayTransport, read_stream, workload_of
from streamscope.budgets import sync_watch


class CountingCondition(threading.Condition):
    """The watchdog's condition, counting the waits that return (each one is a wake-up)."""

    wakeups = 0

    def wait(self, timeout: float | None = None) -> bool:
        woke = super().wait(timeout)
        CountingCondition.wakeups += 1
        return woke


def counted() -> dict[str, int]:
    """Counts of the watchdog's work from here on (checks, heap pushes, wake-ups)."""
    counts = {"checks": 0, "pushes": 0}
    check, push = sync_watch.Watchdog._check, sync_watch.Watchdog.push

    def counting_check(self: Any, watch: Any) -> None:
        counts["checks"] += 1
        check(self, watch)

    def counting_push(self: Any, when: float, watch: Any) -> None:
        counts["pushes"] += 1
        push(self, when, watch)

    sync_watch.Watchdog._check = counting_check  # type: ignore[method-assign]
    sync_watch.Watchdog.push = counting_push  # type: ignore[method-assign]
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=500, help="text deltas in the shorter stream")
    parser.add_argument("--large", type=int, default=5500, help="text deltas in the longer stream")
    parser.add_argument("--pace", type=float, default=0.002, metavar="S",
                        help="seconds before each chunk in the stretched runs")
    args = parser.parse_args(argv)
    if args.small < 1 or args.large <= args.small or args.pace <= 0:
        parser.error("give 1 <= --small < --large and --pace > 0")
    dog = sync_watch.watchdog()
    dog._cond = CountingCondition()  # before its thread starts (with the first stream): it waits on this one
    counts = counted()
    workload = workload_of("budgets")
    transport = ReplayTransport(workload)
    client = anthropic.Anthropic(api_key="x", base_url="http://bench.invalid", max_retries=0,
                                 http_client=httpx2.Client(transport=transport), open_telemetry=False)
    streamscope.AnthropicInstrumentor().instrument(
        tracer_provider=TracerProvider(), budgets=streamscope.Budgets(first_token=60, idle=30, deadline=600))
    read_stream(client, transport, workload.chunks(20))  # warm-up: the watchdog thread starts here
    rows = []
    for pace in (0.0, args.pace):
        os.environ[PACE_ENV] = str(pace)
        for deltas in (args.small, args.large):
            time.sleep(0.05)  # the warm-up's or the previous stream's last wake-up is behind us
            for key in counts:
                counts[key] = 0
            CountingCondition.wakeups = 0
            start = time.monotonic()
            read_stream(client, transport, workload.chunks(deltas))
            seconds = time.monotonic() - start
            rows.append({"deltas": deltas, "pace": pace, "seconds": round(seconds, 3),
                         "wakeups": CountingCondition.wakeups, **counts,
                         "wakeups_per_second": round(CountingCondition.wakeups / seconds, 2)})
    os.environ.pop(PACE_ENV, None)
    print("the sync watchdog on one healthy budgeted stream (first_token=60, idle=30, deadline=600):")
    print(f"{'deltas':>7} {'pace s':>7} {'seconds':>8} {'wake-ups':>9} {'checks':>7} {'pushes':>7} {'wake-ups/s':>11}")
    for r in rows:
        print(f"{r['deltas']:>7} {r['pace']:>7} {r['seconds']:>8} {r['wakeups']:>9} {r['checks']:>7} "
              f"{r['pushes']:>7} {r['wakeups_per_second']:>11}")
    work = {(r["pace"], r["deltas"]): (r["wakeups"], r["checks"], r["pushes"]) for r in rows}
    # Stretched, both streams outlast the interpreter's switch interval (5 ms), as every stream does
    # under callgrind; at full speed a short one may end before the watchdog thread runs at all,
    # and its one wake-up lands after it.
    alike = work[args.pace, args.small] == work[args.pace, args.large]
    verdict = "the same for both lengths" if alike else "NOT the same for both lengths"
    print(f"watchdog work per stream, stretched: {verdict} (so it cancels in a slope between them); "
          f"per event: {'none' if alike else 'some'}")
    print(json.dumps(rows))
    return 0 if alike else 1


if __name__ == "__main__":
    raise SystemExit(main())
