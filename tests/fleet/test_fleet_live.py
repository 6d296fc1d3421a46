"""The dashboard row "Resume and the fleet" and its two alerts, against a real Prometheus.

A small fleet in this process, its metrics served by `opentelemetry-exporter-prometheus`
(`streamscope.telemetry.setup(prometheus_port=0)`), scraped every second by Debian's `prometheus`
with streamscope's rules (generated with the resume and store windows and `for:` scaled down to
seconds, :data:`SCALED`; thresholds stay the defaults), alerts routed by Debian's
`prometheus-alertmanager` to a webhook served by this test (`test_alerts_live.Webhook`):

* one uvicorn worker relaying the real SDK's streams from the simulator with four resume buffers:
  `memory` (`MemoryBuffer`), `small` (a `MemoryBuffer` keeping 4 events), `shared` (`RedisBuffer`
  on a real Redis, Debian's redis-server) and `down` (`RedisBuffer` on a second Redis, stopped:
  an outage);
* a browser workload in a thread, round after round: a browser that leaves after two tokens and
  reconnects with `Last-Event-ID` (resumed, its events replayed), a reconnect with an id nobody
  knows (nothing_to_resume), a reconnect from before what `small` keeps (expired), a stream
  through `down` (it completes; writing its copy fails: a store error);
* a second worker in a process of its own (`fleet_worker.py`, on the shared Redis) running two
  generations, SIGKILLed mid-stream; their browsers reconnect to the first worker (owner_lost);
* the breaker (`Breaker(failures=2, ...)`) opened by two HTTP 529s from the provider.

Then every query of the row returns data (with the values the workload implies), both new alerts
reach the webhook firing, and Prometheus's totals are exactly what the browsers saw.

Every wait is generous (:data:`WAIT`); nothing asserts how long anything took.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import pytest
import redis as redis_py
import yaml
from opentelemetry.sdk.trace import TracerProvider
from relay_app import USER, opener
from served import serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from test_alerts_live import Webhook
from test_dashboards import load_script
from test_dashboards_live import ONLY_WITH_THE_FLEET
from test_relay import Got, get

from redis_server import RedisServer
from streamscope import AnthropicInstrumentor, Breaker, CircuitOpen
from streamscope.serve import MemoryBuffer, RedisBuffer, relay
from streamscope.serve.buffers.redis_keys import key_of
from streamscope.simulator import SCENARIOS, Scenario, Simulator, TextSpec, message_stream
from streamscope.simulator.catalog import ANSWER, LONG, words
from streamscope.telemetry import setup

live = load_script("live")  # dashboards/live.py: Prometheus and Alertmanager, shared with the other live tests
generate = load_script("generate")
PromServer, AlertmanagerServer, eventually = live.PromServer, live.AlertmanagerServer, live.eventually

ROW = "Resume and the fleet"
RESUME_FAILING, REDIS_UNREACHABLE = "StreamscopeResumeFailing", "StreamscopeRedisUnreachable"
FOR = "5s"
#: The rule config (generate.py --config): the row's alerts over seconds, thresholds the defaults.
SCALED: dict[str, str] = {
    "resume_window": "20s",
    "store_error_window": "20s",
    "resume_failing_for": FOR,
    "redis_unreachable_for": FOR,
}
SHORT_RUN = {"__rate_interval": "1m", "__range": "10m"}
JOB = "streamscope-fleet"
WAIT = 120
"""Seconds anything may take to show (scrapes, windows filling, `for:`, Alertmanager); typically 10-30."""
PAUSE = 0.2
"""Seconds between the workload's rounds: a few reconnects a second, leaving cores to the rest."""
MODEL_BROKEN = "claude-breaker"
"""The model whose calls the provider answers 529: its breaker opens, the relay's model's does not."""

QUICK = Scenario.single("fleet_live_quick", message_stream(blocks=[TextSpec(words(ANSWER)[:10], interval=0.1)]))
"""Ten words over about a second: a browser that leaves after two comes back mid-answer."""
OWNED = Scenario.single("fleet_live_owned", message_stream(blocks=[TextSpec(words(LONG)[:60], interval=0.1)]))
"""Six seconds of words: the owner worker is killed long before the end."""
FLEET_WORKER = Path(__file__).with_name("fleet_worker.py")

