"""`multiprocessing` with the fork start method: a pool of workers, each streaming.

The parent sets up telemetry and the instrumentor with budgets, runs one budgeted stream
(`APP_WARMUP=1`), and forks the pool while a second stream of its own (`slow_answer`, about 3 s)
is in flight: no worker may touch it. `maxtasksperchild` makes the pool fork replacements while
that stream is still running. When the pool is done the parent serves the aggregate of every
process's metrics on `METRICS_PORT`, prints one JSON line and waits until stdin closes.

    python fork_pool.py SCENARIO [SCENARIO ...]
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading

from streaming import instrument, stream_sync, warm_up

from streamscope.telemetry import serve_metrics, worker_exit


def main(plan: list[str]) -> None:
    instrument()
    warm_up()

    parent: dict = {}
    first_text = threading.Event()

    def parent_stream() -> None:
        parent.update(stream_sync("slow_answer", on_text=first_text.set))

    thread = threading.Thread(target=parent_stream, name="parent-stream")
    thread.start()
    if not first_text.wait(10):
        raise RuntimeError("the parent's stream sent no text")
    in_flight_at_fork = thread.is_alive()

    pool = multiprocessing.get_context("fork").Pool(3, maxtasksperchild=3)
    results = pool.map(stream_sync, plan, chunksize=1)
    pool.close()
    pool.join()
    for pid in {r["pid"] for r in results}:
        worker_exit(pid)
    thread.join()

    serve_metrics(int(os.environ["METRICS_PORT"]))
    print(json.dumps({"pid": os.getpid(), "in_flight_at_fork": in_flight_at_fork, "parent": parent,
                      "results": results}), flush=True)
    sys.stdin.read()  # stay up, serving /metrics, until the test closes stdin


if __name__ == "__main__":
    main(sys.argv[1:])
