"""A real Prometheus and a real ``streamscope demo`` on loopback, for live tests and screenshots.

Why one module: ``tests/deploy/test_prometheus_live.py``, ``tests/deploy/test_dashboards_live.py`` and
``dashboards/render.py --live`` all need the same two processes (Debian's ``prometheus``, from
``scripts/ensure-prometheus``, scraping a process that records streamscope metrics) and the same
HTTP API calls, so a timing margin or an API detail is fixed in one place;
``tests/deploy/test_alerts_live.py`` adds Debian's ``prometheus-alertmanager`` behind them. It
uses the standard library only; ``dashboards/`` is not a package, so callers load this file by
path, as they load ``generate.py`` (see dashboards/README.md).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class PrometheusError(RuntimeError):
    """The Prometheus HTTP API answered with an error (the message is Prometheus's own)."""


def free_port() -> int:
    """A loopback port nobody listens on right now (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def eventually(check: Callable[[], T], timeout: float = 45, every: float = 0.5) -> T:
    """Poll ``check()`` until it returns a truthy value; return the last value either way.

    Scrapes and rule evaluations happen on Prometheus's clock, not ours: the caller asserts on
    the returned value, so a timeout shows what was last seen instead of a bare "timed out".
    """
    deadline = time.monotonic() + timeout
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(every)
        value = check()
    return value


class PromAPI:
    """Prometheus's HTTP API at ``url``: queries, range queries, rule state.

    Errors come back as :class:`PrometheusError` carrying Prometheus's own message, so a failing
    panel query says what is wrong with it, not just "HTTP Error 400".
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def api(self, path: str, **params: object) -> Any:
        """GET ``/api/v1/<path>``; its ``data``, or :class:`PrometheusError` with Prometheus's message."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:  # 400 bad_data, 422 execution, 503 timeout: JSON bodies
            try:
                body = json.load(exc)
            except ValueError:
                raise PrometheusError(f"{path} {params}: HTTP {exc.code}") from exc
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query (at ``at``, Unix seconds, or now); the result vector."""
        params: dict[str, object] = {"query": promql}
        if at is not None:
            params["time"] = at
        return list(self.api("query", **params)["result"])

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A range query, as Grafana runs a time-series panel; the result matrix."""
        return list(self.api("query_range", query=promql, start=start, end=end, step=step)["result"])

    def by(self, promql: str, label: str) -> dict[str, float]:
        """An instant query as ``{value of label: sample value}``."""
        return {row["metric"].get(label, ""): float(row["value"][1]) for row in self.query(promql)}

    def rules(self) -> list[dict[str, Any]]:
        """The rule groups with each rule's health, last error and last evaluation."""
        return list(self.api("rules")["groups"])

    def wait_evaluated(self, times: int = 2, timeout: float = 30) -> list[dict[str, Any]]:
        """Until every rule group has been evaluated ``times`` more times; the groups then.

        Counted as changes of each group's ``lastEvaluation``, so every evaluation counted saw
        the data present when this was called.
        """
        first = self.rules()
        if not first:
            raise RuntimeError("no rule groups loaded: start Prometheus with rule_files")
        seen = {g["name"]: [g["lastEvaluation"]] for g in first}

        def done() -> list[dict[str, Any]] | None:
            groups = self.rules()
            for g in groups:
                if g["lastEvaluation"] != seen[g["name"]][-1]:
                    seen[g["name"]].append(g["lastEvaluation"])
            return groups if all(len(v) > times for v in seen.values()) else None

        groups = eventually(done, timeout=timeout, every=0.2)
        if groups is None:
            raise RuntimeError(f"rule groups not evaluated {times} times in {timeout}s: {seen}")
        return groups


class _Process:
    """A server binary on a free loopback port, its log in ``directory``: started, awaited, stopped."""

    name = "server"

    def _start(self, directory: Path, args: Sequence[str]) -> None:
        self.log_path = directory / f"{self.name}.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(list(args), stdout=self.log, stderr=subprocess.STDOUT)

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_ready(self, timeout: float = 60) -> None:
        """Until ``/-/ready`` answers 200 (its configuration, rules included, is loaded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout}s: {self.log_path.read_text()}")

    def stop(self) -> None:
        """Terminate (then kill) this server; idempotent."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


S = TypeVar("S", bound=_Process)


class PromServer(PromAPI, _Process):
    """Debian's ``prometheus`` on a free loopback port, scraping one target every ``interval``.

    ``rule_files`` (e.g. ``dashboards/rules.yml``) are evaluated every ``evaluation_interval``
    (default: ``interval``), so a test sees recorded series and rule health seconds after the data
    arrives. With ``alertmanager`` (its URL, e.g. :attr:`AlertmanagerServer.url`) firing and
    resolved alerts are sent there, as a production Prometheus sends them.
    """

    name = "prometheus"

    def __init__(self, directory: Path, target_port: int, *, rule_files: Sequence[Path] = (),
                 job: str = "streamscope-live", interval: str = "1s", evaluation_interval: str | None = None,
                 alertmanager: str | None = None) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("Debian's prometheus is not installed: run scripts/ensure-prometheus")
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        super().__init__(f"http://127.0.0.1:{self.port}")
        rules = "".join(f"\n  - {json.dumps(str(Path(p).resolve()))}" for p in rule_files)
        config = directory / "prometheus.yml"
        config.write_text(textwrap.dedent(f"""\
            global:
              scrape_interval: {interval}
              scrape_timeout: {interval}
              evaluation_interval: {evaluation_interval or interval}
            scrape_configs:
              - job_name: {job}
                static_configs:
                  - targets: ["127.0.0.1:{target_port}"]
            """) + (f"rule_files:{rules}\n" if rules else "") + (_alerting(alertmanager) if alertmanager else ""))
        self._start(directory, [binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
                                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"])


def _alerting(url: str) -> str:
    """The ``alerting:`` section of prometheus.yml sending alerts to the Alertmanager at ``url``."""
    parts = urllib.parse.urlsplit(url)
    prefix = f"\n        path_prefix: {json.dumps(parts.path)}" if parts.path.strip("/") else ""
    return textwrap.dedent(f"""\
        alerting:
          alertmanagers:
            - scheme: {parts.scheme or "http"}{prefix}
              static_configs:
                - targets: ["{parts.netloc}"]
        """)


class AlertmanagerServer(_Process):
    """Debian's ``prometheus-alertmanager`` on a free loopback port, notifying one webhook.

    Clustering is off (``--cluster.listen-address=``: no gossip port, no peers to wait for) and
    its storage lives in ``directory``. Every alert goes to ``webhook_url`` grouped by alert name,
    resolved ones too, and the waits are seconds instead of minutes so a test sees a firing and
    its resolution within one rule-evaluation cycle or two. Give :attr:`url` to
    :class:`PromServer` as ``alertmanager``.
    """

    name = "alertmanager"

    def __init__(self, directory: Path, webhook_url: str, *, group_wait: str = "1s", group_interval: str = "1s",
                 repeat_interval: str = "1h") -> None:
        binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
        if binary is None:
            raise RuntimeError("Debian's prometheus-alertmanager is not installed: run scripts/ensure-prometheus")
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = directory / "alertmanager.yml"
        config.write_text(textwrap.dedent(f"""\
            route:
              receiver: webhook
              group_by: [alertname]
              group_wait: {group_wait}
              group_interval: {group_interval}
              repeat_interval: {repeat_interval}
            receivers:
              - name: webhook
                webhook_configs:
                  - url: {json.dumps(webhook_url)}
                    send_resolved: true
            """))
        self._start(directory, [binary, f"--config.file={config}", f"--storage.path={directory / 'alertmanager-data'}",
                                f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
                                "--log.level=warn"])

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds now (API v2), active, silenced and inhibited alike."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=30) as r:
            return list(json.load(r))


class DemoChild:
    """``streamscope demo --serve`` in a child process, serving ``/metrics`` on a known port.

    The port is chosen before the start so Prometheus can scrape *while* the workload runs (rates
    need samples over time). ``--serve`` keeps the page up after the run; the run is over when
    the demo prints :attr:`DONE`, which it does only after every request has ended and been
    recorded, so :meth:`wait_done` is exact, not a guess from the clock.
    """

    DONE = "serving /metrics until Ctrl-C"
    #: ``streamscope`` with Ctrl-C turned back on: a process started in the background by a
    #: non-interactive shell (CI, ``make ... &``) inherits SIGINT *ignored*, and so would the demo,
    #: which then could only be killed, never stopped the way it is written to stop.
    _MAIN = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "from streamscope.tools.cli import main; sys.exit(main(sys.argv[1:]))")
    AS_DESIGNED = "every span carries the class its script was written for"

    def __init__(self, requests: int, *, time_scale: float = 0.1, concurrency: int = 8, seed: int = 7,
                 port: int | None = None) -> None:
        self.requests = requests
        self.port = port or free_port()
        self.lines: list[str] = []
        self._done = threading.Event()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.started = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self._MAIN, "demo", "--requests", str(requests), "--seed", str(seed),
             "--time-scale", str(time_scale), "--concurrency", str(concurrency), "--port", str(self.port),
             "--serve"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        self._reader = threading.Thread(target=self._read, name="demo-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if self.DONE in line:
                self._done.set()
        self._done.set()  # end of output: the child exited (or closed stdout); wait_done tells which

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def as_designed(self) -> bool:
        """Whether the demo's self-check passed: every request's span has the class its script was
        written for. Whitespace is normalised: the console wraps the sentence at its width."""
        return self.AS_DESIGNED in " ".join(self.output.split())

    def __enter__(self) -> DemoChild:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_done(self, timeout: float = 120) -> str:
        """Until the workload has ended and the demo serves its final metrics; its output so far."""
        if not self._done.wait(timeout):
            raise RuntimeError(f"the demo did not finish in {timeout}s:\n{self.output[-3000:]}")
        if self.DONE not in self.output:
            raise RuntimeError(f"the demo exited ({self.proc.poll()}) before serving:\n{self.output[-3000:]}")
        return self.output

    def stop(self) -> int:
        """Ctrl-C (the demo then shuts its telemetry down and exits), kill if that hangs; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=5)
        return int(self.proc.returncode)


def settle(prom: PromAPI, demo: DemoChild, *, timeout: float = 120) -> float:
    """Until ``demo``'s workload is over, fully scraped and (if rules are loaded) evaluated twice.

    Returns when the data was complete (Unix seconds): the natural end of a query range. Raises,
    with what was last seen, if any step does not happen within its (generous) time.
    """
    from streamscope.tools.demo_page import provider_calls

    demo.wait_done(timeout)
    total, calls = "sum(streamscope_requests_total)", provider_calls(demo.requests)  # the page's relayed reads too
    if not eventually(lambda: prom.by(total, "").get("") == calls, timeout=30):
        raise RuntimeError(f"Prometheus has {prom.by(total, '')} provider calls, the demo made {calls}")
    complete = time.time()
    if prom.rules():
        prom.wait_evaluated(times=2)
    return complete


__all__ = ["AlertmanagerServer", "DemoChild", "PromAPI", "PromServer", "PrometheusError", "eventually", "free_port",
           "settle"]
