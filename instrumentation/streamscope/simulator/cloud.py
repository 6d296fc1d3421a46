"""The simulator's scenarios behind the URL paths and wire formats of the SDK's cloud clients.

`CloudSimulator` is a `Simulator` with one more route per cloud. Each route checks the
credential form its client sends, hands the request to the simulator's own player (so every
step, stall, ping and cut plays on the same clock as a first-party stream), and rewires what
goes back: the cloud's request-id headers and, for Bedrock, each server-sent event re-framed as
an AWS event-stream message (`application/vnd.amazon.eventstream`) with its CRCs, and in-band
errors as exception frames. Scenarios are chosen by path prefix, ``/{cloud}/{scenario}``, then
the cloud's own path follows, exactly as the client builds it from its ``base_url``::

    with CloudSimulator() as sim:
        client = AnthropicVertex(base_url=sim.base_url("vertex", "complete"), region="us-east5",
                                 project_id=VERTEX_PROJECT, access_token="test")
"""

from __future__ import annotations

import base64
import json
import struct
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from .server import Simulator
from .steps import Scenario

Cloud = Literal["bedrock", "mantle", "vertex", "foundry", "aws", "google_cloud"]
CLOUDS: tuple[Cloud, ...] = ("bedrock", "mantle", "vertex", "foundry", "aws", "google_cloud")

AWS_ACCESS_KEY = "test"
"""The access key the AWS clients sign with in tests: SigV4 signs offline, nothing checks it remotely."""
VERTEX_PROJECT = "streamscope-test"
GOOGLE_PROJECT = "streamscope-test"
GOOGLE_WORKSPACE = "wrkspc_test"
EVENTSTREAM = "application/vnd.amazon.eventstream"

_PADDING = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


@dataclass(frozen=True)
class _Wire:
    """What one cloud puts on the wire around the Anthropic events."""

    path: str
    """The route after ``/{cloud}/{name}``: what the client appends to its ``base_url``."""
    request_id_tag: str
    """Infix of the ``request-id`` the service answers with (``req_{tag}_...``)."""
    sigv4_service: str | None = None
    """SigV4 service name the client must sign for; else a bearer token or API key."""
    extra_request_id: str | None = None
    """The platform's own request-id header, sent beside Anthropic's ``request-id``."""


_WIRES: dict[Cloud, _Wire] = {
    "bedrock": _Wire("/model/{model}/invoke-with-response-stream", "bdrk", "bedrock", "x-amzn-requestid"),
    "mantle": _Wire("/anthropic/v1/messages", "bdrk", "bedrock-mantle", "x-amzn-requestid"),
    "vertex": _Wire("/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{call}", "vrtx"),
    "foundry": _Wire("/anthropic/v1/messages", "fndry", extra_request_id="apim-request-id"),
    "aws": _Wire("/v1/messages", "aws", "aws-external-anthropic", "x-amzn-requestid"),
    "google_cloud": _Wire("/v1/projects/{project}/locations/{location}/workspaces/{workspace}/invoke/v1/messages",
                          "gcp"),
}


def cloud_request_id(cloud: Cloud, simulator_id: str) -> str:
    """The ``request-id`` a cloud answers for the simulator's request ``req_sim_N``."""
    return simulator_id.replace("req_", f"req_{_WIRES[cloud].request_id_tag}_", 1)


