"""streamscope checked against the GenAI conventions' registry (pinned in `semconv-genai/`, see its
SOURCE.txt): every span attribute, metric name, unit, instrument kind, bucket boundary and event
it emits, over both providers (the real anthropic and openai SDKs against the embedded simulator)
and every class, with content capture off and on, and `OTEL_SEMCONV_STABILITY_OPT_IN` without and
with `gen_ai_latest_experimental`.

Rules (registry.py): a `gen_ai.*` key must be a registry key, typed as the registry says (a name it
has under another spelling is reported with the registry's); an OpenAI key the OpenAI registry lists
is spelled as it is there; `streamscope.*` and unlisted vendor keys stay as they are. Required and
conditionally required attributes present where their condition holds; recommended ones need not
be, but if present are spelled and typed right. Without the opt-in a metric is accepted under
today's name (the old name of a pending rename in changelog.yaml), judged by the new metric's
unit, kind and buckets; under it every `gen_ai.*` metric must be a registry metric.

The negative tests at the end feed the checker known-bad telemetry, so it cannot pass vacuously.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from registry import (
    LATEST,
    OPT_IN_ENV,
    PROPOSED,
    CallFacts,
    Deviation,
    Registry,
    check_log_record,
    check_metric,
    check_span,
    dedupe,
)

import streamscope
from streamscope import AnthropicInstrumentor, Budgets, OpenAIInstrumentor
from streamscope.simulator import SCENARIOS, Scenario, Simulator, TextSpec, message_stream
from streamscope.simulator.openai_catalog import OPENAI_SCENARIOS
from streamscope.simulator.openai_streams import chat_stream, responses_stream

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
USER = [{"role": "user", "content": "How do streams fail?"}]
THINKING = {"type": "enabled", "budget_tokens": 4096}
BUDGETS = {
    "route:budgeted": Budgets(first_token=0.8, idle=0.3, deadline=3.0),
    "route:deadline": Budgets(deadline=0.8),
    "route:first_token": Budgets(first_token=0.3),
    "route:idle": Budgets(idle=0.3),
    "route:deadline_short": Budgets(deadline=0.5),
}
FAILED = {"upstream_error", "stalled_before_first_content", "stalled_mid_stream", "deadline_in_thinking",
          "deadline_in_answer", "cancelled"}
EVERY_CLASS = {"complete", "truncated", "budget_exhausted", "silently_unverified", "refused", "paused",
               *FAILED}
# Classes a provider's streams cannot give: OpenAI has no thinking signature (nothing to leave
# unverified) and no pause_turn.
NOT_FOR = {"openai": {"silently_unverified", "paused"}, "anthropic": set()}
CUSTOM = [
    Scenario.single("cv_paused", message_stream(blocks=[TextSpec(["Searching", " more."])], stop_reason="pause_turn")),
    Scenario.single("cv_cached", message_stream(blocks=[TextSpec(["Hello", " there."])], input_tokens=25,
                                                cache_read_input_tokens=60, cache_creation_input_tokens=40)),
    Scenario.single("cv_chat_cached", chat_stream(text=TextSpec(["Hello", " there."]), prompt_tokens=100,
                                                  cached_tokens=60, completion_tokens=3)),
    Scenario.single("cv_responses_cached", responses_stream(text=TextSpec(["Hello", " there."]), input_tokens=100,
                                                            cached_tokens=60, output_tokens=3)),
]
# Request parameters whose conditionally required attributes then hold (spans.yaml and the refinements).
# (the anthropic SDK's `create()` takes sampling parameters only through `extra_body` now)
ANTHROPIC_PARAMS = {"extra_body": {"temperature": 0.5, "top_p": 0.9, "top_k": 5}, "stop_sequences": ["###"],
                    "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}}}
ANTHROPIC_CONDITIONS = {"gen_ai.request.top_k", "gen_ai.output.type"}
CHAT_PARAMS = {"temperature": 0.3, "top_p": 0.9, "frequency_penalty": 0.1, "presence_penalty": 0.1, "seed": 7,
               "stop": ["###"], "response_format": {"type": "json_object"}, "service_tier": "default"}
CHAT_CONDITIONS = {"gen_ai.request.seed", "gen_ai.output.type", "openai.request.service_tier"}
RESPONSES_PARAMS = {"temperature": 0.3, "top_p": 0.9, "service_tier": "default",
                    "text": {"format": {"type": "json_object"}}}
RESPONSES_CONDITIONS = {"gen_ai.output.type", "openai.request.service_tier"}


@dataclass(frozen=True)
class Call:
    provider: str  # anthropic / openai
    scenario: str
    label: str  # the class the scenario gives
    route: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    conditions: frozenset[str] = frozenset()
    leave_early: bool = False

    @property
    def api(self) -> str:
        if self.provider == "anthropic":
            return "messages"
        return "responses" if self.scenario.startswith(("responses_", "cv_responses")) or \
            self.scenario.endswith("500") else "chat"


A, O = "anthropic", "openai"  # noqa: E741
# The class matrix of tests/integration/test_classes_live.py and test_metrics.py's MIX (Anthropic)
# and tests/adapters/test_openai_streams.py's CASES (OpenAI), budgets given by route.
CALLS = [
    Call(A, "complete", "complete", extra=ANTHROPIC_PARAMS, conditions=frozenset(ANTHROPIC_CONDITIONS)),
    Call(A, "thinking", "complete", extra={"thinking": THINKING}),
    Call(A, "tool_use", "complete"),
    Call(A, "cv_cached", "complete"),
    Call(A, "cv_paused", "paused"),
    Call(A, "truncated", "truncated"),
    Call(A, "refused", "refused"),
    Call(A, "budget_exhausted", "budget_exhausted", extra={"thinking": THINKING}),
    Call(A, "silently_unverified", "silently_unverified", extra={"thinking": THINKING}),
    Call(A, "inband_error", "upstream_error"),
    Call(A, "cut_connection", "upstream_error"),
    Call(A, "incomplete", "upstream_error"),
    Call(A, "http_529", "upstream_error"),
    Call(A, "timed_silent_start", "stalled_before_first_content", route="budgeted"),
    Call(A, "timed_pinging_stall", "stalled_mid_stream", route="budgeted"),
    Call(A, "slow_thinking", "deadline_in_thinking", route="deadline", extra={"thinking": THINKING}),
    Call(A, "slow_answer", "deadline_in_answer", route="deadline"),
    Call(A, "slow_answer", "cancelled", leave_early=True),
    Call(O, "chat_complete", "complete", extra=CHAT_PARAMS, conditions=frozenset(CHAT_CONDITIONS)),
    Call(O, "responses_complete", "complete", extra=RESPONSES_PARAMS, conditions=frozenset(RESPONSES_CONDITIONS)),
    Call(O, "chat_tool_call", "complete"),
    Call(O, "responses_tool_call", "complete"),
    Call(O, "cv_chat_cached", "complete"),
    Call(O, "cv_responses_cached", "complete"),
    Call(O, "chat_truncated", "truncated"),
    Call(O, "responses_truncated", "truncated"),
    Call(O, "chat_budget_exhausted", "budget_exhausted"),
    Call(O, "responses_budget_exhausted", "budget_exhausted"),
    Call(O, "chat_refusal", "refused"),
    Call(O, "responses_content_filter", "refused"),
    Call(O, "chat_inband_error", "upstream_error"),
    Call(O, "responses_failed", "upstream_error"),
    Call(O, "chat_cut_connection", "upstream_error"),
    Call(O, "chat_incomplete", "upstream_error"),
    Call(O, "openai_http_429", "upstream_error"),
    Call(O, "openai_http_500", "upstream_error"),
    Call(O, "chat_silent_start", "stalled_before_first_content", route="first_token"),
    Call(O, "responses_silent_stall", "stalled_mid_stream", route="idle"),
    Call(O, "chat_silent_stall", "deadline_in_answer", route="deadline_short"),
    Call(O, "responses_reasoning_silent", "deadline_in_thinking", route="deadline_short"),
    Call(O, "chat_silent_stall", "cancelled", leave_early=True),
]
MODES = [pytest.param(latest, capture, id=f"{'latest' if latest else 'default'}-content_{'on' if capture else 'off'}")
         for latest in (False, True) for capture in (False, True)]


@pytest.fixture(scope="module")
def reg() -> Registry:
    return Registry()


@pytest.fixture(scope="module")
def simulator() -> Iterator[Simulator]:
    with Simulator({**SCENARIOS, **OPENAI_SCENARIOS}) as sim:
        for scenario in CUSTOM:
            sim.add(scenario)
        yield sim


def model_of(index: int, call: Call) -> str:
    """Each call its own model name: the span, its events and its metric points are matched by it."""
    return f"{'claude' if call.provider == A else 'gpt'}-sim-cv{index:02d}"


def drive(sim: Simulator, index: int, call: Call) -> None:
    """One streamed call through the real SDK, read the way a caller would; its failure is the scenario's."""
    model = model_of(index, call)
    with streamscope.route(call.route) if call.route else contextlib.nullcontext(), \
            contextlib.suppress(Exception):
        if call.provider == A:
            c = anthropic.Anthropic(base_url=sim.url(call.scenario), api_key="k", max_retries=0)
            params = {"model": model, "max_tokens": 8192 if "thinking" in call.extra else 1024, "messages": USER,
                      **call.extra}
            if call.leave_early:
                with c.messages.stream(**params) as stream:
                    for event in stream:
                        if event.type == "text":
                            break
                return
            for _ in c.messages.create(stream=True, **params):
                pass
            return
        o = openai.OpenAI(base_url=sim.openai_url(call.scenario), api_key="k", max_retries=0, timeout=15)
        if call.api == "chat":
            stream = o.chat.completions.create(model=model, messages=USER, stream=True,  # type: ignore[arg-type]
                                               stream_options={"include_usage": True},
                                               max_completion_tokens=1024, **call.extra)
        else:
            stream = o.responses.create(model=model, input="How do streams fail?", stream=True,  # type: ignore[call-overload]
                                        max_output_tokens=1024, **call.extra)
        with stream:
            for event in stream:
                if call.leave_early and _text(event):
                    break


