"""Preforking servers, for real: gunicorn (sync and gthread workers, uvicorn workers; with and
without `--preload`), `uvicorn --workers` and `multiprocessing` with the fork start method, each
serving an app (tests/apps/) that streams from the simulator with budgets `first_token=20,
idle=0.5` (a silent start under `first_token=2`) and `PROMETHEUS_MULTIPROC_DIR` set. Under
`--preload` (and in the `multiprocessing` parent) one budgeted stream runs before the fork.

In every worker every stall is caught by its own budget (`idle` 0.5 s after the last text of a
10 s silence, `first_token` 2 s into a 5 s silent start) within a generous margin; healthy
streams served at the same time by sibling workers (and, under `multiprocessing`, the parent's
own stream in flight across the forks) complete; one scrape of the aggregated `/metrics` gives,
by class, the sum of every process's requests; with workers recycled (`max_requests`,
`maxtasksperchild`) the totals never go backwards. The servers run as their own process groups,
killed whole at the end, and nothing is left behind.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streamscope.simulator import Simulator

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "tests" / "apps"

IDLE, FIRST_TOKEN = 0.5, 2.0  # the apps' budgets for these stalls (tests/apps/streaming.py)
MARGIN = 2.0  # generous (a loaded 2-core machine: 1.69 s seen); the stalls last 10 s and 5 s
# scenario -> (budget that must catch it, the class it is counted as, texts before it)
STALLS = {
    "silent_stall": ("idle", "stalled_mid_stream", 3),
    "silent_start": ("first_token", "stalled_before_first_content", 0),
}
# scenario -> texts of the whole answer
HEALTHY = {"complete": 5, "slow_answer": 30}
BUDGET_SECONDS = {"idle": IDLE, "first_token": FIRST_TOKEN}
STALLS_PER_WORKER = 2  # idle stalls every worker must have caught


# -- processes ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group `pgid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def children(pid: int) -> set[int]:
    """The live child processes of `pid` (multiprocessing's resource tracker left out)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid and fields[0] not in ("Z", "X") and b"resource_tracker" not in cmdline:
            found.add(int(entry))
    return found


class Server:
    """A server started as its own process group (session), output to a log file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, stdin: int | None = None,
                 stdout: int | None = None) -> None:
        self.argv, self.log_path = argv, log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=stdout if stdout is not None else self._log, stderr=self._log, start_new_session=True,
        )
        self.pgid = self.proc.pid
        self.leaked: list[int] | None = None

    def log(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> list[int]:
        """SIGTERM to the whole group, then SIGKILL to what is left after 15 s. Returns the
        processes that were still alive after the grace time (leaked); idempotent."""
        if self.leaked is not None:
            return self.leaked
        try:
            os.killpg(self.pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            self.proc.poll()
            if self.proc.returncode is not None and not group_members(self.pgid):
                break
            time.sleep(0.1)
        self.leaked = group_members(self.pgid)
        if self.leaked:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        self._log.close()
        return self.leaked


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """Every server a test starts; their process groups are killed at teardown whatever happened."""
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def app_env(sim: Simulator, tmp_path: Path, **extra: str) -> dict[str, str]:
    multiproc = tmp_path / "prometheus-multiproc"
    multiproc.mkdir()  # fresh and empty, as at a server's start
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PROMETHEUS_", "STREAMSCOPE_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(APPS), *filter(None, [os.environ.get("PYTHONPATH")])]),
        PYTHONUNBUFFERED="1",
        PROMETHEUS_MULTIPROC_DIR=str(multiproc),
        SIM_URL=f"http://127.0.0.1:{sim.port}",
        **extra,
    )
    return env


# -- HTTP ----------------------------------------------------------------------------------------


def get(url: str, timeout: float = 30) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def get_json(url: str, timeout: float = 30) -> dict[str, Any]:
    return json.loads(get(url, timeout))


def wait_until(check, what: str, server: Server, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if not server.alive():
            pytest.fail(f"{what}: the server exited ({server.proc.returncode})\n{server.log()}")
        try:
            value = check()
        except (OSError, urllib.error.URLError, ValueError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout}s\n{server.log()}")
        time.sleep(0.1)


def scrape(port: int) -> Counter[str]:
    """One scrape of the aggregated page: `streamscope_requests_total` summed by class, and
    `streamscope_active_streams` summed over its series (key `active`, absent if it is)."""
    text = get(f"http://127.0.0.1:{port}/metrics", timeout=10).decode()
    totals: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "streamscope_requests_total":
                totals[sample.labels["streamscope_class"]] += sample.value
            elif sample.name == "streamscope_active_streams":
                totals["active"] = totals.get("active", 0) + sample.value
    return totals


def settled_scrape(port: int, expected: Counter[str], server: Server, timeout: float = 15) -> list[Counter[str]]:
    """Scrape until the page shows `expected` (metrics are recorded as each stream ends, the
    responses may arrive first); every scrape taken, the last one to be asserted on."""
    seen: list[Counter[str]] = []

    def check() -> bool:
        seen.append(scrape(port))
        return by_class(seen[-1]) == by_class(expected)

    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline and server.alive():
        time.sleep(0.25)
    return seen


def by_class(totals: Counter[str]) -> dict[str, float]:
    return {k: v for k, v in totals.items() if k != "active" and v}


# -- the load ----------------------------------------------------------------------------------


def run_plan(base: str, plan: list[str], concurrency: int) -> list[dict[str, Any]]:
    def one(scenario: str) -> dict[str, Any]:
        return get_json(f"{base}/stream/{scenario}", timeout=60)

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, plan))


def expected_class(result: dict[str, Any]) -> str:
    return STALLS[result["scenario"]][1] if result["scenario"] in STALLS else "complete"


def check_results(results: list[dict[str, Any]]) -> None:
    """Every stall caught by its budget in time; every healthy stream complete."""
    problems = []
    for r in results:
        if r["scenario"] in STALLS:
            budget, _, texts = STALLS[r["scenario"]]
            limit = BUDGET_SECONDS[budget] + MARGIN
            if r["outcome"] != "timeout" or r["budget"] != budget or r["texts"] != texts or r["silence"] > limit:
                problems.append(f"stall not caught by {budget} within {limit}s: {r}")
        elif r["outcome"] != "completed" or r["texts"] != HEALTHY[r["scenario"]]:
            problems.append(f"healthy stream harmed: {r}")
    assert not problems, "\n".join(problems)


def round_plan(workers: int) -> list[str]:
    """Per worker: two mid-stream stalls, a quick answer, a 3 s answer (in flight while siblings
    fire), interleaved; and one silent start per round."""
    plan = ["silent_stall", "complete", "silent_stall", "slow_answer"] * workers
    plan.insert(len(plan) // 2, "silent_start")
    return plan


def serve_until_covered(base: str, workers: set[int], concurrency: int, max_rounds: int = 5) -> list[dict[str, Any]]:
    """Rounds of load until every worker pid has caught `STALLS_PER_WORKER` idle stalls."""
    results: list[dict[str, Any]] = []
    for _ in range(max_rounds):
        results += run_plan(base, round_plan(len(workers)), concurrency)
        stalls = Counter(r["pid"] for r in results if r["scenario"] == "silent_stall")
        if all(stalls[pid] >= STALLS_PER_WORKER for pid in workers):
            break
    return results


# -- gunicorn ----------------------------------------------------------------------------------

WORKER_CLASSES = {
    # name: (gunicorn args, app, workers, client concurrency)
    "sync": (["-k", "sync"], "wsgi_app:app", 3, 6),
    "gthread": (["-k", "gthread", "--threads", "4"], "wsgi_app:app", 2, 8),
    "uvicorn": (["-k", "uvicorn.workers.UvicornWorker"], "asgi_app:app", 2, 8),
}


def start_gunicorn(sim: Simulator, tmp_path: Path, servers: list[Server], worker_class: str, *, preload: bool,
                   metrics: str, max_requests: int = 0) -> tuple[Server, str, int, int]:
    """gunicorn on free loopback ports, ready (every worker answering). `metrics="hooks"`: the
    master serves `/metrics` from `when_ready` (tests/apps/gunicorn.conf.py); `"setup"`: the app's
    `setup(prometheus_port=...)` does (tests/apps/gunicorn_setup_port.conf.py)."""
    args, app, workers, _ = WORKER_CLASSES[worker_class]
    port, metrics_port = free_port(), free_port()
    extra = {"METRICS_PORT": str(metrics_port)} if metrics == "hooks" else {"APP_METRICS_PORT": str(metrics_port)}
    if preload:
        extra["APP_WARMUP"] = "1"
    config = APPS / ("gunicorn.conf.py" if metrics == "hooks" else "gunicorn_setup_port.conf.py")
    argv = [sys.executable, "-m", "gunicorn", "--config", str(config), "--bind", f"127.0.0.1:{port}",
            "--workers", str(workers), *args, *(["--preload"] if preload else [])]
    if max_requests:
        argv += ["--max-requests", str(max_requests)]
    argv.append(app)
    server = Server(argv, app_env(sim, tmp_path, **extra), tmp_path / "gunicorn.log")
    servers.append(server)
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: len(children(server.proc.pid)) >= workers, f"{workers} workers", server)
    wait_until(lambda: get_json(f"{base}/pid", timeout=5)["pid"], "the app answering", server)
    wait_until(lambda: get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) is not None,
               "/metrics answering", server)
    return server, base, metrics_port, workers


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("worker_class", "preload", "metrics"),
    [
        ("sync", True, "hooks"),
        ("sync", False, "hooks"),
        ("gthread", True, "setup"),
        ("gthread", False, "setup"),
        ("uvicorn", True, "hooks"),
        ("uvicorn", False, "hooks"),
    ],
    ids=["sync-preload", "sync", "gthread-preload-setup-port", "gthread-setup-port", "uvicorn-preload", "uvicorn"],
)
def test_gunicorn(sim, tmp_path, servers, worker_class: str, preload: bool, metrics: str) -> None:
    server, base, metrics_port, _workers = start_gunicorn(
        sim, tmp_path, servers, worker_class, preload=preload, metrics=metrics
    )
    serve_and_check(server, base, metrics_port, WORKER_CLASSES[worker_class][3], warmups=1 if preload else 0)


def serve_and_check(server: Server, base: str, metrics_port: int, concurrency: int, warmups: int) -> None:
    """Load until every worker has caught its stalls; then the results, one scrape, the exit."""
    pids = children(server.proc.pid)
    results = serve_until_covered(base, pids, concurrency)

    check_results(results)
    served = {r["pid"] for r in results}
    assert served <= pids and server.proc.pid not in served, (served, pids)
    stalls = Counter(r["pid"] for r in results if r["scenario"] == "silent_stall")
    assert all(stalls[pid] >= STALLS_PER_WORKER for pid in pids), f"stalls per worker: {dict(stalls)} of {pids}"

    expected = Counter(expected_class(r) for r in results) + Counter({"complete": warmups})
    seen = settled_scrape(metrics_port, expected, server)
    assert by_class(seen[-1]) == by_class(expected), (
        f"one scrape: {seen[-1]}, requests made: {expected}\n{server.log()}"
    )
    assert seen[-1].get("active") == 0, f"streams still active at rest: {seen[-1]}"
    assert_never_backwards(seen)

    assert server.stop() == [], f"processes left behind\n{server.log()}"


SERVE_METRICS = "import signal, sys, streamscope.telemetry as t; t.serve_metrics(int(sys.argv[1])); signal.pause()"
"""docs/deploy.md's page for `uvicorn --workers`: a process of its own that streams nothing."""


@pytest.mark.timeout(240)
def test_uvicorn_workers(sim, tmp_path, servers) -> None:
    """`uvicorn --workers 2`: uvicorn spawns its workers (nothing inherited, no hooks); each runs
    `setup()`, and a process of its own serves everyone's sum (`serve_metrics()`)."""
    port, metrics_port, workers = free_port(), free_port(), 2
    env = app_env(sim, tmp_path)
    page = Server([sys.executable, "-c", SERVE_METRICS, str(metrics_port)], env, tmp_path / "serve_metrics.log")
    servers.append(page)
    argv = [sys.executable, "-m", "uvicorn", "asgi_app:app", "--host", "127.0.0.1", "--port", str(port),
            "--workers", str(workers), "--log-level", "info"]
    server = Server(argv, env, tmp_path / "uvicorn.log")
    servers.append(server)
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: len(children(server.proc.pid)) >= workers, f"{workers} workers", server)
    wait_until(lambda: get_json(f"{base}/pid", timeout=5)["pid"], "the app answering", server)
    wait_until(lambda: get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) is not None,
               "/metrics answering", page)
    serve_and_check(server, base, metrics_port, 8, warmups=0)
    assert page.stop() == [], page.log()


