"""A local Anthropic-compatible Messages endpoint that plays scripted scenarios over real HTTP.

The real SDK talks to it over loopback, so everything between the socket and the instrumented
code (httpx2, SSE decoding, retries, connection reuse) is exercised for real. A scenario is
chosen by URL path prefix (``/s/<name>/v1/messages``) so request bodies stay untouched. OpenAI's
streams are served the same way, at ``/s/<name>/v1/chat/completions`` and ``/s/<name>/v1/responses``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .openai_streams import OpenAIHttpError, error_body, personalize
from .steps import Cut, Event, HttpError, Raw, Scenario, Silence, Step

Outcome = Literal["completed", "disconnected", "cut", "http_error"]

_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


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
    outcome: Outcome | None = None
    """``completed``: the script ran to its end; ``disconnected``: the client went away first;
    ``cut``: the server dropped the connection (a ``Cut`` step, or ``stop()`` mid-stream);
    ``http_error``: an ``HttpError`` status was answered. Set from the server thread, possibly a
    moment after the client saw the end: use ``Simulator.wait_for_outcome``."""

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


class Simulator:
    """Serves ``scenarios`` (default: the whole catalog) on 127.0.0.1 from a background thread.

    ``time_scale`` multiplies every delay of every script, so the demo can run in scaled time.
    Use as ``with Simulator(...) as sim:`` (or ``async with``), or ``start()`` / ``stop()``.
    """

    def __init__(
        self,
        scenarios: Mapping[str, Scenario] | Iterable[Scenario] | None = None,
        *,
        time_scale: float = 1.0,
        host: str = "127.0.0.1",
        tls: tuple[str, str] | None = None,
    ) -> None:
        if scenarios is None:
            from .catalog import SCENARIOS
            from .openai_catalog import OPENAI_SCENARIOS

            scenarios = {**SCENARIOS, **OPENAI_SCENARIOS}
        self._scenarios: dict[str, Scenario] = (
            dict(scenarios) if isinstance(scenarios, Mapping) else {s.name: s for s in scenarios}
        )
        self.time_scale = time_scale
        self.host = host
        self.tls = _checked_tls(tls)
        """(certificate file, key file) to serve HTTPS, as production endpoints do; None: HTTP."""
        self._requests: list[RequestLog] = []
        self._attempts: Counter[str] = Counter()
        self._cond = threading.Condition()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._port: int | None = None
        self._stopping = False
        self._app = Starlette(routes=[
            Route("/s/{name}/v1/messages", self._messages, methods=["POST"]),
            Route("/s/{name}/v1/chat/completions", self._openai, methods=["POST"]),
            Route("/s/{name}/v1/responses", self._openai, methods=["POST"]),
        ])

    # ------------------------------------------------------------------ public API

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("simulator is not running")
        return self._port

    def url(self, name: str) -> str:
        """The ``base_url`` to give the SDK for scenario ``name``."""
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://{self.host}:{self.port}/s/{name}"

    def openai_url(self, name: str) -> str:
        """The ``base_url`` to give the openai SDK for scenario ``name`` (it appends the path
        after ``/v1``)."""
        return f"{self.url(name)}/v1"

    def add(self, scenario: Scenario) -> None:
        """Register (or replace) a scenario; safe while running."""
        self._scenarios[scenario.name] = scenario

    @property
    def requests(self) -> list[RequestLog]:
        """A snapshot of the request log, in arrival order."""
        with self._cond:
            return list(self._requests)

    def wait_for_outcome(self, index: int, timeout: float = 5.0) -> RequestLog:
        """Block until request ``index`` (negative counts from the end) has an outcome."""

        def ready() -> bool:
            known = len(self._requests) > index if index >= 0 else len(self._requests) >= -index
            return known and self._requests[index].outcome is not None

        with self._cond:
            if not self._cond.wait_for(ready, timeout):
                raise TimeoutError(f"request {index} has no outcome after {timeout}s")
            return self._requests[index]

    def open_connections(self) -> int:
        """TCP connections to the server that are open right now (for leak tests)."""
        return len(self._server.server_state.connections) if self._server else 0

    def wait_for_connections(self, count: int = 0, timeout: float = 5.0) -> int:
        """Wait until at most ``count`` connections are open (closes are seen asynchronously);
        returns the number open when done."""
        deadline = time.monotonic() + timeout
        while self.open_connections() > count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.open_connections()

    def start(self) -> Simulator:
        """Bind a free port, start uvicorn in its own thread and event loop, wait until it serves."""
        if self._thread is not None:
            raise RuntimeError("simulator already started")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        config = uvicorn.Config(
            self._app,
            http="h11",
            ws="none",
            loop="asyncio",
            lifespan="off",
            log_config=None,  # leave the process's logging alone
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
            ssl_certfile=None if self.tls is None else self.tls[0],
            ssl_keyfile=None if self.tls is None else self.tls[1],
        )
        server = uvicorn.Server(config)
        self._stopping = False
        self._server, self._port = server, sock.getsockname()[1]
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._serve(server, sock),), name=f"simulator:{self._port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("simulator failed to start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Shut down: in-flight streams are dropped (outcome ``cut``), the thread is joined."""
        server, thread, loop = self._server, self._thread, self._loop
        if server is None or thread is None:
            return
        self._stopping = True
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._drop_connections)
            except RuntimeError:  # the loop closed meanwhile
                pass
        server.should_exit = True
        thread.join(timeout=10)
        if thread.is_alive():
            raise RuntimeError("simulator thread did not stop")
        self._server = self._thread = self._loop = None
        self._port = None

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> Simulator:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)

    # ------------------------------------------------------------------ server side

    async def _serve(self, server: uvicorn.Server, sock: socket.socket) -> None:
        self._loop = asyncio.get_running_loop()
        await server.serve(sockets=[sock])

    def _drop_connections(self) -> None:
        if self._server is not None:
            for connection in list(self._server.server_state.connections):
                connection.transport.close()

    def _cut(self, scope: Scope) -> None:
        """Abort the TCP connection that carries ``scope``'s request, without finishing the body."""
        client = tuple(scope.get("client") or ())
        for connection in list(self._server.server_state.connections if self._server else ()):
            if getattr(connection, "client", None) == client:
                connection.transport.abort()
                return
        raise RuntimeError(f"no open connection from {client}")

    def _finish(self, log: RequestLog, outcome: Outcome) -> None:
        with self._cond:
            if log.outcome is None:
                log.outcome, log.ended = outcome, time.monotonic()
                self._cond.notify_all()

    async def _messages(self, request: Request) -> Response:
        name = request.path_params["name"]
        scenario = self._scenarios.get(name)
        if scenario is None:
            return _error_response(404, "not_found_error", f"no scenario named {name!r}")
        try:
            body = json.loads(await request.body())
        except ClientDisconnect:  # the client gave up (a budget fired) before the body was read
            return Response(status_code=499)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _error_response(400, "invalid_request_error", "the request body is not a JSON object")
        with self._cond:
            number = len(self._requests) + 1
            attempt = self._attempts[name]
            self._attempts[name] += 1
            log = RequestLog(name, attempt, body, dict(request.headers), f"req_sim_{number}", time.monotonic())
            self._requests.append(log)
        steps = scenario.steps_for(attempt)
        if steps and isinstance(steps[0], HttpError):
            error = steps[0]
            self._finish(log, "http_error")  # before answering, so a client that saw it sees it logged
            return JSONResponse(error.body(), error.status, headers={"request-id": log.request_id, **error.headers})
        return _ScriptResponse(self, log, steps, number)

    async def _openai(self, request: Request) -> Response:
        """Chat Completions and Responses: the scenario's steps played as ``_messages`` plays them,
        with OpenAI's error bodies and ``x-request-id`` header. Only streams are simulated: a
        request without ``stream: true`` is answered 400."""
        name = request.path_params["name"]
        scenario = self._scenarios.get(name)
        if scenario is None:
            return JSONResponse(error_body(f"no scenario named {name!r}", "invalid_request_error"), 404)
        try:
            body = json.loads(await request.body())
        except ClientDisconnect:
            return Response(status_code=499)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return JSONResponse(error_body("the request body is not a JSON object", "invalid_request_error"), 400)
        if body.get("stream") is not True:
            message = "the simulator only streams: send stream=true"
            return JSONResponse(error_body(message, "invalid_request_error", param="stream"), 400)
        with self._cond:
            number = len(self._requests) + 1
            attempt = self._attempts[name]
            self._attempts[name] += 1
            log = RequestLog(name, attempt, body, dict(request.headers), f"req_sim_{number}", time.monotonic())
            self._requests.append(log)
        steps = scenario.steps_for(attempt)
        if steps and isinstance(steps[0], HttpError):
            error = steps[0]
            self._finish(log, "http_error")
            headers = {"x-request-id": log.request_id, **error.headers}
            if isinstance(error, OpenAIHttpError):
                return JSONResponse(error.body(), error.status, headers=headers)
            return JSONResponse(error_body(error.message, error.error_type), error.status, headers=headers)
        return _OpenAIScriptResponse(self, log, personalize(steps, body, number), number)