def _text(event: Any) -> bool:
    choices = getattr(event, "choices", None)
    if choices:
        return bool(getattr(choices[0].delta, "content", None))
    return getattr(event, "type", "") == "response.output_text.delta"


@dataclass
class Run:
    latest: bool
    capture: bool
    spans: list[Any]
    metrics: list[Any]
    logs: list[Any]


def collect(sim: Simulator, latest: bool, capture: bool) -> Run:
    with pytest.MonkeyPatch.context() as mp:
        for name in ("STREAMSCOPE_CONFIG", "STREAMSCOPE_STREAM_LOGS", "OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT"):
            mp.delenv(name, raising=False)
        if latest:
            mp.setenv(OPT_IN_ENV, LATEST)
        else:
            mp.delenv(OPT_IN_ENV, raising=False)
        if capture:
            mp.setenv(CAPTURE_ENV, "SPAN_AND_EVENT")
        else:
            mp.delenv(CAPTURE_ENV, raising=False)
        spans, reader, logs = InMemorySpanExporter(), InMemoryMetricReader(), InMemoryLogRecordExporter()
        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(spans))
        meter = MeterProvider(metric_readers=[reader])
        logger = LoggerProvider()
        logger.add_log_record_processor(SimpleLogRecordProcessor(logs))
        instrumentors = [AnthropicInstrumentor(), OpenAIInstrumentor()]
        try:
            for instrumentor in instrumentors:
                instrumentor.instrument(tracer_provider=tracer, meter_provider=meter, logger_provider=logger,
                                        budgets=BUDGETS)
            for index, call in enumerate(CALLS):
                drive(sim, index, call)
        finally:
            for instrumentor in instrumentors:
                if instrumentor.is_instrumented_by_opentelemetry:
                    instrumentor.uninstrument()
    data = reader.get_metrics_data()
    metrics = [m for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics
               if sm.scope.name == "streamscope" for m in sm.metrics]
    meter.shutdown()
    own = [s for s in spans.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]
    return Run(latest, capture, own, metrics, [r.log_record for r in logs.get_finished_logs()])