def assert_never_backwards(scrapes: list[Counter[str]]) -> None:
    for before, after in itertools.pairwise(scrapes):
        went_back = {k: (before[k], after[k]) for k in before if k != "active" and after[k] < before[k]}
        assert not went_back, f"a total went backwards between two scrapes: {went_back}"


@pytest.mark.timeout(240)
def test_gunicorn_recycled_workers_never_lower_the_totals(sim, tmp_path, servers) -> None:
    """`max_requests=3`: workers exit and the master forks new ones (from the preloaded master,
    again and again) while the load runs and `/metrics` is scraped every 0.2 s."""
    server, base, metrics_port, workers = start_gunicorn(
        sim, tmp_path, servers, "sync", preload=True, metrics="hooks", max_requests=3
    )
    scrapes: list[Counter[str]] = []
    stop = threading.Event()

    def scraper() -> None:
        while not stop.is_set():
            try:
                scrapes.append(scrape(metrics_port))
            except OSError as exc:  # the master serves the page: it must answer throughout
                scrapes.append(Counter({f"scrape failed: {exc}": 1}))
            stop.wait(0.2)

    thread = threading.Thread(target=scraper, daemon=True)
    thread.start()
    try:
        results = run_plan(base, ["silent_stall", "complete", "complete", "silent_stall", "slow_answer"] * 5, 4)
    finally:
        stop.set()
        thread.join(timeout=15)

    check_results(results)
    assert len({r["pid"] for r in results}) > workers + 2, "workers were not recycled"
    assert not [s for s in scrapes if any(k.startswith("scrape failed") for k in s)], scrapes
    expected = Counter(expected_class(r) for r in results) + Counter({"complete": 1})
    settled = settled_scrape(metrics_port, expected, server)
    assert by_class(settled[-1]) == by_class(expected), f"one scrape: {settled[-1]}, requests made: {expected}"
    assert settled[-1].get("active") == 0, f"streams still active at rest: {settled[-1]}"
    assert_never_backwards(scrapes + settled)

    assert server.stop() == [], f"processes left behind\n{server.log()}"


