"""What each streamed call cost, through the real SDKs against the local endpoint.

Every figure is worked out here by hand from the usage the simulator sends and the price table's
rates (input, output, 5-minute and 1-hour cache writes, cache reads, web searches per request):
complete streams, a stream cut by each budget (its output estimated from the text and thinking
that arrived, 4 characters to a token, rounded up, at least one), an HTTP error (not billed), a
model with no known price (no figure, counted unpriced), the user's prices (`prices=` and the
file's `[prices]`), and a retried request (`StreamResult.cost` sums the attempts). The span's
`streamscope.cost.usd` and the `streamscope.cost` counter agree.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conftest import USER, EndCounter, Telemetry, client
from streamscope import Backoff, Budgets, OpenAIInstrumentor, collect, stream_with_retry
from streamscope.pricing import shipped_rates
from streamscope.simulator import (
    HttpError,
    Scenario,
    Silence,
    Simulator,
    TextSpec,
    ThinkingSpec,
    error_event,
    message_stream,
)
from streamscope.simulator.openai_chat import chat_stream
from streamscope.simulator.openai_responses import responses_stream

SONNET = "claude-sonnet-4-5-20250929"
FRESH, READ, WRITE_5M, WRITE_1H, OUT, SEARCHES = 1000, 2000, 300, 200, 400, 2
CACHED = {"input_tokens": FRESH, "cache_read_input_tokens": READ,
          "cache_creation_input_tokens": WRITE_5M + WRITE_1H, "cache_creation_1h_input_tokens": WRITE_1H}
THREE = ["Streams", " fail", " in"]  # 16 characters: 4 tokens by the estimate
THINKING = "Let me think about how streams fail."  # 36 characters: 9 tokens
M = 1_000_000


def rates(provider: str, model: str) -> dict[str, float]:
    """The table's rates for `model`, US dollars per million tokens (per request for web search)."""
    found = shipped_rates(provider, model)
    assert found is not None, model
    return {key: (rate.base if rate is not None else math.nan) if key != "web_search" else rate
            for key, rate in (("input", found.input), ("output", found.output), ("cache_read", found.cache_read),
                              ("cache_write", found.cache_write), ("cache_write_1h", found.cache_write_1h),
                              ("web_search", found.web_search))}


def input_side(r: dict[str, float]) -> float:
    """The cached request's input: fresh, read, written for 5 minutes and for an hour, each at its rate."""
    return (FRESH * r["input"] + READ * r["cache_read"] + WRITE_5M * r["cache_write"]
            + WRITE_1H * r["cache_write_1h"]) / M


SCENARIOS = [
    Scenario.single("cost_complete", message_stream(blocks=[TextSpec(THREE, interval=0.01)], output_tokens=OUT,
                                                    web_search_requests=SEARCHES, **CACHED)),
    Scenario.single("cost_idle", message_stream(blocks=[TextSpec([*THREE, Silence(5.0), " ways."], interval=0.02)],
                                                **CACHED)),
    Scenario.single("cost_first_token", message_stream(
        thinking=ThinkingSpec([THINKING[:20], THINKING[20:]], first_delay=0.02, duration=0.1),
        blocks=[TextSpec([Silence(5.0), *THREE])], **CACHED)),
    Scenario.single("cost_silent", message_stream(blocks=[TextSpec([Silence(5.0), *THREE])], **CACHED)),
    Scenario.single("cost_deadline", message_stream(blocks=[TextSpec(["word "] * 60, interval=0.05)], **CACHED)),
    Scenario.single("cost_529", [HttpError(529, "overloaded_error", "Overloaded")]),
    Scenario("cost_retried", [message_stream(blocks=[TextSpec([], interval=0.01)], interrupt=[error_event()],
                                             **CACHED),
                              message_stream(blocks=[TextSpec(THREE, interval=0.01)], output_tokens=OUT, **CACHED)]),
]


@pytest.fixture(scope="module", autouse=True)
def _scenarios(sim: Simulator) -> None:
    for scenario in SCENARIOS:
        sim.add(scenario)