_RUNS: dict[tuple[bool, bool], Run] = {}


@pytest.fixture(scope="module")
def runs(simulator: Simulator) -> Iterator[Any]:
    def get(latest: bool, capture: bool) -> Run:
        if (latest, capture) not in _RUNS:
            _RUNS[latest, capture] = collect(simulator, latest, capture)
        return _RUNS[latest, capture]

    yield get
    _RUNS.clear()


def calls_by_model() -> dict[str, Call]:
    return {model_of(i, call): call for i, call in enumerate(CALLS)}


def facts(call: Call, capture: bool) -> CallFacts:
    return CallFacts(call.provider, call.label in FAILED, set(call.conditions), capture)


def mode_name(latest: bool, capture: bool) -> str:
    return f"{'opt-in' if latest else 'default'}, content {'on' if capture else 'off'}"


def report(found: list[Deviation], mode: str) -> str:
    lines = "\n".join(f"  {d}" for d in dedupe(found))
    return (f"{len(dedupe(found))} deviation(s) from the registry ({mode}): "
            f"name / what is wrong / what the registry says\n{lines}")


# ---------------------------------------------------------------------------------------------- spans


@pytest.mark.parametrize(("latest", "capture"), MODES)
def test_spans(reg: Registry, runs: Any, latest: bool, capture: bool) -> None:
    run = runs(latest, capture)
    by_model = calls_by_model()
    assert len(run.spans) == len(CALLS), [s.name for s in run.spans]
    found: list[Deviation] = []
    seen: set[str] = set()
    for span in run.spans:
        model = dict(span.attributes or {}).get("gen_ai.request.model")
        assert model in by_model, f"a span without a known gen_ai.request.model: {dict(span.attributes or {})}"
        seen.add(model)
        found += check_span(reg, span, facts(by_model[model], capture))
    assert seen == set(by_model)
    assert not found, report(found, f"spans, {mode_name(latest, capture)}")
    # The cost proposal's names: under the opt-in only, on every priced span, beside streamscope's own.
    priced = [dict(s.attributes or {}) for s in run.spans if "streamscope.cost.usd" in (s.attributes or {})]
    assert priced, "no span was priced"
    for attrs in priced:
        proposed = {k: attrs[k] for k in PROPOSED if k in attrs}
        if latest:
            assert proposed == {"gen_ai.usage.cost.amount": attrs["streamscope.cost.usd"],
                                "gen_ai.usage.cost.currency": "USD", "gen_ai.usage.cost.source": "local"}
        else:
            assert proposed == {}