def _checked_tls(tls: tuple[str, str] | None) -> tuple[str, str] | None:
    """`tls` as given, once its files load as a certificate and its key (here, in one clear
    line, not as a failure inside the server's thread)."""
    if tls is None:
        return None
    if not isinstance(tls, tuple) or len(tls) != 2:
        raise ValueError(f"tls={tls!r}: give (certificate file, key file), both PEM")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(tls[0], tls[1])
    except OSError as exc:  # ssl.SSLError included
        raise ValueError(f"tls={tls!r}: the certificate and key do not load ({exc.strerror or exc}): "
                         "give (certificate file, key file), both PEM") from None
    return tls


def _error_response(status: int, error_type: str, message: str) -> JSONResponse:
    return JSONResponse({"type": "error", "error": {"type": error_type, "message": message}}, status)


class _Clock:
    """Schedules steps on absolute due times, so send overhead does not accumulate as drift."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.due = anyio.current_time()

    async def wait(self, delay: float) -> None:
        self.due += delay * self.scale
        await anyio.sleep(max(0.0, self.due - anyio.current_time()))


class _ScriptResponse(Response):
    """Plays one attempt's script, as SSE or (for ``stream: false``) as one JSON Message,
    while watching for the client going away."""

    def __init__(self, sim: Simulator, log: RequestLog, steps: Iterable[Step], number: int) -> None:
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

    def _headers(self, content_type: str) -> list[tuple[bytes, bytes]]:
        return [(b"content-type", content_type.encode()), (b"request-id", self.log.request_id.encode())]

    async def _stream(self, scope: Scope, send: Send) -> Outcome:
        await send({"type": "http.response.start", "status": 200, "headers": self._headers("text/event-stream")})
        clock = _Clock(self.sim.time_scale)
        for step in self.steps:
            await clock.wait(step.delay)
            if isinstance(step, Cut):
                self.sim._cut(scope)
                return "cut"
            if isinstance(step, Event):
                step = Event(step.name, self._personalize(step.name, step.data))
            if not isinstance(step, Silence | HttpError):
                await send({"type": "http.response.body", "body": step.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return "completed"

    async def _json(self, scope: Scope, send: Send) -> Outcome:
        """Non-streaming: wait out the script, then answer the Message its events assemble to."""
        clock = _Clock(self.sim.time_scale)
        events: list[tuple[str, dict[str, Any]]] = []
        for step in self.steps:
            await clock.wait(step.delay)
            if isinstance(step, Cut):
                self.sim._cut(scope)
                return "cut"
            if isinstance(step, Event):
                events.append((step.name, step.data))
            elif isinstance(step, Raw):
                events += _parse_sse(step.payload)
        try:
            status, body = _assemble([(name, self._personalize(name, data)) for name, data in events])
        except (LookupError, TypeError, ValueError) as exc:
            status, body = 500, {"type": "error", "error": {"type": "api_error", "message": f"bad script: {exc}"}}
        await send({"type": "http.response.start", "status": status, "headers": self._headers("application/json")})
        await send({"type": "http.response.body", "body": json.dumps(body).encode()})
        return "completed"

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


class _OpenAIScriptResponse(_ScriptResponse):
    """An OpenAI stream: the request id goes out in ``x-request-id``, where the openai SDK reads it."""

    def _headers(self, content_type: str) -> list[tuple[bytes, bytes]]:
        if content_type == "text/event-stream":
            content_type += "; charset=utf-8"
        return [(b"content-type", content_type.encode()), (b"x-request-id", self.log.request_id.encode())]


def _parse_sse(payload: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The well-formed events in raw SSE bytes (best effort, for non-streaming answers)."""
    events = []
    for block in payload.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, []
        for line in block.decode("utf-8", "replace").split("\n"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if name and data:
            try:
                events.append((name, json.loads("\n".join(data))))
            except ValueError:
                pass
    return events


def _assemble(events: list[tuple[str, dict[str, Any]]]) -> tuple[int, dict[str, Any]]:
    """Fold stream events into (status, non-streaming body), as the API would have answered."""
    message: dict[str, Any] | None = None
    partial_json: dict[int, str] = {}
    for name, data in events:
        if name == "error":
            return _ERROR_STATUS.get(data.get("error", {}).get("type"), 500), data
        if name == "message_start":
            message = {**copy.deepcopy(data["message"]), "content": []}
        elif message is None:
            continue
        elif name == "content_block_start":
            message["content"].append(copy.deepcopy(data["content_block"]))
        elif name == "content_block_delta":
            index, delta = data["index"], data["delta"]
            block = message["content"][index]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            elif delta["type"] == "input_json_delta":
                partial_json[index] = partial_json.get(index, "") + delta["partial_json"]
        elif name == "content_block_stop" and data["index"] in partial_json:
            message["content"][data["index"]]["input"] = json.loads(partial_json.pop(data["index"]) or "{}")
        elif name == "message_delta":
            message.update(data.get("delta", {}))
            if "usage" in data:
                message["usage"] = {**message.get("usage", {}), **data["usage"]}
    if message is None:
        return 500, {"type": "error", "error": {"type": "api_error", "message": "the script sent no message"}}
    return 200, message
