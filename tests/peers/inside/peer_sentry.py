"""Peer driver: `sentry-sdk` (2.75 and 3.x) with its Anthropic and OpenAI integrations, captured in memory.

What it turns on: `sentry_sdk.init` with `AnthropicIntegration()` and `OpenAIIntegration()`,
`traces_sample_rate=1.0` and a DSN on 127.0.0.1 (port 9, never contacted). The two integrations
replace methods on the SDKs' classes: anthropic's `Messages.create`/`stream`,
`MessageStreamManager.__enter__`, `Stream._iterator` and `Stream.close` (and the async ones);
openai's `Completions.create`, `Responses.create` and `Embeddings.create` (sync and async), whose
streams it wraps one by one (their `_iterator`). With no transaction active, each call starts a
transaction of its own (op `gen_ai.chat`; `gen_ai.responses` for openai's responses), finished when
its stream ends: for anthropic also when it fails or is closed, for openai only when it runs to its
end (see the leak below). An exception raised by the call itself (not by the stream) is also sent as
an error event (mechanism `anthropic` / `openai`).

Why `default_integrations=False` and `auto_enabling_integrations=False`: the matrix runs the
simulator in the same process, and the auto-enabled Starlette integration would record its
server-side requests as transactions; the default stdlib integration adds `subprocess` spans for a
one-time `uname -p` (platform detection, inside the first openai call: it differs from the next);
logging would turn other libraries' log lines into events. None of these is the peer tracing an LLM
call. (The auto-enabled httpx2 integration would add one `http.client` span per request, whose
description carries the simulator's port.)

How it captures: `transport=` takes a `sentry_sdk.transport.Transport` subclass; that is Sentry's
documented way to replace how envelopes are sent, so nothing is sent anywhere and every envelope
the client would send is kept. `capture_envelope` is called synchronously when a transaction
finishes or an event is captured; `records()` calls `sentry_sdk.flush()` first all the same.

A leak `reset()` undoes: the openai integration finishes its transaction only when the stream's
iterator runs to its end (no `finally`), so a stream that fails mid-way (an in-band error, a cut
connection) or that the caller leaves early leaves its transaction unsent and still the current span
of the caller's scope; every later call in that context then becomes a child span of it and is never
sent either (the error events still are). `reset()` clears the current span of the calling context,
so that each call the matrix makes starts as it would in a fresh request; within one `reset()`
window the leak shows.

Records: `transaction <op> <name>` for each transaction (its root span), `span <op> <description>`
for each child span, `event <mechanism> <exception type>` for each error event (status "error").
sentry-sdk 3.0's OpenAI integration sends its spans as they end (envelope items of type `span`, a
container of span v2 objects), not in transactions: `segment <op> <name>` for a root span (its
`is_segment`), `span <op> <name>` for the others.
Span status: Sentry's None is "unset", "ok" is "ok", any other (`internal_error`, `cancelled`, ...)
is "error".
"""

from __future__ import annotations

import threading
from typing import Any

NAME = "sentry"
REQUIREMENTS = ["sentry-sdk"]
SDKS = ("anthropic", "openai")

_DSN = "http://public@127.0.0.1:9/1"
_lock = threading.Lock()
_records: list[tuple[str, str]] = []
_enabled = False


def _status(value: Any) -> str:
    if value is None:
        return "unset"
    return "ok" if value == "ok" else "error"


def _from_envelope(envelope: Any) -> list[tuple[str, str]]:
    """The (name, status) of every transaction, span and error event in one envelope."""
    out: list[tuple[str, str]] = []
    for item in envelope.items:
        payload = item.payload.json
        if payload is None:
            continue
        if item.type == "transaction":
            trace = (payload.get("contexts") or {}).get("trace") or {}
            out.append((f"transaction {trace.get('op')} {payload.get('transaction')}", _status(trace.get("status"))))
            out.extend(
                (f"span {span.get('op')} {span.get('description')}", _status(span.get("status")))
                for span in payload.get("spans") or []
            )
        elif item.type == "span":  # 3.x streams spans (a container of span v2 items), not transactions
            for span in payload.get("items") or []:
                attributes = span.get("attributes") or {}
                op = (attributes.get("sentry.op") or {}).get("value")
                kind = "segment" if span.get("is_segment") else "span"
                out.append((f"{kind} {op} {span.get('name')}", _status(span.get("status"))))
        elif item.type == "event":
            for exc in (payload.get("exception") or {}).get("values") or [{}]:
                mechanism = (exc.get("mechanism") or {}).get("type")
                out.append((f"event {mechanism} {exc.get('type')}", "error"))
    return out


def enable() -> None:
    """`sentry_sdk.init` with the two integrations, every transaction sampled, an in-memory transport."""
    global _enabled
    if _enabled:
        return
    import sentry_sdk
    from sentry_sdk.integrations.anthropic import AnthropicIntegration
    from sentry_sdk.integrations.openai import OpenAIIntegration
    from sentry_sdk.transport import Transport

    class _Memory(Transport):
        """Keeps what the client would send."""

        def capture_envelope(self, envelope: Any) -> None:
            found = _from_envelope(envelope)
            with _lock:
                _records.extend(found)

    sentry_sdk.init(
        dsn=_DSN,
        transport=_Memory,
        traces_sample_rate=1.0,
        integrations=[AnthropicIntegration(), OpenAIIntegration()],
        default_integrations=False,
        auto_enabling_integrations=False,
        send_client_reports=False,
    )
    _enabled = True


def records() -> list[dict[str, str]]:
    """Every transaction, span and error event since `reset()`, sorted by (name, status)."""
    if _enabled:
        import sentry_sdk

        sentry_sdk.flush()
    with _lock:
        return [{"name": name, "status": status} for name, status in sorted(_records)]


def reset() -> None:
    """Forget what was recorded (after flushing, so nothing pending is counted later), and drop a
    transaction a failed openai stream left current in this context (see the module's docstring)."""
    if _enabled:
        import sentry_sdk

        sentry_sdk.flush()
        scope = sentry_sdk.get_current_scope()
        if scope.span is not None:
            scope.span = None
    with _lock:
        _records.clear()
