"""Instructions per streamed event (callgrind): the bare SDKs, their tracing, and streamscope.

The bare anthropic and openai SDKs, the tracing that each can have, and streamscope observing or
enforcing budgets, side by side, counted by valgrind's callgrind, so the machine's load does not
change the figures.

The workload is one SDK call on the sync client, `create(..., stream=True)`, read to its end with
a plain `for event in stream:` loop, replayed by an `httpx2.BaseTransport` subclass handed to the
client (which checks the request's path), one server-sent event per body chunk, the same chunks
every run: no network, no timers, no threads of the benchmark's own (with budgets, streamscope's
watchdog thread waits on its condition). Each stream is as the API sends it, with N text deltas:

* anthropic `client.messages.create(...)`: message_start, a text block of N text deltas,
  message_delta with usage, message_stop: N + 5 events;
* openai `client.chat.completions.create(..., stream_options={"include_usage": True})`: the role
  chunk, N content chunks, the finish-reason chunk, the usage chunk (`choices: []`), then
  `data: [DONE]`, which the SDK does not yield: N + 3 chunks;
* openai `client.responses.create(...)`: response.created and .in_progress, a message item with
  one output_text part and its N deltas, the part and item closed, response.completed: N + 8 events.

The configurations, by key (a key's last part says what instruments the SDK):

* `bare`, `openai-bare`, `responses-bare`: the bare SDK (anthropic with `open_telemetry=False`),
  and no tracer provider anywhere;
* `sdk`: the anthropic client given `open_telemetry={"tracer_provider": provider}`;
* `observe`, `openai-observe`, `responses-observe`: streamscope observe-only,
  `AnthropicInstrumentor()` or `OpenAIInstrumentor()` `.instrument(tracer_provider=provider)`;
* `budgets`, `openai-budgets`, `responses-budgets`: the same with
  `budgets=Budgets(first_token=60, idle=30, deadline=600)`;
* `breaker`: the anthropic `budgets` configuration with `breaker=Breaker()` as well: the breaker
  is asked once per call (may it start? how did it end?), so per event it must add nothing; the
  table prints its difference from `budgets`;
* `openai-otel`: OpenTelemetry's OpenAI instrumentation (opentelemetry-instrumentation-openai-v2),
  `OpenAIInstrumentor().instrument(tracer_provider=provider)`, measured where it imports. It
  instruments Chat Completions, not the Responses API, so Responses has no such peer.

`provider` is an OpenTelemetry SDK `TracerProvider` exporting to memory, and each child checks
its spans after reading: one per stream, with the stream's output tokens on it (streamscope's
`streamscope.content_events`, the others' `gen_ai.usage.output_tokens`), streamscope's with
`gen_ai.provider.name` its SDK's, and none from another tracer — so no figure is of a tracer
that records nothing.

Each configuration runs in a fresh interpreter under `valgrind --tool=callgrind` (address-space
randomisation off, PYTHONHASHSEED=0, so runs repeat), once reading `--small` text deltas and
once `--large`. Before the measured stream the child reads a warm-up stream, seeds `random`
(span ids) and collects garbage (so the collector's counters start alike), then calls
`os.getppid()` and, after the stream, `os.getpgrp()`: callgrind zeroes its counts on entering the
one and writes them out on entering the other, so start-up, imports, instrumenting and warming
up are not counted. Instructions per
event are the slope (I(large) - I(small)) / (large - small), so what is paid once per stream
(the request, the span's end and export) cancels too; what a configuration adds is its slope
minus its own SDK's bare slope, reported in one table per SDK call. The openai SDK builds each
chunk's models in Python, field by field (its `construct_type`), where the anthropic SDK hands
each event to pydantic-core's compiled validator, so the openai SDK's bare figure is several
times the anthropic SDK's: compare what configurations add, not the bare figures.

The targets are the anthropic SDK's: observe-only at most 0.5 times what the SDK's own tracing
adds per event (`sdk`), measured in the same run, budgets at most 0.6 times; streamscope's own
work (`own-observe`, `own-budgets`) at most 0.35 and 0.40 times. The openai SDK has
no tracing of its own to hold streamscope against; there its figures are given for scale as
ratios to what the anthropic SDK's tracing adds (where `sdk` runs too) and, on Chat Completions,
to what `openai-otel` adds (where it imports), and its targets are `openai_cpu.py`'s: client CPU
per event in whole streams, observe-only at most 0.5 µs, budgets at most 1 µs.

Layouts: CPython 3.11 caches attribute look-ups in a 4,096-entry table indexed by the type's
version tag and the address of the name, so which look-ups collide there (and miss on every
event) is an accident of the process: what was allocated and looked up before. Such accidents
move a configuration's instructions per event by a thousand or more from one process layout to
another, with the same code (the bare SDK too: 1,500 in one layout, none in another), where runs
in one layout repeat to within about 100. A miss is a call of CPython's `find_name_in_mro`,
which a hit never makes, so each run counts the instructions spent there and under it apart:
the tables give the per-event path without them, and the misses per event on their own, by
configuration. `--layouts N` measures N layouts — layout k's interpreter makes 40 * k throwaway
classes before it runs this file — and reports the median over them, with their range. CPython runs several
times more instructions under valgrind than natively: compare the figures with each other, not
with timings. `--keep DIR` keeps each measured stream's callgrind dump: `callgrind_annotate` on
two sizes of one configuration and of its bare SDK says which functions the added work is in.

    python benchmarks/instructions.py [--small 500] [--large 5500] [--configs bare,sdk,observe,openai-observe,...]
                                      [--repeats 2] [--layouts 1] [--jobs 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import anthropic
import httpx2

HERE = Path(__file__).resolve().parent
PARAMS: dict[str, Any] = {"model": "claude-bench", "max_tokens": 8192, "messages": [{"role": "user", "content": "go"}]}
CHAT: dict[str, Any] = {"model": "gpt-bench", "messages": [{"role": "user", "content": "go"}],
                        "stream_options": {"include_usage": True}}
RESPONSES: dict[str, Any] = {"model": "gpt-bench", "input": "go"}
WARMUP = 100
"""Text deltas in the warm-up stream read before each measured one."""

CONFIGS = {  # key: label
    "bare": "bare SDK",
    "sdk": "sdk's own tracing",
    "observe": "streamscope observe-only",
    "budgets": "streamscope budgets",
    "breaker": "streamscope budgets+breaker",
    "own-observe": "own work: observe-only",
    "own-budgets": "own work: budgets",
    "wrapped-observe": "every layer wrapped: observe-only",
    "wrapped-budgets": "every layer wrapped: budgets",
    "logfire": "Logfire",
    "ddtrace": "ddtrace",
    "openai-bare": "bare SDK",
    "openai-observe": "streamscope observe-only",
    "openai-budgets": "streamscope budgets",
    "openai-otel": "OpenTelemetry openai-v2",
    "responses-bare": "bare SDK",
    "responses-observe": "streamscope observe-only",
    "responses-budgets": "streamscope budgets",
}
"""A key's last part is what instruments the SDK: bare, sdk, observe, budgets, otel, or a peer
library (`PEERS`). `own-observe` and `own-budgets` are streamscope with the SDK's own `__stream__`
left to run (not taken over, as on an SDK whose `__stream__` streamscope does not know): what
streamscope's own work costs per event, without the SDK work it saves where it takes the layer over.
`wrapped-observe` and `wrapped-budgets` take none of the SDK's layers over (`__iter__`, `_iter_events`
and the decoder's `iter_bytes` run too, each wrapped where streamscope hooks it): a release whose
streaming module changed throughout."""
PEERS = {"logfire": "logfire", "ddtrace": "ddtrace"}
"""Peer configurations: the module each needs (measured where it is installed, as `make bench`'s
environment has them). Logfire records through its own OpenTelemetry provider (two spans per
stream, kept in memory); ddtrace's APM tracing patches the SDK (`patch(anthropic=True)`), with
every background sender off and its finished traces noted and dropped by a trace filter, so no
writer or agent is involved."""
DDTRACE_ENV = {
    "DD_TRACE_AGENT_URL": "http://127.0.0.1:9", "DD_INSTRUMENTATION_TELEMETRY_ENABLED": "false",
    "DD_REMOTE_CONFIGURATION_ENABLED": "false", "DD_CRASHTRACKING_ENABLED": "false",
    "DD_TRACE_GIT_METADATA_ENABLED": "false", "DD_TRACE_STARTUP_LOGS": "false",
}
"""Read when ddtrace is imported: nothing leaves the process, no thread of its own runs per second."""
PEER_SPANS: list[Any] = []
"""ddtrace's finished spans, noted by its trace filter (its spans are not OpenTelemetry's)."""
TARGETS = {"observe": 0.5, "budgets": 0.6, "breaker": 0.6}
OWN_TARGETS = {"observe": 0.35, "budgets": 0.40}
"""The `own-*` rows' targets: streamscope's own work, the SDK's `__stream__` left to run."""
"""On the anthropic SDK: at most this fraction of what its own tracing adds per event (`sdk`)."""
OTEL_OPENAI = "opentelemetry.instrumentation.openai_v2"
"""OpenTelemetry's OpenAI instrumentation (package opentelemetry-instrumentation-openai-v2)."""
OPENAI_V2_OVERLAY = Path(sys.prefix) / "openai-v2"
"""Where `make bench` installs openai-v2 apart (`pip install --target`, no dependencies), with the two
packages its own packaging leaves out or gets wrong: `opentelemetry-util-genai==1.1b0` (openai-v2 2.4b0
imports `opentelemetry.util.genai.instruments`, gone from util-genai 1.2b0 on, while the Anthropic
peer beside it needs 1.3b0) and `httpx` (openai-v2 imports `httpx.URL`; openai 3.x is on httpx2)."""


