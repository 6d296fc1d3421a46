"""The scenario model: a script of timed steps the simulator plays for each request.

A step's ``delay`` is relative to the previous step, so a script reads like a transcript of
the wire. The builders below write realistic Messages streams (the same events, in the same
order, with the same JSON shapes as the API and its reference ``.sse`` files), so the
instrumentation is tested against what the real SDK parses, not against a mock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeAlias

REFERENCE_DIR = Path(__file__).with_name("reference")
"""The ``.sse`` files copied verbatim from the Anthropic docs."""

DEFAULT_SIGNATURE = "EqQBCgIYAhIMsimulatedsignatureGgxzaW11bGF0b3I="


# --------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class Event:
    """One SSE event, ``event: {name}`` / ``data: {json}``, sent ``delay`` s after the previous step."""

    name: str
    data: dict[str, Any]
    delay: float = 0.0

    def encode(self) -> bytes:
        # Compact JSON, one ``data:`` line, as the API sends it.
        payload = json.dumps(self.data, separators=(",", ":"), ensure_ascii=False)
        return f"event: {self.name}\ndata: {payload}\n\n".encode()


@dataclass(frozen=True)
class Ping:
    """A keep-alive ``ping`` event: the API sends these while the model produces nothing visible."""

    delay: float = 0.0

    def encode(self) -> bytes:
        return b'event: ping\ndata: {"type": "ping"}\n\n'


@dataclass(frozen=True)
class Raw:
    """Bytes sent exactly as given: for verbatim replays and malformed SSE."""

    payload: bytes
    delay: float = 0.0

    def encode(self) -> bytes:
        return self.payload


@dataclass(frozen=True)
class Silence:
    """Send nothing for ``seconds``: a stall, or a slow start."""

    seconds: float

    @property
    def delay(self) -> float:
        return self.seconds


@dataclass(frozen=True)
class Cut:
    """Drop the TCP connection mid-body, like a dead proxy or network.

    The SDK does not wrap this: iterating the stream raises ``httpx2.RemoteProtocolError``
    ("peer closed connection without sending complete message body (incomplete chunked read)").
    A non-streaming request is cut before any response: the SDK raises ``APIConnectionError``
    (after its retries).
    """

    delay: float = 0.0


@dataclass(frozen=True)
class HttpError:
    """Answer with an HTTP error status and an Anthropic JSON error body instead of a stream.

    Only valid as the first step of an attempt (an API error status comes before any body).
    """

    status: int
    error_type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def delay(self) -> float:
        return 0.0

    def body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": self.error_type, "message": self.message}}


Step: TypeAlias = Event | Ping | Raw | Silence | Cut | HttpError


def _with_delay(step: Step, delay: float) -> Step:
    if isinstance(step, Silence):
        return Silence(delay)
    if isinstance(step, HttpError):
        raise ValueError("HttpError has no delay")
    return replace(step, delay=delay)


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """A named script per attempt: the n-th request to it plays ``attempts[min(n, len - 1)]``.

    Several attempts let a test script retries, e.g. "529 first, then a good stream".
    """

    name: str
    attempts: Sequence[Sequence[Step]]

    def __post_init__(self) -> None:
        attempts = tuple(tuple(steps) for steps in self.attempts)
        if not attempts:
            raise ValueError(f"scenario {self.name!r} has no attempts")
        for steps in attempts:
            if any(isinstance(step, HttpError) for step in steps[1:]):
                raise ValueError(f"scenario {self.name!r}: HttpError must be the first step")
        object.__setattr__(self, "attempts", attempts)

    @classmethod
    def single(cls, name: str, steps: Iterable[Step]) -> Scenario:
        """A scenario that plays the same script on every attempt."""
        return cls(name, [list(steps)])

    def steps_for(self, attempt: int) -> Sequence[Step]:
        """The script of the ``attempt``-th request (0-based); the last one repeats."""
        return self.attempts[min(attempt, len(self.attempts) - 1)]


# --------------------------------------------------------------------------- builders


@dataclass(frozen=True)
class ThinkingSpec:
    """A thinking block: first delta ``first_delay`` s after the block starts, the rest spread
    evenly until ``duration`` s, when the ``signature_delta`` closes it.

    ``display="omitted"`` sends one empty ``thinking_delta`` then the signature, as the API does
    when thinking display is omitted. ``display="redacted"`` sends a ``redacted_thinking`` block
    instead, as the API does when safety systems redact the thinking: nothing for ``duration`` s
    (the model thinks), then the block opens with its encrypted ``data`` and closes at once.
    """

    chunks: Sequence[str] = (
        "The user wants a short answer.",
        " Let me check the facts",
        " and keep it brief.",
    )
    duration: float = 0.5
    first_delay: float = 0.1
    display: Literal["summarized", "omitted", "redacted"] = "summarized"
    signature: str = DEFAULT_SIGNATURE


@dataclass(frozen=True)
class TextSpec:
    """A text block: ``chunks`` sent ``interval`` s apart, the first after ``first_delay``
    (default ``interval``). A Step among the chunks is played as is (stalls, pings, bad bytes)."""

    chunks: Sequence[str | Step]
    interval: float = 0.05
    first_delay: float | None = None


@dataclass(frozen=True)
class ToolUseSpec:
    """A tool_use block whose input arrives as ``input_json_delta`` partial JSON chunks."""

    name: str
    chunks: Sequence[str]
    interval: float = 0.05
    first_delay: float | None = None
    id: str | None = None


@dataclass(frozen=True)
class ServerToolSpec:
    """A server-side tool run (web search, web fetch, code execution, ...), as the API streams it:
    a ``server_tool_use`` block whose input arrives as ``input_json_delta`` chunks, then the run
    (``run`` s on the server, with a ping every ``ping_every`` s, or silence if None; with
    ``pings_for``, pings only for that long and then silence: a run that hangs), then the result
    block (``result_type``, its content inline, no deltas)."""

    name: str = "web_search"
    chunks: Sequence[str] = ("", '{"query": "how do', ' streams fail"}')
    run: float = 1.0
    ping_every: float | None = 0.2
    pings_for: float | None = None
    result_type: str = "web_search_tool_result"
    interval: float = 0.02
    first_delay: float | None = None
    id: str | None = None


BlockSpec: TypeAlias = TextSpec | ToolUseSpec | ServerToolSpec


def error_event(error_type: str = "overloaded_error", message: str = "Overloaded", delay: float = 0.0) -> Event:
    """An in-band ``error`` event, as the API sends when it fails after the 200 status."""
    return Event("error", {"type": "error", "error": {"type": error_type, "message": message}}, delay)


def pings(every: float, count: int) -> list[Ping]:
    """``count`` pings, ``every`` s apart: a stall that still looks alive."""
    return [Ping(every) for _ in range(count)]


def message_stream(
    *,
    model: str | None = None,
    thinking: ThinkingSpec | None = None,
    blocks: Sequence[BlockSpec] = (),
    stop_reason: str = "end_turn",
    stop_sequence: str | None = None,
    stop_details: dict[str, Any] | None = None,
    output_tokens: int | None = None,
    thinking_tokens: int | None = None,
    input_tokens: int = 25,
    cache_read_input_tokens: int | None = None,
    cache_creation_input_tokens: int | None = None,
    include_usage: bool = True,
    first_event_delay: float = 0.0,
    ping_every: float | None = None,
    final: bool | Literal["stop_only"] = True,
    interrupt: Sequence[Step] = (),
    unknown_events: bool = False,
) -> list[Step]:
    """A Messages stream: ``message_start``, the thinking block, ``blocks``, ``message_delta``,
    ``message_stop``.

    ``model=None`` and the message id are filled in per request by the server (the request's
    model, ``msg_sim_<n>``). ``output_tokens=None`` estimates it from the text (4 chars a token)
    plus ``thinking_tokens``, which is reported cumulatively in ``message_delta`` as
    ``usage.output_tokens_details.thinking_tokens``. ``final=False`` ends the body cleanly after
    the last block, without ``message_delta``/``message_stop``; ``final="stop_only"`` sends
    ``message_stop`` without the ``message_delta`` before it (no stop reason, no final usage). ``interrupt`` steps replace the end
    of the stream right after the last content chunk (the open block is never closed): an in-band
    error, a ``Cut``, a ``Silence``. ``ping_every`` interleaves pings, in time, from the first
    content step to the end of the body. ``unknown_events`` adds events of a type the SDK does
    not know (``future_event_type``), which clients must ignore.
    """
    start_usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": 1}
    for key, value in (
        ("cache_creation_input_tokens", cache_creation_input_tokens),
        ("cache_read_input_tokens", cache_read_input_tokens),
    ):
        if value is not None:
            start_usage[key] = value
    message: dict[str, Any] = {
        "id": None,
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
    }
    if include_usage:
        message["usage"] = start_usage
    head: list[Step] = [Event("message_start", {"type": "message_start", "message": message}, first_event_delay)]
    if unknown_events:
        head.append(_unknown_event(0))

    body: list[Step] = []
    specs: list[ThinkingSpec | BlockSpec] = ([thinking] if thinking else []) + list(blocks)
    index = 0
    for n, spec in enumerate(specs):
        if isinstance(spec, ServerToolSpec):
            body += _server_tool(index, spec)
            index += 1  # the result block: its own index
        else:
            body += _block(index, spec)
        if n == len(specs) - 1 and interrupt:
            break
        body.append(Event("content_block_stop", {"type": "content_block_stop", "index": index}))
        if unknown_events:
            body.append(_unknown_event(index + 1))
        index += 1
    body += interrupt
    if ping_every:
        body = _interleave_pings(body, ping_every)

    if interrupt or not final:
        return head + body
    if final == "stop_only":
        return [*head, *body, Event("message_stop", {"type": "message_stop"})]

    visible = sum(len(c) for spec in blocks for c in spec.chunks if isinstance(c, str) and isinstance(spec, TextSpec))
    thinking_chars = sum(len(c) for c in thinking.chunks) if thinking else 0
    if output_tokens is None:
        output_tokens = max(1, visible // 4 + (thinking_tokens if thinking_tokens is not None else thinking_chars // 4))
    delta: dict[str, Any] = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
    if stop_details is not None:
        delta["stop_details"] = stop_details
    message_delta: dict[str, Any] = {"type": "message_delta", "delta": delta}
    if include_usage:
        # Usage in message_delta is cumulative; the API repeats the input side there too.
        usage: dict[str, Any] = {**start_usage, "output_tokens": output_tokens}
        if thinking_tokens is not None:
            usage["output_tokens_details"] = {"thinking_tokens": thinking_tokens}
        message_delta["usage"] = usage
    tail: list[Step] = [Event("message_delta", message_delta), Event("message_stop", {"type": "message_stop"})]
    return head + body + tail


def _block(index: int, spec: ThinkingSpec | BlockSpec) -> list[Step]:
    """content_block_start and the block's deltas (timed); not the stop.

    The start event goes out with the block's first delta, as the API does: it opens a block
    when the model begins producing it, so "block opened" and "first delta" coincide.
    """
    steps = _block_events(index, spec)
    if len(steps) > 1 and isinstance(steps[1], Event) and steps[1].delay:
        steps[0], steps[1] = _with_delay(steps[0], steps[1].delay), _with_delay(steps[1], 0.0)
    return steps


def _block_events(index: int, spec: ThinkingSpec | BlockSpec) -> list[Step]:

    def delta(payload: dict[str, Any], delay: float) -> Event:
        return Event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": payload}, delay)

    def start(block: dict[str, Any]) -> Event:
        return Event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})

    if isinstance(spec, ThinkingSpec) and spec.display == "redacted":
        data = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}
        return [_with_delay(start(data), spec.duration)]
    if isinstance(spec, ThinkingSpec):
        chunks = list(spec.chunks) if spec.display == "summarized" else [""]
        gap = (spec.duration - spec.first_delay) / len(chunks) if chunks else 0.0
        steps: list[Step] = [start({"type": "thinking", "thinking": ""})]
        for i, chunk in enumerate(chunks):
            steps.append(delta({"type": "thinking_delta", "thinking": chunk}, spec.first_delay if i == 0 else gap))
        # The signature closes the block at `duration` after its start.
        sig_delay = gap if chunks else spec.duration
        steps.append(delta({"type": "signature_delta", "signature": spec.signature}, sig_delay))
        return steps

    first = spec.interval if spec.first_delay is None else spec.first_delay
    if isinstance(spec, ToolUseSpec):
        block = {"type": "tool_use", "id": spec.id or f"toolu_sim_{index:02d}", "name": spec.name, "input": {}}
        steps = [start(block)]
        for i, chunk in enumerate(spec.chunks):
            steps.append(delta({"type": "input_json_delta", "partial_json": chunk}, first if i == 0 else spec.interval))
        return steps

    steps = [start({"type": "text", "text": ""})]
    sent_text = False
    for chunk in spec.chunks:
        if isinstance(chunk, str):
            steps.append(delta({"type": "text_delta", "text": chunk}, spec.interval if sent_text else first))
            sent_text = True
        else:
            steps.append(chunk)
    return steps


def _server_tool(index: int, spec: ServerToolSpec) -> list[Step]:
    """The ``server_tool_use`` block, its stop, the run, and the result block (not its stop)."""
    tool_id = spec.id or f"srvtoolu_sim_{index:02d}"
    steps = _block(index, ToolUseSpec(spec.name, spec.chunks, spec.interval, spec.first_delay, tool_id))
    block = {"type": "server_tool_use", "id": tool_id, "name": spec.name, "input": {}}
    steps[0] = Event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block},
                     steps[0].delay)
    steps.append(Event("content_block_stop", {"type": "content_block_stop", "index": index}))
    if spec.ping_every:
        pinging = spec.run if spec.pings_for is None else min(spec.pings_for, spec.run)
        count = int(pinging / spec.ping_every + 1e-9)
        steps += pings(spec.ping_every, count)
        rest = spec.run - count * spec.ping_every
    else:
        rest = spec.run
    result = {"type": spec.result_type, "tool_use_id": tool_id, "content": _tool_result_content(spec.result_type)}
    steps.append(Event("content_block_start", {"type": "content_block_start", "index": index + 1,
                                               "content_block": result}, max(rest, 0.0)))
    return steps


def _tool_result_content(result_type: str) -> Any:
    if result_type == "web_search_tool_result":
        return [{"type": "web_search_result", "title": "How streams fail", "url": "https://example.com/streams",
                 "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2YSDKk",
                 "page_age": "November 2, 2026"}]
    if result_type == "web_fetch_tool_result":
        return {"type": "web_fetch_result", "url": "https://example.com/streams", "retrieved_at": "2026-11-02T00:00:00Z",
                "content": {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                                         "data": "Streams fail."}}}
    return {"type": "code_execution_result", "stdout": "ok\n", "stderr": "", "return_code": 0, "content": []}


def _unknown_event(n: int) -> Event:
    return Event("future_event_type", {"type": "future_event_type", "sequence": n, "detail": {"note": "ignore me"}})


def _interleave_pings(steps: Sequence[Step], period: float) -> list[Step]:
    """Insert a Ping every ``period`` s of script time, splitting the delays they fall into."""
    out: list[Step] = []
    since = 0.0
    for step in steps:
        remaining = step.delay
        while since + remaining >= period - 1e-9:
            wait = max(0.0, period - since)
            out.append(Ping(wait))
            remaining, since = max(0.0, remaining - wait), 0.0
        out.append(_with_delay(step, remaining))
        since += remaining
    return out


def from_sse_file(path: str | Path, *, delay: float = 0.0) -> list[Step]:
    """Replay an ``.sse`` file verbatim, one Raw step per event, ``delay`` s apart.

    A bare file name is looked up in ``REFERENCE_DIR``.
    """
    path = Path(path)
    if not path.exists() and path.parent == Path("."):
        path = REFERENCE_DIR / path
    text = path.read_bytes().replace(b"\r\n", b"\n")
    blocks = [block for block in text.split(b"\n\n") if block.strip()]
    return [Raw(block.strip(b"\n") + b"\n\n", delay if i else 0.0) for i, block in enumerate(blocks)]
