"""A local Anthropic-compatible Messages endpoint that plays scripted scenarios over real HTTP.

The real SDK talks to it over loopback, so everything between the socket and the instrumented
code (httpx2, SSE decoding, retries, connection reuse) is exercised for real. A scenario is
chosen by URL path prefix (``/s/<name>/v1/messages``) so request bodies stay untouched. OpenAI's
streams are served the same way, at ``/s/<name>/v1/chat/completions`` and ``/s/<name>/v1/responses``.
The plain paths (``/v1/messages``, ...) play a scenario drawn from a weighted mix (mix.py), for an
SDK or an app that is only given a base URL.
"""


from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Scope

from .mix import Mix
from .mix import Route as ApiRoute  # starlette's Route is the URL route
from .openai_wire import OpenAIHttpError, error_body, personalize
from .playback import OpenAIScriptResponse, ScriptResponse
from .request_log import Outcome, RequestLog
from .steps import HttpError, Scenario, Step

__all__ = ["RequestLog", "Simulator"]


class _Read(NamedTuple):
    """A request the simulator can answer: the scenario named in its path, and its JSON body."""

    name: str
    scenario: Scenario
    body: dict[str, Any]


class Simulator:
    """Serves ``scenarios`` (default: the whole catalog) on ``host`` from a background thread.

    ``time_scale`` multiplies every delay of every script, so the demo can run in scaled time.
    ``port`` 0 takes any free port. The plain paths play a scenario drawn per request from ``mix``
    (name → relative weight; names from either catalog, each route plays its API's counterpart:
    see mix.py), by a ``random.Random(seed)``; without a mix, ``mix.DEFAULT_MIX``: ``complete``
    80 %, and ``http_429``, ``http_529``, ``http_500``, ``http_400`` 5 % each. A mix name that is
    not served raises ValueError, naming it and the valid names.
    Use as ``with Simulator(...) as sim:`` (or ``async with``), or ``start()`` / ``stop()``.
    """

    def __init__(
        self,
        scenarios: Mapping[str, Scenario] | Iterable[Scenario] | None = None,
        *,
        time_scale: float = 1.0,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: tuple[str, str] | None = None,
        mix: Mapping[str, float] | None = None,
        seed: int | None = 0,
    ) -> None:
        if scenarios is None:
            from .catalog import SCENARIOS
            from .openai_catalog import OPENAI_SCENARIOS

            scenarios = {**SCENARIOS, **OPENAI_SCENARIOS}
        self._scenarios: dict[str, Scenario] = (
            dict(scenarios) if isinstance(scenarios, Mapping) else {s.name: s for s in scenarios}
        )
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port={port!r}: give a TCP port 0-65535 (0: any free port)")
        self.mix = Mix(mix, self._scenarios, seed) if mix is not None else Mix.default(self._scenarios, seed)
        """What the plain paths draw from (None: no scenario of the default mix is served)."""
        self.time_scale = time_scale
        self.host = host
        self._bind_port = port
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
            Route("/v1/messages", self._messages, methods=["POST"]),
            Route("/v1/chat/completions", self._openai, methods=["POST"]),
            Route("/v1/responses", self._openai, methods=["POST"]),
        ])

    # ------------------------------------------------------------------ public API

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("simulator is not running")
        return self._port

    def url(self, name: str | None = None) -> str:
        """The ``base_url`` to give the anthropic SDK for scenario ``name`` (it appends
        ``/v1/messages``); without a name, the mix's."""
        scheme = "http" if self.tls is None else "https"
        host = f"[{self.host}]" if ":" in self.host else self.host
        base = f"{scheme}://{host}:{self.port}"
        return base if name is None else f"{base}/s/{name}"

    def openai_url(self, name: str | None = None) -> str:
        """The ``base_url`` to give the openai SDK for scenario ``name`` (it appends the path
        after ``/v1``); without a name, the mix's."""
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
        """Bind the port (OSError if it cannot be: in use, a bad host), start uvicorn in its own
        thread and event loop, wait until it serves."""
        if self._thread is not None:
            raise RuntimeError("simulator already started")
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._bind_port))
        except OSError:
            sock.close()
            raise
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
        read = await self._read(request, "messages", _anthropic_error)
        if isinstance(read, Response):
            return read
        log, steps, number = self._log(request, read)
        if steps and isinstance(steps[0], HttpError):
            error = steps[0]
            self._finish(log, "http_error")  # before answering, so a client that saw it sees it logged
            return JSONResponse(error.body(), error.status, headers={"request-id": log.request_id, **error.headers})
        return ScriptResponse(self, log, steps, number)

    async def _openai(self, request: Request) -> Response:
        """Chat Completions and Responses: the scenario's steps played as ``_messages`` plays them,
        with OpenAI's error bodies and ``x-request-id`` header. Only streams are simulated: a
        request without ``stream: true`` is answered 400."""
        route: ApiRoute = "chat" if request.url.path.endswith("/chat/completions") else "responses"
        read = await self._read(request, route, _openai_error)
        if isinstance(read, Response):
            return read
        if read.body.get("stream") is not True:
            return _openai_error(400, "the simulator only streams: send stream=true", param="stream")
        log, steps, number = self._log(request, read)
        if steps and isinstance(steps[0], HttpError):
            error = steps[0]
            self._finish(log, "http_error")
            headers = {"x-request-id": log.request_id, **error.headers}
            if isinstance(error, OpenAIHttpError):
                return JSONResponse(error.body(), error.status, headers=headers)
            return JSONResponse(error_body(error.message, error.error_type), error.status, headers=headers)
        return OpenAIScriptResponse(self, log, personalize(steps, read.body, number), number)

    async def _read(self, request: Request, route: ApiRoute, error: Callable[[int, str], Response],
                    ) -> _Read | Response:
        """The request's scenario (named in its path, or drawn from the mix) and JSON body, or the
        answer to a request that has neither (``error(status, message)`` in the route's API's shape)."""
        name = request.path_params.get("name")
        if name is None:
            name = self.mix.draw(route) if self.mix is not None else None
            if name is None:
                return error(404, f"the mix has no scenario for this API: give one, or name one in the path "
                                  f"(/s/<name>{request.url.path})")
        scenario = self._scenarios.get(name)
        if scenario is None:
            return error(404, f"no scenario named {name!r}")
        try:
            body = json.loads(await request.body())
        except ClientDisconnect:  # the client gave up (a budget fired) before the body was read
            return Response(status_code=499)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return error(400, "the request body is not a JSON object")
        return _Read(name, scenario, body)

    def _log(self, request: Request, read: _Read) -> tuple[RequestLog, Sequence[Step], int]:
        """Log the request as the next attempt at its scenario: the entry, the script it gets, its number."""
        with self._cond:
            number = len(self._requests) + 1
            attempt = self._attempts[read.name]
            self._attempts[read.name] += 1
            log = RequestLog(read.name, attempt, read.body, dict(request.headers), f"req_sim_{number}",
                             time.monotonic())
            self._requests.append(log)
        return log, read.scenario.steps_for(attempt), number


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



def _anthropic_error(status: int, message: str) -> JSONResponse:
    error_type = "not_found_error" if status == 404 else "invalid_request_error"
    return JSONResponse({"type": "error", "error": {"type": error_type, "message": message}}, status)


def _openai_error(status: int, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, "invalid_request_error", param=param), status)