def test_every_class_over_both_providers(runs: Any) -> None:
    """The matrix really gives every class on each provider (so the checks above saw each)."""
    run = runs(False, False)
    by_model = calls_by_model()
    got: dict[str, set[str]] = {A: set(), O: set()}
    wrong = []
    for span in run.spans:
        attrs = dict(span.attributes or {})
        call = by_model[attrs["gen_ai.request.model"]]
        got[call.provider].add(attrs.get("streamscope.class"))
        if attrs.get("streamscope.class") != call.label:
            wrong.append((call.scenario, call.label, attrs.get("streamscope.class")))
    assert not wrong, wrong
    for provider, classes in got.items():
        assert classes == EVERY_CLASS - NOT_FOR[provider], (provider, sorted(classes))


# ---------------------------------------------------------------------------------------------- metrics


@pytest.mark.parametrize(("latest", "capture"), MODES)
def test_metrics(reg: Registry, runs: Any, latest: bool, capture: bool) -> None:
    run = runs(latest, capture)
    gen_ai = [m for m in run.metrics if m.name.startswith("gen_ai.")]
    assert gen_ai, "no gen_ai.* metric emitted"
    found: list[Deviation] = []
    for metric in gen_ai:
        found += check_metric(reg, metric, latest=latest)
    # error.type on the duration's points exactly for the calls that failed
    duration = "gen_ai.client.inference.duration" if latest else "gen_ai.client.operation.duration"
    by_model = calls_by_model()
    emitted = {m.name: m for m in gen_ai}
    if duration not in emitted:
        found.append(Deviation(duration, "not emitted", "the inference duration histogram (recommended)"))
    else:
        for point in emitted[duration].data.data_points:
            attrs = dict(point.attributes or {})
            call = by_model.get(str(attrs.get("gen_ai.request.model")))
            if call is None:
                continue
            if ("error.type" in attrs) != (call.label in FAILED):
                found.append(Deviation(f"{duration}: error.type", f"{'set' if 'error.type' in attrs else 'absent'} "
                                       f"for a {call.label} call", "conditionally_required: If the operation ended in "
                                       "an error (and only then)"))
        providers = {dict(p.attributes or {}).get("gen_ai.provider.name") for p in emitted[duration].data.data_points}
        assert providers == {A, O}, providers
    if latest:  # changelog.yaml's clarification: no token histogram for a failed operation
        for name in ("gen_ai.client.inference.operation.input_tokens",
                     "gen_ai.client.inference.operation.output_tokens"):
            for point in emitted[name].data.data_points if name in emitted else ():
                call = by_model.get(str(dict(point.attributes or {}).get("gen_ai.request.model")))
                if call is not None and call.label in FAILED:
                    found.append(Deviation(name, f"recorded for a failed ({call.label}) operation",
                                           "token usage histograms should not be recorded for failed operations"))
    assert not found, report(found, f"metrics, {'opt-in' if latest else 'default'}")


