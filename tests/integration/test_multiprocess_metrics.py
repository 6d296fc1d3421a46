"""Metrics from every worker process as one scrape target (issue 13, point 3).

prometheus-client's multiprocess mode (`PROMETHEUS_MULTIPROC_DIR`) fed by streamscope's
instruments, with real processes: `os.fork` and `multiprocessing`'s "fork" context, the real SDK
against the simulator, the served `/metrics` page parsed with prometheus-client's parsers, and a
real Prometheus scraping two "pods".

A server here is a fresh Python process running `master()`, as gunicorn's master is: it forks the
workers, reaps them, calls `worker_exit()` and serves the sum. It takes one command per line on
stdin and answers each on stdout, so a test can recycle and kill workers between scrapes. Workers
are forked from that clean process rather than from pytest, whose simulator and other threads
would be copied mid-flight: their state is what a real server's workers would have.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from streamscope.export import prometheus_multiprocess as mp
from streamscope.export.prometheus_aggregate import aggregate_registry
from streamscope.simulator import Scenario, ServerToolSpec, Silence, Simulator, TextSpec, message_stream
from streamscope.simulator.catalog import ANSWER, words
from streamscope.telemetry import serve_metrics, setup, worker_exit

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parents[1]
MODEL = "claude-multiprocess"
USER = [{"role": "user", "content": "How do streams fail?"}]
THINKING = {"type": "enabled", "budget_tokens": 1_000_000}
"""Unreachable in the checkout route's 20 s at any rate this stream can show (its deltas span about
0.3 s, so well under 50,000 tokens a second). With 4,096 the verdict sat at the edge (about 208 tokens
a second) and a loaded machine tipped one leg over it."""
REPLY_TIMEOUT = 120  # seconds for one command (a worker's streams included) on a loaded machine

HANG = Scenario.single("mp_hang", [Silence(60)])
"""A request that gets nothing back for a minute: a stream in flight while a test looks."""
WEB_SEARCH = Scenario.single("mp_web_search", message_stream(blocks=[
    TextSpec(words(ANSWER)[:3], interval=0.01), ServerToolSpec(run=0.3, ping_every=0.1),
    TextSpec(words(ANSWER)[:6], interval=0.01)]))
"""Text, a 0.3 s web search on the server, the answer: one server tool run."""


@pytest.fixture(scope="module")
def base(sim: Simulator) -> str:
    """The simulator's scenario root, with this module's scenarios added."""
    sim.add(HANG)
    sim.add(WEB_SEARCH)
    return f"http://127.0.0.1:{sim.port}/s/"


# -- what runs in the server and worker processes ----------------------------------------------


def call(base: str, scenario: str, *, model: str = MODEL, route: str | None = None,
         extra: dict[str, Any] | None = None, cancel: bool = False) -> None:
    """One streamed call through the real (instrumented) SDK; the scenario's own failure is its class."""
    import anthropic

    import streamscope

    client = anthropic.Anthropic(base_url=base + scenario, api_key="test-key", max_retries=0)
    params = {"model": model, "max_tokens": 8192 if extra else 1024, "messages": USER, **(extra or {})}
    try:
        with streamscope.route(route) if route else contextlib.nullcontext():
            with client.messages.stream(**params) as stream:
                for event in stream:
                    if cancel and event.type == "text":
                        break
    except Exception:
        pass
    finally:
        client.close()