def use_openai_v2_overlay() -> None:
    """Put the openai-v2 overlay first on the path, where it exists (before openai-v2 is imported)."""
    if OPENAI_V2_OVERLAY.is_dir() and str(OPENAI_V2_OVERLAY) not in sys.path:
        sys.path.insert(0, str(OPENAI_V2_OVERLAY))
        importlib.invalidate_caches()
REPEAT_TOLERANCE = 0.005
ZERO, DUMP = "getppid", "getpgrp"
"""libc functions nothing else here calls: the child calls them (`os.getppid()`, `os.getpgrp()`)
just before and after each measured stream, and callgrind zeroes its counts on entering the
first and writes them out on entering the second."""


# -- the workload (in the child) ------------------------------------------------------------

def _event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _data(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def sse_chunks(deltas: int) -> list[bytes]:
    """A Messages stream with `deltas` text deltas, one server-sent event per chunk, as the API
    sends it (compact JSON on one `data:` line; the shapes of streamscope's simulator)."""
    usage = {"input_tokens": 25, "output_tokens": 1}
    start = {"id": "msg_bench", "type": "message", "role": "assistant", "content": [], "model": PARAMS["model"],
             "stop_reason": None, "stop_sequence": None, "usage": usage}
    delta = _event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "tok "}})
    return [
        _event({"type": "message_start", "message": start}),
        _event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        *[delta] * deltas,
        _event({"type": "content_block_stop", "index": 0}),
        _event({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {**usage, "output_tokens": deltas}}),
        _event({"type": "message_stop"}),
    ]


