"""The Prometheus side, for real: the exposition names `opentelemetry-exporter-prometheus` makes of
the instruments (and that the dashboards query), and a real Prometheus server (Debian's
`prometheus`, `scripts/ensure-prometheus`) scraping a process that runs a scripted mix of streams
with `streamscope.telemetry.setup(prometheus_port=0)`; PromQL over its HTTP API then sees the mix.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap
import threading
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client.parser import text_string_to_metric_families
from relay_app import make_app
from served import serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from test_dashboards import load_script
from test_metrics import THINKING, run
from test_relay import get

import streamscope.core.guard as internal
from conftest import USER
from streamscope import AnthropicInstrumentor, Breaker, Budgets
from streamscope.export import metric_definitions as M
from streamscope.serve import MemoryBuffer, RedisBuffer, relay
from streamscope.simulator import SCENARIOS, Scenario, ServerToolSpec, Simulator, TextSpec, message_stream
from streamscope.simulator.catalog import ANSWER, OVERLOADED_529, words
from streamscope.telemetry import setup

live = load_script("live")  # dashboards/live.py: the real Prometheus, shared with the other live tests
PromServer, eventually = live.PromServer, live.eventually
generate = load_script("generate")
SHORT_RUN = {"__rate_interval": "1m", "__range": "10m"}
UNOBSERVED_PANEL = "Calls streamscope could not observe"
"""Its series exist only where another library took a call over: this test makes one, the demo none."""

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_NAMES = {
    # The contract's and the dashboards' names, each with its exposition type.
    "streamscope_requests_total": "counter",
    "streamscope_budget_firings_total": "counter",
    "streamscope_active_streams": "gauge",
    "streamscope_time_to_headers_seconds": "histogram",
    "streamscope_time_to_first_content_seconds": "histogram",
    "streamscope_thinking_duration_seconds": "histogram",
    "streamscope_max_gap_seconds": "histogram",
    "streamscope_decode_rate_per_second": "histogram",
    "streamscope_thinking_budget_used": "histogram",
    "streamscope_internal_errors_total": "counter",
    "streamscope_unobserved_calls_total": "counter",
    "streamscope_budget_limit_seconds": "gauge",
    "streamscope_deadline_unreachable_total": "counter",
    "streamscope_usage_reasoning_tokens": "histogram",
    "streamscope_server_tool_duration_seconds": "histogram",
    "gen_ai_client_operation_duration_seconds": "histogram",
    "gen_ai_client_token_usage": "histogram",
    "gen_ai_client_operation_time_to_first_chunk_seconds": "histogram",
    # What the retry helpers and the relay count (export/outcomes.py).
    "streamscope_attempts": "histogram",
    "streamscope_retries_total": "counter",
    "streamscope_relay_streams_total": "counter",
    # What the relay's resume and the fleet's store count (export/fleet_metrics.py).
    "streamscope_relay_resumes_total": "counter",
    "streamscope_relay_replayed_events_total": "counter",
    "streamscope_relay_buffer_size_bytes": "gauge",
    "streamscope_store_errors_total": "counter",
}
BOUNDARIES = {
    "streamscope_time_to_headers_seconds": M.TIME_TO_HEADERS_BUCKETS,
    "streamscope_time_to_first_content_seconds": M.TIME_TO_FIRST_CONTENT_BUCKETS,
    "streamscope_thinking_duration_seconds": M.THINKING_DURATION_BUCKETS,
    "streamscope_max_gap_seconds": M.MAX_GAP_BUCKETS,
    "streamscope_decode_rate_per_second": M.DECODE_RATE_BUCKETS,
    "streamscope_thinking_budget_used": M.BUDGET_USED_BUCKETS,
    "streamscope_usage_reasoning_tokens": M.REASONING_TOKENS_BUCKETS,
    "streamscope_server_tool_duration_seconds": M.SERVER_TOOL_BUCKETS,
    "gen_ai_client_operation_duration_seconds": M.SEMCONV_DURATION_BUCKETS,
    "gen_ai_client_token_usage": M.SEMCONV_TOKEN_BUCKETS,
    "gen_ai_client_operation_time_to_first_chunk_seconds": M.SEMCONV_DURATION_BUCKETS,
}


# -- the exposition, in process ---------------------------------------------------------------

WEB_SEARCH = Scenario.single("exposition_web_search", message_stream(blocks=[
    TextSpec(words(ANSWER)[:3], interval=0.01), ServerToolSpec(run=0.3, ping_every=0.1),
    TextSpec(words(ANSWER)[:6], interval=0.01)]))
"""Text, a web search of 0.3 s on the server (pinging), the answer: one server tool run."""
RETRIED = Scenario("exposition_529_then_ok", [[OVERLOADED_529], message_stream(blocks=[TextSpec(words(ANSWER)[:6])])])
"""Overloaded on the first attempt, an answer on the second: a relayed request with one retry."""
RESUMABLE = Scenario.single("exposition_resumable", message_stream(blocks=[TextSpec(words(ANSWER)[:12],
                                                                                    interval=0.1)]))
"""Twelve words over about 1.2 s: a browser that leaves after three comes back mid-answer."""
RESUME_MODEL = "claude-sim-resume"
"""The model the relays with resume ask for: no first-token budget (instrument() below), so a
first token a loaded machine delays never makes them retry, and their series stay apart."""


def resume_app(sim: Any, buffer: Any) -> Any:
    """`GET /relay/<scenario>`: the real async SDK's stream of `RESUME_MODEL`, relayed with resume."""
    async def relayed(request: Request) -> Response:
        client = anthropic.AsyncAnthropic(base_url=sim.url(request.path_params["scenario"]), api_key="test-key")
        return await relay(request, lambda: client.messages.create(model=RESUME_MODEL, max_tokens=1024,
                                                                   messages=USER, stream=True), resume=buffer)

    return Starlette(routes=[Route("/relay/{scenario}", relayed)])