# ---------------------------------------------------------------------------------------------- events


@pytest.mark.parametrize(("latest", "capture"), MODES)
def test_events(reg: Registry, runs: Any, latest: bool, capture: bool) -> None:
    run = runs(latest, capture)
    by_model = calls_by_model()
    named = [r for r in run.logs if getattr(r, "event_name", None)]
    found: list[Deviation] = []
    details: set[str] = set()
    for record in named:
        model = str(dict(record.attributes or {}).get("gen_ai.request.model"))
        call = by_model.get(model)
        if record.event_name == "gen_ai.client.inference.operation.details":
            details.add(model)
        found += check_log_record(reg, record, facts(call, capture) if call else None, content_in_event=capture)
    if capture and details != set(by_model):  # SPAN_AND_EVENT: the details event for every call
        found.append(Deviation("event gen_ai.client.inference.operation.details",
                               f"missing for {len(set(by_model) - details)} call(s) with content capture in events",
                               "opt_in: emitted when the user opted in"))
    assert not found, report(found, f"events, {mode_name(latest, capture)}")


# ---------------------------------------------------------------------------------------------- the checker itself


@dataclass
class _Kind:
    name: str


@dataclass
class _Span:
    name: str
    attributes: dict[str, Any]
    kind: _Kind = field(default_factory=lambda: _Kind("CLIENT"))
    events: tuple[Any, ...] = ()


GOOD = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic", "gen_ai.request.model": "m",
        "gen_ai.request.stream": True, "server.address": "127.0.0.1", "server.port": 443,
        "gen_ai.usage.input_tokens": 25, "streamscope.class": "complete", "anthropic.request.id": "req_1"}


def test_a_good_span_passes(reg: Registry) -> None:
    assert check_span(reg, _Span("chat m", dict(GOOD)), CallFacts(A, failed=False)) == []


def test_a_misspelled_key_is_reported_with_the_registry_spelling(reg: Registry) -> None:
    found = check_span(reg, _Span("chat m", {**GOOD, "gen_ai.usage.cache_creation.input_tokens": 40}),
                       CallFacts(A, failed=False))
    assert [(d.name, d.registry) for d in found] == [
        ("span[anthropic]: gen_ai.usage.cache_creation.input_tokens", "spelled gen_ai.usage.cache_write.input_tokens")]
    found = check_span(reg, _Span("chat m", {**GOOD, "gen_ai.provider.name": "openai",
                                             "openai.response.service_tiers": "default",
                                             "gen_ai.openai.request.seed": 7}), CallFacts(O, failed=False))
    assert {(d.name, d.registry) for d in found} >= {
        ("span[openai]: openai.response.service_tiers", "spelled openai.response.service_tier")}
    assert any(d.name == "span[openai]: gen_ai.openai.request.seed" for d in found)
    # an OpenAI key its registry does not list stays as it is
    assert check_span(reg, _Span("chat m", {**GOOD, "gen_ai.provider.name": "openai", "openai.request.id": "x"}),
                      CallFacts(O, failed=False)) == []


