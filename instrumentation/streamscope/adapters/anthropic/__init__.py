"""The adapter for the `anthropic` SDK: the only package that knows its classes and events.

One file per concern: `request` (which calls are streamed Messages calls, and what a request
is), `events` (what each event means to the recorder, and the fast path's test), `content`
(capture, when opted in), `ending` (how an exception ends a stream, and the helpers'
questions). The hooks themselves are the ones every Stainless-generated SDK shares
(`..stainless`): the client's `request`, `_sleep_for_retry` and `_tracer`, the stream's
iteration, `close` and `_iter_events` (where pings are counted). Every client of the package
(first-party, Bedrock, Vertex, Foundry, AWS, Google Cloud) goes through them.
"""

from __future__ import annotations

from streamscope.adapters.stainless import InstallError, Spec, StainlessAdapter, install_or_log
from streamscope.core.calls import CallOpener

from . import content, ending, events, request
from .ending import Helpers

__all__ = ["HELPERS", "AnthropicAdapter", "InstallError"]

HELPERS = Helpers()


def spec() -> Spec:
    """The anthropic SDK as the shared hooks see it (imports the SDK)."""
    from anthropic import _base_client, _streaming

    events.load()
    return Spec(
        name="anthropic", base_client=_base_client, streaming=_streaming, helpers=HELPERS,
        request=request.streamed_request, observe=events.observe, sse=events.sse,
        event_type=request.event_type, text_length=None,
        deltas=events.DELTAS,
        ending=ending.ending, request_id=request.request_id, capture=content.captured,
        observe_capturing=content.observe_capturing, ping="ping",
        propagation_switch="ANTHROPIC_OPEN_TELEMETRY_PROPAGATION",
    )


class AnthropicAdapter(StainlessAdapter):
    """Installs and removes the hooks on the anthropic SDK's classes."""

    def __init__(self, pipeline: CallOpener) -> None:
        super().__init__(pipeline, spec())

    def install_or_log(self) -> bool:
        """Install, or log one line saying why not (the SDK is then left exactly as it was)."""
        from anthropic import __version__

        return install_or_log(self, __version__)