@dataclass
class Resumed:
    """What the resume workload saw: events sent on the resumed connection, and the buffer that
    holds the finished generation (its bytes are on the gauge)."""

    replayed: int
    held: MemoryBuffer


def resume_workload(sim: Any, scrape: Callable[[], str]) -> Resumed:
    """The relay with resume, three streams relayed: one with `MemoryBuffer` whose browser leaves
    after three tokens and reconnects with `Last-Event-ID` (resumed: the rest is replayed), then a
    reconnect with an id the buffer never saw (nothing_to_resume, 204); one with a `RedisBuffer`
    on a port nobody listens on (the stream completes; writing its copy fails: one store error)."""
    sim.add(RESUMABLE)
    memory = MemoryBuffer(grace=10.0, ttl=300.0)  # holds the finished generation past the scrape
    path = f"/relay/{RESUMABLE.name}"
    with serving(resume_app(sim, memory)) as base:
        first = get(base, path, stop_after=3)
        assert first.status == 200 and first.events and first.events[-1].event == "token", first.events
        again = get(base, path, {"Last-Event-ID": first.events[-1].id or ""})
        assert again.status == 200 and again.headers["x-request-id"] == first.headers["x-request-id"]
        assert again.terminal.event == "done" and len(first.tokens + again.tokens) == 12, (first.events, again.events)
        unknown = get(base, path, {"Last-Event-ID": "f" * 32 + ":2"})
        assert unknown.status == 204
    nobody = RedisBuffer(f"redis://127.0.0.1:{live.free_port()}/0", timeout=0.2)
    with serving(resume_app(sim, nobody)) as base:
        whole = get(base, "/relay/complete")
        assert whole.status == 200 and whole.terminal.event == "done", "the stream goes on without Redis"
        # The copy is written from a task of its own, never waited on: its failure comes when it comes.
        assert eventually(lambda: "streamscope_store_errors_total{" in scrape(), timeout=30), scrape()
    return Resumed(len(again.events), memory)


