"""The developer's mistakes with `relay()`'s `open_stream`, told in one line each, with the fix.

`open_stream` must be a function that opens the provider stream: each attempt calls it. Three
natural slips pass type checkers (the SDKs' streams, managers and coroutines are all `Any`-ish to
a lambda-typed parameter) and used to fail without a word: an already opened stream or stream
manager (`relay(request, client.messages.stream(...))`), a coroutine (an async client's call made
but not awaited: "coroutine was never awaited" and a bare 500), and a function whose call is not a
streamed one (`messages.create()` without `stream=True`: a whole `Message`, relayed as `done` with
no chunks, the answer lost). Each is answered like any failure before the stream, HTTP 500
`internal_error` (the browser is told nothing of the service's code), with one ERROR line on the
`streamscope` logger saying which mistake it is and how to fix it. What the mistake opened is
closed: a stream's connection, a coroutine (so no "never awaited" warning follows).
"""

from __future__ import annotations

import inspect
from contextlib import suppress
from typing import Any

from streamscope.core.guard import logger

PREFIX = "streamscope.serve.relay: "
_ANSWERED = "; this request was answered 500 internal_error"


class NotAStream(TypeError):
    """`open_stream()` returned something that is not a stream (the log line says what and why)."""


def _origin(obj: Any) -> tuple[str, str]:
    """(top-level package, name) of what made `obj`: for a coroutine the function it runs."""
    if inspect.iscoroutine(obj):
        module = obj.cr_frame.f_globals.get("__name__", "") if obj.cr_frame is not None else ""
        return str(module).partition(".")[0], obj.__qualname__
    kind = type(obj)
    return str(getattr(kind, "__module__", "")).partition(".")[0], kind.__name__


def _call(sdk: str, name: str, manager: bool = False) -> str:
    """The streamed call to show in the fix, for the SDK (and API) the mistake came from."""
    if sdk == "openai":
        api = "responses" if "Respons" in name else "chat.completions"
        return f"client.{api}.stream(...)" if manager else f"client.{api}.create(..., stream=True)"
    return "client.messages.stream(...)" if manager else "client.messages.create(..., stream=True)"


def wrong_argument(open_stream: Any) -> str | None:
    """What is wrong with an `open_stream` that is not a function, with the fix; None if callable."""
    if callable(open_stream):
        return None
    sdk, name = _origin(open_stream)
    if inspect.isawaitable(open_stream):
        what = f"a coroutine ({name}), a call made but not awaited"
        fix = "pass a function that makes the call"
        call = _call(sdk, name)
    elif (hasattr(open_stream, "__aenter__") or hasattr(open_stream, "__enter__")) and not (
            hasattr(open_stream, "__aiter__") or hasattr(open_stream, "__iter__")):
        what, fix, call = f"a stream manager ({name})", "pass a function that returns it", _call(sdk, name, True)
    elif (hasattr(open_stream, "__aiter__") or hasattr(open_stream, "__iter__")) and hasattr(open_stream, "close"):
        what, fix, call = f"an opened stream ({name})", "pass a function that opens it", _call(sdk, name)
    else:
        what, fix, call = f"a {name}, not a function", "pass a function that opens the stream", _call(sdk, name)
    return f"{PREFIX}relay() got {what}: {fix}, e.g. relay(request, lambda: {call}){_ANSWERED}"


def not_a_stream(made: Any) -> str | None:
    """What is wrong with what `open_stream()` returned, with the fix; None for a stream."""
    streams = hasattr(made, "__aiter__") or hasattr(made, "__iter__")
    if streams and not hasattr(made, "model_dump") and not isinstance(made, (str, bytes, dict, list, tuple)):
        return None
    sdk, name = _origin(made)
    whole = " (a whole answer: the call was not a streamed one)" if hasattr(made, "model_dump") else ""
    return (f"{PREFIX}open_stream() returned a {name}{whole}, not a stream: ask for a stream, e.g. "
            f"lambda: {_call(sdk, name)} or lambda: {_call(sdk, name, True)}{_ANSWERED}")


def report(line: str) -> None:
    """The mistake's one line (ERROR: every request through this code fails until it is fixed)."""
    logger.error(line)


async def discard(obj: Any) -> None:
    """Close what a mistaken argument holds: a coroutine (never run, so nothing was sent), the
    coroutine a stream manager holds, an opened stream's connection. Never raises."""
    with suppress(Exception):
        if inspect.iscoroutine(obj):
            obj.close()
            return
        if not hasattr(obj, "__iter__") and not hasattr(obj, "__aiter__"):  # a manager: its pending request
            for value in list(getattr(obj, "__dict__", {}).values()):
                if inspect.iscoroutine(value):
                    value.close()
            return
        closed = obj.close() if callable(getattr(obj, "close", None)) else None
        if inspect.isawaitable(closed):
            await closed