# -- multiprocessing, fork start method ----------------------------------------------------------


@pytest.mark.timeout(240)
def test_multiprocessing_fork_pool(sim, tmp_path, servers) -> None:
    metrics_port = free_port()
    plan = ["silent_stall", "complete", "silent_stall", "complete"] * 4 + ["silent_start"] * 2
    argv = [sys.executable, str(APPS / "fork_pool.py"), *plan]
    env = app_env(sim, tmp_path, METRICS_PORT=str(metrics_port), APP_WARMUP="1")
    server = Server(argv, env, tmp_path / "fork_pool.log", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    servers.append(server)

    line = b""
    deadline = time.monotonic() + 120
    while not line.endswith(b"\n") and time.monotonic() < deadline and server.alive():
        ready, _, _ = select.select([server.proc.stdout], [], [], 0.5)
        if ready:
            chunk = os.read(server.proc.stdout.fileno(), 1 << 20)
            if not chunk:
                break
            line += chunk
    assert line.endswith(b"\n"), f"no report from the pool's parent\n{server.log()}"
    report = json.loads(line)
    results = report["results"]

    assert report["in_flight_at_fork"], "the parent's stream ended before the pool forked"
    check_results([report["parent"], *results])
    assert report["parent"]["pid"] == report["pid"]
    pool_pids = {r["pid"] for r in results}
    assert report["pid"] not in pool_pids and len(pool_pids) >= 3, pool_pids
    stall_pids = {r["pid"] for r in results if r["scenario"] in STALLS}
    assert len(stall_pids) >= 3, f"stalls were caught in {len(stall_pids)} workers only"

    # the parent's warm-up and its in-flight stream, and every task
    expected = Counter(expected_class(r) for r in results) + Counter({"complete": 2})
    seen = settled_scrape(metrics_port, expected, server)
    assert by_class(seen[-1]) == by_class(expected), (
        f"one scrape: {seen[-1]}, requests made: {expected}\n{server.log()}"
    )
    assert seen[-1].get("active") == 0, f"streams still active at rest: {seen[-1]}"
    assert_never_backwards(seen)

    server.proc.stdin.close()
    server.proc.wait(timeout=15)
    assert server.proc.returncode == 0, server.log()
    assert server.stop() == [], f"processes left behind\n{server.log()}"