def exposition(sim: Any, monkeypatch: pytest.MonkeyPatch, *, latest: bool) -> tuple[str, Resumed]:
    """The /metrics page after the workload below, with the GenAI names of today (`latest` False)
    or those `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental` gives; and what the
    resume workload saw."""
    if latest:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    else:
        monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    telemetry = setup("exposition", otlp=False, prometheus_port=0, set_global=False)
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=TracerProvider(), meter_provider=telemetry.meter_provider,
                            budgets={"default": Budgets(first_token=0.5),
                                     "route:checkout": Budgets(first_token=5.0, idle=5.0, deadline=20.0),
                                     f"model:{RESUME_MODEL}": Budgets(first_token=math.inf)},
                            breaker={"route:fragile": Breaker(failures=1, window=60.0, cool_down=60.0)})

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{telemetry.prometheus_port}/metrics", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            return str(r.read().decode())

    try:
        # decode rate, budget use, reasoning tokens, and a deadline that cannot fit 32,000 thinking
        # tokens (they would need 1,600 tokens/s; the stream decodes ~100/s, and events a loaded
        # machine reads late, in one go, can make it look a few times faster, never that fast)
        run(sim, "thinking", "checkout", {"thinking": {**THINKING, "budget_tokens": 32000}, "max_tokens": 64000})
        run(sim, "timed_silent_start", None, {})  # a firing
        run(sim, "http_529", "fragile", {})  # opens the route's breaker (its state and a transition)
        sim.add(WEB_SEARCH)
        run(sim, WEB_SEARCH.name, "checkout", {})  # one server tool run
        # One call streamscope could not observe: a streamed request whose whole body the client read at once.
        httpx2.post(sim.url("complete") + "/v1/messages", timeout=30,
                    json={"model": "m", "max_tokens": 64, "messages": USER, "stream": True})
        # Two requests relayed to a browser: one retried, then answered; one overloaded on both attempts.
        sim.add(RETRIED)
        # And one that fails mid-prose and is carried on (a scenario of its own: its first request fails).
        continued = Scenario(f"prose_overloaded_{uuid.uuid4().hex[:8]}", SCENARIOS["prose_overloaded"].attempts)
        sim.add(continued)
        with serving(make_app(sim)) as base:
            for path in (f"/relay/anthropic/create/{RETRIED.name}", "/relay/anthropic/create/http_529?attempts=2",
                         f"/relay/anthropic/create/{continued.name}?continue=1"):
                httpx2.get(base + path, timeout=30)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            internal.internal_error("test_prometheus_live")
        resumed = resume_workload(sim, scrape)
        return scrape(), resumed
    finally:
        instrumentor.uninstrument()
        telemetry.shutdown()


