"""The adapter for the `openai` SDK: the only package that knows its classes and events.

One file per concern, as for anthropic: `request` (which calls are streamed Chat Completions or
Responses calls, and what a request is), `events` (what each event of either API means to the
recorder, and the fast path's test), `content` (capture, when opted in), `ending` (how an
exception ends a stream, and the helpers' questions). The hooks are the ones every
Stainless-generated SDK shares (`..stainless`); OpenAI sends no keep-alive, so none is counted.
One hook is this SDK's own: its `stream()` helpers close the response directly, not the raw
stream, so their `close` is hooked too (a caller who leaves a helper stream early is `closed` then,
not when the stream is collected).
"""

from __future__ import annotations

import importlib
from typing import Any

from streamscope.adapters.stainless import InstallError, Spec, StainlessAdapter, install_or_log
from streamscope.core.calls import CallOpener, call_of, end

from . import content, ending, events, request
from .ending import Helpers

__all__ = ["HELPERS", "InstallError", "OpenAIAdapter"]

HELPERS = Helpers()
HELPER_STREAMS = (
    ("openai.lib.streaming.chat._completions", "ChatCompletionStream"),
    ("openai.lib.streaming.chat._completions", "AsyncChatCompletionStream"),
    ("openai.lib.streaming.responses._responses", "ResponseStream"),
    ("openai.lib.streaming.responses._responses", "AsyncResponseStream"),
)
"""The `stream()` helpers' stream classes, whose `close` closes the response, not the raw stream."""


def spec() -> Spec:
    """The openai SDK as the shared hooks see it (imports the SDK)."""
    from openai import _base_client, _streaming

    events.load()
    return Spec(
        name="openai", base_client=_base_client, streaming=_streaming, helpers=HELPERS,
        request=request.streamed_request, observe=events.observe, sse=events.sse,
        event_type=request.event_type, text_length=events.text_length,
        ending=ending.ending, request_id=request.request_id, capture=content.captured,
        observe_capturing=content.observe_capturing, ping=None,
    )


def _closed(helper: Any) -> None:
    call = call_of(helper)  # the helper's `_raw_stream` carries the call
    if call is not None:
        end(call.recorder, "closed")


def _helper_close(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    _closed(instance)
    return wrapped(*args, **kwargs)


async def _helper_aclose(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    _closed(instance)
    return await wrapped(*args, **kwargs)


class OpenAIAdapter(StainlessAdapter):
    """Installs and removes the hooks on the openai SDK's classes."""

    def __init__(self, pipeline: CallOpener) -> None:
        super().__init__(pipeline, spec())

    def install(self) -> None:
        """The shared hooks and the helpers' `close`, all or nothing."""
        super().install()
        try:
            for module, name in HELPER_STREAMS:
                owner = getattr(importlib.import_module(module), name)
                self.patches.wrap(owner, "close", _helper_aclose if name.startswith("Async") else _helper_close)
        except Exception as exc:
            self.uninstall()
            raise InstallError(f"the stream helpers' close: {type(exc).__name__}: {exc}") from None

    def install_or_log(self) -> bool:
        """Install, or log one line saying why not (the SDK is then left exactly as it was)."""
        from openai import __version__

        return install_or_log(self, __version__)
