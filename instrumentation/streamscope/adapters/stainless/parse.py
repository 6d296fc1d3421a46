"""The SDK's parse layer (`Stream.__stream__`), with the fast path's test on each event's JSON.

Where text arrives deep inside the parsed models (openai's chat chunk: choice, then delta, each a
pydantic model whose every attribute read goes through its `__getattr__` hook), telling a plain
text chunk from the rest costs more than everything else streamscope does per event. The same
facts are plain dict reads in the JSON the SDK has just decoded, one line before it builds the
models. So where the installed SDK's `__stream__` is, to the bytecode, the one below (`known()`,
at install), the hooks put in its place that same code with two statements added: it finds the
stream's call when the caller starts reading, and for each event it stores the visible characters
the adapter's test (`Spec.text_of`) finds in the event's JSON in `rec.text`, where the observer
reads them a moment later, as the event arrives. An uninstrumented stream pays one compare per
event. Where an SDK has changed `__stream__`, it runs as it is, and the observer tests the models.

The copies are compiled from this module's source of the SDK's code with the statements added
(`_ADDED`), in the SDK module's names; `linecache` holds their source, so a traceback through
them reads as the SDK's code does.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any

from ...calls import ATTR
from .layers import same_code

_SYNC = """
def __stream__(self):
    cast_to = cast(Any, self._cast_to)
    response = self.response
    process_data = self._client._process_response_data
    iterator = self._iter_events()
    legacy = self._options is None or self._options.stream_mode == "legacy"

    try:
        for sse in iterator:
            if sse.data.startswith("[DONE]"):
                break

            if legacy and sse.event and sse.event.startswith("thread."):
                data = sse.json()

                if sse.event == "error" and is_mapping(data) and data.get("error"):
                    message = None
                    error = data.get("error")
                    if is_mapping(error):
                        message = error.get("message")
                    if not message or not isinstance(message, str):
                        message = "An error occurred during streaming"

                    raise APIError(
                        message=message,
                        request=self.response.request,
                        body=data["error"],
                    )

                yield process_data(data={"data": data, "event": sse.event}, cast_to=cast_to, response=response)
            else:
                data = sse.json()
                if legacy and is_mapping(data) and data.get("error"):
                    message = None
                    error = data.get("error")
                    if is_mapping(error):
                        message = error.get("message")
                    if not message or not isinstance(message, str):
                        message = "An error occurred during streaming"

                    raise APIError(
                        message=message,
                        request=self.response.request,
                        body=data["error"],
                    )

                yield process_data(
                    data={"data": data, "event": sse.event}
                    if self._options is not None and self._options.synthesize_event_and_data
                    else data,
                    cast_to=cast_to,
                    response=response,
                )
    finally:
        response.close()
"""
"""The openai SDK's (3.57) `Stream.__stream__`."""

_AWAITED = (
    ("def __stream__", "async def __stream__"),
    ("        for sse in iterator:", "        async for sse in iterator:"),
    ("                break\n", '                if response.http_version == "HTTP/1.1":\n'
                               "                    await drain_response_async(response)\n"
                               "                break\n"),
    ("        response.close()", "        await response.aclose()"),
)
"""What `AsyncStream.__stream__` has in place of `Stream.__stream__`'s lines: the same loop,
awaited, which drains an HTTP/1.1 body after [DONE] (so its connection can be reused)."""


def _awaited(source: str) -> str:
    for line, awaited in _AWAITED:
        assert source.count(line) == 1, line
        source = source.replace(line, awaited)
    return source


KNOWN: dict[str, str] = {"Stream": _SYNC, "AsyncStream": _awaited(_SYNC)}
"""The SDK's code, compared to the bytecode at install (`known()`)."""

_ADDED: tuple[tuple[str, str], ...] = (
    # (the SDK's code around the place, "|" marking it; what the copy has there), each found once.
    ('    legacy = self._options is None or self._options.stream_mode == "legacy"\n|',
     "    _streamscope_call = self.__dict__.get(_streamscope_ATTR)\n"
     "    _streamscope_rec = None if _streamscope_call is None else _streamscope_call.recorder\n"),
    ('                data = sse.json()\n|\n                if sse.event == "error"',  # Assistants: never text
     "                if _streamscope_rec is not None:\n"
     "                    _streamscope_rec.text = -1\n"),
    ("                data = sse.json()\n|                if legacy and is_mapping(data)",
     "                if _streamscope_rec is not None:\n"
     "                    _streamscope_rec.text = _streamscope_text_of(data)\n"),
)


def known(streaming: Any) -> tuple[bool, bool]:
    """Whether the SDK's `Stream.__stream__` and `AsyncStream.__stream__` are the code `KNOWN` has."""
    return tuple(same_code(getattr(streaming, cls).__dict__.get("__stream__"), KNOWN[cls])  # type: ignore[return-value]
                 for cls in ("Stream", "AsyncStream"))


def copy(streaming: Any, cls: str, text_of: Callable[[Any], int]) -> Any:
    """`cls.__stream__` as `KNOWN` has it, with `_ADDED`, in the SDK module's names; `text_of`:
    the visible characters of a plain text event, from its JSON (-1 for anything else; never raises)."""
    source = KNOWN[cls].lstrip("\n")
    for around, added in _ADDED:
        if source.count(around.replace("|", "")) != 1:
            raise RuntimeError(f"streamscope's copy of {cls}.__stream__ lacks {around.strip()!r}")
        source = source.replace(around.replace("|", ""), around.replace("|", added))
    filename = f"<streamscope: {streaming.__name__}.{cls}.__stream__>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {**vars(streaming), "_streamscope_ATTR": ATTR, "_streamscope_text_of": text_of}
    exec(compile(source, filename, "exec"), namespace)
    function = namespace["__stream__"]
    function.__module__, function.__qualname__ = streaming.__name__, f"{cls}.__stream__"
    return function