def test_exposition_names_types_buckets_and_labels(sim, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every contract name comes out of the real exporter, with the chosen buckets as `le`, and
    every metric and label name the dashboards and rules query is one the exporter produces, with
    the GenAI names of today or with the conventions' newer ones (the dashboards read either)."""
    text, resumed = exposition(sim, monkeypatch, latest=False)  # first: the scripted retries count on a fresh simulator
    latest, _ = exposition(sim, monkeypatch, latest=True)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {s.name: s for f in families.values() for s in f.samples}
    types = {}
    for family in families.values():
        for sample in family.samples:
            types[sample.name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")] = family.type
    for name, kind in PROMETHEUS_NAMES.items():
        assert name in samples or f"{name}_bucket" in samples, f"{name} not exposed; got {sorted(samples)}"
        assert types[name] == kind, name
    for name, bounds in BOUNDARIES.items():
        le = [s.labels["le"] for f in families.values() for s in f.samples if s.name == f"{name}_bucket"]
        first = le[: len(bounds) + 1]
        assert first == [repr(float(b)) for b in bounds] + ["+Inf"], (name, first)
    labels = {k for f in families.values() for s in f.samples for k in s.labels}
    assert {"gen_ai_provider_name", "gen_ai_request_model", "streamscope_route", "streamscope_class",
            "streamscope_partial", "streamscope_budget", "gen_ai_token_type", "gen_ai_operation_name",
            "gen_ai_response_model", "server_address", "server_port", "error_type", "streamscope_failure_code",
            "streamscope_relay_outcome", "http_response_status_code"} <= labels

    def relayed(model: str) -> dict[tuple[str, str, str], float]:
        return {(s.labels["streamscope_relay_outcome"], s.labels["http_response_status_code"],
                 s.labels["streamscope_failure_code"]): s.value for s in families["streamscope_relay_streams"].samples
                if s.labels["gen_ai_request_model"] == model}

    def attempts(model: str) -> tuple[float, float]:
        found = {s.name: s.value for s in families["streamscope_attempts"].samples
                 if s.labels["gen_ai_request_model"] == model}
        return found["streamscope_attempts_count"], found["streamscope_attempts_sum"]

    assert relayed("claude-sim-1") == {("done", "200", ""): 2.0, ("error", "503", "upstream_unavailable"): 1.0}
    assert relayed(RESUME_MODEL) == {("done", "200", ""): 2.0}  # the one resumed counts once: one generation
    assert {s.labels["streamscope_failure_code"]: s.value
            for s in families["streamscope_retries"].samples} == {"upstream_unavailable": 2.0}
    # The continued answer's two lines (its first request's, its continuation's) count one each.
    assert attempts("claude-sim-1") == (4.0, 6.0) and attempts(RESUME_MODEL) == (2.0, 2.0)
    assert {s.labels["streamscope_relay_outcome"]: s.value
            for s in families["streamscope_relay_continuations"].samples} == {"done": 1.0}
    failed = {s.labels.get("streamscope_failure_code", "") for s in families["streamscope_requests"].samples}
    assert {"upstream_unavailable", "upstream_timeout"} <= failed  # the code of each failed call
    assert {s.labels["streamscope_partial"] for s in families["streamscope_requests"].samples} <= {"true", "false"}
    assert samples["streamscope_deadline_unreachable_total"].value == 1  # 32,000 tokens in a 20 s deadline
    runs = [s for s in families["streamscope_server_tool_duration_seconds"].samples if s.name.endswith("_count")]
    assert [(s.labels["streamscope_route"], s.value) for s in runs] == [("checkout", 1.0)], runs
    assert {"gen_ai_provider_name", "gen_ai_request_model", "streamscope_route"} <= set(runs[0].labels)
    # The resume workload: one reconnect resumed, one with nothing to resume; every event of the
    # resumed connection counted as replayed; one failed write to the unreachable Redis.
    assert {"streamscope_resume_outcome", "streamscope_store_operation", "streamscope_buffer_backend"} <= labels
    assert {s.labels["streamscope_resume_outcome"]: s.value for s in families["streamscope_relay_resumes"].samples} == {
        "resumed": 1.0, "nothing_to_resume": 1.0}
    assert samples["streamscope_relay_replayed_events_total"].value == resumed.replayed > 0
    assert {s.labels["streamscope_store_operation"]: s.value for s in families["streamscope_store_errors"].samples} == {
        "buffer.append": 1.0}
    # The gauge sums every buffer of the process (other tests' too): at least what ours holds.
    size = {s.labels["streamscope_buffer_backend"]: s.value
            for s in families["streamscope_relay_buffer_size_bytes"].samples}
    assert set(size) == {"memory", "redis"} and size["memory"] >= resumed.held.size() > 0, size

    # What the dashboards and the rules query, against what came out.
    newer = list(text_string_to_metric_families(latest))
    produced = (set(samples) | set(PROMETHEUS_NAMES) | labels | {s.name for f in newer for s in f.samples}
                | {k for f in newer for s in f.samples for k in s.labels})
    assert "gen_ai_client_inference_duration_seconds_bucket" in produced and "gen_ai_token_modality" in produced
    queried: set[str] = set()
    for path in [*ROOT.glob("dashboards/*.json"), ROOT / "dashboards" / "rules.yml",
                 ROOT / "dashboards" / "generate.py", *ROOT.glob("dashboards/mixin/*.py")]:
        queried |= set(re.findall(r"(?<![\w:])((?:streamscope|gen_ai)_[a-zA-Z0-9_]+)", path.read_text()))
    recorded = {"streamscope_requests", "streamscope_requests_partial", "streamscope_budget_firings",
                "streamscope_deadline_unreachable",  # the middle part of recording-rule names
                "gen_ai_latest_experimental"}  # the opt-in's value, named in the panels' descriptions
    unknown = {q for q in queried - produced - recorded if not q.endswith(("_bucket", "_sum", "_count"))}
    unknown |= {q for q in queried if q.endswith(("_bucket", "_sum", "_count")) and q not in produced}
    assert not unknown, f"the dashboards query names the exporter does not produce: {sorted(unknown)}"


# -- a real Prometheus server -----------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import contextlib, sys
    from concurrent.futures import ThreadPoolExecutor
    import anthropic
    import httpx2
    import streamscope
    from streamscope import AnthropicInstrumentor, Breaker, Budgets
    from streamscope.telemetry import setup

    base = sys.argv[1]
    telemetry = setup("prometheus-live", otlp=False, prometheus_port=0)
    print("PORT", telemetry.prometheus_port, flush=True)
    AnthropicInstrumentor().instrument(budgets={"route:budgeted": Budgets(first_token=0.5)}, max_models=4)
    USER = [{"role": "user", "content": "How do streams fail?"}]

    def call(scenario, model, route=None, cancel=False):
        c = anthropic.Anthropic(base_url=base + scenario, api_key="test-key", max_retries=0)
        try:
            with streamscope.route(route) if route else contextlib.nullcontext():
                with c.messages.stream(model=model, max_tokens=1024, messages=USER) as stream:
                    for event in stream:
                        if cancel and event.type == "text":
                            break
        except Exception:
            pass

    for scenario in ["complete", "complete", "complete", "truncated", "refused", "inband_error", "http_529"]:
        call(scenario, "claude-mix")
    call("timed_silent_start", "claude-mix", route="budgeted")
    call("slow_answer", "claude-mix", cancel=True)
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda _: call("slow_start", "claude-slow"), range(3)))
    for i in range(12):
        call("complete", f"flood-{i:02d}")
    # a call streamscope could not observe: a streamed request whose whole body the client read at once
    httpx2.post(base + "complete/v1/messages", json={"model": "m", "max_tokens": 64, "messages": USER, "stream": True})
    print("DONE", flush=True)
    sys.stdin.read()
    telemetry.shutdown()
    """
)
EXPECTED_CLASSES = {"complete": 18, "truncated": 1, "refused": 1, "upstream_error": 2,
                    "stalled_before_first_content": 1, "cancelled": 1}
SLOW_START = Scenario.single("slow_start", message_stream(blocks=[TextSpec(words(ANSWER)[:6], first_delay=1.1,
                                                                           interval=0.02)]))


def test_a_real_prometheus_scrapes_the_scenario_mix(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    sim = Simulator({**SCENARIOS, "slow_start": SLOW_START}).start()
    child = subprocess.Popen([sys.executable, str(script), f"http://127.0.0.1:{sim.port}/s/"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    prom: PromServer | None = None
    lines: list[str] = []
    timer = threading.Timer(90, child.kill)
    timer.start()
    try:
        first = child.stdout.readline()
        assert first.startswith("PORT "), (first, child.stderr.read() if child.poll() is not None else "")
        prom = PromServer(tmp_path, int(first.split()[1]))
        prom.wait_ready()
        for line in child.stdout:
            lines.append(line)
            if line.startswith("DONE"):
                break
        assert lines and lines[-1].startswith("DONE"), (lines, child.stderr.read() if child.poll() is not None else "")

        # Requests per class, as PromQL sees them once the last scrape is in.
        classes = "sum by (streamscope_class) (streamscope_requests_total)"
        got = eventually(lambda: (lambda c: c if c == EXPECTED_CLASSES else None)(
            prom.by(classes, "streamscope_class")))
        assert got == EXPECTED_CLASSES, prom.by(classes, "streamscope_class")
        assert prom.by('sum by (streamscope_budget) (streamscope_budget_firings_total)', "streamscope_budget") == {
            "first_token": 1.0}
        assert prom.by('sum by (streamscope_partial) (streamscope_requests_total)', "streamscope_partial") == {
            "true": 2.0, "false": 22.0}  # inband_error and the cancelled one had shown content

        # The histogram keeps the slow starts (1.1 s of silence) apart from the rest (within 0.2 s).
        # The bounds leave room for a loaded machine: two slow starts sent 0.5 s late once put the
        # median in the (1.5, 2.0] bucket. Above 1.0 still fails a histogram that lost the silence.
        [slow] = prom.query('histogram_quantile(0.5, sum by (le) '
                            '(streamscope_time_to_first_content_seconds_bucket{gen_ai_request_model="claude-slow"}))')
        assert 1.0 < float(slow["value"][1]) <= 3.0, slow
        [fast] = prom.query('histogram_quantile(0.9, sum by (le) '
                            '(streamscope_time_to_first_content_seconds_bucket{gen_ai_request_model!="claude-slow"}))')
        assert 0 < float(fast["value"][1]) <= 1.0, fast
        # The cardinality guard: 14 model names, 4 admitted, the flood folded into `other`.
        models = prom.by("sum by (gen_ai_request_model) (streamscope_requests_total)", "gen_ai_request_model")
        assert models == {"claude-mix": 9.0, "claude-slow": 3.0, "flood-00": 1.0, "flood-01": 1.0, "other": 10.0}
        responses = prom.by("count by (gen_ai_response_model) (gen_ai_client_operation_duration_seconds_count)",
                            "gen_ai_response_model")
        assert set(responses) <= {"claude-mix", "claude-slow", "flood-00", "flood-01", "other", ""}
        # The call another library took over: counted, and the dashboard panel's own query shows it.
        # (It comes after the last classed request, so a scrape can hold every class and not it yet.)
        unobserved = "sum by (streamscope_unobserved_by) (streamscope_unobserved_calls_total)"
        assert eventually(lambda: prom.by(unobserved, "streamscope_unobserved_by")) == {"_OTHER": 1.0}
        [panel] = [q for q in generate.panel_expressions(SHORT_RUN) if q.panel == UNOBSERVED_PANEL]
        assert eventually(lambda: prom.query(panel.expr)), panel.expr
        # Nothing in flight; the scrape target is the process, identified as OpenTelemetry does.
        assert prom.by("sum(streamscope_active_streams)", "") == {"": 0.0}
        [info] = prom.query('target_info{job="streamscope-live"}')
        assert info["metric"]["service_name"] == "prometheus-live"
    finally:
        timer.cancel()
        if prom is not None:
            prom.stop()
        if child.poll() is None:
            try:
                child.communicate(input="", timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        sim.stop()
    assert child.returncode == 0, child.stderr.read() if child.stderr and not child.stderr.closed else ""
