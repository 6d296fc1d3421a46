"""Where the SDK's per-event layers are the plain pass-throughs the adapter knows, streamscope's
generators take their place (docs/performance.md); where they are not, the hooks wrap them.
Either way the caller gets exactly what the SDK alone gives, and the span says the same."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from conftest import USER, Telemetry, aclient, client
from streamscope import AnthropicInstrumentor
from streamscope.adapters.stainless.layers import FLAGS, KNOWN, PLAIN, Layers, same_code
from streamscope.simulator import Scenario, TextSpec, ThinkingSpec, message_stream, pings
from streamscope.simulator.steps import Raw

SCENARIOS = ["layers_pings", "odd_deltas", "tool_use", "inband_error", "cut_connection", "unknown_events"]
PATHS = ["sync create", "sync stream()", "sync next()", "async create", "async stream()", "async anext()"]
TIMINGS = re.compile(r"time|gap|rate|thinking\.(start|end)|duration|first_delta|last_delta|id$|^streamscope\.attempt$")
"""What differs between two runs of one scenario: clocks, ids, and which try it is (the second run of
a failing scenario from one thread is taken for a retry of the first)."""


def active_layers() -> Layers:
    """The layers of the anthropic adapter installed now."""
    adapter = AnthropicInstrumentor()._adapter
    assert adapter is not None, "streamscope is not instrumented"
    return adapter.layers


@pytest.fixture(scope="module", autouse=True)
def _pinging(sim) -> None:
    sim.add(Scenario.single("layers_pings", message_stream(
        thinking=ThinkingSpec(duration=0.02), blocks=[TextSpec(["a", *pings(0.0, 3), "b", "c", *pings(0.0, 2), "d"],
                                                               interval=0.0)])))
    # Deltas the fast path must leave to the full one: a delta type this SDK does not know (it
    # arrives as a mis-typed TextDelta, text and all), one without a type, one with null text.
    odd = [b'{"type":"future_delta","text":"zz"}', b'{"text":"yy"}', b'{"type":"text_delta","text":null}']
    sim.add(Scenario.single("odd_deltas", message_stream(blocks=[TextSpec(
        ["Hello", *[Raw(b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
                        + d + b"}\n\n") for d in odd], " there"], interval=0.0)])))


def what_the_caller_gets(sim, scenario: str, path: str) -> tuple[list[str], str | None]:
    got: list[str] = []

    def seen(event: Any) -> None:
        got.append(re.sub(r"msg_sim_\d+", "", event.model_dump_json(warnings=False)))

    async def run_async() -> None:
        c = aclient(sim, scenario)
        try:
            if path == "async create":
                async for event in await c.messages.create(model="m", max_tokens=256, messages=USER, stream=True):
                    seen(event)
            elif path == "async anext()":
                stream = await c.messages.create(model="m", max_tokens=256, messages=USER, stream=True)
                while (event := await anext(stream, None)) is not None:
                    seen(event)
            else:
                async with c.messages.stream(model="m", max_tokens=256, messages=USER) as s:
                    async for event in s:
                        seen(event)
        finally:
            await c.close()

    try:
        if path.startswith("async"):
            asyncio.run(run_async())
        else:
            with client(sim, scenario) as c:
                if path == "sync create":
                    for event in c.messages.create(model="m", max_tokens=256, messages=USER, stream=True):
                        seen(event)
                elif path == "sync next()":
                    stream = c.messages.create(model="m", max_tokens=256, messages=USER, stream=True)
                    while (event := next(stream, None)) is not None:
                        seen(event)
                else:
                    with c.messages.stream(model="m", max_tokens=256, messages=USER) as s:
                        for event in s:
                            seen(event)
        return got, None
    except Exception as exc:
        return got, type(exc).__name__


@pytest.fixture(scope="module")
def without_streamscope(sim) -> dict[tuple[str, str], tuple[list[str], str | None]]:
    return {(s, p): what_the_caller_gets(sim, s, p) for s in SCENARIOS for p in PATHS}


def test_the_installed_sdk_has_the_layers_streamscope_takes_over(telemetry: Telemetry) -> None:
    from anthropic._streaming import Stream

    layers = active_layers()
    # `__stream__` is the form STREAM has from anthropic 1.x (0.x's names each event type it yields).
    expected = {name: name not in ("stream", "astream") or "_observer" in Stream.__dict__ for name in FLAGS}
    assert {name: getattr(layers, name) for name in FLAGS} == expected, (
        "the installed SDK's Stream.__iter__, __next__, __stream__, _iter_events or SSEDecoder.iter_bytes is no "
        "longer the code adapters/stainless/layers.py writes out: streamscope now wraps it (correct, but slower "
        "per event); see what it does now and update KNOWN or STREAM")


def test_a_stream_class_with_its_own_events_keeps_them(sim, telemetry: Telemetry) -> None:
    """A `Stream` subclass with its own `_iter_events` runs it: its `__stream__` is not taken over."""
    import anthropic
    from anthropic._streaming import Stream
    from anthropic.types import RawMessageStreamEvent

    seen: list[str | None] = []

    class Counting(Stream[RawMessageStreamEvent]):
        def _iter_events(self) -> Any:
            for sse in super()._iter_events():
                seen.append(sse.event)
                yield sse

    c = anthropic.Anthropic(base_url=sim.url("layers_pings"), api_key="k", max_retries=0)
    try:
        events = c.post("/v1/messages", cast_to=anthropic.types.Message, stream=True, stream_cls=Counting,
                        body={"model": "m", "max_tokens": 64, "messages": USER, "stream": True})
        kinds = [event.type for event in events]
    finally:
        c.close()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert seen.count("ping") == 5 and len(seen) == len(kinds) + 5
    if active_layers().stream:  # taken over from anthropic 1.x; 0.x ties no call to a raw `post()`'s stream
        assert telemetry.attrs()["streamscope.pings"] == 5


def test_same_code_tells_a_changed_method() -> None:
    from anthropic._streaming import SSEDecoder, Stream

    # anthropic >= 1 tells its stream observer in `__iter__`; 0.x's only re-yields.
    iterating = KNOWN if "_observer" in Stream.__dict__ else PLAIN
    assert same_code(Stream.__dict__["__iter__"], iterating["Stream", "__iter__"])
    assert same_code(SSEDecoder.iter_bytes, KNOWN["SSEDecoder", "iter_bytes"])  # its docstring aside
    changed = KNOWN["SSEDecoder", "iter_bytes"].replace('"utf-8"', '"utf-8", "replace"')
    namespace: dict[str, Any] = {}
    exec(compile(changed, "changed", "exec"), namespace)
    assert not same_code(namespace["iter_bytes"], KNOWN["SSEDecoder", "iter_bytes"])
    assert not same_code(Stream.__dict__["__next__"], KNOWN["Stream", "__iter__"])
    assert not same_code(len, KNOWN["Stream", "__iter__"])


def test_a_decoder_of_its_own_is_wrapped_not_replaced(sim, telemetry: Telemetry) -> None:
    """A client whose decoder has its own `iter_bytes` (as a Bedrock client's does) keeps it."""
    import anthropic
    from anthropic._streaming import SSEDecoder

    seen: list[str] = []

    class Decoder(SSEDecoder):
        def iter_bytes(self, iterator: Any) -> Any:
            for sse in super().iter_bytes(iterator):
                seen.append(sse.event)
                yield sse

    class Client(anthropic.Anthropic):
        def _make_sse_decoder(self, *args: Any, **kwargs: Any) -> Any:  # anthropic 2.16 passes the options
            return Decoder()

    c = Client(base_url=sim.url("layers_pings"), api_key="k", max_retries=0)
    for _ in c.messages.create(model="m", max_tokens=64, messages=USER, stream=True):
        pass
    assert seen.count("ping") == 5 == telemetry.attrs()["streamscope.pings"]


def test_the_caller_gets_what_the_sdk_gives(sim, instrument, without_streamscope, monkeypatch) -> None:
    """Every path and ending, with streamscope's generators in place of the SDK's layers and, as
    on an SDK whose layers are not the pass-throughs streamscope knows, over them."""
    telemetry = instrument()
    layers = active_layers()
    spans: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    for placed in ("in place", "over"):
        if placed == "over":
            for name in FLAGS:
                monkeypatch.setattr(layers, name, False)
        spans[placed] = {}
        for scenario in SCENARIOS:
            for path in PATHS:
                before = len(telemetry.spans())
                got = what_the_caller_gets(sim, scenario, path)
                assert got == without_streamscope[scenario, path], (placed, scenario, path)
                made = telemetry.spans()[before:]
                assert len(made) == 1, (placed, scenario, path)
                spans[placed][scenario, path] = {k: v for k, v in (made[0].attributes or {}).items()
                                                 if not TIMINGS.search(k)}
    telemetry.assert_each_ended_once()
    pinged = spans["in place"]["layers_pings", "sync create"]
    assert pinged["streamscope.pings"] == 5
    assert pinged["streamscope.content_events"] == 8  # 3 thinking, a signature, 4 text
    assert pinged["streamscope.class"] == "complete"
    for path in PATHS:
        assert spans["in place"]["layers_pings", path] == pinged, path
    odd = spans["in place"]["odd_deltas", "sync create"]
    assert odd["streamscope.text_chars"] == len("Hello there") and odd["streamscope.content_events"] == 5
    for path in PATHS:  # the stream() helpers' own accumulator gives up on these (as without streamscope)
        if "stream()" not in path:
            assert spans["in place"]["odd_deltas", path] == odd, path
    classes = {spans["in place"][s, "sync create"]["streamscope.class"] for s in SCENARIOS}
    assert classes >= {"complete", "upstream_error"}
    assert spans["in place"] == spans["over"]


def test_uninstrument_puts_the_sdks_methods_back() -> None:
    from anthropic._streaming import AsyncStream, Stream

    from streamscope import AnthropicInstrumentor

    names = ("__iter__", "__aiter__", "__next__", "__anext__", "_iter_events", "close", "__stream__")
    before = {(cls, name): cls.__dict__[name]
              for cls in (Stream, AsyncStream) for name in names if name in cls.__dict__}
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument()
    taken = {(Stream, "__stream__"): active_layers().stream, (AsyncStream, "__stream__"): active_layers().astream}
    assert all((cls.__dict__[name] is not method) == taken.get((cls, name), True)
               for (cls, name), method in before.items())
    instrumentor.uninstrument()
    assert all(cls.__dict__[name] is method for (cls, name), method in before.items())
