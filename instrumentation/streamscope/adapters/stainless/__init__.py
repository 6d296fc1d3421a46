"""The hooks every Stainless-generated SDK shares (`anthropic`, `openai`), installed as one change.

An adapter describes its SDK in a `Spec`; `StainlessAdapter` puts the client hooks (`client`)
and the stream hooks (`stream`) on that SDK's classes, all or nothing (`patches`), after the
layer check (`layers`) has decided which of the SDK's per-event pass-throughs they replace.
Every way out of a stream ends its record through `ending` (once); what the adapters read
alike is here too: values from the wire (`parsing`) and the content they capture (`capture`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from streamscope.core.calls import CallOpener
from streamscope.core.guard import logger

from . import unasync
from .client import ClientHooks
from .layers import Layers
from .other_libraries import runs_through, shadowing, taken_by
from .patches import Patches
from .posted import BelowFloorHooks, PostedHooks
from .spec import Spec
from .stream import StreamHooks

__all__ = ["InstallError", "Spec", "StainlessAdapter"]


class InstallError(RuntimeError):
    """The SDK cannot be instrumented as it is; nothing was changed."""


class StainlessAdapter:
    """Installs and removes one SDK's hooks, bound to one pipeline."""

    def __init__(self, pipeline: CallOpener, spec: Spec) -> None:
        self.spec = spec
        self.layers = Layers()
        self.streams = StreamHooks(spec, self.layers)
        self.client = ClientHooks(pipeline, spec)
        self.patches = Patches()
        self.posted: list[PostedHooks] = []
        """The `send` hooks on each HTTP library installed (httpx, httpx2): calls posted there by
        clients other than the SDK (`posted.py`)."""

    def install(self) -> None:
        """Every hook, or none: on any failure the SDK is left exactly as it was, and
        `InstallError` says which hook could not be applied."""
        base, streaming, client, streams = self.spec.base_client, self.spec.streaming, self.client, self.streams
        step = "the client hooks"
        client.active = True
        try:
            self.patches.wrap(base.SyncAPIClient, "request", client.sync_request)
            self.patches.wrap(base.AsyncAPIClient, "request", client.async_request)
            for root, hook in ((base.SyncAPIClient, client.sync_request), (base.AsyncAPIClient, client.async_request)):
                self._go_around(root, hook)
            self.patches.wrap(base.SyncAPIClient, "_sleep_for_retry", client.sleep_for_retry)
            self.patches.wrap(base.AsyncAPIClient, "_sleep_for_retry", client.async_sleep_for_retry)
            step = "the SDK's tracer"
            tracer = base.BaseClient.__dict__.get("_tracer")
            observer_off = isinstance(tracer, property) and tracer.fget is not None
            if observer_off:
                self.patches.replace(base.BaseClient, "_tracer", ClientHooks.tracer_property(tracer))
            # An SDK line that sends no trace context of its own: streamscope adds it to each request.
            client.inject = None if observer_off else self.spec.propagation_switch
            # Before the stream hooks wrap what it compares; the SDK's stream observer may be
            # skipped only where its tracer is off inside instrumented calls (above).
            step = "the layer check"
            self.layers.check(streaming, sdk_observer_off=observer_off)
            step = "the stream hooks"
            for cls, name, hook in (
                ("Stream", "__init__", streams.init), ("AsyncStream", "__init__", streams.init),
                ("Stream", "__iter__", streams.iter), ("Stream", "close", streams.close),
                ("Stream", "_iter_events", streams.iter_events),
                ("AsyncStream", "__aiter__", streams.aiter), ("AsyncStream", "close", streams.aclose),
                ("AsyncStream", "_iter_events", streams.aiter_events),
            ):
                self.patches.wrap(getattr(streaming, cls), name, hook)
            # `__stream__` only where `layers` knows it (and the keep-alive is the one it skips).
            for cls, is_async, known in (("Stream", False, self.layers.stream),
                                         ("AsyncStream", True, self.layers.astream)):
                if known and self.spec.ping == "ping":
                    self.patches.wrap(getattr(streaming, cls), "__stream__", functools.partial(streams.parse, is_async))
            # Called once per event by direct `next()`/`anext()`: plain functions in the class
            # (a wrapt wrapper here costs about 0.4 µs per call).
            for cls, name, make in (("Stream", "__next__", streams.next_hook),
                                    ("AsyncStream", "__anext__", streams.anext_hook)):
                owner = getattr(streaming, cls)
                self.patches.replace(owner, name, make(owner.__dict__[name]))
            step = "the HTTP clients' send"
            for name in TRANSPORTS:
                self.patches.when_imported(name, self._watch_posts)
            streams.unobserved = self._unobserved
        except Exception as exc:
            for posted in self.posted:
                posted.active = False
            self.posted.clear()
            client.active = False
            client.inject = None
            streams.unobserved = None
            self.patches.undo()
            self.layers.reset()
            raise InstallError(f"{step}: {type(exc).__name__}: {exc}") from None

    def uninstall(self) -> None:
        """Every hook off (a hook another library wrapped since stays under theirs, passing through)."""
        for posted in self.posted:
            posted.active = False
        self.posted.clear()
        self.client.active = False
        self.streams.unobserved = None
        self.patches.undo()
        self.layers.reset()

    def _go_around(self, root: type, hook: Any) -> None:
        """Wrap each client class's own `request` in front of `root`'s (`other_libraries`). Best effort:
        one that cannot be wrapped leaves streamscope on, and its calls counted as unobserved."""
        for shadow in list(shadowing(root, "request")):
            try:
                if not runs_through(shadow.__dict__["request"], self.client.is_ours):
                    self.patches.wrap(shadow, "request", hook)
            except Exception as exc:
                logger.warning("streamscope: cannot go around %s.%s.request (%s: %s); streamed calls through it "
                               "are not observed (counted in streamscope.unobserved_calls).", shadow.__module__,
                               shadow.__qualname__, type(exc).__name__, str(exc))

    def _watch_posts(self, transport: ModuleType) -> None:
        """The `send` hooks on one HTTP library: calls posted there by clients other than the SDK."""
        posted = PostedHooks(self.client.pipeline, self.spec)
        self.posted.append(posted)
        self.patches.wrap(transport.Client, "send", posted.send)
        self.patches.wrap(transport.AsyncClient, "send", posted.async_send)
        posted.active = True

    def _unobserved(self, stream: Any) -> None:
        """A stream without its call reached the stream hooks: count it if another library's
        request stood in front of streamscope's (`other_libraries`)."""
        by = taken_by(stream, self.client.is_ours)
        if by is not None:
            self.client.pipeline.unobserved(self.spec.name, by)


