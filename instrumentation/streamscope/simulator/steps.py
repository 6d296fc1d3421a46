"""The scenario model: a script of timed steps the simulator plays for each request.

A step's ``delay`` is relative to the previous step, so a script reads like a transcript of
the wire. The builders write realistic streams from these steps: Anthropic's Messages streams in
anthropic_streams.py, OpenAI's in openai_streams.py (the same events, in the same order, with the
same JSON shapes as the APIs and their reference ``.sse`` files), so the instrumentation is tested
against what the real SDKs parse, not against a mock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias

REFERENCE_DIR = Path(__file__).with_name("reference")
"""The ``.sse`` files copied verbatim from the Anthropic docs."""

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


def with_delay(step: Step, delay: float) -> Step:
    """``step`` sent ``delay`` s after the previous one."""
    if isinstance(step, Silence):
        return Silence(delay)
    if isinstance(step, HttpError):
        raise ValueError("HttpError has no delay")
    return replace(step, delay=delay)


def pings(every: float, count: int) -> list[Ping]:
    """``count`` pings, ``every`` s apart: a stall that still looks alive."""
    return [Ping(every) for _ in range(count)]


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


# --------------------------------------------------------------------------- verbatim replays


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
