"""Idempotency keys: a page that sends the same request again follows the answer it started.

The browser client (`client.js`) sends `Idempotency-Key: <key>` with a relayed request and with
each of its reconnects (the header of the IETF draft `draft-ietf-httpapi-idempotency-key-header`).
With a resume buffer, the relay claims the key for the request before it opens anything; the
request is its method, path, query and body (the fingerprint):
* the key is free: the request runs, and holds the key as long as its generation is resumable;
* the key is the same request's (a page reloaded, a fetch retried, a second click, an effect run
  twice): no new provider request; the answer is followed from its first event, as a resume. A
  request still waiting for its first content is waited for (at most the relay's `heartbeat` and
  `WAIT_MORE`), then 409 `request_in_progress` with `Retry-After: 1`;
* the key is another request's: 422 `idempotency_key_reused`, nothing opened.
A request that starts no generation (refused before the stream, or its browser left first) gives
its key back. `Streamscope-Cancel: 1` with the key (or with a `Last-Event-ID`) stops the generation
at once, on whichever worker runs it: what the client's `abort()` sends.
Without a resume buffer the key is not looked at: nothing is kept that a repeat could follow.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

from starlette.requests import Request
from starlette.responses import Response

from streamscope.core.failures import Failure
from streamscope.core.guard import internal_error, logger

from .buffers.base import NotFound, Resumable, ResumeBuffer, parse_last_event_id

KEY_HEADER = "idempotency-key"
CANCEL_HEADER = "streamscope-cancel"
CANCEL_ANSWER = "Streamscope-Cancel"
"""On the 204 answer to a cancel: `cancelled`, `nothing_to_cancel` or `resume_off`."""
MAX_KEY = 255
"""Characters a key may have (a UUID has 36)."""
POLL = 0.1
"""Seconds between two looks for the generation of a request that is still starting."""
WAIT_MORE = 2.0
"""Seconds a repeat waits beyond the `heartbeat`: a generation started on another worker is in
Redis within a second of its start."""
REUSED = Failure("idempotency_key_reused", False)
IN_PROGRESS = Failure("request_in_progress", True, 1.0)
_said_malformed = [False]
_releasing: set[asyncio.Future[None]] = set()
"""Keys being given back (each task kept until it finishes)."""


def key_of(request: Request) -> str | None:
    """The request's idempotency key: the header's value, bare or as a quoted string; None when
    absent or not a key (empty, longer than `MAX_KEY`, control characters: one WARNING, once)."""
    raw = request.headers.get(KEY_HEADER)
    if raw is None:
        return None
    key = raw.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if key and len(key) <= MAX_KEY and key.isprintable():
        return key
    if not _said_malformed[0]:
        _said_malformed[0] = True
        logger.warning("streamscope: an Idempotency-Key header is not a key (1 to %d printable characters): the "
                       "request runs without one, and a repeat of it starts another generation. Send the same "
                       "key, such as a UUID, with a request and every repeat of it.", MAX_KEY)
    return None


async def fingerprint(request: Request) -> str:
    """What makes two requests the same: method, path, query and body."""
    digest = hashlib.sha256()
    for part in (request.method, request.url.path, request.url.query):
        digest.update(part.encode() + b"\0")
    try:
        digest.update(await request.body())
    except Exception:  # the app read the body as a stream: the rest still tells requests apart
        digest.update(b"\0unread")
    return digest.hexdigest()


async def admit(buffer: ResumeBuffer, key: str, request_print: str, request_id: str,
                heartbeat: float) -> tuple[str, Resumable | NotFound | Failure | None]:
    """The request's id and what to answer: None (a new request: it runs), a generation to
    follow from its start, a `NotFound` (204), or a refusal (`REUSED`, `IN_PROGRESS`)."""
    until = time.monotonic() + heartbeat + WAIT_MORE
    while True:
        try:
            claimed, their_id = await buffer.claim(key, request_print, request_id, heartbeat + 1.0)
        except Exception:
            internal_error("serve.idempotency.claim")
            return request_id, None
        if claimed == "new":
            return request_id, None
        if claimed == "other":
            return request_id, REUSED
        try:
            found = await buffer.find(their_id, 0)
        except Exception:
            internal_error("serve.idempotency.find")
            found = "nothing_to_resume"
        if not isinstance(found, str) or found == "expired":
            return their_id, found
        if time.monotonic() >= until:
            return request_id, IN_PROGRESS
        await asyncio.sleep(POLL)  # the same request, still waiting for its first content


def release(buffer: ResumeBuffer, key: str, request_id: str) -> None:
    """Give the key back (its request started no generation), from a task: never waited on."""
    async def released() -> None:
        try:
            await buffer.release(key, request_id)
        except Exception:
            internal_error("serve.idempotency.release")

    task = asyncio.ensure_future(released())
    _releasing.add(task)
    task.add_done_callback(_releasing.discard)


async def cancel(request: Request, buffer: ResumeBuffer | None, headers: dict[str, str]) -> Response:
    """A cancel (`Streamscope-Cancel`): the generation the key or the `Last-Event-ID` names is
    given up now (its provider connection closed); 204 either way, never a new generation."""
    if buffer is None:
        return _cancelled("resume_off", headers)
    try:
        request_id: str | None = None
        key = key_of(request)
        last_event_id = request.headers.get("last-event-id")
        if key is not None:
            request_id = await buffer.claimed(key, await fingerprint(request))
        if request_id is None and last_event_id is not None:  # a body the cancel could not send again
            parsed = parse_last_event_id(last_event_id)
            request_id = parsed[0] if parsed is not None else None
        done = request_id is not None and await buffer.cancel(request_id)
    except Exception:
        internal_error("serve.idempotency.cancel")
        done = False
    return _cancelled("cancelled" if done else "nothing_to_cancel", headers)


def _cancelled(reason: str, headers: dict[str, str]) -> Response:
    return Response(status_code=204, headers={**headers, CANCEL_ANSWER: reason})
