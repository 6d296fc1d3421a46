"""`streamscope simulate` as a user runs it: a real process, the base URLs it prints, the real
`anthropic` and `openai` SDKs pointed at them (no retries), and how it stops.

Deadlines are generous (a loaded 2-core machine) and only bound waiting; nothing asserts wall-clock time.
"""

from __future__ import annotations

import queue
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

import anthropic
import httpx2
import openai
import pytest

from streamscope.simulator import SCENARIOS
from streamscope.simulator.openai_catalog import OPENAI_SCENARIOS

WAIT = 60.0  # seconds: only how long to wait before calling a run hung
COMMAND = [sys.executable, "-m", "streamscope.tools.cli", "simulate"]
MESSAGES = [{"role": "user", "content": "hi"}]
FAILURES = ("http_429", "http_529", "http_500", "http_400")


@dataclass
class Running:
    process: subprocess.Popen[str]
    lines: queue.Queue[str | None]
    banner: list[str] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)

    def anthropic(self, **kwargs: Any) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.urls["ANTHROPIC_BASE_URL"], api_key="test", max_retries=0,
                                   timeout=30, **kwargs)

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.urls["OPENAI_BASE_URL"], api_key="test", max_retries=0, timeout=30)

    def stop(self, signum: int = signal.SIGINT) -> tuple[int, list[str], str]:
        """Send ``signum``; the exit code, every later stdout line, and stderr."""
        self.process.send_signal(signum)
        code = self.process.wait(timeout=WAIT)
        rest = []
        while (line := self.lines.get(timeout=WAIT)) is not None:
            rest.append(line)
        assert self.process.stderr is not None
        return code, rest, self.process.stderr.read()


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