class LogLines(logging.Handler):
    """streamscope's warnings in this process: how many, and whether any carried a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        logging.getLogger("streamscope").addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def instrument(port: int | None = None, cool_down: float | None = None) -> Any:
    """streamscope on, with a breaker that opens on one failure and probes after `cool_down` where given."""
    from opentelemetry.sdk.trace import TracerProvider

    from streamscope import AnthropicInstrumentor, Breaker

    telemetry = setup("multiprocess-test", otlp=False, prometheus_port=port, set_global=False)
    breaker = None if cool_down is None else {"default": Breaker(failures=1, window=60.0, cool_down=cool_down)}
    AnthropicInstrumentor().instrument(tracer_provider=TracerProvider(), meter_provider=telemetry.meter_provider,
                                       breaker=breaker)
    return telemetry


def worker(base: str, plan: list[str], inherited: Any, port: int | None, report: int) -> None:
    """A worker: streamscope set up after the fork (unless the master preloaded it), the plan's
    streams (`mp_hang` in a thread, left in flight), one JSON line to the master. `breaker=S` first
    in the plan: a breaker with a cool-down of S seconds; `sleep=S`: a pause between streams."""
    lines = LogLines()
    cool_down = float(plan.pop(0).removeprefix("breaker=")) if plan and plan[0].startswith("breaker=") else None
    telemetry = inherited if inherited is not None else instrument(port, cool_down)
    for scenario in plan:
        if scenario.startswith("sleep="):
            time.sleep(float(scenario.removeprefix("sleep=")))
        elif scenario == HANG.name:
            threading.Thread(target=call, args=(base, scenario), daemon=True).start()
        else:
            call(base, scenario)
    served = telemetry._server
    result = {
        "pid": os.getpid(),
        "bound": inherited is None and telemetry.prometheus_port is not None,
        # The simulator's model has no price: that line is its own (tests/integration/test_cost.py).
        "lines": [r.getMessage() for r in lines.records if r.name != "streamscope.prices"],
        "tracebacks": sum(r.exc_info is not None for r in lines.records),
        "inherited_socket_open": inherited is not None and served is not None and served.socket.fileno() != -1,
    }
    if inherited is not None:
        inherited.shutdown()  # a forked child's shutdown must not wait for the parent's server thread
    os.write(report, (json.dumps(result) + "\n").encode())


class Worker:
    """A forked worker (`os.fork` or a `multiprocessing` "fork" Process) and its report pipe."""

    def __init__(self, kind: str, target: Callable[..., None], args: tuple[Any, ...], stay: bool) -> None:
        read, write = os.pipe()

        def body() -> None:
            os.close(read)
            target(*args, write)
            if stay:
                time.sleep(600)  # holds its streams until the master kills it

        if kind == "fork":
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    body()
                    code = 0
                except BaseException:
                    import traceback

                    traceback.print_exc()
                finally:
                    os._exit(code)
            self.pid, self.process = pid, None
        else:
            import multiprocessing

            self.process = multiprocessing.get_context("fork").Process(target=body, daemon=False)
            self.process.start()
            self.pid = self.process.pid
        os.close(write)
        self.read = read

    def report(self, timeout: float) -> dict[str, Any]:
        data = b""
        deadline = time.monotonic() + timeout
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([self.read], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self.read, 65536) if ready else b""
            if not chunk:
                return {"pid": self.pid, "error": "no report (the worker died or hung)"}
            data += chunk
        return dict(json.loads(data))

    def reap(self) -> int:
        if self.process is not None:
            self.process.join()
            return int(self.process.exitcode or 0)
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)


def master(argv: list[str]) -> None:
    """The server: `master BASE MODE WORKER_PORT` with `PROMETHEUS_MULTIPROC_DIR` set.

    MODE `serve`: the master serves the sum (`serve_metrics`, gunicorn's `when_ready`); workers set
    streamscope up after the fork. `preload`: the master sets streamscope up (`setup(prometheus_port=0)`
    serves the sum), runs one `complete` stream, and workers inherit it all (gunicorn `--preload`).
    `workers`: the master serves nothing; every worker calls `setup(prometheus_port=WORKER_PORT)`.

    Commands: `run fork|mp stay|exit SCENARIO,...` -> `RAN {report}`; `reap PID`, `kill PID`,
    `dead PID` (worker_exit) -> `OK ...`; `quit`.
    """
    base, mode, worker_port = argv[0], argv[1], int(argv[2])
    inherited = None
    if mode == "serve":
        server = serve_metrics(0)
        assert server is not None
        print("PORT", server.port, flush=True)
    elif mode == "preload":
        inherited = instrument(0)
        call(base, "complete")
        print("PORT", inherited.prometheus_port, flush=True)
    else:
        print("PORT", worker_port, flush=True)
    workers: dict[int, Worker] = {}
    for line in sys.stdin:
        command, *args = line.split()
        if command == "run":
            kind, stay, plan = args[0], args[1] == "stay", [s for s in args[2].split(",") if s]
            w = Worker(kind, worker, (base, plan, inherited, worker_port if mode == "workers" else None), stay)
            workers[w.pid] = w
            print("RAN", json.dumps(w.report(REPLY_TIMEOUT)), flush=True)
        elif command == "reap":
            print("OK", workers.pop(int(args[0])).reap(), flush=True)
        elif command == "kill":
            w = workers.pop(int(args[0]))
            os.kill(w.pid, signal.SIGKILL)
            print("OK", w.reap(), flush=True)
        elif command == "dead":
            worker_exit(int(args[0]))
            print("OK", flush=True)
        elif command == "quit":
            break
    for w in workers.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(w.pid, signal.SIGKILL)
        w.reap()


MASTER = f"import sys; sys.path.insert(0, {str(TESTS)!r}); from test_multiprocess_metrics import master; " \
         "master(sys.argv[1:])"


# -- the test side ----------------------------------------------------------------------------


class Server:
    """A `master()` process with its own multiprocess directory; commands and scrapes."""

    def __init__(self, directory: Path, base: str, mode: str, worker_port: int = 0) -> None:
        self.dir = directory / "multiproc"
        self.dir.mkdir(parents=True)
        self.stderr_path = directory / "master.stderr"
        env = {**os.environ, mp.ENV: str(self.dir), "PYTHONUNBUFFERED": "1"}
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen([sys.executable, "-c", MASTER, base, mode, str(worker_port)], cwd=TESTS,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                         env=env)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.port = int(self._reply("PORT").split()[1])

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.strip())
        self._lines.put("EOF")

    def _reply(self, expect: str) -> str:
        try:
            line = self._lines.get(timeout=REPLY_TIMEOUT)
        except queue.Empty:
            line = "(no reply)"
        assert line.startswith(expect), f"{line}\n--- master stderr ---\n{self.stderr_path.read_text()[-5000:]}"
        return line

    def command(self, line: str, expect: str = "OK") -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._reply(expect)

    def run(self, kind: str, plan: list[str], *, stay: bool = False) -> dict[str, Any]:
        """One worker running `plan`; its report. A worker that does not stay is reaped."""
        report = json.loads(self.command(f"run {kind} {'stay' if stay else 'exit'} {','.join(plan)}", "RAN")[4:])
        assert "error" not in report, (report, self.stderr_path.read_text()[-5000:])
        if not stay:
            assert self.command(f"reap {report['pid']}") == "OK 0", self.stderr_path.read_text()[-5000:]
        return dict(report)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def server(tmp_path: Path, base: str, mode: str, worker_port: int = 0) -> Iterator[Server]:
    s = Server(tmp_path / f"{mode}-{uuid.uuid4().hex[:6]}", base, mode, worker_port)
    try:
        yield s
    finally:
        s.close()


def scrape(port: int, openmetrics: bool = False) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if openmetrics:
        request.add_header("Accept", "application/openmetrics-text; version=1.0.0; charset=utf-8")
    with urllib.request.urlopen(request, timeout=30) as r:
        return str(r.read().decode())


def samples(text: str) -> list[Any]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def by_label(text: str, name: str, label: str) -> dict[str, float]:
    totals: Counter[str] = Counter()
    for s in samples(text):
        if s.name == name:
            totals[s.labels.get(label, "")] += s.value
    return {k: v for k, v in totals.items() if v}


def total(text: str, name: str) -> float:
    return sum(s.value for s in samples(text) if s.name == name)


def eventually(check: Callable[[], Any], timeout: float = 60, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(every)
        value = check()
    return value


def classes(plan: list[str]) -> Counter[str]:
    designed = {"complete": "complete", "truncated": "truncated", "refused": "refused", "http_529": "upstream_error"}
    return Counter(designed[s] for s in plan)


# -- one scrape, the sum of every worker --------------------------------------------------------

PLANS = [["complete", "complete", "truncated"], ["complete", "http_529"], ["refused", "complete", "complete"]]


@pytest.mark.parametrize("mode, kind", [("serve", "fork"), ("preload", "mp")])
def test_one_scrape_returns_the_sum_of_every_workers_requests_by_class(tmp_path: Path, base: str, mode: str,
                                                                        kind: str) -> None:
    """Three workers forked by a master that serves the sum (gunicorn's `when_ready`, `os.fork`),
    or that preloaded streamscope and ran a stream of its own before forking (`--preload`,
    `multiprocessing`): one scrape is the sum of every process, the master's stream counted once."""
    with server(tmp_path, base, mode) as s:
        expected = Counter({"complete": 1}) if mode == "preload" else Counter()
        for plan in PLANS:
            report = s.run(kind, plan)
            assert report["lines"] == [] and not report["inherited_socket_open"], report
            assert s.command(f"dead {report['pid']}") == "OK"
            expected += classes(plan)
        text = scrape(s.port)
    assert by_label(text, "streamscope_requests_total", "streamscope_class") == dict(expected)
    streams = sum(expected.values())
    assert total(text, "gen_ai_client_operation_duration_seconds_count") == streams
    assert total(text, "streamscope_active_streams") == 0
    # A forked worker wrote files of its own (a pid each), never into the master's.
    pids = {p.stem.rsplit("_", 1)[1] for p in s.dir.glob("counter_*.db")}
    assert len(pids) == len(PLANS) + (mode == "preload"), sorted(pids)


def test_a_recycled_worker_never_takes_a_counter_backwards(tmp_path: Path, base: str) -> None:
    """Workers exit and are replaced (`max_requests`) between scrapes: every counter, bucket, count
    and sum only ever grows, and the totals are every worker's, the dead ones' included."""
    plans = [["complete", "complete", "truncated"], ["complete", "http_529"], ["refused"], ["complete"]]
    scrapes: list[str] = []
    expected: Counter[str] = Counter()
    with server(tmp_path, base, "serve") as s:
        for i, plan in enumerate(plans):
            report = s.run("fork" if i % 2 == 0 else "mp", plan, stay=i == len(plans) - 1)
            expected += classes(plan)
            scrapes.append(scrape(s.port))
            if i == len(plans) - 1:  # the last one is killed, as a worker past its timeout would be
                assert s.command(f"kill {report['pid']}").startswith("OK")
            assert s.command(f"dead {report['pid']}") == "OK"
            scrapes.append(scrape(s.port))
        assert len(list(s.dir.glob("counter_*.db"))) == len(plans)  # the dead workers' files stay

    def cumulative(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Each series as Prometheus identifies it (an empty label is no label)."""
        return {(x.name, tuple(sorted((k, v) for k, v in x.labels.items() if v))): x.value for x in samples(text)
                if x.name.endswith(("_total", "_bucket", "_count", "_sum"))}

    for before, after in itertools.pairwise(scrapes):
        b, a = cumulative(before), cumulative(after)
        assert b.keys() <= a.keys(), sorted(b.keys() - a.keys())
        went_back = {k: (b[k], a[k]) for k in b if a[k] < b[k]}
        assert not went_back, went_back
    assert by_label(scrapes[-1], "streamscope_requests_total", "streamscope_class") == dict(expected)


def test_a_worker_whose_first_file_is_still_empty_leaves_the_page_whole(tmp_path: Path, base: str) -> None:
    """A process writing its first value creates its file empty and only then sizes it: a scrape
    in between (a gunicorn master forking a new worker while Prometheus scrapes) still serves every
    other worker's totals, not an HTTP 500."""
    with server(tmp_path, base, "serve") as s:
        s.run("fork", ["complete", "truncated"])
        before = scrape(s.port)
        for kind in ("counter", "histogram", "gauge_livesum"):
            (s.dir / f"{kind}_999999.db").touch()  # what `MmapedDict` leaves between open and truncate
        after = scrape(s.port)
    assert by_label(after, "streamscope_requests_total", "streamscope_class") == {"complete": 1, "truncated": 1}
    assert samples(after) == samples(before)


def test_a_file_no_worker_wrote_is_one_line_and_the_page_stays_whole(tmp_path: Path, base: str,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A damaged file, or one that is not a worker's, in the directory: the page is every worker's
    totals without it (not an HTTP 500), and one WARNING line names the file and what to do."""
    with server(tmp_path, base, "serve") as s:
        s.run("fork", ["complete", "truncated"])
        before = scrape(s.port)
        (s.dir / "counter_999998.db").write_bytes(b"garbage")
        after = scrape(s.port)
        with caplog.at_level(logging.WARNING, logger="streamscope"):
            for _ in range(2):
                generate_latest(aggregate_registry(str(s.dir)))
    assert samples(after) == samples(before)
    said = [r.getMessage() for r in caplog.records if "counter_999998.db" in r.getMessage()]
    assert len(said) == 1 and "remove it" in said[0] and "\n" not in said[0], said


def test_active_streams_sums_live_workers_and_drops_a_dead_one_after_worker_exit(tmp_path: Path, base: str) -> None:
    """`streamscope_active_streams` is the sum over live workers ("livesum"). A worker killed
    mid-stream keeps its +1 until `worker_exit(pid)` (gunicorn's `child_exit`) marks it dead; its
    finished requests stay counted."""
    active = "streamscope_active_streams"
    with server(tmp_path, base, "serve") as s:
        first = s.run("fork", ["complete", HANG.name], stay=True)
        second = s.run("mp", [HANG.name], stay=True)
        assert eventually(lambda: total(scrape(s.port), active) == 2), scrape(s.port)
        assert s.command(f"kill {first['pid']}").startswith("OK")
        assert total(scrape(s.port), active) == 2  # not yet marked dead
        assert s.command(f"dead {first['pid']}") == "OK"
        text = scrape(s.port)
        assert total(text, active) == 1
        assert by_label(text, "streamscope_requests_total", "streamscope_class") == {"complete": 1}
        assert s.command(f"kill {second['pid']}").startswith("OK")
        assert s.command(f"dead {second['pid']}") == "OK"
        text = scrape(s.port)
        assert total(text, active) == 0
        assert by_label(text, "streamscope_requests_total", "streamscope_class") == {"complete": 1}



def test_a_breaker_open_in_any_live_worker_reads_open(tmp_path: Path, base: str) -> None:
    """`streamscope_breaker_state` over workers is the largest live worker's ("livemax"): worker A
    opens its breaker and keeps it open; worker B opens, probes and closes after A moved, and the
    fleet still reads open (2), as the "a breaker open" alert needs. The value set last (B's
    closed) would read 0. Once A is gone (`worker_exit`), B's closed is what is left."""
    state = "streamscope_breaker_state"
    with server(tmp_path, base, "serve") as s:
        first = s.run("fork", ["breaker=600", "http_529"], stay=True)
        s.run("fork", ["breaker=0.3", "http_529", "sleep=0.6", "complete"], stay=True)
        text = scrape(s.port)
        assert by_label(text, state, "gen_ai_request_model") == {MODEL: 2.0}, text
        moved = by_label(text, "streamscope_breaker_transitions_total", "streamscope_breaker_to")
        assert moved == {"open": 2.0, "half_open": 1.0, "closed": 1.0}, moved
        assert s.command(f"kill {first['pid']}").startswith("OK")
        assert s.command(f"dead {first['pid']}") == "OK"
        text = scrape(s.port)
        assert [x.value for x in samples(text) if x.name == state] == [0.0], text

def test_every_worker_asks_for_the_port_one_serves_the_sum(tmp_path: Path, base: str) -> None:
    """Every worker calls `setup(prometheus_port=P)` (no `--preload`, no master hook): the first
    binds and serves every worker's sum, the others log one line and carry on. When the serving
    worker dies, its replacement binds the port and serves the same, complete sum."""
    port = free_port()
    expected: Counter[str] = Counter()
    with server(tmp_path, base, "workers", port) as s:
        reports = []
        for plan in PLANS:
            reports.append(s.run("fork", plan, stay=True))
            expected += classes(plan)
        serving = [r for r in reports if r["bound"]]
        assert len(serving) == 1, reports
        for r in reports:
            if not r["bound"]:
                assert len(r["lines"]) == 1 and r["tracebacks"] == 0, r
                assert f"port 127.0.0.1:{port} is in use" in r["lines"][0], r
        assert by_label(scrape(port), "streamscope_requests_total", "streamscope_class") == dict(expected)

        assert s.command(f"kill {serving[0]['pid']}").startswith("OK")
        assert s.command(f"dead {serving[0]['pid']}") == "OK"
        replacement = s.run("fork", ["complete"], stay=True)
        expected += Counter({"complete": 1})
        assert replacement["bound"] and replacement["lines"] == [], replacement
        assert by_label(scrape(port), "streamscope_requests_total", "streamscope_class") == dict(expected)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the same names as OpenTelemetry's Prometheus exporter --------------------------------------


def leg(base: str) -> None:
    """One process, `setup(prometheus_port=0)`, a mix of streams touching every instrument, then
    serving until stdin closes. Run with and without `PROMETHEUS_MULTIPROC_DIR`."""
    from opentelemetry.sdk.trace import TracerProvider

    import streamscope.core.guard as internal
    from streamscope import AnthropicInstrumentor, Budgets

    telemetry = setup("exposition", otlp=False, prometheus_port=0, set_global=False)
    AnthropicInstrumentor().instrument(
        tracer_provider=TracerProvider(), meter_provider=telemetry.meter_provider,
        budgets={"default": Budgets(first_token=0.5),
                 "route:checkout": Budgets(first_token=5.0, idle=5.0, deadline=20.0)})
    call(base, "thinking", route="checkout", extra={"thinking": THINKING})  # reasoning, budget use, unreachable
    call(base, "timed_silent_start")  # a first-token firing
    call(base, WEB_SEARCH.name, route="checkout")  # a server tool run
    call(base, "complete", model="claude-other")
    call(base, "http_529")  # error.type
    call(base, "slow_answer", cancel=True)  # cancelled, partial
    try:
        raise RuntimeError("an internal error, on purpose")
    except RuntimeError:
        internal.internal_error("test_multiprocess_metrics")
    print("PORT", telemetry.prometheus_port, flush=True)
    sys.stdin.read()
    telemetry.shutdown()


LEG = f"import sys; sys.path.insert(0, {str(TESTS)!r}); from test_multiprocess_metrics import leg; leg(sys.argv[1])"


def test_multiprocess_names_labels_and_buckets_are_the_opentelemetry_exporters(tmp_path: Path, base: str) -> None:
    """The same streams recorded through `opentelemetry-exporter-prometheus` (one process) and
    through the multiprocess files: the same families and types, the same series (names, label
    names and values, `le` strings), the same counts, in both exposition formats. So every
    dashboard and rule reads the same in both modes."""
    directory = tmp_path / "multiproc"
    directory.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in (mp.ENV, mp.ENV.lower())}
    legs = {
        "otel": subprocess.Popen([sys.executable, "-c", LEG, base], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=env, cwd=TESTS),
        "multiprocess": subprocess.Popen([sys.executable, "-c", LEG, base], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, env={**env, mp.ENV: str(directory)},
                                         cwd=TESTS),
    }
    pages: dict[str, dict[str, str]] = {}
    try:
        for name, proc in legs.items():
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("PORT "), (name, line)
            port = int(line.split()[1])
            pages[name] = {"text": scrape(port), "openmetrics": scrape(port, openmetrics=True)}
    finally:
        for proc in legs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate("", timeout=30)
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def shape(text: str, parse: Callable[[str], Any]) -> tuple[dict[str, str], set[Any], dict[Any, float], set[str]]:
        families = [f for f in parse(text) if f.name not in ("target", "target_info")]  # per-process ids
        types = {f.name: f.type for f in families}
        series = {(s.name, tuple(sorted(s.labels.items()))) for f in families for s in f.samples}
        counts = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples
                  if s.name.endswith(("_total", "_count", "_bucket")) or f.type == "gauge"}
        target = {k for f in parse(text) for s in f.samples if s.name == "target_info" for k in s.labels}
        return types, series, counts, target

    for fmt, parse in (("text", text_string_to_metric_families), ("openmetrics", parse_openmetrics)):
        otel = shape(pages["otel"][fmt], parse)
        multi = shape(pages["multiprocess"][fmt], parse)
        assert otel[0] == multi[0], (fmt, set(otel[0].items()) ^ set(multi[0].items()))
        assert otel[1] == multi[1], (fmt, sorted(otel[1] - multi[1])[:10], sorted(multi[1] - otel[1])[:10])
        # bucket counts depend on timing only for durations; counters, counts and gauges must agree
        exact = {k for k in otel[2] if not k[0].endswith("_bucket")}
        assert {k: otel[2][k] for k in exact} == {k: multi[2][k] for k in exact}, fmt
        assert otel[3] == multi[3] and "service_instance_id" in otel[3], (fmt, otel[3] ^ multi[3])
    families = {f.name for f in text_string_to_metric_families(pages["multiprocess"]["text"])}
    assert {"streamscope_requests", "streamscope_budget_firings", "streamscope_active_streams",
            "streamscope_budget_limit_seconds", "streamscope_deadline_unreachable", "streamscope_internal_errors",
            "streamscope_server_tool_duration_seconds", "gen_ai_client_token_usage"} <= families
    le = {s.labels["le"] for s in samples(pages["multiprocess"]["text"])
          if s.name == "gen_ai_client_token_usage_bucket"}
    assert {"1048576.0", "67108864.0", "+Inf"} <= le, sorted(le)


def test_the_copied_naming_helpers_match_the_exporters() -> None:
    """Should the exporter move its private naming helpers, the copies name everything alike."""
    from opentelemetry.exporter.prometheus import _mapping

    units = ["s", "ms", "{token}", "{token}/s", "1", "By", "KiBy", "%", "m/s", "{req}/min", "s/", "/s", "Cel", "",
             "foo bar", "{a}{b}", "kBy/h", "1/s"]
    names = ["streamscope.requests", "gen_ai.client.token.usage", "9lives", "a-b.c:d", "x__y", "ünï", ""]
    assert [mp.copy_map_unit(u) for u in units] == [_mapping.map_unit(u) for u in units]
    assert [mp.copy_sanitize_full_name(n) for n in names] == [_mapping.sanitize_full_name(n) for n in names]
    assert [mp.copy_sanitize_attribute(n) for n in names] == [_mapping.sanitize_attribute(n) for n in names]


# -- a real Prometheus: two pods, each a server with workers ------------------------------------


def test_a_real_prometheus_sums_workers_and_pods(tmp_path: Path, base: str) -> None:
    """Two "pods" (a master serving with `os.fork` workers; a preloaded master with
    `multiprocessing` workers), one target each, `dashboards/rules.yml` loaded: the dashboard's
    per-class sums are the sum over every worker of both pods, every panel query and every rule
    evaluates, no counter ever resets although workers come and go, and the per-class rate panel
    sees every class."""
    from test_dashboards import load_script

    live = load_script("live")
    generate = load_script("generate")
    with server(tmp_path, base, "serve") as pod_a, server(tmp_path, base, "preload") as pod_b:
        prom = live.PromServer(tmp_path / "prometheus", pod_a.port, job="streamscope-pods",
                               rule_files=[ROOT / "dashboards" / "rules.yml"])
        try:
            prom.wait_ready()
            # dashboards/live.py's server scrapes one target: add the second pod, reload the config
            config = tmp_path / "prometheus" / "prometheus.yml"
            one = f'"127.0.0.1:{pod_a.port}"'
            assert one in config.read_text()
            config.write_text(config.read_text().replace(one, f'{one}, "127.0.0.1:{pod_b.port}"'))
            prom.proc.send_signal(signal.SIGHUP)
            assert live.eventually(lambda: prom.by("sum(up)", "") == {"": 2.0}, timeout=60), prom.query("up")

            expected = Counter({"complete": 1})  # pod B's master
            query = "sum by (streamscope_class) (streamscope_requests_total)"
            for _ in range(2):  # a second round of (new) workers: every class's series then grows
                for plan in PLANS:
                    for pod, kind in ((pod_a, "fork"), (pod_b, "mp")):
                        report = pod.run(kind, plan)
                        assert pod.command(f"dead {report['pid']}") == "OK"
                        expected += classes(plan)
                got = live.eventually(lambda want=dict(expected): (lambda c: c if c == want else None)(
                    prom.by(query, "streamscope_class")), timeout=60)
                assert got == dict(expected), prom.by(query, "streamscope_class")
            # Workers came and went: no counter series ever reset, so rate() reads every increase.
            assert prom.by("max(resets(streamscope_requests_total[10m]))", "") == {"": 0.0}
            assert prom.by("count(count by (instance) (streamscope_requests_total))", "") == {"": 2.0}
            assert prom.by("sum(streamscope_active_streams)", "") in ({"": 0.0}, {})

            groups = prom.wait_evaluated(times=2, timeout=60)
            unhealthy = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"]
            assert not unhealthy, unhealthy
            panels = generate.panel_expressions({"__rate_interval": "1m", "__range": "10m"})
            for panel in panels:
                prom.query(panel.expr)  # raises PrometheusError with Prometheus's message on a bad query
            by_class = next(p.expr for p in panels if p.panel == "Requests by class")
            rates = prom.by(by_class, "streamscope_class")
            assert set(rates) == set(expected) and all(v > 0 for v in rates.values()), rates
        finally:
            prom.stop()


# -- setup() in one process: misconfiguration, resource, nothing changed without the variable ---


def _one_warning(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    records = [r for r in caplog.records if r.name == "streamscope" and r.levelno >= logging.WARNING]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert records[0].exc_info is None and "\n" not in records[0].getMessage(), records[0].getMessage()
    return records[0]


def _misconfigured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, str]]:
    missing = tmp_path / "missing"
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o500)
    if os.getuid() == 0:  # root writes anywhere: have the check see what a worker's user would
        access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: (
            not mode & os.W_OK if Path(path) == read_only else access(path, mode, **kw)))
    return [(missing, "does not exist"), (a_file, "is not a directory"), (read_only, "is not writable")]


