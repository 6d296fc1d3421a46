"""`make bench`: every benchmark, in order, with its defaults (docs/performance.md has the figures)."""

from __future__ import annotations

import sys

import instructions
import load
import memory
import micro
import openai_cpu
import openai_fast_path
import precision
import redis_scale
import relay_instructions
import relay_load
import relay_memory
import relay_scale
import stale
import stream_cpu
import wall_time


def main() -> int:
    sections = [
        ("micro: the per-event path alone, anthropic and openai (time, and instructions under callgrind)",
         lambda: micro.main(["--callgrind", "--processes", "4"])),
        ("instructions: per event under callgrind, anthropic and openai SDKs: bare, their tracing, streamscope; "
         "metrics on (an SDK MeterProvider with a reader), as the dashboards' users run it",
         lambda: instructions.main(["--metrics", "sdk"])),
        ("instructions, metrics on through prometheus-client's multiprocess files (gunicorn, uvicorn --workers)",
         lambda: instructions.main(["--metrics", "multiprocess"])),
        ("instructions, metrics off (no meter provider): beside the figures above, never instead of them",
         lambda: instructions.main(["--metrics", "off"])),
        ("relay_instructions: per relayed event under callgrind, streamscope's relay() beside a hand-written relay",
         lambda: relay_instructions.main(["--profile"])),
        ("wall_time: the budgets' watchdog per stream and per second, at full speed and stretched in wall time",
         lambda: wall_time.main([])),
        ("openai_fast_path: the openai chat test alone, in instructions, over four process layouts",
         lambda: openai_fast_path.main([])),
        ("stream_cpu: whole streams through the real SDK, streamscope beside its peers, metrics on",
         lambda: stream_cpu.main(["--metrics", "sdk"])),
        ("stream_cpu, metrics off: beside the figures above, never instead of them",
         lambda: stream_cpu.main(["--metrics", "off"])),
        ("openai_cpu: whole streams through the real openai SDK, streamscope beside OpenTelemetry's instrumentation, "
         "metrics on", lambda: openai_cpu.main(["--metrics", "sdk"])),
        ("openai_cpu, metrics off", lambda: openai_cpu.main(["--metrics", "off"])),
        ("precision: how late budgets fire", lambda: precision.main([])),
        ("memory: per in-flight stream, and over a long answer", lambda: memory.main([])),
        ("stale: 100,000 short budgeted streams in forked workers, the watchdog's heap and memory",
         lambda: stale.main([])),
        ("load: 1,000 concurrent async streams and 32 sync threads, 5 % stalling", lambda: load.main([])),
        ("relay_load: 500 concurrent relayed streams on one uvicorn worker, streamscope's relay and a hand-written one",
         lambda: relay_load.main([])),
        ("relay_memory: what a relayed stream's memory is made of, by component (tracemalloc), both endpoints",
         lambda: relay_memory.main([])),
        ("relay_scale: 100 to 2,000 concurrent relayed streams on one uvicorn worker, 1 in 10 stalling: memory per "
         "stream and how late budgets fire, and the sync SDK's budgets in 200 threads", lambda: relay_scale.main([])),
        ("redis_scale: what resume and the fleet breaker ask of Redis per event, per stream and per worker",
         lambda: redis_scale.main([])),
    ]
    status = 0
    for title, run in sections:
        print(f"\n== {title} ==", flush=True)
        status |= run()
    return status


if __name__ == "__main__":
    sys.exit(main())