pytestmark = pytest.mark.timeout(600)


def worker_app(sim: Simulator, buffers: dict[str, Any]) -> Any:
    """`GET /relay/<buffer>/<scenario>`: the real SDK's stream relayed with resume on that buffer."""
    async def relayed(request: Request) -> Response:
        p = request.path_params
        return await relay(request, opener(sim, "anthropic", "create", p["scenario"], request.query_params),
                           resume=buffers[p["buffer"]])

    return Starlette(routes=[Route("/relay/{buffer}/{scenario}", relayed)])


class Workload:
    """Browsers reading the relay, round after round, in a thread until :meth:`stop`; what they saw
    is counted (:attr:`seen`, :attr:`replayed`) and anything unexpected kept in :attr:`errors`."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.seen: Counter[str] = Counter()
        self.replayed = 0
        """Events received on connections that resumed (each is one the buffer replayed)."""
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-workload", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """After the round in progress; idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the workload did not stop"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.round()
            except Exception as exc:  # an assertion too: kept for the tests, the rounds go on
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(PAUSE)

    def round(self) -> None:
        b = self.base
        # A browser leaves after two tokens and comes back with the id of the last event it got.
        first = get(b, f"/relay/memory/{QUICK.name}", stop_after=2)
        assert first.status == 200 and first.events[-1].event == "token", (first.status, first.events)
        again = get(b, f"/relay/memory/{QUICK.name}", {"Last-Event-ID": first.events[-1].id or ""})
        assert again.status == 200 and again.terminal.event == "done", (again.status, again.events)
        assert len(first.tokens + again.tokens) == 10, (first.events, again.events)
        self.seen["resumed"] += 1
        self.replayed += len(again.events)
        # A reconnect with an id no worker ever gave.
        unknown = get(b, "/relay/memory/complete", {"Last-Event-ID": "f" * 32 + ":2"})
        assert unknown.status == 204, unknown.status
        self.seen["nothing_to_resume"] += 1
        # A reconnect from before the 4 events `small` keeps.
        whole = get(b, "/relay/small/complete")
        assert whole.terminal.event == "done" and len(whole.events) > 5, whole.events
        late = get(b, "/relay/small/complete", {"Last-Event-ID": f"{whole.headers['x-request-id']}:1"})
        assert late.status == 204, late.status
        self.seen["expired"] += 1
        # A stream through the worker whose Redis is down: whole, without resume.
        down = get(b, "/relay/down/complete")
        assert down.status == 200 and down.terminal.event == "done", (down.status, down.events)
        self.seen["down"] += 1


@dataclass
class Fleet:
    prom: Any
    alertmanager: Any
    webhook: Webhook
    workload: Workload
    buffers: dict[str, Any]
    rules: dict[str, dict[str, Any]]
    """The generated alerting rules by name, as Prometheus loaded them."""
    started: float
    owner_lost: list[Got] = field(default_factory=list)
    """The reconnects whose owner had died, as their browsers got them."""


def scaled_rules(directory: Path) -> Path:
    """streamscope's rules generated from :data:`SCALED` (the real generator, a real config file)."""
    config = directory / "scaled.toml"
    config.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in SCALED.items()))
    out = directory / "generated"
    assert generate.main(["--config", str(config), "--output-dir", str(out)]) == 0
    return out / generate.RULES_FILE


def open_breaker(sim: Simulator) -> None:
    """Two 529s from the provider open `MODEL_BROKEN`'s breaker; the third call is not sent."""
    client = anthropic.Anthropic(base_url=sim.url("http_529"), api_key="test-key", max_retries=0, timeout=10)
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError):
            client.messages.create(model=MODEL_BROKEN, max_tokens=64, messages=USER, stream=True)
    with pytest.raises(CircuitOpen):
        client.messages.create(model=MODEL_BROKEN, max_tokens=64, messages=USER, stream=True)


def number(event_id: str | None) -> int:
    """`<request id>:<n>` -> n."""
    return int((event_id or ":0").rpartition(":")[2])