def test_a_misconfigured_directory_is_one_line_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """A directory that is missing, not a directory, or not writable: `setup()`, `serve_metrics()`
    and `worker_exit()` each log one line saying what is wrong and how to fix it, raise nothing,
    and serve nothing (one worker's numbers on its own would pass for the sum)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import values

    for path, says in _misconfigured(tmp_path, monkeypatch):
        monkeypatch.setenv(mp.ENV, str(path))
        caplog.clear()
        telemetry = setup("misconfigured", otlp=False, prometheus_port=0, set_global=False)
        try:
            line = _one_warning(caplog).getMessage()
            assert says in line and str(path) in line and mp.ENV in line, line
            assert "mkdir -p" in line or "writable" in line, line
            assert telemetry.prometheus_port is None and telemetry.multiprocess_dir is None
            assert isinstance(telemetry.meter_provider, MeterProvider)
        finally:
            telemetry.shutdown()
        caplog.clear()
        if path.is_dir():  # readable: the parent that only serves the sum needs no more
            served = serve_metrics(0)
            assert served is not None
            served.close()
            assert not [r for r in caplog.records if r.name == "streamscope"]
        else:
            assert serve_metrics(0) is None
            assert says in _one_warning(caplog).getMessage()
        caplog.clear()
        worker_exit(12345)
        assert not [r for r in caplog.records if r.name == "streamscope"]
    assert not getattr(values.ValueClass, "_multiprocess", False)  # this process never switched

    monkeypatch.delenv(mp.ENV)
    caplog.clear()
    assert serve_metrics(0) is None
    assert mp.ENV in _one_warning(caplog).getMessage()


def test_setup_gives_each_call_its_own_service_instance_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers pushing OTLP must not be one series: `service.instance.id` is a fresh UUID per
    `setup()` unless `OTEL_RESOURCE_ATTRIBUTES` sets one. Without the multiprocess variable the
    providers are the SDK's, as before."""
    from opentelemetry.sdk.metrics import MeterProvider

    monkeypatch.delenv(mp.ENV, raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    made = [setup("instances", otlp=False, set_global=False) for _ in range(2)]
    try:
        ids = [t.tracer_provider.resource.attributes["service.instance.id"] for t in made]
        assert ids[0] != ids[1] and all(uuid.UUID(str(i)) for i in ids)
        assert all(isinstance(t.meter_provider, MeterProvider) and t.multiprocess_dir is None for t in made)
    finally:
        for t in made:
            t.shutdown()
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=pod-7,deployment.environment=test")
    telemetry = setup("instances", otlp=False, set_global=False)
    try:
        assert telemetry.tracer_provider.resource.attributes["service.instance.id"] == "pod-7"
    finally:
        telemetry.shutdown()