class Costs:
    """One instrumented session's spans and its cost counters."""

    def __init__(self, telemetry: Telemetry, reader: InMemoryMetricReader) -> None:
        self.telemetry, self.reader = telemetry, reader

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        return [p for rm in (data.resource_metrics if data else []) for sm in rm.scope_metrics
                for m in sm.metrics if m.name == name for p in m.data.data_points]

    def counted(self) -> dict[tuple[str, bool], float]:
        """`streamscope.cost` by class and estimated."""
        return {(p.attributes["streamscope.class"], p.attributes["streamscope.cost.estimated"]): p.value
                for p in self.points("streamscope.cost")}


@pytest.fixture
def costs(instrument: Callable[..., Telemetry]) -> Callable[..., Costs]:
    def start(**options: Any) -> Costs:
        reader = InMemoryMetricReader()
        return Costs(instrument(meter_provider=MeterProvider(metric_readers=[reader]), **options), reader)
    return start


def read(sim: Simulator, scenario: str, model: str = SONNET) -> None:
    c = client(sim, scenario)
    try:
        for _ in c.messages.create(model=model, max_tokens=1024, messages=USER, stream=True):
            pass
    except Exception:  # the SDK's error or StreamTimeout: the span says which
        pass
    finally:
        c.close()


def test_a_complete_stream_is_priced_from_its_usage(sim: Simulator, costs: Callable[..., Costs]) -> None:
    got = costs()
    read(sim, "cost_complete")
    r = rates("anthropic", SONNET)
    want = input_side(r) + OUT * r["output"] / M + SEARCHES * r["web_search"]
    attrs = got.telemetry.attrs()
    assert attrs["streamscope.class"] == "complete"
    assert attrs["streamscope.cost.usd"] == pytest.approx(want, rel=1e-12)
    assert attrs["streamscope.cost.estimated"] is False
    assert got.counted() == {("complete", False): pytest.approx(want, rel=1e-12)}
    [point] = got.points("streamscope.cost")
    assert point.attributes["gen_ai.request.model"] == SONNET and point.attributes["streamscope.partial"] is False
    assert got.points("streamscope.cost.unpriced") == []


def test_the_table_has_the_published_rates() -> None:
    """The shipped table's Claude Sonnet 4.5 rates are Anthropic's published ones (US dollars per
    million tokens; a 5-minute cache write 1.25x input, a 1-hour one 2x, a read 0.1x; $10 per
    thousand web searches): the figures above rest on them."""
    assert rates("anthropic", SONNET) == {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75,
                                          "cache_write_1h": 6.0, "web_search": 0.01}


@pytest.mark.parametrize(("scenario", "budgets", "label", "chars"), [
    ("cost_idle", Budgets(idle=0.4), "stalled_mid_stream", len("".join(THREE))),
    ("cost_first_token", Budgets(first_token=1.0), "stalled_before_first_content", len(THINKING)),
    ("cost_deadline", Budgets(deadline=1.0), "deadline_in_answer", None),
])
def test_a_stream_cut_by_a_budget_pays_its_input_and_the_output_so_far(
        sim: Simulator, costs: Callable[..., Costs], scenario: str, budgets: Budgets, label: str,
        chars: int | None) -> None:
    got = costs(budgets=budgets)
    read(sim, scenario)
    attrs = got.telemetry.attrs()
    assert attrs["streamscope.class"] == label
    if chars is None:  # cut somewhere in the answer: the characters the span says arrived
        chars = attrs["streamscope.text_chars"]
        assert chars > 0
    r = rates("anthropic", SONNET)
    want = input_side(r) + math.ceil(chars / 4) * r["output"] / M
    assert attrs["streamscope.cost.usd"] == pytest.approx(want, rel=1e-12)
    assert attrs["streamscope.cost.estimated"] is True
    assert "gen_ai.usage.output_tokens" not in attrs, "the estimate is the cost's, never reported as usage"
    assert got.counted() == {(label, True): pytest.approx(want, rel=1e-12)}


