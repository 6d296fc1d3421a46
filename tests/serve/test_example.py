"""The worked example (examples/fastapi_relay.py) as a user runs it: real uvicorn, the real SDK,
the simulator as the provider. Its endpoint keeps the whole contract in at most 15 lines of code,
and a user's bad input is one clear HTTP error with a code, never a traceback."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served import serving
from test_relay import get, no_provider_text

from streamscope.simulator import SCENARIOS, HttpError, Scenario, Simulator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_relay.py"


def code_lines(path: Path) -> list[str]:
    """The lines of code: no docstring, comments or blank lines."""
    text = path.read_text()
    body = text.split('"""', 2)[2] if text.startswith('"""') else text
    return [line for line in body.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_the_example_is_at_most_15_lines() -> None:
    assert len(code_lines(EXAMPLE)) <= 15, code_lines(EXAMPLE)


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator(SCENARIOS) as simulator:
        simulator.add(Scenario.single("unknown_model", [HttpError(404, "not_found_error", "model: claude-nope")]))
        simulator.add(Scenario.single("bad_key", [HttpError(401, "authentication_error", "invalid x-api-key")]))
        yield simulator


@pytest.fixture
def example(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """`example(scenario)`: the example app, its provider the simulator's scenario, on real uvicorn."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    servers: list[Any] = []

    def start(scenario: str) -> str:
        monkeypatch.setenv("SIMULATOR_URL", sim.url(scenario))
        name = f"fastapi_relay_{scenario}_{len(servers)}"
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        server = serving(module.app)
        servers.append(server)
        return server.__enter__()

    yield start
    for server in servers:
        server.__exit__(None, None, None)
    from streamscope import AnthropicInstrumentor

    AnthropicInstrumentor().uninstrument()


def test_an_answer(example: Any) -> None:
    got = get(example("complete"), "/chat?q=hello")
    assert got.status == 200 and got.terminal.event == "done" and "".join(got.tokens)
    assert got.terminal.json["class"] == "complete" and got.headers["x-request-id"]


@pytest.mark.parametrize(("scenario", "path", "headers", "status", "code"), [
    ("complete", "/chat", {}, 400, "bad_request"),  # the question is missing
    ("complete", "/chat?q=hi", {"request-timeout-ms": "soon"}, 400, "bad_request"),  # a garbage deadline
    ("complete", "/chat?q=hi", {"request-timeout-ms": "50"}, 504, "upstream_timeout"),  # no time left
    ("unknown_model", "/chat?q=hi&model=claude-nope", {}, 502, "upstream_rejected"),
    ("bad_key", "/chat?q=hi", {}, 502, "upstream_rejected"),
    ("http_529", "/chat?q=hi", {}, 503, "upstream_unavailable"),
])
def test_bad_input_is_one_clear_error_with_a_code(example: Any, sim: Simulator, scenario: str, path: str,
                                                  headers: dict[str, str], status: int, code: str) -> None:
    url = example(scenario)
    since = len(sim.requests)
    got = get(url, path, headers)
    assert got.status == status
    body = got.body
    assert "Traceback" not in body and "\n" not in body.strip()
    answer = json.loads(body)
    assert answer["code"] == code and answer["request_id"] == got.headers["x-request-id"]
    assert set(answer) <= {"code", "request_id", "detail"}
    no_provider_text(got)
    assert "claude-nope" not in body and "x-api-key" not in body
    for index in range(since, len(sim.requests)):  # nothing left running upstream
        assert sim.wait_for_outcome(index).outcome == "http_error"
