"""Peer driver: Datadog `ddtrace` (4.16.x), APM tracing and LLM Observability, with no agent and no network.

What it turns on: `ddtrace.patch(anthropic=True, openai=True)` (ddtrace's own integrations, which
wrap `Messages.create`/`stream` (sync, async, beta) and openai's resource methods) and
`LLMObs.enable(agentless_enabled=True, integrations_enabled=False)` (LLM Observability on those same
integrations; with `integrations_enabled=True` it would also patch every other LLM library it
supports (botocore's Bedrock clients, which `anthropic[bedrock]` brings, among them) and requests,
httpx, urllib3, grpc, flask, starlette, fastapi and aiohttp for context propagation, which would
trace the in-process simulator's Starlette server as well).

Why a loopback sink: ddtrace has no in-memory exporter. Agentless LLM Observability by itself does
not run without the network: it posts its events to `https://llmobs-intake.<DD_SITE>`, reroutes the
APM traces to `public-trace-http-intake.logs.<DD_SITE>` (its APM_AGENTLESS mode), and switches
instrumentation telemetry and remote configuration to their intakes too; without agentless mode
everything goes to an agent at localhost:8126. So `enable()` starts an HTTP server on 127.0.0.1 in
this process and, before ddtrace is imported, points `DD_TRACE_AGENT_URL` (APM traces, `/info`) and
`DD_LLMOBS_OVERRIDE_ORIGIN` (the LLM Observability intake's origin, a setting in ddtrace's list of
supported configurations; it also selects its LLMOBS_AGENTLESS mode: events go straight to that
intake, APM traces to the agent URL) at it, and turns instrumentation telemetry, remote
configuration, crash tracking and git metadata (a `git` subprocess) off. Under a network namespace
with no route, strace shows connects to 127.0.0.1 only. ddtrace reads that configuration when it is
imported, so nothing may import it before `enable()` (which raises if something did). Under pytest
something does: ddtrace registers a pytest plugin (entry point `pytest11`, name `ddtrace`) that
imports it at start and probes an agent at localhost:8126 even without `--ddtrace`; run pytest with
`-p no:ddtrace` in this peer's environment.

How records are captured, each the least invasive way we found:
* APM spans: a `TraceFilter` (public `ddtrace.trace.TraceFilter`, installed with the public
  `tracer.configure(trace_processors=[...])`) that notes every finished span and passes the trace on
  unchanged (returning None would also starve LLM Observability, whose processor runs after the
  user's). The trace still goes to the sink, as it would go to an agent.
* LLM Observability events: the sink decodes what ddtrace posts to `/api/v2/llmobs`, i.e. exactly
  what the intake would receive (the public `span_processor` hook sees no span name nor status).
  `_DD_LLMOBS_WRITER_INTERVAL` is set to an hour so that only `LLMObs.flush()` (synchronous, called
  by `records()` and `reset()`) posts: a background flush in flight could otherwise be missed.

Seen with the simulator: where `messages.stream()`'s request fails before any event (HTTP 529,
raised by `MessageStreamManager.__enter__` after the wrapped `stream()` has returned), ddtrace's
span and event say "ok"; `create(stream=True)` says "error".

Records: `apm <span name> <resource>` (status "error" if `span.error` else "ok", as ddtrace's own
LLM Observability maps it: Datadog spans have no unset status) and `llmobs <kind> <name>` (status
as posted, "ok" or "error").
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NAME = "ddtrace"
REQUIREMENTS = ["ddtrace"]
SDKS = ("anthropic", "openai")

_LLMOBS_PATH = "/api/v2/llmobs"
_lock = threading.Lock()
_records: list[tuple[str, str]] = []
_posts: dict[str, int] = {}
"""Requests the sink answered, by method and path: what ddtrace sent (diagnostics, not records)."""
_sink: ThreadingHTTPServer | None = None


class _Intake(BaseHTTPRequestHandler):
    """Stands in for the agent and the LLM Observability intake: answers 200 `{}` to everything."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        path = self.path.split("?", 1)[0]
        with _lock:
            _posts[f"{self.command} {path}"] = _posts.get(f"{self.command} {path}", 0) + 1
            if self.command == "POST" and path.endswith(_LLMOBS_PATH):
                _records.extend(_llmobs_records(json.loads(body)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the sink is not under test."""


def _llmobs_records(payload: Any) -> list[tuple[str, str]]:
    """The (name, status) of every span event in one posted LLM Observability payload."""
    out: list[tuple[str, str]] = []
    for event in payload if isinstance(payload, list) else [payload]:
        for span in event.get("spans", []):
            meta = span.get("meta") or {}
            kind = (meta.get("span") or {}).get("kind", "?")
            out.append((f"llmobs {kind} {span.get('name')}", "error" if span.get("status") == "error" else "ok"))
    return out


def _start_sink() -> str:
    global _sink
    _sink = ThreadingHTTPServer(("127.0.0.1", 0), _Intake)
    _sink.daemon_threads = True
    threading.Thread(target=_sink.serve_forever, name="peer-ddtrace-intake", daemon=True).start()
    return f"http://127.0.0.1:{_sink.server_port}"


def enable() -> None:
    """Start the sink, configure ddtrace at it (before its import), patch both SDKs, enable LLMObs."""
    if _sink is not None:
        return
    if "ddtrace" in sys.modules:
        raise RuntimeError(
            "ddtrace was imported before enable(), so it read its configuration (agent URL, telemetry) without"
            " the sink; under pytest its own plugin (entry point pytest11 'ddtrace') imports it at start:"
            " run pytest -p no:ddtrace"
        )
    url = _start_sink()
    os.environ.update({
        "DD_TRACE_AGENT_URL": url,
        "DD_LLMOBS_OVERRIDE_ORIGIN": url,
        "DD_SERVICE": "streamscope-peer",
        "DD_INSTRUMENTATION_TELEMETRY_ENABLED": "false",
        "DD_REMOTE_CONFIGURATION_ENABLED": "false",
        "DD_CRASHTRACKING_ENABLED": "false",
        "DD_TRACE_GIT_METADATA_ENABLED": "false",
        "DD_TRACE_STARTUP_LOGS": "false",
        "_DD_LLMOBS_WRITER_INTERVAL": "3600",
    })

    import ddtrace
    from ddtrace.llmobs import LLMObs
    from ddtrace.trace import TraceFilter, tracer

    class _Spans(TraceFilter):
        """Notes every finished span of a trace and passes the trace on unchanged."""

        def process_trace(self, trace: list[Any]) -> list[Any]:
            with _lock:
                _records.extend((f"apm {s.name} {s.resource}", "error" if s.error else "ok") for s in trace)
            return trace

    tracer.configure(trace_processors=[_Spans()])
    ddtrace.patch(anthropic=True, openai=True)
    # A placeholder key: agentless mode requires one, and nothing leaves 127.0.0.1 (see above).
    LLMObs.enable(agent_service="streamscope-peer", agentless_enabled=True, integrations_enabled=False,
                  api_key="0" * 32, site="datadoghq.com")


def _flush() -> None:
    """Post the buffered LLM Observability events (synchronously) and the APM traces to the sink."""
    if _sink is None:
        return
    from ddtrace.llmobs import LLMObs
    from ddtrace.trace import tracer

    LLMObs.flush()
    tracer.flush()  # type: ignore[no-untyped-call]  # documented, unannotated


def records() -> list[dict[str, str]]:
    """Every APM span and LLM Observability event since `reset()`, sorted by (name, status)."""
    _flush()
    with _lock:
        return [{"name": name, "status": status} for name, status in sorted(_records)]


def reset() -> None:
    """Forget what was recorded (after sending what was pending, so it is not counted later)."""
    _flush()
    with _lock:
        _records.clear()
        _posts.clear()