class CloudSimulator(Simulator):
    """The simulator, plus each cloud client's routes (see the module docstring)."""

    def __init__(
        self,
        scenarios: Mapping[str, Scenario] | Iterable[Scenario] | None = None,
        *,
        time_scale: float = 1.0,
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(scenarios, time_scale=time_scale, host=host)
        # Beside the simulator's own route, on its own app: one server, one request log.
        for cloud, wire in _WIRES.items():
            self._app.router.routes.append(
                Route(f"/{cloud}/{{name}}{wire.path}", self._endpoint(cloud), methods=["POST"])
            )

    def base_url(self, cloud: Cloud, scenario: str) -> str:
        """The ``base_url`` to give `cloud`'s client for `scenario`: its real base path, after the prefix."""
        root = f"http://{self.host}:{self.port}/{cloud}/{scenario}"
        return {
            "bedrock": root,
            "mantle": f"{root}/anthropic",
            "vertex": f"{root}/v1",
            "foundry": f"{root}/anthropic/",
            "aws": root,
            "google_cloud": (f"{root}/v1/projects/{GOOGLE_PROJECT}/locations/global"
                             f"/workspaces/{GOOGLE_WORKSPACE}/invoke"),
        }[cloud]

    def _endpoint(self, cloud: Cloud) -> Callable[[Request], Awaitable[Response]]:
        """`cloud`'s route: the simulator's own player (`_messages`) behind the cloud's wire."""
        wire = _WIRES[cloud]

        async def endpoint(request: Request) -> Response:
            refused = _refused(cloud, wire, request.headers)
            if refused is not None:
                return refused
            params = request.path_params
            if cloud == "vertex" and not params["call"].endswith(":streamRawPredict"):
                return JSONResponse({"error": {"code": 404, "message": "only streamRawPredict is simulated"}}, 404)
            if cloud in ("bedrock", "vertex"):
                # The URL carries the model (and, for Bedrock, the stream flag): give the player
                # the body a first-party request would have had.
                try:
                    body = json.loads(await request.body())
                except ClientDisconnect:  # the client gave up (a budget fired) before the body was read
                    return Response(status_code=499)
                if cloud == "bedrock":
                    body.update(model=params["model"], stream=True)
                else:
                    body["model"] = params["call"].rpartition(":")[0]
                request = Request(request.scope, _replay(json.dumps(body).encode()))
            return _Rewired(cloud, await self._messages(request))

        return endpoint


def _replay(body: bytes) -> Receive:
    """An ASGI receive that yields `body` once (the original was read to rewrite it)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _refused(cloud: Cloud, wire: _Wire, headers: Mapping[str, str]) -> Response | None:
    """The service's 401/403 when the client did not send the credential form it must."""
    auth = headers.get("authorization", "")
    if wire.sigv4_service is not None:
        if cloud == "aws" and "anthropic-workspace-id" not in headers:
            return JSONResponse({"message": "missing anthropic-workspace-id"}, 403)
        if cloud == "mantle" and headers.get("anthropic-version") is None:
            return JSONResponse({"message": "missing anthropic-version"}, 400)
        scope = f"Credential={AWS_ACCESS_KEY}/"
        signed = auth.startswith("AWS4-HMAC-SHA256 ") and scope in auth and "x-amz-date" in headers
        if not signed or f"/us-east-1/{wire.sigv4_service}/aws4_request" not in auth:
            return JSONResponse({"message": f"expected a SigV4 signature for {wire.sigv4_service}"}, 403)
    elif cloud == "foundry":
        if not headers.get("x-api-key"):
            return JSONResponse({"error": {"code": "401", "message": "missing x-api-key"}}, 401)
    elif not auth.startswith("Bearer "):
        return JSONResponse({"error": {"code": 401, "message": "missing bearer token"}}, 401)
    return None


class _Rewired(Response):
    """Plays the simulator's response through `cloud`'s wire: its headers and, for Bedrock, framing."""

    def __init__(self, cloud: Cloud, inner: Response) -> None:
        # Not Response.__init__: the inner response produces the body.
        self.cloud, self.inner = cloud, inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        wire = _WIRES[self.cloud]
        framer: _EventStreamFramer | None = None

        async def relay(message: Message) -> None:
            nonlocal framer
            if message["type"] == "http.response.start":
                headers = []
                for key, value in message.get("headers", []):
                    if key == b"request-id":
                        value = cloud_request_id(self.cloud, value.decode()).encode()
                    elif key == b"content-type" and self.cloud == "bedrock" and value == b"text/event-stream":
                        framer = _EventStreamFramer()
                        value = EVENTSTREAM.encode()
                        headers.append((b"x-amzn-bedrock-content-type", b"application/json"))
                    headers.append((key, value))
                if wire.extra_request_id is not None:
                    headers.append((wire.extra_request_id.encode(), str(uuid.uuid4()).encode()))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and framer is not None:
                message = {**message, "body": framer.feed(message.get("body", b""))}
            await send(message)

        await self.inner(scope, receive, relay)


# -- AWS event-stream framing ------------------------------------------------------------------

def _header(name: str, value: str) -> bytes:
    """One string header (value type 7): name length (1 byte), name, type, value length (2), value."""
    key, data = name.encode(), value.encode()
    return struct.pack(">B", len(key)) + key + b"\x07" + struct.pack(">H", len(data)) + data


def eventstream_message(headers: Iterable[tuple[str, str]], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude (total length, headers length, prelude CRC32),
    headers, payload, and the message CRC32 over everything before it."""
    encoded = b"".join(_header(name, value) for name, value in headers)
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def chunk_frame(event: bytes) -> bytes:
    """An InvokeModelWithResponseStream ``chunk`` event carrying one Anthropic event's JSON.

    Bedrock pads each payload with ``p``, a run of the alphabet of varying length, so that the
    frame's size does not give away the token's; it is part of the wire, and clients ignore it."""
    encoded = base64.b64encode(event).decode()
    padding = _PADDING[: (len(encoded) * 7) % len(_PADDING) + 1]
    payload = json.dumps({"bytes": encoded, "p": padding}, separators=(",", ":")).encode()
    headers = ((":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event"))
    return eventstream_message(headers, payload)


def exception_frame(error: Mapping[str, Any]) -> bytes:
    """An in-band Anthropic ``error`` as the exception frame Bedrock ends a stream with: its own
    throttling as ``throttlingException``; a model-side failure as ``modelStreamErrorException``
    (HTTP 424 semantics: the model behind Bedrock failed), with the model's status and message."""
    kind, message = str(error.get("type")), str(error.get("message"))
    body: dict[str, Any]
    if kind == "rate_limit_error":
        name, body = "throttlingException", {"message": message}
    else:
        status = {"overloaded_error": 529, "api_error": 500}.get(kind, 500)
        original = json.dumps({"type": "error", "error": dict(error)}, separators=(",", ":"))
        name = "modelStreamErrorException"
        body = {"message": f"Received error from model: {message}", "originalStatusCode": status,
                "originalMessage": original}
    headers = ((":exception-type", name), (":content-type", "application/json"), (":message-type", "exception"))
    return eventstream_message(headers, json.dumps(body, separators=(",", ":")).encode())


class _EventStreamFramer:
    """Server-sent events in, event-stream messages out, one frame per event as each completes
    (so every step keeps its timing). ``message_stop`` gets Bedrock's invocation metrics."""

    def __init__(self) -> None:
        self.pending = b""
        self.usage: dict[str, int] = {}

    def feed(self, data: bytes) -> bytes:
        self.pending += data.replace(b"\r\n", b"\n")
        *blocks, self.pending = self.pending.split(b"\n\n")
        return b"".join(self._frame(block) for block in blocks)

    def _frame(self, block: bytes) -> bytes:
        name, lines = None, []
        for line in block.split(b"\n"):
            field, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if field == b"event":
                name = value.decode()
            elif field == b"data":
                lines.append(value)
        if not lines:
            return b""
        data = b"\n".join(lines)
        try:
            event = json.loads(data)
        except ValueError:
            return chunk_frame(data)  # bad bytes stay bad, framed as Bedrock frames anything
        if name == "error" and isinstance(event, dict):
            return exception_frame(event.get("error") or {})
        if isinstance(event, dict):
            message = event.get("message")
            usage = event.get("usage") or (message.get("usage") if isinstance(message, dict) else None)
            if isinstance(usage, dict):
                self.usage.update({k: v for k, v in usage.items() if isinstance(v, int)})
            if event.get("type") == "message_stop":
                event["amazon-bedrock-invocationMetrics"] = {
                    "inputTokenCount": self.usage.get("input_tokens", 0),
                    "outputTokenCount": self.usage.get("output_tokens", 0),
                    "invocationLatency": 0,
                    "firstByteLatency": 0,
                }
                data = json.dumps(event, separators=(",", ":")).encode()
        return chunk_frame(data)
