"""What the preforking test apps share: streamscope set up from the environment, and one stream
per request that reports what happened to it.

Environment (set by tests/integration/test_preforking.py):

* `SIM_URL`: the simulator's root (`http://127.0.0.1:PORT`); a scenario's base URL is
  `SIM_URL/s/<scenario>`.
* `PROMETHEUS_MULTIPROC_DIR`: where every process writes its metrics (read by streamscope).
* `APP_METRICS_PORT`: when set, `setup()` is asked to serve `/metrics` on it (else the server's
  `when_ready` hook serves the aggregate from the master).
* `APP_WARMUP=1`: run one budgeted stream at import, so that a preloading master has used the
  watchdog (and may still hold its entry) when it forks the workers.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import anthropic

from streamscope import AnthropicInstrumentor, Budgets, StreamTimeout
from streamscope.telemetry import Telemetry, setup

MODEL = "claude-preforking-test"
SHORT_FIRST_TOKEN_MODEL = "claude-preforking-test-short-first-token"
BUDGETS = {
    # A first-token budget as long as production's: the watchdog entry a finished stream leaves
    # behind (the master's warm-up) is then still pending when the master forks.
    "default": Budgets(first_token=20.0, idle=0.5),
    # `silent_start` (5 s of nothing) runs under this model, to be caught by first_token.
    f"model:{SHORT_FIRST_TOKEN_MODEL}": Budgets(first_token=2.0),
}
USER = [{"role": "user", "content": "How do streams fail?"}]


def model_for(scenario: str) -> str:
    return SHORT_FIRST_TOKEN_MODEL if scenario == "silent_start" else MODEL


def base_url(scenario: str) -> str:
    return f"{os.environ['SIM_URL']}/s/{scenario}"


def instrument() -> Telemetry:
    """Telemetry and the instrumentor, as an app would at import (or in a post-fork hook)."""
    port = os.environ.get("APP_METRICS_PORT")
    telemetry = setup("preforking-test", otlp=False, prometheus_port=int(port) if port else None)
    AnthropicInstrumentor().instrument(
        tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider, budgets=BUDGETS
    )
    return telemetry


# One client per process and scenario: a client (its connection pool) must never cross a fork.
_clients: dict[tuple[int, str], Any] = {}
_clients_lock = threading.Lock()


def sync_client(scenario: str) -> anthropic.Anthropic:
    key = (os.getpid(), scenario)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = anthropic.Anthropic(base_url=base_url(scenario), api_key="test-key", max_retries=0)
        return _clients[key]


def async_client(scenario: str) -> anthropic.AsyncAnthropic:
    key = (os.getpid(), scenario)
    if key not in _clients:  # one event loop per worker: no lock needed
        _clients[key] = anthropic.AsyncAnthropic(base_url=base_url(scenario), api_key="test-key", max_retries=0)
    return _clients[key]


class Outcome:
    """Times one stream and turns how it ended into the JSON the test reads."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.start = time.monotonic()
        self.last_text: float | None = None
        self.texts = 0

    def text(self) -> None:
        self.texts += 1
        self.last_text = time.monotonic()

    def report(self, exc: BaseException | None) -> dict[str, Any]:
        end = time.monotonic()
        result: dict[str, Any] = {
            "pid": os.getpid(),
            "scenario": self.scenario,
            "outcome": "completed",
            "budget": None,
            "error": None,
            "texts": self.texts,
            "elapsed": end - self.start,
            # how long after the last text (or the request, if none came) the stream ended
            "silence": end - (self.last_text if self.last_text is not None else self.start),
        }
        if isinstance(exc, StreamTimeout):
            result.update(outcome="timeout", budget=exc.budget)
        elif exc is not None:
            result.update(outcome="error", error=f"{type(exc).__name__}: {exc}")
        return result


def stream_sync(scenario: str, on_text: Callable[[], None] | None = None) -> dict[str, Any]:
    client = sync_client(scenario)  # made before the clock starts, as the budgets' clock starts at the request
    outcome = Outcome(scenario)
    try:
        with client.messages.stream(model=model_for(scenario), max_tokens=64, messages=USER) as stream:
            for _ in stream.text_stream:
                outcome.text()
                if on_text is not None:
                    on_text()
    except Exception as exc:
        return outcome.report(exc)
    return outcome.report(None)


async def stream_async(scenario: str) -> dict[str, Any]:
    client = async_client(scenario)  # made before the clock starts, as the budgets' clock starts at the request
    outcome = Outcome(scenario)
    try:
        async with client.messages.stream(
            model=model_for(scenario), max_tokens=64, messages=USER
        ) as stream:
            async for _ in stream.text_stream:
                outcome.text()
    except Exception as exc:
        return outcome.report(exc)
    return outcome.report(None)


def warm_up() -> dict[str, Any] | None:
    """One budgeted stream in this process (the master, under `--preload`), on a client that is
    closed afterwards, when `APP_WARMUP=1`. It counts as one `complete` request."""
    if os.environ.get("APP_WARMUP") != "1":
        return None
    with anthropic.Anthropic(base_url=base_url("complete"), api_key="test-key", max_retries=0) as client:
        outcome = Outcome("complete")
        with client.messages.stream(model=MODEL, max_tokens=64, messages=USER) as stream:
            for _ in stream.text_stream:
                outcome.text()
    return _checked(outcome.report(None))


async def warm_up_async() -> dict[str, Any] | None:
    """`warm_up()` with the async client (for the ASGI app's master)."""
    if os.environ.get("APP_WARMUP") != "1":
        return None
    async with anthropic.AsyncAnthropic(base_url=base_url("complete"), api_key="test-key", max_retries=0) as client:
        outcome = Outcome("complete")
        async with client.messages.stream(model=MODEL, max_tokens=64, messages=USER) as stream:
            async for _ in stream.text_stream:
                outcome.text()
    return _checked(outcome.report(None))


def _checked(result: dict[str, Any]) -> dict[str, Any]:
    if result["texts"] != 5:
        raise RuntimeError(f"warm-up stream did not complete: {result}")
    return result
