"""The hand-written relay the benchmarks hold streamscope's `relay()` against: an article's endpoint.

An endpoint that streams Claude's answer to a browser as Server-Sent Events, as the article writes
it, with the plain SDK and no telemetry: `classify` and `backoff_delay` decide the retries,
`resilient_stream` retries before the first chunk and bounds each chunk's wait with
`asyncio.timeout(idle_timeout)`, `anthropic_tokens` reads `client.messages.stream(...).text_stream`,
`sse()` frames an event, `events()` sends the tokens and one terminal `done` or `error`, and the
handler pulls the first chunk before it returns a Starlette `StreamingResponse` (so a failure before
it is a real HTTP error). Kept as written; adapted only to run here: the client is injected
(`make_app(client, model)`, where the article builds `anthropic.AsyncAnthropic()` from the
environment), the model name too, and the request body's model is spelled out (`ChatRequest`).

`relay_instructions.py` counts its instructions per relayed event, `relay_load.py` serves it under
load, each beside streamscope's relay.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import uuid
from dataclasses import dataclass

import anthropic
from fastapi import FastAPI, HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

log = logging.getLogger(__name__)
app = FastAPI()
client: anthropic.AsyncAnthropic | None = None  # the article: anthropic.AsyncAnthropic(); here make_app() sets it
MODEL = "claude-sonnet-4-5"


def make_app(anthropic_client: anthropic.AsyncAnthropic, model: str = MODEL) -> FastAPI:
    """The article's app, its endpoint calling `anthropic_client` with `model`."""
    global client, MODEL
    client, MODEL = anthropic_client, model
    return app


class ChatRequest(BaseModel):
    prompt: str


@dataclass(frozen=True)
class Failure:
    code: str
    retryable: bool
    retry_after: float | None = None


class StreamFailure(Exception):
    def __init__(self, code: str, partial: bool):
        super().__init__(code)
        self.code = code
        self.partial = partial


def _retry_after(exc):
    raw = exc.response.headers.get("retry-after")
    try:
        return float(raw) if raw else None
    except ValueError:
        return None


def classify(exc):
    if isinstance(exc, TimeoutError):
        return Failure("upstream_timeout", True)
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        if status == 429:
            return Failure("rate_limited", True, _retry_after(exc))
        if status >= 500:
            return Failure("upstream_unavailable", True, _retry_after(exc))
        if status in (408, 409):
            return Failure("upstream_timeout", True)
        return Failure("upstream_rejected", False)
    if isinstance(exc, anthropic.APIConnectionError):
        return Failure("upstream_unreachable", True)
    return Failure("internal_error", False)


def backoff_delay(attempt, retry_after=None, base=0.5, cap=8.0):
    delay = random.uniform(0, min(cap, base * 2 ** attempt))
    if retry_after:
        delay = max(delay, retry_after)
    return min(delay, 30.0)


async def anthropic_tokens(prompt):
    async with client.messages.stream(model=MODEL, max_tokens=1024,
                                      messages=[{"role": "user", "content": prompt}]) as stream:
        async for text in stream.text_stream:
            yield text


async def resilient_stream(open_upstream, *, max_attempts=3, idle_timeout=30.0):
    attempt = 0
    while True:
        emitted = False
        upstream = open_upstream()
        try:
            while True:
                try:
                    async with asyncio.timeout(idle_timeout):
                        chunk = await anext(upstream)
                except StopAsyncIteration:
                    return
                emitted = True
                yield chunk
        except Exception as exc:
            info = classify(exc)
            attempt += 1
            if emitted or not info.retryable or attempt >= max_attempts:
                raise StreamFailure(info.code, partial=emitted) from exc
            await asyncio.sleep(backoff_delay(attempt, info.retry_after))
        finally:
            await upstream.aclose()


HTTP_STATUS = {"rate_limited": 429, "upstream_timeout": 504, "upstream_unavailable": 503,
               "upstream_unreachable": 503}


def sse(event, data, event_id=None):
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


async def events(upstream, first, request_id):
    sent = 0
    try:
        if first is not None:
            sent += 1
            yield sse("token", {"text": first}, f"{request_id}:{sent}")
            async for chunk in upstream:
                sent += 1
                yield sse("token", {"text": chunk}, f"{request_id}:{sent}")
        yield sse("done", {"request_id": request_id, "chunks": sent})
    except StreamFailure as failure:
        log.warning("stream_failed", extra={"request_id": request_id, "code": failure.code, "chunks": sent})
        yield sse("error", {"code": failure.code, "request_id": request_id, "partial": failure.partial})
    except Exception:
        log.exception("stream_crashed", extra={"request_id": request_id})
        yield sse("error", {"code": "internal_error", "request_id": request_id, "partial": sent > 0})
    finally:
        await upstream.aclose()


@app.post("/v1/chat/stream")
async def chat_stream(body: ChatRequest):
    request_id = uuid.uuid4().hex
    upstream = resilient_stream(lambda: anthropic_tokens(body.prompt))
    try:
        first = await anext(upstream)
    except StopAsyncIteration:
        first = None
    except StreamFailure as failure:
        raise HTTPException(status_code=HTTP_STATUS.get(failure.code, 502),  # noqa: B904 (as the article writes it)
                            detail={"code": failure.code, "request_id": request_id})
    return StreamingResponse(events(upstream, first, request_id), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