def test_a_stream_cut_before_any_output_pays_its_input(sim: Simulator, costs: Callable[..., Costs]) -> None:
    got = costs(budgets=Budgets(first_token=0.5))
    read(sim, "cost_silent")
    attrs = got.telemetry.attrs()
    assert attrs["streamscope.class"] == "stalled_before_first_content"
    assert attrs["streamscope.cost.usd"] == pytest.approx(input_side(rates("anthropic", SONNET)), rel=1e-12)
    assert attrs["streamscope.cost.estimated"] is False, "no output event arrived: nothing estimated"


def test_an_http_error_costs_nothing(sim: Simulator, costs: Callable[..., Costs]) -> None:
    got = costs()
    read(sim, "cost_529")
    attrs = got.telemetry.attrs()
    assert attrs["streamscope.class"] == "upstream_error"
    assert attrs["streamscope.cost.usd"] == 0.0 and attrs["streamscope.cost.estimated"] is False
    assert got.counted() == {("upstream_error", False): 0.0}


def test_a_model_without_a_price_is_unknown_never_zero(sim: Simulator, costs: Callable[..., Costs]) -> None:
    got = costs()
    read(sim, "cost_complete", model="claude-sim-unpriced-1")
    attrs = got.telemetry.attrs()
    assert attrs["streamscope.class"] == "complete"
    assert "streamscope.cost.usd" not in attrs and "streamscope.cost.estimated" not in attrs
    assert got.points("streamscope.cost") == []
    [point] = got.points("streamscope.cost.unpriced")
    assert point.value == 1 and point.attributes["gen_ai.request.model"] == "claude-sim-unpriced-1"


