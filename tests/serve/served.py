"""A real uvicorn server for the serving tests, and a reader of Server-Sent Events over real HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn


@contextmanager
def serving(app: Any, send_buffer: int | None = None) -> Iterator[str]:
    """`app` on a real uvicorn server on 127.0.0.1 (any free port), in a thread; yields its URL.
    `send_buffer`: the kernel's send buffer of each accepted connection, in bytes (accepted sockets
    inherit it from the listening one), so a browser that stops reading holds up a send sooner."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, http="h11", ws="none", loop="asyncio", lifespan="off", log_config=None,
                            log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=asyncio.run, args=(server.serve(sockets=[sock]),), daemon=True)
    thread.start()
    started = time.monotonic()
    while not server.started:
        assert thread.is_alive() and time.monotonic() - started < 10, "uvicorn did not start"
        time.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@dataclass
class Sse:
    """One server-sent event as a browser's parser sees it (comments kept apart)."""

    event: str = "message"
    data: str = ""
    id: str | None = None

    @property
    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class SseParser:
    """The WHATWG event-stream parsing rules, enough for these tests: fields, comments, blank lines."""

    events: list[Sse] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    _buffer: str = ""
    _current: dict[str, str] = field(default_factory=dict)
    _cr: bool = False

    def feed(self, text: str) -> list[Sse]:
        if self._cr:  # a CR that ended the last piece: with an LF starting this one, one line end
            text, self._cr = "\r" + text, False
        if text.endswith("\r"):
            text, self._cr = text[:-1], True
        self._buffer += text.replace("\r\n", "\n").replace("\r", "\n")
        new: list[Sse] = []
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            if not line:
                if "data" in self._current or "event" in self._current:
                    sse = Sse(self._current.get("event", "message"), self._current.get("data", ""),
                              self._current.get("id"))
                    self.events.append(sse)
                    new.append(sse)
                self._current = {}
            elif line.startswith(":"):
                self.comments.append(line[1:].strip())
            else:
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "data" and "data" in self._current:
                    self._current["data"] += "\n" + value
                else:
                    self._current[name] = value
        return new