def test_a_wrong_type_is_reported(reg: Registry) -> None:
    found = check_span(reg, _Span("chat m", {**GOOD, "gen_ai.usage.input_tokens": 25.0,
                                             "gen_ai.response.finish_reasons": "stop",
                                             "server.port": "443"}), CallFacts(A, failed=False))
    assert {(d.name, d.registry) for d in found} == {
        ("span[anthropic]: gen_ai.usage.input_tokens", "type int"),
        ("span[anthropic]: gen_ai.response.finish_reasons", "type string[]"),
        ("span[anthropic]: server.port", "type int")}


def test_a_missing_required_attribute_is_reported(reg: Registry) -> None:
    attrs = {k: v for k, v in GOOD.items() if k not in ("gen_ai.provider.name", "server.port")}
    found = check_span(reg, _Span("chat m", attrs), CallFacts(A, failed=True, request={"gen_ai.request.top_k"}))
    got = {(d.name, d.wrong) for d in found}
    assert ("span[anthropic]: gen_ai.provider.name", "missing") in got
    assert ("span[anthropic]: server.port", "missing") in got
    assert ("span[anthropic]: error.type", "missing") in got  # failed: conditionally required
    # top_k is only recommended in Anthropic's refinement; for OpenAI a seed in the request requires it
    assert not any("top_k" in d.name for d in found)
    found = check_span(reg, _Span("chat m", {**GOOD, "gen_ai.provider.name": "openai"}),
                       CallFacts(O, failed=False, request={"gen_ai.request.seed"}, content=True))
    assert {d.name for d in found} == {"span[openai]: gen_ai.request.seed", "span[openai]: gen_ai.input.messages",
                                       "span[openai]: gen_ai.output.messages"}
    # error.type on a call that did not fail; the wrong name and kind
    found = check_span(reg, _Span("m chat", {**GOOD, "error.type": "x"}, _Kind("INTERNAL")), CallFacts(A, failed=False))
    assert {d.name for d in found} == {"span[anthropic]: error.type", "span[anthropic] name", "span[anthropic] kind"}


@dataclass
class _Point:
    attributes: dict[str, Any]
    explicit_bounds: tuple[float, ...] = ()


@dataclass
class _Data:
    data_points: list[Any]
    is_monotonic: bool = True


class Histogram(_Data):
    pass


class Sum(_Data):
    pass


@dataclass
class _Metric:
    name: str
    unit: str
    data: Any


POINT = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m",
         "server.address": "h", "server.port": 1, "streamscope.route": "r"}
SECONDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)


def test_a_good_metric_passes(reg: Registry) -> None:
    good = _Metric("gen_ai.client.inference.duration", "s", Histogram([_Point(dict(POINT), SECONDS)]))
    assert check_metric(reg, good, latest=True) == []
    usage = _Metric("gen_ai.client.inference.usage.input_tokens", "{token}",
                    Sum([_Point({**POINT, "gen_ai.token.modality": "text"})]))
    assert check_metric(reg, usage, latest=True) == []
    old = _Metric("gen_ai.client.operation.time_to_first_chunk", "s", Histogram([_Point(dict(POINT), SECONDS)]))
    assert check_metric(reg, old, latest=False) == []  # today's name: accepted without the opt-in


def test_a_wrong_unit_kind_or_bucket_list_is_reported(reg: Registry) -> None:
    bad = _Metric("gen_ai.client.inference.duration", "ms", Histogram([_Point(dict(POINT), (0.1, 1.0, 10.0))]))
    assert {d.wrong.split()[0] for d in check_metric(reg, bad, latest=True)} == {"unit", "bucket"}
    counter_as_updown = _Metric("gen_ai.client.inference.usage.output_tokens", "{token}",
                                Sum([_Point({**POINT, "gen_ai.token.modality": "text"})], is_monotonic=False))
    assert [(d.wrong, d.registry) for d in check_metric(reg, counter_as_updown, latest=True)] == [
        ("instrument updowncounter", "instrument counter")]
    # an old name is judged by the new metric's buckets
    old = _Metric("gen_ai.client.operation.time_per_output_chunk", "s", Histogram([_Point(dict(POINT), (1.0, 2.0))]))
    assert [d.wrong.split()[0] for d in check_metric(reg, old, latest=False)] == ["bucket"]


