"""The load behind tests/deploy/test_alerts_live.py: real streams, real metrics, phases on demand.

Run as ``python alert_load.py PHASE_FILE``. It instruments the real ``anthropic`` SDK with
streamscope (a real OpenTelemetry MeterProvider, ``/metrics`` served by
``opentelemetry-exporter-prometheus``'s reader through ``streamscope.telemetry.setup``), starts the
simulator in-process and loops requests against it, one phase at a time. The phase is the text of
PHASE_FILE, re-read before every round, so the test switches it by rewriting the file:

- ``healthy``: complete answers.
- ``partial``: a complete answer, then two that fail after content reached the caller (an
  ``overloaded_error`` event inside the 200 stream; the connection cut mid-answer).
- ``closing``: complete answers the caller stops reading after the first text and closes, as a
  browser tab closed mid-answer does (class ``cancelled``, partial: the caller's own cancel).
- ``rate_limited``: a complete answer, then an HTTP 429 (retry-after 1; the client does not retry).

It prints ``PORT <n>`` (the /metrics port) first, then ``PHASE <name> <calls so far>`` when a
phase starts. SIGTERM ends it after the call in progress; it then shuts its telemetry down.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import anthropic
import httpx2

from streamscope import AnthropicInstrumentor
from streamscope.simulator import Simulator
from streamscope.telemetry import setup

MODEL = "claude-alerts"
PRICES = {MODEL: {"input": 3.0, "output": 15.0}}
"""US dollars per million tokens (a Sonnet's): the simulator answers as the requested model, which
has no shipped price, so without these no call would be priced and ``streamscope_cost_USD_total``
would stay empty. Per call (the simulator's scripts): ``complete`` 12 input + 10 output tokens =
186 micro-USD; ``inband_error`` / ``cut_connection`` 25 input + 4 estimated output ("Streams fail in",
4 chars a token) = 135 micro-USD; ``http_429`` no usage, 0; a closed tab 12 input + the output so
far (estimated)."""
USER = [{"role": "user", "content": "How do streams fail?"}]
#: Each phase's round: (scenario, whether the caller closes the stream after its first text).
PHASES: dict[str, list[tuple[str, bool]]] = {
    "healthy": [("complete", False)],
    "partial": [("complete", False), ("inband_error", False), ("cut_connection", False)],
    "closing": [("complete", True)],
    "rate_limited": [("complete", False), ("http_429", False)],
}
PAUSE = 0.1
"""Seconds between rounds: a few requests a second, far above the alerts' traffic guard, while
leaving the cores to Prometheus and Alertmanager."""


def call(client: anthropic.Anthropic, close_early: bool) -> None:
    """One streamed request; failures are the point, so they are swallowed (streamscope saw them)."""
    try:
        with client.messages.create(model=MODEL, max_tokens=64, messages=USER, stream=True) as stream:
            for event in stream:
                if close_early and event.type == "content_block_delta":
                    break  # the caller's own cancel: leaving the block closes the stream
    except (anthropic.APIError, httpx2.HTTPError):  # an error status or event; the connection cut
        pass


def main(phase_file: Path) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    telemetry = setup("alert-load", otlp=False, prometheus_port=0)
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider,
                            prices=PRICES)
    try:
        with Simulator() as sim:
            clients = {name: anthropic.Anthropic(base_url=sim.url(name), api_key="test-key", max_retries=0,
                                                 timeout=10)
                       for name in {name for round_ in PHASES.values() for name, _ in round_}}
            print(f"PORT {telemetry.prometheus_port}", flush=True)
            current, calls = "", 0
            while not stop.is_set():
                phase = phase_file.read_text().strip()
                if phase != current:
                    print(f"PHASE {phase} {calls}", flush=True)
                    current = phase
                for scenario, close_early in PHASES[phase]:
                    call(clients[scenario], close_early)
                    calls += 1
                stop.wait(PAUSE)
    finally:
        instrumentor.uninstrument()
        telemetry.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