def test_an_unpriced_model_is_one_warning_per_process(sim: Simulator, costs: Callable[..., Costs],
                                                      caplog: pytest.LogCaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a meter provider the unpriced counter goes nowhere: the log says it, once per model,
    with the override that fixes it."""
    import streamscope.pipeline

    monkeypatch.setattr(streamscope.pipeline, "_WARNED_UNPRICED", set())
    costs()
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        for model in ("claude-sim-unpriced-2", "claude-sim-unpriced-2", "claude-sim-unpriced-3"):
            read(sim, "cost_complete", model=model)
    lines = [r.getMessage() for r in caplog.records if "no price is known" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "anthropic model 'claude-sim-unpriced-2'" in lines[0]
    assert "[prices.\"claude-sim-unpriced-2\"]" in lines[0] and "prices={'claude-sim-unpriced-2'" in lines[0]
    assert "claude-sim-unpriced-3" in lines[1] and all("\n" not in line for line in lines)


def test_the_users_prices_override_by_glob(sim: Simulator, costs: Callable[..., Costs]) -> None:
    got = costs(prices={"claude-sonnet-4-5*": {"input": 1.0, "output": 2.0}, "claude-sim-*": {"input": 0.5,
                                                                                               "output": 1.5}})
    read(sim, "cost_complete")
    read(sim, "cost_complete", model="claude-sim-own-1")
    sonnet, own = got.telemetry.spans()
    r = rates("anthropic", SONNET)  # the keys the override leaves out: the shipped rates
    want = (FRESH * 1.0 + READ * r["cache_read"] + WRITE_5M * r["cache_write"] + WRITE_1H * r["cache_write_1h"]
            + OUT * 2.0) / M + SEARCHES * r["web_search"]
    assert sonnet.attributes["streamscope.cost.usd"] == pytest.approx(want, rel=1e-12)
    # A model only the user prices: flat rates, cache reads and writes at the input rate.
    own_want = ((FRESH + READ + WRITE_5M + WRITE_1H) * 0.5 + OUT * 1.5) / M
    assert own.attributes["streamscope.cost.usd"] == pytest.approx(own_want, rel=1e-12)


def test_the_files_prices_and_a_bad_entry(sim: Simulator, costs: Callable[..., Costs], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "streamscope.toml"
    config.write_text('[prices."claude-sim-*"]\ninput = 0.5\noutput = 1.5\n\n'
                      '[prices."claude-bad-*"]\ninput = "cheap"\n')
    monkeypatch.setenv("STREAMSCOPE_CONFIG", str(config))
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        got = costs(prices={"claude-sim-*": {"output": 3.0}})  # the API's key over the file's
    warned = [r.getMessage() for r in caplog.records if r.name == "streamscope"]
    assert len(warned) == 1 and "claude-bad-*" in warned[0] and "cheap" in warned[0], warned
    assert "\n" not in warned[0]
    read(sim, "cost_complete", model="claude-sim-own-1")
    want = ((FRESH + READ + WRITE_5M + WRITE_1H) * 0.5 + OUT * 3.0) / M
    assert got.telemetry.attrs()["streamscope.cost.usd"] == pytest.approx(want, rel=1e-12)


def test_a_retried_request_costs_every_attempt(sim: Simulator, costs: Callable[..., Costs]) -> None:
    got = costs()
    c = client(sim, "cost_retried")
    result = collect(stream_with_retry(
        lambda: c.messages.create(model=SONNET, max_tokens=1024, messages=USER, stream=True),
        backoff=Backoff(base=0.05, cap=0.1)))
    c.close()
    assert result.reason == "complete" and result.text == "".join(THREE)
    failed, answered = sorted(got.telemetry.spans(), key=lambda s: s.start_time)
    r = rates("anthropic", SONNET)
    # The failed attempt: its input was billed (message_start), no output event arrived.
    assert failed.attributes["streamscope.class"] == "upstream_error"
    assert failed.attributes["streamscope.cost.usd"] == pytest.approx(input_side(r), rel=1e-12)
    assert answered.attributes["streamscope.cost.usd"] == pytest.approx(input_side(r) + OUT * r["output"] / M,
                                                                        rel=1e-12)
    assert result.cost == pytest.approx(2 * input_side(r) + OUT * r["output"] / M, rel=1e-12)
    assert got.counted() == {("upstream_error", False): pytest.approx(input_side(r), rel=1e-12),
                             ("complete", False): pytest.approx(input_side(r) + OUT * r["output"] / M, rel=1e-12)}


def test_a_plain_stream_result_has_its_cost(sim: Simulator, costs: Callable[..., Costs]) -> None:
    got = costs()
    c = client(sim, "cost_complete")
    result = collect(c.messages.create(model=SONNET, max_tokens=1024, messages=USER, stream=True))
    c.close()
    assert result.cost == got.telemetry.attrs()["streamscope.cost.usd"] > 0


# -- OpenAI: both APIs ------------------------------------------------------------------------------

MINI = "gpt-4o-mini"
PROMPT, CACHED_PROMPT, COMPLETION = 1200, 1024, 300


@pytest.fixture(scope="module")
def osim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        for scenario in [
            Scenario.single("chat_priced", chat_stream(text=TextSpec(THREE, interval=0.01), prompt_tokens=PROMPT,
                                                       cached_tokens=CACHED_PROMPT, completion_tokens=COMPLETION)),
            Scenario.single("chat_idle", chat_stream(text=TextSpec([*THREE, Silence(5.0), " ways."], interval=0.02),
                                                     prompt_tokens=PROMPT)),
            Scenario.single("chat_silent", chat_stream(text=TextSpec(THREE), first_event_delay=5.0)),
            Scenario.single("responses_priced", responses_stream(
                text=TextSpec(THREE, interval=0.01), input_tokens=PROMPT, cached_tokens=CACHED_PROMPT,
                output_tokens=COMPLETION)),
        ]:
            simulator.add(scenario)
        yield simulator


@pytest.fixture
def ocosts() -> Iterator[Callable[..., Costs]]:
    instrumentor = OpenAIInstrumentor()

    def start(**options: Any) -> Costs:
        exporter, provider, ends = InMemorySpanExporter(), TracerProvider(), EndCounter()
        provider.add_span_processor(ends)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        made, reader = Telemetry(exporter, provider, ends), InMemoryMetricReader()
        instrumentor.instrument(tracer_provider=made.provider, meter_provider=MeterProvider(metric_readers=[reader]),
                                **options)
        return Costs(made, reader)

    yield start
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


def oclient(osim: Simulator, scenario: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=osim.openai_url(scenario), api_key="test", max_retries=0, timeout=15)


def test_openai_chat_is_priced_with_its_cached_prompt(osim: Simulator, ocosts: Callable[..., Costs]) -> None:
    got = ocosts()
    c = oclient(osim, "chat_priced")
    for _ in c.chat.completions.create(model=MINI, messages=USER, stream=True,
                                       stream_options={"include_usage": True}):
        pass
    c.close()
    r = rates("openai", MINI)
    # prompt_tokens include the cached ones: the rest at the input rate, the cached at the read rate.
    want = ((PROMPT - CACHED_PROMPT) * r["input"] + CACHED_PROMPT * r["cache_read"] + COMPLETION * r["output"]) / M
    attrs = got.telemetry.attrs()
    assert attrs["streamscope.cost.usd"] == pytest.approx(want, rel=1e-12)
    assert attrs["streamscope.cost.estimated"] is False


def read_chat(osim: Simulator, scenario: str) -> None:
    """One streamed chat completion read to its end, or to the error that ends it (the span says which)."""
    c = oclient(osim, scenario)
    try:
        for _ in c.chat.completions.create(model=MINI, messages=USER, stream=True,
                                           stream_options={"include_usage": True}):
            pass
    except Exception:
        pass
    finally:
        c.close()


PROMPT_CHARS = len("user") + len("How do streams fail?")  # USER's strings: 24 characters, 6 tokens


def test_openai_chat_cut_by_a_budget_estimates_its_input_and_output(osim: Simulator,
                                                                    ocosts: Callable[..., Costs]) -> None:
    """Chat Completions reports usage only in its last chunk: a cut stream's input is estimated from
    the prompt's characters, its output from the text that arrived."""
    got = ocosts(budgets=Budgets(idle=0.4))
    read_chat(osim, "chat_idle")
    attrs = got.telemetry.attrs()
    assert attrs["streamscope.class"] == "stalled_mid_stream"
    r = rates("openai", MINI)
    want = (math.ceil(PROMPT_CHARS / 4) * r["input"] + math.ceil(16 / 4) * r["output"]) / M
    assert attrs["streamscope.cost.usd"] == pytest.approx(want, rel=1e-12)
    assert attrs["streamscope.cost.estimated"] is True
    assert "gen_ai.usage.input_tokens" not in attrs, "the estimate is the cost's, never reported as usage"


def test_openai_killed_before_any_content_pays_its_estimated_input(osim: Simulator,
                                                                   ocosts: Callable[..., Costs]) -> None:
    """A reasoning model thinks before its first chunk: killed by the first-token budget, it was still
    billed its input (the request was accepted: its headers came)."""
    got = ocosts(budgets=Budgets(first_token=0.5))
    read_chat(osim, "chat_silent")
    attrs = got.telemetry.attrs()
    assert attrs["streamscope.class"] == "stalled_before_first_content"
    want = math.ceil(PROMPT_CHARS / 4) * rates("openai", MINI)["input"] / M
    assert attrs["streamscope.cost.usd"] == pytest.approx(want, rel=1e-12) and want > 0
    assert attrs["streamscope.cost.estimated"] is True


def test_openai_responses_is_priced(osim: Simulator, ocosts: Callable[..., Costs]) -> None:
    got = ocosts()
    c = oclient(osim, "responses_priced")
    for _ in c.responses.create(model=MINI, input="How do streams fail?", stream=True):
        pass
    c.close()
    r = rates("openai", MINI)
    want = ((PROMPT - CACHED_PROMPT) * r["input"] + CACHED_PROMPT * r["cache_read"] + COMPLETION * r["output"]) / M
    assert got.telemetry.attrs()["streamscope.cost.usd"] == pytest.approx(want, rel=1e-12)


def test_instrument_loads_the_price_table_so_no_stream_end_pays_for_it() -> None:
    """The table is tens of milliseconds of imports (seconds under tracemalloc): `instrument()` loads
    it, once per process, and importing streamscope does not."""
    import subprocess
    import sys

    code = ("import sys, streamscope; loaded = 'genai_prices' in sys.modules; "
            "streamscope.AnthropicInstrumentor().instrument(); print(loaded, 'genai_prices' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
