"""What the simulator saw of each request, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Outcome = Literal["completed", "disconnected", "cut", "http_error"]


@dataclass
class RequestLog:
    """What the server saw of one request, and how it ended (set once, from the server thread)."""

    scenario: str
    attempt: int
    body: dict[str, Any]
    headers: dict[str, str]
    request_id: str
    started: float
    """``time.monotonic()`` when the request arrived."""
    ended: float | None = None
    late: float = 0.0
    """How far behind its script the stream was sent, at worst (s): each step's send minus when
    it was due, counted from the request's arrival. Near zero, unless the machine was too busy for
    the simulator to keep time; a test of timing can read it to tell a late provider from a bug."""
    outcome: Outcome | None = None
    """``completed``: the script ran to its end; ``disconnected``: the client went away first;
    ``cut``: the server dropped the connection (a ``Cut`` step, or ``stop()`` mid-stream);
    ``http_error``: an ``HttpError`` status was answered. Set from the server thread, possibly a
    moment after the client saw the end: use ``Simulator.wait_for_outcome``."""

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