OBFUSCATION = "q3ZkT9xWb2LrN8vYc4HsJ6mP"
"""OpenAI's `obfuscation` padding: a delta's text and its padding come to 16 characters."""


def chat_chunks(deltas: int) -> list[bytes]:
    """A Chat Completions stream with `deltas` content deltas, one chunk per server-sent event, as
    the API sends it to a request with `include_usage` (the shapes of streamscope's simulator):
    the role chunk, the content chunks, the finish reason, the usage chunk, `[DONE]`."""
    def chunk(choices: list[dict[str, Any]], pad: str, usage: dict[str, Any] | None = None) -> bytes:
        return _data({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
                      "model": CHAT["model"], "service_tier": "default", "system_fingerprint": "fp_bench",
                      "choices": choices, "usage": usage, "obfuscation": pad})

    def choice(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]

    usage = {"prompt_tokens": 25, "completion_tokens": deltas, "total_tokens": 25 + deltas,
             "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
             "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                           "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
    delta = chunk(choice({"content": "tok "}), OBFUSCATION[:12])
    return [
        chunk(choice({"role": "assistant", "content": "", "refusal": None}), OBFUSCATION[:16]),
        *[delta] * deltas,
        chunk(choice({}, "stop"), OBFUSCATION[:16]),
        chunk([], OBFUSCATION[:16], usage),
        b"data: [DONE]\n\n",
    ]


def responses_chunks(deltas: int) -> list[bytes]:
    """A Responses stream with `deltas` output_text deltas, one server-sent event per chunk, as the
    API sends it (the shapes of streamscope's simulator): response.created and .in_progress, a
    message item with one output_text part, its N deltas, the part and item closed, and
    response.completed with the whole response and its usage."""
    def response(status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        return {"id": "resp_bench", "object": "response", "created_at": 1700000000, "status": status,
                "background": False, "error": None, "incomplete_details": None, "instructions": None,
                "max_output_tokens": None, "max_tool_calls": None, "model": RESPONSES["model"], "output": output,
                "parallel_tool_calls": True, "previous_response_id": None, "prompt_cache_key": None,
                "reasoning": {"effort": None, "summary": None}, "safety_identifier": None,
                "service_tier": "auto" if status == "in_progress" else "default", "store": True,
                "temperature": 1.0, "text": {"format": {"type": "text"}, "verbosity": "medium"},
                "tool_choice": "auto", "tools": [], "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled",
                "usage": usage, "user": None, "metadata": {}}

    events: list[dict[str, Any]] = []

    def add(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    where = {"item_id": "msg_bench", "output_index": 0, "content_index": 0}
    item = {"id": "msg_bench", "type": "message", "status": "in_progress", "content": [], "role": "assistant"}
    empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    full = {**empty, "text": "tok " * deltas}
    done = {**item, "status": "completed", "content": [full]}
    usage = {"input_tokens": 25, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
             "output_tokens": deltas, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 25 + deltas}
    add("response.created", response=response("in_progress", [], None))
    add("response.in_progress", response=response("in_progress", [], None))
    add("response.output_item.added", output_index=0, item=item)
    add("response.content_part.added", **where, part=empty)
    for _ in range(deltas):
        add("response.output_text.delta", **where, delta="tok ", logprobs=[], obfuscation=OBFUSCATION[:12])
    add("response.output_text.done", **where, text=full["text"], logprobs=[])
    add("response.content_part.done", **where, part=full)
    add("response.output_item.done", output_index=0, item=done)
    add("response.completed", response=response("completed", [done], usage))
    return [_event(event) for event in events]


@dataclass(frozen=True)
class Workload:
    """One SDK's streamed call: its configurations (its bare SDK first) and its stream."""

    sdk: str
    call: str
    """The client's method, by its path from the client."""
    params: dict[str, Any]
    configs: tuple[str, ...]
    path: str
    """The request's URL path, which the transport checks."""
    request_id: str
    """The response header that carries the request id."""
    framing: int
    """Events read besides the N text deltas."""
    chunks: Callable[[int], list[bytes]]


WORKLOADS = {
    "messages": Workload("anthropic", "messages.create", PARAMS,
                         ("bare", "sdk", "observe", "budgets", "breaker", "own-observe", "own-budgets",
                          "wrapped-observe", "wrapped-budgets", "logfire", "ddtrace"),
                         "/v1/messages", "request-id", 5, sse_chunks),
    "chat": Workload("openai", "chat.completions.create", CHAT,
                     ("openai-bare", "openai-observe", "openai-budgets", "openai-otel"),
                     "/v1/chat/completions", "x-request-id", 3, chat_chunks),
    "responses": Workload("openai", "responses.create", RESPONSES,
                          ("responses-bare", "responses-observe", "responses-budgets"),
                          "/v1/responses", "x-request-id", 8, responses_chunks),
}


def workload_of(config: str) -> Workload:
    return next(w for w in WORKLOADS.values() if config in w.configs)


def kind_of(config: str) -> str:
    """What instruments the SDK in `config`: bare, sdk, observe, budgets or otel."""
    return config.rsplit("-", 1)[-1]


def label_of(config: str) -> str:
    """A configuration's label, with its SDK's call where that is not Anthropic's (labels repeat)."""
    workload = workload_of(config)
    return CONFIGS[config] if workload.sdk == "anthropic" else f"{workload.sdk} {workload.call}: {CONFIGS[config]}"


PACE_ENV = "STREAMSCOPE_BENCH_PACE"
"""Seconds the replayed body sleeps before each chunk (`--pace`): the same stream, stretched in
wall time. What a configuration adds per event must not change with it: work that grows with
wall time (a timer's wake-ups, thread switches) would show here as instructions per event."""


class _Body(httpx2.SyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks
        self._pace = float(os.environ.get(PACE_ENV) or 0.0)

    def __iter__(self) -> Iterator[bytes]:
        if not self._pace:
            yield from self._chunks
            return
        for chunk in self._chunks:
            time.sleep(self._pace)
            yield chunk


class ReplayTransport(httpx2.BaseTransport):
    """Answers every request to `workload`'s path with a 200 `text/event-stream` whose body yields
    `chunks` one by one."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.chunks: list[bytes] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == self.workload.path, request.url
        return httpx2.Response(200, headers={"content-type": "text/event-stream",
                                             self.workload.request_id: "req_bench"},
                               stream=_Body(self.chunks), request=request)


def read_stream(client: Any, transport: ReplayTransport, chunks: list[bytes]) -> int:
    """The measured workload: one streamed create, read to its end. Returns the events read."""
    transport.chunks = chunks
    create = attrgetter(transport.workload.call)(client)  # looked up now: an instrumentor may wrap it
    count = 0
    for _ in create(**transport.workload.params, stream=True):
        count += 1
    return count


METRICS_MODES = ("sdk", "multiprocess", "off")
"""Where the instrumentations' metrics go (`--metrics`): an SDK `MeterProvider` with a reader, as a
user of the dashboards runs it; prometheus-client's multiprocess files (with the SDK provider
beside, as `streamscope.telemetry.setup()` makes it under `PROMETHEUS_MULTIPROC_DIR`); nowhere."""
METRICS = "sdk"
METRICS_SAID = {"sdk": "on (an SDK MeterProvider with a reader)",
                "multiprocess": "on (prometheus-client's multiprocess files and an SDK MeterProvider with a reader)",
                "off": "off (no meter provider)"}


READERS: list[Any] = []
"""The in-memory metric reader of a child with metrics on."""


def check_chunks(chunks: int) -> list[str]:
    """With metrics on, streamscope's time per output chunk histogram counted `chunks` values."""
    counted = sum(point.count for resource in READERS[0].get_metrics_data().resource_metrics
                  for scope in resource.scope_metrics if scope.scope.name == "streamscope"
                  for metric in scope.metrics if metric.name.endswith("time_per_output_chunk")
                  for point in metric.data.data_points)
    return [] if counted == chunks else [f"time per output chunk counted {counted} values, expected {chunks}"]


def meter_provider(mode: str) -> Any:
    """The meter provider `--metrics` asks for: metrics read by an in-memory reader (each child
    checks the chunk histogram's count), or written to a temporary multiprocess directory too."""
    if mode == "off":
        return None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    READERS.append(InMemoryMetricReader())
    provider = MeterProvider(metric_readers=READERS, shutdown_on_exit=False)
    if mode == "multiprocess":
        import tempfile

        from streamscope.export import prometheus_multiprocess as mp

        mp.use_directory(tempfile.mkdtemp(prefix="streamscope-bench-"))
        return mp.MultiprocessMeterProvider(provider, forward=True)
    return provider


def child(config: str, deltas: int) -> None:
    """One configuration, a warm-up stream and a measured one of `deltas` text deltas (under
    valgrind); then check the spans and print what was read and recorded, as JSON."""
    workload, kind = workload_of(config), kind_of(config)
    provider: Any = None
    exporter: Any = None
    meters = meter_provider(METRICS) if kind in ("observe", "budgets", "breaker", "otel") else None
    if kind != "bare":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    transport = ReplayTransport(workload)
    client: Any
    if workload.sdk == "anthropic":
        client = anthropic.Anthropic(api_key="x", base_url="http://bench.invalid", max_retries=0,
                                     http_client=httpx2.Client(transport=transport),
                                     open_telemetry={"tracer_provider": provider} if kind == "sdk" else False)
    else:  # imported here, so the Anthropic configurations' processes are as they were
        import openai

        client = openai.OpenAI(api_key="x", base_url="http://bench.invalid/v1", max_retries=0,
                               http_client=httpx2.Client(transport=transport))
    if kind in ("observe", "budgets", "breaker"):
        import streamscope

        budgets = streamscope.Budgets(first_token=60, idle=30, deadline=600) if kind != "observe" else None
        anthropic_sdk = workload.sdk == "anthropic"
        instrumentor = streamscope.AnthropicInstrumentor if anthropic_sdk else streamscope.OpenAIInstrumentor
        options: dict[str, Any] = {"breaker": streamscope.Breaker()} if kind == "breaker" else {}
        instrumentor().instrument(tracer_provider=provider, budgets=budgets, meter_provider=meters, **options)
        if config.startswith("own-"):  # the SDK's `__stream__` runs, as where streamscope does not know it
            layers = instrumentor()._adapter.layers
            layers.stream = layers.astream = False
        elif config.startswith("wrapped-"):  # every layer of the SDK's runs, as where it knows none
            instrumentor()._adapter.layers.reset()
    elif kind == "otel":
        use_openai_v2_overlay()
        importlib.import_module(OTEL_OPENAI).OpenAIInstrumentor().instrument(tracer_provider=provider,
                                                                             meter_provider=meters)
    elif kind == "logfire":
        import logfire
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        logfire.configure(send_to_logfire=False, console=False, metrics=False,
                          additional_span_processors=[SimpleSpanProcessor(exporter)])
        logfire.instrument_anthropic()
    elif kind == "ddtrace":
        os.environ.update(DDTRACE_ENV)
        import ddtrace
        from ddtrace.trace import TraceFilter, tracer

        class Noted(TraceFilter):
            def process_trace(self, trace: Any) -> None:
                PEER_SPANS.extend(trace)
                return None  # dropped: nothing to write

        tracer.configure(trace_processors=[Noted()])
        ddtrace.patch(anthropic=True)
    warmup, measured = workload.chunks(WARMUP), workload.chunks(deltas)

    read_stream(client, transport, warmup)
    random.seed(0)  # the span ids the tracers draw: the same every run
    gc.collect()  # the collector's counts from here on are the same whatever start-up allocated
    os.getppid()  # ZERO: callgrind counts from here
    events = read_stream(client, transport, measured)
    os.getpgrp()  # DUMP: to here

    spans = [] if exporter is None else list(exporter.get_finished_spans())
    problems = check_peer(kind, spans) if kind in PEERS else check_spans(config, spans, deltas)
    if READERS and kind in ("observe", "budgets", "breaker"):
        problems += check_chunks(WARMUP - 1 + deltas - 1)
    if events != deltas + workload.framing:
        problems.append(f"read {events} events, expected {deltas + workload.framing}")
    named = [f"{s.instrumentation_scope.name}: {s.name}" for s in spans] or [f"{kind}: {s.name}" for s in PEER_SPANS]
    print(json.dumps({"spans": named, "problems": problems}))


def check_peer(kind: str, spans: list[Any]) -> list[str]:
    """A peer recorded each of the two streams (Logfire: its request span and its streaming span)."""
    if kind == "logfire":
        found = [s.instrumentation_scope.name for s in spans]
        expected = ["logfire.anthropic"] * 4
        return [] if found == expected else [f"Logfire spans {found}, expected 4 from logfire.anthropic"]
    names = [s.name for s in PEER_SPANS]
    return [] if names == ["anthropic.request"] * 2 else [f"ddtrace spans {names}, expected two anthropic.request"]


def check_spans(config: str, spans: list[Any], deltas: int) -> list[str]:
    """What is wrong with the spans `config` recorded for the warm-up and the measured stream."""
    workload, kind = workload_of(config), kind_of(config)
    if kind == "bare":
        from opentelemetry import trace

        provider = type(trace.get_tracer_provider()).__name__
        return [] if provider == "ProxyTracerProvider" else [f"a global tracer provider is set: {provider}"]
    if kind == "sdk":
        scope, count = "com.anthropic.sdk.python", "gen_ai.usage.output_tokens"
        named = all(s.name == "anthropic.messages.create" for s in spans)
    elif kind == "otel":  # it records through OpenTelemetry's GenAI library, whose scope name varies by version
        scope = spans[0].instrumentation_scope.name if spans else OTEL_OPENAI
        count = "gen_ai.usage.output_tokens"
        named = all((s.attributes or {}).get("gen_ai.provider.name") == "openai" for s in spans)
    else:  # streamscope names its span after the operation and model ("chat claude-bench")
        scope, count = "streamscope", "streamscope.content_events"
        named = all((s.attributes or {}).get("gen_ai.provider.name") == workload.sdk for s in spans)
    found = [(s.instrumentation_scope.name, (s.attributes or {}).get(count)) for s in spans]
    if found == [(scope, WARMUP), (scope, deltas)] and named:
        return []
    return [f"spans {[(s.instrumentation_scope.name, s.name) for s in spans]} with {count} {[c for _, c in found]}, "
            f"expected two from {scope} with {WARMUP} and {deltas}"
            + (f" and gen_ai.provider.name {workload.sdk}" if kind != "sdk" else "")]


# -- measuring (in the parent) --------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    config: str
    deltas: int
    layout: int
    repeat: int
    instructions: int
    """Of the measured stream."""
    seconds: float
    misses: int = 0
    """Of those, the ones spent where CPython's type attribute cache missed (see `type_cache_misses`)."""


PAD = 40
"""Layout k's interpreter makes k * PAD throwaway classes (each looked up once, so each takes a
type version tag) before it runs this file."""
_BOOT = """\
import runpy, sys
_pad = [type(f"_Pad{i}", (), {"x": i}) for i in range(int(sys.argv[1]))]
for cls in _pad:
    cls.x
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


PACE = 0.0
"""`--pace`, handed to each child in its environment."""
KEEP: Path | None = None
"""`--keep DIR`: where each child's dump of its measured stream is copied."""
MISS_FUNCTION = "find_name_in_mro"
"""Where CPython 3.11 goes when its type attribute cache misses: a walk of the type's MRO, a dict
look-up per class. It runs only on a miss; a hit returns from the cache without calling it."""


def type_cache_misses(dump: Path) -> int:
    """Instructions spent in `find_name_in_mro` and what it calls (callgrind's inclusive cost)."""
    done = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                          capture_output=True, text=True, check=True)
    found = re.findall(rf"^\s*([\d,]+) \([\s\d.]+%\)\s+\S*:{MISS_FUNCTION}(?:'\d+)?\s", done.stdout, flags=re.M)
    return sum(int(n.replace(",", "")) for n in found)


def measure(config: str, deltas: int, layout: int, repeat: int) -> Run:
    """Instructions of one child's measured stream, under callgrind."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out, log = Path(tmp) / "callgrind.out", Path(tmp) / "valgrind.log"
        interpreter = [sys.executable] + (["-c", _BOOT, str(layout * PAD)] if layout else [])
        command = ["setarch", platform.machine(), "-R",
                   "valgrind", "--tool=callgrind", f"--zero-before={ZERO}", f"--dump-before={DUMP}",
                   f"--callgrind-out-file={out}", f"--log-file={log}",
                   *interpreter, __file__, "--child", config, "--deltas", str(deltas), "--metrics", METRICS]
        done = subprocess.run(command, capture_output=True, text=True, cwd=HERE,
                              env={**os.environ, "PYTHONHASHSEED": "0", PACE_ENV: str(PACE)})
        if done.returncode != 0:
            raise RuntimeError(f"{label_of(config)}, {deltas} deltas: the child failed ({done.returncode})\n"
                               f"{done.stderr[-3000:]}{log.read_text()[-1000:] if log.exists() else ''}")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        if report["problems"]:
            raise RuntimeError(f"{label_of(config)}, {deltas} deltas: " + "; ".join(report["problems"]))
        # One dump at DUMP (part 1), then the one at exit: the measured stream is part 1's count.
        dumped = out.with_name(out.name + ".1").read_text()
        assert f"Trigger: --dump-before={DUMP}" in dumped, "no dump at the end of the measured stream"
        assert not out.with_name(out.name + ".2").exists(), f"{DUMP} was called elsewhere too"
        match = re.search(r"^summary:\s+(\d+)", dumped, flags=re.M)
        assert match, "no callgrind summary"
        misses = type_cache_misses(out.with_name(out.name + ".1"))
        if KEEP is not None:  # for `callgrind_annotate`: where the instructions went, function by function
            shutil.copy(out.with_name(out.name + ".1"), KEEP / f"{config}-{deltas}-layout{layout}-run{repeat + 1}.out")
    run = Run(config, deltas, layout, repeat, int(match.group(1)), time.monotonic() - start, misses)
    print(f"({label_of(config)}, {deltas} deltas, layout {layout}, run {repeat + 1}: {run.instructions:,} "
          f"instructions, {run.seconds:.0f} s; spans: {', '.join(report['spans']) or 'none'})",
          file=sys.stderr, flush=True)
    return run


Slopes = dict[str, list[list[float]]]
"""Instructions per event, by configuration, then repeat, then layout."""


def slopes(runs: list[Run], configs: list[str], small: int, large: int, repeats: int, layouts: int,
           count: Callable[[Run], int] = lambda r: r.instructions - r.misses) -> Slopes:
    """Per event, of `count`: by default the instructions but the type cache's misses."""
    total = {(r.config, r.deltas, r.layout, r.repeat): count(r) for r in runs}
    return {c: [[(total[c, large, k, i] - total[c, small, k, i]) / (large - small) for k in range(layouts)]
                for i in range(repeats)] for c in configs}


def report(per_event: Slopes, small: int, large: int) -> None:
    """A table per SDK call: its bare SDK's instructions per event, then what each configuration
    adds to that; under each, streamscope's ratios to the anthropic SDK's tracing (against the
    targets on that SDK, for scale on the other) and to its peer's."""
    first = next(iter(per_event.values()))
    repeats, layouts = len(first), len(first[0])
    rows: dict[str, list[tuple[float, float, float]]] = {}  # config: per repeat, (median, lowest, highest)
    for workload in WORKLOADS.values():
        if workload.configs[0] not in per_event:
            continue
        bare = [statistics.median(by_layout) for by_layout in per_event[workload.configs[0]]]
        for config in (c for c in workload.configs if c in per_event):
            base = [0.0] * repeats if config == workload.configs[0] else bare
            rows[config] = [(statistics.median(v) - b, min(v) - b, max(v) - b) for v, b in zip(per_event[config], base)]
    over = f", median over {layouts} layouts [lowest, highest]" if layouts > 1 else ""
    print(f"instructions per streamed event (valgrind callgrind; sync create(stream=True) read with a for loop; "
          f"slope between {small} and {large} text deltas{over}; without the type cache's misses, "
          f"counted apart below): each SDK's bare figure, then what each configuration adds to it; "
          f"metrics: {METRICS_SAID[METRICS]}")
    width = 28 if layouts > 1 else 12
    for workload in WORKLOADS.values():
        shown = [c for c in workload.configs if c in rows]
        if not shown:
            continue
        print(f"\n{workload.sdk} SDK, {workload.call}(stream=True)")
        print(f"{'':28}" + "".join(f"{f'run {i + 1}':>{width}}" for i in range(repeats)))
        for config in shown:
            label = CONFIGS[config] if config == workload.configs[0] else "+ " + CONFIGS[config]
            cells = (f"{m:,.0f} [{lo:,.0f}, {hi:,.0f}]" if layouts > 1 else f"{m:,.0f}" for m, lo, hi in rows[config])
            print(f"{label:28}" + "".join(f"{cell:>{width}}" for cell in cells))
        if "breaker" in rows and "budgets" in rows:
            print(f"{CONFIGS['breaker']} - {CONFIGS['budgets']}: " + " ".join(
                f"{b[0] - a[0]:+,.0f}" for a, b in zip(rows["budgets"], rows["breaker"], strict=True))
                + " instructions per event (the breaker is asked per call, not per event)")
        peers = [c for c in workload.configs if kind_of(c) == "otel"]
        own = workload.sdk == "anthropic"
        unit = CONFIGS["sdk"] if own else "the anthropic SDK's own tracing"
        for config in (c for c in shown if kind_of(c) in TARGETS):
            target = (OWN_TARGETS if config.startswith(("own-", "wrapped-")) else TARGETS)[kind_of(config)]
            if "sdk" in rows:
                ratios = _ratios(rows[config], rows["sdk"])
                met = all(r <= target for r in ratios)
                print(f"{CONFIGS[config]} / {unit}: " + " ".join(f"{r:.2f}x" for r in ratios)
                      + (f" (target <= {target}x): {'met' if met else 'NOT met'}" if own else
                         " (for scale; the targets on this SDK are openai_cpu.py's, in µs)"))
            for peer in peers:
                print(f"{CONFIGS[config]} / {CONFIGS[peer]}: " + (" ".join(
                    f"{r:.2f}x" for r in _ratios(rows[config], rows[peer])) if peer in rows else "not measured"))
    if repeats > 1:
        worst = max(abs(a - b) / min(a, b) for by_repeat in per_event.values()
                    for other in by_repeat[1:] for a, b in zip(by_repeat[0], other))
        moved = max(max(m for m, _, _ in cells) - min(m for m, _, _ in cells) for cells in rows.values())
        verdict = "within" if worst <= REPEAT_TOLERANCE else "NOT within"
        print(f"repeats: instructions per event {verdict} {REPEAT_TOLERANCE:.1%} of run 1's (largest difference "
              f"{worst:.3%}); each bare SDK's figure and what each configuration adds moved by at most {moved:.0f}")


def report_misses(misses: Slopes) -> None:
    """The type cache's misses per event, by configuration: an accident of the process layout."""
    print("\ntype attribute cache misses, instructions per event (in find_name_in_mro; which look-ups collide "
          "in the 4,096-entry cache depends on the process layout, not on the code run per event)")
    for config, by_repeat in misses.items():
        cells = [f"{statistics.median(v):,.0f} [{min(v):,.0f}, {max(v):,.0f}]" for v in by_repeat]
        print(f"{label_of(config):40}" + "".join(f"{cell:>24}" for cell in cells))


def _ratios(ours: list[tuple[float, float, float]], theirs: list[tuple[float, float, float]]) -> list[float]:
    """Per repeat, what one configuration adds over what another adds (medians over layouts)."""
    return [a[0] / b[0] for a, b in zip(ours, theirs)]


def otel_unavailable() -> str | None:
    """Why OpenTelemetry's OpenAI instrumentation cannot be measured here; None where it can."""
    use_openai_v2_overlay()
    if importlib.util.find_spec(OTEL_OPENAI) is None:
        return "not installed"
    try:
        importlib.import_module(OTEL_OPENAI)
    except Exception as exc:  # installed beside dependencies it does not work with
        return f"installed, but does not import ({type(exc).__name__}: {exc})"
    return None


def main(argv: list[str] | None = None) -> int:
    global PACE, METRICS, KEEP
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=500, help="text deltas in the smaller stream")
    parser.add_argument("--large", type=int, default=5500, help="text deltas in the larger stream")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"comma-separated, of {', '.join(CONFIGS)} (each one's bare SDK is measured too)")
    parser.add_argument("--repeats", type=int, default=2, help="times each measurement is made")
    parser.add_argument("--layouts", type=int, default=1, help="process layouts each measurement is made in")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="children under valgrind at once")
    parser.add_argument("--pace", type=float, default=0.0, metavar="S",
                        help="seconds the replayed body waits before each chunk: the stream stretched in wall time")
    parser.add_argument("--metrics", choices=METRICS_MODES, default=METRICS,
                        help="where the instrumentations' metrics go: an SDK MeterProvider with a reader (as the "
                             "dashboards' users run), also prometheus-client's multiprocess files, or nowhere")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="copy each measured stream's callgrind dump into DIR (read with callgrind_annotate)")
    parser.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--deltas", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pace < 0:
        parser.error("--pace takes seconds >= 0")
    PACE = args.pace
    METRICS = args.metrics
    KEEP = args.keep
    if args.child:
        child(args.child, args.deltas)
        return 0
    if KEEP is not None:
        try:
            KEEP.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            parser.error(f"--keep {KEEP}: {exc.strerror.lower()}; name a folder (it is made if missing)")
    if shutil.which("valgrind") is None or shutil.which("setarch") is None:
        print("valgrind (or setarch) is not installed: no instruction counts")
        return 0
    wanted = {c for c in args.configs.split(",") if c}
    if unknown := wanted - set(CONFIGS):
        parser.error(f"unknown configurations {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    if not wanted:
        parser.error(f"no configuration chosen; choose from {', '.join(CONFIGS)}")
    chosen = wanted | {workload_of(c).configs[0] for c in wanted}  # what each adds is over its bare SDK's
    if "openai-otel" in chosen and (why := otel_unavailable()):
        print(f"(openai-otel: {why}, not measured)", flush=True)
        chosen.discard("openai-otel")
    for peer, module in PEERS.items():
        if peer in chosen and importlib.util.find_spec(module) is None:
            print(f"({peer}: not installed, not measured)", flush=True)
            chosen.discard(peer)
    configs = [c for c in CONFIGS if c in chosen]
    jobs = [(c, n, k, i) for i in range(args.repeats) for k in range(args.layouts) for c in configs
            for n in (args.large, args.small)]
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        runs = list(pool.map(lambda job: measure(*job), jobs))
    print(f"({len(runs)} children under callgrind, {args.jobs} at a time: {time.monotonic() - start:.0f} s)",
          file=sys.stderr, flush=True)
    report(slopes(runs, configs, args.small, args.large, args.repeats, args.layouts), args.small, args.large)
    report_misses(slopes(runs, configs, args.small, args.large, args.repeats, args.layouts, lambda r: r.misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