TRANSPORTS = ("httpx", "httpx2")
"""The HTTP libraries a framework may post with itself, hooked once the process imports them."""


def watch_below_floor(paths: tuple[str, ...], count: Callable[[], None]) -> Patches:
    """For an SDK below the supported floor: count its streamed calls at the HTTP libraries' `send`
    (nothing of the SDK is hooked); the changes, to undo at `uninstrument()`."""
    patches = Patches()
    hooks = BelowFloorHooks(paths, count)

    def watch(transport: ModuleType) -> None:
        patches.wrap(transport.Client, "send", hooks.send)
        patches.wrap(transport.AsyncClient, "send", hooks.async_send)

    try:
        for name in TRANSPORTS:
            patches.when_imported(name, watch)
    except Exception as exc:
        patches.undo()
        logger.warning("streamscope: cannot watch the HTTP clients for calls of an SDK below the floor (%s: %s); "
                       "they are not counted.", type(exc).__name__, exc)
    return patches


def install_or_log(adapter: StainlessAdapter, sdk_version: str) -> bool:
    """`install()`, or one log line saying why streamscope is off for this SDK. Never raises."""
    if unasync.MISSING:
        logger.error("streamscope: cannot instrument %s: streamscope is installed without its .py files, which it "
                     "reads once at import to make its readers for sync streams; the SDK is left as it was and "
                     "streamscope is off for it. Install streamscope with its .py files (pip installs them; an "
                     "application bundler needs to be told to keep streamscope's source).", adapter.spec.name)
        return False
    try:
        adapter.install()
        return True
    except InstallError as exc:
        logger.error("streamscope: cannot instrument %s %s, which differs from what streamscope knows (%s); "
                     "the SDK is left as it was and streamscope is off for it. Use a supported version of %s, "
                     "or a streamscope release that supports this one.", adapter.spec.name, sdk_version, exc,
                     adapter.spec.name)
        return False