@contextmanager
def simulate(*args: str) -> Iterator[Running]:
    """`streamscope simulate --port 0 ARGS` until its banner is out; killed at the end if still running."""
    process = subprocess.Popen([*COMMAND, "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    running = Running(process, queue.Queue())
    threading.Thread(target=_pump, args=(process.stdout, running.lines), daemon=True).start()
    try:
        while not running.banner or not running.banner[-1].startswith("one scenario every time:"):
            line = running.lines.get(timeout=WAIT)
            assert line is not None, f"exited early: {process.wait(timeout=WAIT)}, {process.stderr.read()}"  # type: ignore[union-attr]
            running.banner.append(line)
            name, equals, value = line.partition("=")
            if equals and name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
                running.urls[name] = value
        yield running
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=WAIT)


def anthropic_outcome(client: anthropic.Anthropic) -> tuple[int, str | None]:
    """(status, retry-after) of one streamed call: 200 if the stream ended normally."""
    try:
        with client.messages.stream(model="claude-sim", max_tokens=64, messages=MESSAGES) as stream:
            assert stream.get_final_text() == "Hello! How can I help you today?"
        return 200, None
    except anthropic.APIStatusError as error:
        return error.status_code, error.response.headers.get("retry-after")


def openai_outcome(client: openai.OpenAI, responses: bool) -> tuple[int, str | None]:
    try:
        if responses:
            events = list(client.responses.create(model="gpt-sim", input="hi", stream=True))
            assert events[-1].type == "response.completed"
        else:
            chunks = list(client.chat.completions.create(model="gpt-sim", messages=MESSAGES, stream=True))
            assert chunks[-1].choices[0].finish_reason == "stop"
        return 200, None
    except openai.APIStatusError as error:
        return error.status_code, error.response.headers.get("retry-after")


def test_the_banner_gives_base_urls_the_sdks_take() -> None:
    with simulate() as run:
        anthropic_url, openai_url = run.urls["ANTHROPIC_BASE_URL"], run.urls["OPENAI_BASE_URL"]
        assert anthropic_url.startswith("http://127.0.0.1:") and openai_url == f"{anthropic_url}/v1"
        assert run.banner[1:3] == [f"ANTHROPIC_BASE_URL={anthropic_url}", f"OPENAI_BASE_URL={openai_url}"]
        assert "mix on /v1/messages: complete 80%, http_429 5%, http_529 5%, http_500 5%, http_400 5%" in run.banner
        assert f"ANTHROPIC_BASE_URL={anthropic_url}/s/<name>" in run.banner[-1]
        # the per-scenario form: one named scenario every time
        name_url = f"{anthropic_url}/s/http_400"
        with anthropic.Anthropic(base_url=name_url, api_key="test", max_retries=0) as c, \
                pytest.raises(anthropic.BadRequestError):
            c.messages.create(model="m", max_tokens=8, messages=MESSAGES)
        code, rest, err = run.stop()
    assert code == 0 and "Traceback" not in err, err
    assert rest == ["req_sim_1 http_400: http_error", "stopped after 1 request(s): http_400 1"]


def test_a_seeded_mix_gives_every_outcome_through_both_sdks() -> None:
    mix = "complete=0.4," + ",".join(f"{name}=0.15" for name in FAILURES)
    with simulate("--mix", mix, "--seed", "3", "--time-scale", "0.05") as run:
        with run.anthropic() as a, run.openai() as o:
            claude = [anthropic_outcome(a) for _ in range(20)]
            gpt = [openai_outcome(o, responses=bool(i % 2)) for i in range(20)]
        code, rest, err = run.stop()
    assert code == 0 and "Traceback" not in err, err
    assert {status for status, _ in claude} == {200, 429, 529, 500, 400}, claude
    assert {status for status, _ in gpt} == {200, 429, 503, 500, 400}, gpt  # OpenAI's overloaded is a 503
    assert {after for status, after in claude + gpt if status == 429} == {"1"}
    finished = [line for line in rest if line.startswith("req_sim_")]
    assert len(finished) == 40 and rest[-1].startswith("stopped after 40 request(s): ")
    played = Counter(line.split()[1].rstrip(":") for line in finished)
    assert played["complete"] == claude.count((200, None))
    assert played["chat_complete"] + played["responses_complete"] == gpt.count((200, None))


def test_a_mix_of_only_429_always_answers_429_with_retry_after() -> None:
    with simulate("--mix", "http_429=1") as run:
        with run.anthropic() as a, run.openai() as o:
            got = [anthropic_outcome(a) for _ in range(10)] + [openai_outcome(o, bool(i % 2)) for i in range(10)]
        code, _, err = run.stop()
    assert got == [(429, "1")] * 20 and code == 0, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_it_cleanly_even_mid_stream(signum: int) -> None:
    with simulate() as run:
        client = anthropic.Anthropic(base_url=run.urls["ANTHROPIC_BASE_URL"] + "/s/silent_stall", api_key="test",
                                     max_retries=0, timeout=WAIT)
        with client.messages.create(model="m", max_tokens=64, messages=MESSAGES, stream=True) as stream:
            events = iter(stream)
            while next(events).type != "content_block_delta":  # the stream is open and stalling
                pass
            code, rest, err = run.stop(signum)
            with pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)):
                list(events)
    assert code == 0, err
    assert "Traceback" not in err and err.strip() == "", err
    assert rest == ["req_sim_1 silent_stall: cut", "stopped after 1 request(s): silent_stall 1"]


def test_list_names_every_scenario_once() -> None:
    done = subprocess.run([*COMMAND, "--list"], capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 0 and done.stderr == ""
    rows = [line.split(maxsplit=1) for line in done.stdout.splitlines() if line.startswith("  ")]
    names = [row[0] for row in rows]
    assert sorted(names) == sorted({*SCENARIOS, *OPENAI_SCENARIOS}) and all(len(row) == 2 for row in rows)
    assert {*FAILURES, "openai_http_429", "openai_http_503", "openai_http_500", "openai_http_400"} <= set(names)


def one_line_usage_error(*args: str) -> str:
    done = subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamscope simulate: "), done.stderr
    return lines[0]


@pytest.mark.parametrize(("mix", "words"), [
    ("complete=0.9,http_249=0.1", ["'http_249'", "did you mean 'http_529'", "valid names:", "http_429", "complete"]),
    ("complete=lots", ["weight of 'complete'", "finite number >= 0", "NAME=WEIGHT"]),
    ("complete=-1", ["finite number >= 0"]),
    ("=1", ["has no scenario name", "NAME=WEIGHT"]),
    ("complete=1,complete=2", ["given twice"]),
    ("complete=0", ["weight > 0"]),
])
def test_a_bad_mix_is_one_line_and_exit_2(mix: str, words: list[str]) -> None:
    line = one_line_usage_error("--mix", mix, "--port", "0")
    assert "argument --mix:" in line and all(w in line for w in words), line


def test_a_busy_port_is_one_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_usage_error("--port", str(port))
    assert f"port {port} of 127.0.0.1 is in use" in line and "--port" in line, line