def test_metric_attributes_and_names_are_judged(reg: Registry) -> None:
    no_modality = _Metric("gen_ai.client.inference.usage.input_tokens", "{token}", Sum([_Point(dict(POINT))]))
    assert [(d.name, d.wrong) for d in check_metric(reg, no_modality, latest=True)] == [
        ("gen_ai.client.inference.usage.input_tokens: gen_ai.token.modality", "missing")]
    error_on_ttfc = _Metric("gen_ai.client.inference.time_to_first_chunk", "s",
                            Histogram([_Point({**POINT, "error.type": "timeout"}, SECONDS)]))
    assert [d.wrong for d in check_metric(reg, error_on_ttfc, latest=True)] == ["attribute not defined for this metric"]
    no_provider = _Metric("gen_ai.client.operation.duration", "s",
                          Histogram([_Point({k: v for k, v in POINT.items() if k != "gen_ai.provider.name"}, SECONDS)]))
    assert [d.wrong for d in check_metric(reg, no_provider, latest=False)] == ["missing"]
    token_type = {**POINT, "gen_ai.token.type": "input"}
    old_usage = _Metric("gen_ai.client.token.usage", "{token}", Histogram([_Point(token_type, (1.0, 4.0))]))
    assert [d.wrong.split()[0] for d in check_metric(reg, old_usage, latest=False)] == ["bucket"]
    # under the opt-in: old names and removed attributes are deviations
    assert {d.wrong for d in check_metric(reg, old_usage, latest=True)} >= {
        "old name emitted under the opt-in", "not a registry key (removed)"}
    misspelled = _Metric("gen_ai.client.inference.usage.input_token", "{token}", Sum([]))
    assert [(d.wrong, d.registry) for d in check_metric(reg, misspelled, latest=True)] == [
        ("not a registry metric", "spelled gen_ai.client.inference.usage.input_tokens")]
    duration = _Metric("gen_ai.client.operation.duration", "s", Histogram([_Point(dict(POINT), SECONDS)]))
    assert [d.wrong for d in check_metric(reg, duration, latest=True)] == ["emitted under the opt-in"]


@dataclass
class _Record:
    event_name: str
    attributes: dict[str, Any]
    severity_number: int


def test_events_are_judged(reg: Registry) -> None:
    details = {k: v for k, v in GOOD.items() if not k.startswith("streamscope.")}
    ok = _Record("gen_ai.client.inference.operation.details", details, 5)
    assert check_log_record(reg, ok, CallFacts(A, failed=False), content_in_event=False) == []
    got = check_log_record(reg, _Record(ok.event_name, details, 9), CallFacts(A, failed=False), content_in_event=True)
    assert {d.name for d in got} == {"event gen_ai.client.inference.operation.details severity",
                                     "event gen_ai.client.inference.operation.details: gen_ai.input.messages",
                                     "event gen_ai.client.inference.operation.details: gen_ai.output.messages"}
    exc = _Record("gen_ai.client.operation.exception", {"gen_ai.provider.name": "anthropic"}, 13)
    assert [d.wrong for d in check_log_record(reg, exc, None, content_in_event=False)] == [
        "missing (and no exception.message)"]
    assert [d.wrong for d in check_log_record(reg, _Record("gen_ai.client.exception", {}, 13), None, False)] == [
        "not a registry event"]


def test_the_registry_is_resolved(reg: Registry) -> None:
    assert reg.attributes("gen_ai.usage.cache_write.input_tokens") == ("int", "development")
    assert reg.attributes("gen_ai.usage.cache_creation.input_tokens") is None
    assert reg.attributes("openai.api.type") == ("enum", "development")
    duration = reg.metric("gen_ai.client.inference.duration")
    assert duration is not None and duration.unit == "s" and duration.instrument == "histogram"
    assert duration.buckets == SECONDS and "error.type" in duration.attributes
    assert reg.renamed("gen_ai.client.operation.time_to_first_chunk") == "gen_ai.client.inference.time_to_first_chunk"
    assert reg.renamed("gen_ai.usage.cache_creation.input_tokens") == "gen_ai.usage.cache_write.input_tokens"
    assert reg.span(provider="openai").attributes["gen_ai.request.model"].level == "required"
    assert reg.span(provider="anthropic").attributes["gen_ai.request.top_k"].level == "recommended"
    assert reg.span().attributes["gen_ai.request.top_k"].level == "conditionally_required"