def copied(redis_url: str, first: Got) -> int:
    """The number of the last event of `first`'s generation in Redis (0: none yet): the buffer's
    stream of it (`redis_keys.key_of`), one entry `0-<n>` per event."""
    key = key_of(first.headers["x-request-id"])
    with redis_py.Redis.from_url(redis_url, socket_timeout=5) as client:
        last = client.xrevrange(key, "+", "-", count=1)
    return number(last[0][0].decode().replace("-", ":")) if last else 0


def lose_owner(sim: Simulator, redis_url: str, base: str, prom: Any) -> list[Got]:
    """Two generations on a worker of its own, SIGKILLed mid-stream; each browser reconnects here.

    The second reconnect waits until Prometheus has scraped the first one's `owner_lost`, so the
    counter's rate sees an increase (its series starts at 1: the first increment has no rate)."""
    owner = subprocess.Popen([sys.executable, str(FLEET_WORKER), redis_url, sim.url("")], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert owner.stdout is not None
        url = owner.stdout.readline().strip()
        assert url.startswith("http://"), (url, owner.poll())
        firsts = [get(url, f"/relay/anthropic/create/{OWNED.name}", stop_after=3) for _ in range(2)]
        for first in firsts:  # killed once its copy in Redis holds what the browser got (a busy owner lags)
            assert eventually(lambda first=first: copied(redis_url, first) >= number(first.events[-1].id),
                              timeout=30), (copied(redis_url, first), first.events[-1].id)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(10)
        if owner.stdout is not None:
            owner.stdout.close()
    got = []
    query = 'sum(streamscope_relay_resumes_total{streamscope_resume_outcome="owner_lost"})'
    for n, first in enumerate(firsts, 1):
        rid = first.headers["x-request-id"]
        again = get(base, f"/relay/shared/{OWNED.name}", {"Last-Event-ID": first.events[-1].id or ""})
        assert again.status == 200, again.status
        assert again.terminal.event == "error" and again.terminal.json == {
            "code": "upstream_unreachable", "request_id": rid, "partial": True}, again.events
        got.append(again)
        assert eventually(lambda n=n: prom.by(query, "") == {"": float(n)}, timeout=WAIT), prom.by(query, "")
    return got


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    # A breaker store an earlier module of this worker left behind syncs with its Redis, long
    # stopped, until it is collected, and would count those errors to this module's meter.
    gc.collect()
    directory = tmp_path_factory.mktemp("fleet-live")
    rules_file = scaled_rules(directory)
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    rules = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    for name in (RESUME_FAILING, REDIS_UNREACHABLE):
        assert rules[name]["for"] == FOR, f"{name}: for is {rules[name]['for']}, the config asked {FOR}"
    with ExitStack() as stack:
        sim = stack.enter_context(Simulator({**SCENARIOS, QUICK.name: QUICK, OWNED.name: OWNED}))
        shared = stack.enter_context(RedisServer())
        outage = stack.enter_context(RedisServer())
        telemetry = setup("fleet-live", otlp=False, prometheus_port=0, set_global=False)
        stack.callback(telemetry.shutdown)
        instrumentor = AnthropicInstrumentor()
        # A cool-down far past the module's run: the breaker stays open while the panels are read.
        instrumentor.instrument(tracer_provider=TracerProvider(), meter_provider=telemetry.meter_provider,
                                breaker=Breaker(failures=2, window=30, cool_down=600))
        stack.callback(instrumentor.uninstrument)
        buffers = {
            "memory": MemoryBuffer(grace=10.0, ttl=300.0),
            "small": MemoryBuffer(grace=10.0, ttl=300.0, max_events=4),
            "shared": RedisBuffer(shared.url, grace=10.0, ttl=300.0),
            "down": RedisBuffer(outage.url, grace=10.0, ttl=300.0, timeout=0.2),
        }
        base = stack.enter_context(serving(worker_app(sim, buffers)))
        webhook = Webhook()
        stack.callback(webhook.close)
        alertmanager = stack.enter_context(AlertmanagerServer(directory / "alertmanager", webhook.url))
        alertmanager.wait_ready()
        prom = stack.enter_context(PromServer(directory / "prometheus", telemetry.prometheus_port,
                                              rule_files=[rules_file], job=JOB, interval="1s",
                                              alertmanager=alertmanager.url))
        prom.wait_ready()
        assert eventually(lambda: prom.api("alertmanagers")["activeAlertmanagers"], timeout=WAIT), \
            prom.api("alertmanagers")

        # Both Redis buffers hold a generation while their Redis answers; then one Redis goes away.
        for name in ("shared", "down"):
            whole = get(base, f"/relay/{name}/complete")
            assert whole.terminal.event == "done", whole.events
            assert eventually(lambda name=name: buffers[name].size() > 0, timeout=30), f"nothing written to {name}"
        outage.stop()
        open_breaker(sim)
        workload = Workload(base)
        started = time.time()
        workload.start()
        stack.callback(workload.stop)
        owner_lost = lose_owner(sim, shared.url, base, prom)
        yield Fleet(prom, alertmanager, webhook, workload, buffers, rules, started, owner_lost)


def row_panels(title: str) -> set[str]:
    """The titles of the panels under row `title` of the triage dashboard, as generated."""
    found: dict[str, list[str]] = {}
    for build in generate.DASHBOARDS.values():
        row = None
        for panel in generate.mixin.dashboard_model(build, generate.DEFAULT)["panels"]:
            if panel["type"] == "row":
                row = found.setdefault(panel["title"], [p["title"] for p in panel.get("panels", []) or []])
            elif row is not None:
                row.append(panel["title"])
    return set(found[title])


def values(rows: list[dict[str, Any]], label: str) -> dict[str, float]:
    """A range query's result as {value of label: largest value over the range} (NaN left out)."""
    out: dict[str, float] = {}
    for row in rows:
        points = [float(v) for _, v in row["values"] if v not in ("NaN", "+Inf", "-Inf")]
        out[row["metric"].get(label, "")] = max(points, default=float("nan"))
    return out


def test_every_fleet_panel_query_returns_data(fleet: Fleet) -> None:
    """As Grafana asks (a range query over the run, an instant query now), every query of the row
    returns data; and the data is the workload's: all four resume outcomes at a rate, lost and
    nothing-to-resume shares above 0, events replayed, both buffers holding bytes, store errors on
    `buffer.append`, one worker's breaker open for the 529'd model."""
    titles = row_panels(ROW)
    assert titles == ONLY_WITH_THE_FLEET, "test_dashboards_live.py exempts exactly this row's panels"
    queries = [q for q in generate.panel_expressions(SHORT_RUN) if q.panel in titles]
    assert {q.panel for q in queries} == titles and len(queries) == 8

    def both(expr: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        ranged = fleet.prom.query_range(expr, fleet.started, time.time(), 1)
        instant = fleet.prom.query(expr)
        return (ranged, instant) if ranged and instant else None

    seen: dict[tuple[str, str], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for q in queries:
        assert "$" not in q.expr, q
        got = eventually(lambda q=q: both(q.expr), timeout=WAIT)
        assert got, f"{q.panel} {q.ref_id}: no data\n{q.expr}"
        seen[(q.panel, q.ref_id)] = got

    outcomes = {"resumed", "nothing_to_resume", "expired", "owner_lost"}
    by_outcome = "streamscope_resume_outcome"
    [resumes] = [q for q in queries if q.panel == "Resumes by outcome"]
    # Every outcome reconnected at a rate at some time in the run (owner_lost: the second one).
    got = eventually(lambda: (lambda v: v if set(v) == outcomes and all(x > 0 for x in v.values()) else None)(
        values(fleet.prom.query_range(resumes.expr, fleet.started, time.time(), 1), by_outcome)), timeout=WAIT)
    assert got, values(fleet.prom.query_range(resumes.expr, fleet.started, time.time(), 1), by_outcome)

    lost, nothing = (values(seen[("Reconnects that could not resume", ref)][0], "")[""] for ref in "AB")
    assert 0 < lost <= 1 and 0 < nothing <= 1, (lost, nothing)  # a third of each round's reconnects each
    [replayed] = seen[("Replayed events", "A")][1]
    assert float(replayed["value"][1]) > 0

    size = {r["metric"]["streamscope_buffer_backend"]: float(r["value"][1])
            for r in seen[("Resume buffer size by backend", "A")][1]}
    assert set(size) == {"memory", "redis"} and min(size.values()) > 0, size
    errors = {r["metric"]["streamscope_store_operation"]: float(r["value"][1])
              for r in seen[("Store errors by operation", "A")][1]}
    assert set(errors) == {"buffer.append"} and errors["buffer.append"] > 0, errors

    open_, half_open = ({r["metric"]["gen_ai_request_model"]: float(r["value"][1])
                         for r in seen[("Workers with the breaker open", ref)][1]} for ref in "AB")
    assert open_[MODEL_BROKEN] == 1 and half_open[MODEL_BROKEN] == 0, (open_, half_open)
    assert all(v == 0 for m, v in open_.items() if m != MODEL_BROKEN), open_  # the relay's model: closed
    assert fleet.workload.errors == [], fleet.workload.errors


@pytest.mark.parametrize("name", [RESUME_FAILING, REDIS_UNREACHABLE])
def test_the_fleet_alerts_fire_through_alertmanager(fleet: Fleet, name: str) -> None:
    """Each alert's expression, as rules.yml has it (windows and `for:` scaled), holds on the
    workload's data, Prometheus fires it, and Alertmanager notifies the webhook with its runbook."""
    rule = fleet.rules[name]
    firing = eventually(lambda: fleet.webhook.alerts(name, "firing"), timeout=WAIT, every=1)
    active = [a for a in fleet.prom.api("alerts")["alerts"] if a["labels"].get("alertname") == name]
    assert firing, (f"{name} never reached the webhook firing; Prometheus: {active}; "
                    f"Alertmanager: {fleet.alertmanager.alerts()}")
    assert [a["state"] for a in active] == ["firing"], active
    alert = firing[0]
    assert alert["labels"]["job"] == JOB and alert["labels"]["severity"] == rule["labels"]["severity"]
    assert alert["annotations"]["runbook_url"] == rule["annotations"]["runbook_url"]
    assert alert["annotations"]["runbook_url"].endswith("#" + name.lower())
    assert alert["annotations"]["summary"] == rule["annotations"]["summary"]
    [value] = fleet.prom.query(rule["expr"])  # the expression itself returns the job's series
    assert value["metric"] == {"job": JOB} and float(value["value"][1]) > 0, value
    print(f"{name}: firing at the webhook; its expression is now {float(value['value'][1]):.3g} for job {JOB}")


def test_prometheus_counts_what_the_browsers_saw(fleet: Fleet) -> None:
    """The workload stopped, the last scrape in: every reconnect by outcome, every replayed event
    and every failed write to the Redis that went away, exactly as the browsers and the relay saw them."""
    fleet.workload.stop()
    assert fleet.workload.errors == [], fleet.workload.errors
    seen = fleet.workload.seen
    expected = {"resumed": float(seen["resumed"]), "nothing_to_resume": float(seen["nothing_to_resume"]),
                "expired": float(seen["expired"]), "owner_lost": float(len(fleet.owner_lost))}
    assert seen["resumed"] >= 2, seen
    resumes = "sum by (streamscope_resume_outcome) (streamscope_relay_resumes_total)"
    got = eventually(lambda: (lambda v: v if v == expected else None)(
        fleet.prom.by(resumes, "streamscope_resume_outcome")), timeout=WAIT)
    assert got == expected, fleet.prom.by(resumes, "streamscope_resume_outcome")
    replayed = float(fleet.workload.replayed + sum(len(g.events) for g in fleet.owner_lost))
    assert eventually(lambda: fleet.prom.by("sum(streamscope_relay_replayed_events_total)", "") == {"": replayed},
                      timeout=WAIT), (fleet.prom.by("sum(streamscope_relay_replayed_events_total)", ""), replayed)
    # One failed write per stream relayed through `down` after its Redis stopped (its copy then
    # streams on without resume); nothing else reached for a Redis that does not answer.
    errors = "sum by (streamscope_store_operation) (streamscope_store_errors_total)"
    want = {"buffer.append": float(seen["down"])}
    assert eventually(lambda: fleet.prom.by(errors, "streamscope_store_operation") == want, timeout=WAIT), (
        fleet.prom.by(errors, "streamscope_store_operation"), want)
    print(f"Prometheus counted {expected} reconnects, {replayed:.0f} replayed events, {want} store errors")
