"""Playing one attempt's script to the client over ASGI: as SSE, on absolute due times, or
(``stream: false``) as the one JSON Message its events assemble to, while watching for the client
going away."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Protocol

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .non_streaming import assemble, parse_sse
from .request_log import Outcome, RequestLog
from .steps import Cut, Event, Ping, Raw, Step


class Host(Protocol):
    """What a response needs of the simulator that plays it (`server.Simulator`)."""

    time_scale: float
    _stopping: bool

    def _cut(self, scope: Scope) -> None: ...
    def _finish(self, log: RequestLog, outcome: Outcome) -> None: ...


class _Clock:
    """Schedules steps on absolute due times, so send overhead does not accumulate as drift."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.due = self.start = anyio.current_time()

    async def wait(self, delay: float) -> None:
        self.due += delay * self.scale
        await anyio.sleep(max(0.0, self.due - anyio.current_time()))

    def sent(self, log: RequestLog) -> None:
        """A step just went out: how late, against the script counted from the request's arrival."""
        late = anyio.current_time() - (log.started + self.due - self.start)
        if late > log.late:
            log.late = late


class ScriptResponse(Response):
    """Plays one attempt's script, as SSE or (for ``stream: false``) as one JSON Message,
    while watching for the client going away."""

    def __init__(self, sim: Host, log: RequestLog, steps: Iterable[Step], number: int) -> None:
        # Not Response.__init__: the body is produced by __call__, like StreamingResponse.
        self.sim, self.log, self.steps, self.number = sim, log, list(steps), number

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outcome: Outcome | None = None
        try:
            async with anyio.create_task_group() as tasks:

                async def watch_disconnect() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tasks.cancel_scope.cancel()

                tasks.start_soon(watch_disconnect)
                play = self._stream if self.log.stream else self._json
                outcome = await play(scope, send)
                if outcome != "cut":  # after a cut, let the watcher see the disconnect first
                    tasks.cancel_scope.cancel()
        except OSError:  # the client went away while a step was being sent: nothing left to answer
            outcome = "disconnected"
        except Exception:
            outcome = "cut"  # uvicorn closes the connection after an application error
            raise
        finally:
            self.sim._finish(self.log, outcome or ("cut" if self.sim._stopping else "disconnected"))

    def _start_headers(self, content_type: str) -> list[tuple[bytes, bytes]]:
        return [(b"content-type", content_type.encode()), (b"request-id", self.log.request_id.encode())]

    async def _stream(self, scope: Scope, send: Send) -> Outcome:
        await send({"type": "http.response.start", "status": 200, "headers": self._start_headers("text/event-stream")})
        clock = _Clock(self.sim.time_scale)
        for step in self.steps:
            if not await self._due(clock, scope, step):
                return "cut"
            if isinstance(step, Event):
                step = Event(step.name, self._personalize(step.name, step.data))
            if isinstance(step, Event | Ping | Raw):  # a Silence sends nothing
                await send({"type": "http.response.body", "body": step.encode(), "more_body": True})
                clock.sent(self.log)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return "completed"

    async def _json(self, scope: Scope, send: Send) -> Outcome:
        """Non-streaming: wait out the script, then answer the Message its events assemble to."""
        clock = _Clock(self.sim.time_scale)
        events: list[tuple[str, dict[str, Any]]] = []
        for step in self.steps:
            if not await self._due(clock, scope, step):
                return "cut"
            if isinstance(step, Event):
                events.append((step.name, step.data))
            elif isinstance(step, Raw):
                events += parse_sse(step.payload)
        try:
            status, body = assemble([(name, self._personalize(name, data)) for name, data in events])
        except (LookupError, TypeError, ValueError) as exc:
            status, body = 500, {"type": "error", "error": {"type": "api_error", "message": f"bad script: {exc}"}}
        headers = self._start_headers("application/json")
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": json.dumps(body).encode()})
        return "completed"

    async def _due(self, clock: _Clock, scope: Scope, step: Step) -> bool:
        """Wait until ``step`` is due; False for a Cut, which drops the connection there and then."""
        await clock.wait(step.delay)
        if isinstance(step, Cut):
            self.sim._cut(scope)
            return False
        return True

    def _personalize(self, name: str, data: dict[str, Any]) -> dict[str, Any]:
        """Fill the per-request id and the echoed model into a builder's ``message_start``."""
        message = data.get("message")
        if name != "message_start" or not isinstance(message, dict):
            return data
        if message.get("id") is not None and message.get("model") is not None:
            return data
        filled = {
            **message,
            "id": message.get("id") or f"msg_sim_{self.number}",
            "model": message.get("model") or self.log.body.get("model") or "claude-simulator",
        }
        return {**data, "message": filled}


class OpenAIScriptResponse(ScriptResponse):
    """An OpenAI stream: the request id goes out in ``x-request-id``, where the openai SDK reads it."""

    def _start_headers(self, content_type: str) -> list[tuple[bytes, bytes]]:
        if content_type == "text/event-stream":
            content_type += "; charset=utf-8"
        return [(b"content-type", content_type.encode()), (b"x-request-id", self.log.request_id.encode())]

