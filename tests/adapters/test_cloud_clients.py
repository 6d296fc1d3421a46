"""Every cloud client of the `anthropic` SDK, sync and async, through streamscope.

Each real client talks over loopback to `CloudSimulator`, which answers on the client's own URL
path and wire format (Bedrock: AWS event-stream frames with their CRCs and exception frames;
the rest: server-sent events) with the first-party scenarios on the same clock. Credentials
are offline: SigV4 with fixed keys (signed locally by botocore), bearer tokens and API keys
given to the constructor. The matrix checks what streamscope records per client: the class,
`gen_ai.provider.name`, the request id, usage, and the budgets firing with `StreamTimeout`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.lib.bedrock._stream_decoder import AWSEventStreamDecoder
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import sdk_lines
from conftest import USER, Telemetry, offline_class
from streamscope import Budgets, StreamTimeout
from streamscope.pricing import shipped_rates
from streamscope.simulator import SCENARIOS, Event, Scenario, TextSpec, ThinkingSpec, error_event, message_stream
from streamscope.simulator.catalog import LONG, THOUGHTS, words
from streamscope.simulator.cloud import (
    AWS_ACCESS_KEY,
    CLOUDS,
    EVENTSTREAM,
    GOOGLE_WORKSPACE,
    VERTEX_PROJECT,
    Cloud,
    CloudSimulator,
    chunk_frame,
    cloud_request_id,
    eventstream_message,
    exception_frame,
)

SCALE = 0.2
"""Every script plays at a fifth of its catalog timing (a 10 s stall lasts 2 s). Budgets are
plain seconds, each far from the scaled script's own gaps on either side, so a loaded machine
changes how long a case takes, not its outcome."""
THINKING = {"type": "enabled", "budget_tokens": 4096}
EXTRA = [
    # Thinking for 10 s (2 s scaled) before any text: a deadline lands in the thinking.
    Scenario.single("long_thinking", message_stream(
        thinking=ThinkingSpec(THOUGHTS * 10, first_delay=0.2, duration=10.0),
        blocks=[TextSpec(words(LONG)[:5], first_delay=0.1, interval=0.03)], thinking_tokens=400)),
    # Nothing at all for 25 s (5 s scaled): a first-token budget fires first.
    Scenario.single("long_silent_start", message_stream(first_event_delay=25.0,
                                                        blocks=[TextSpec(["late"], interval=0.05)])),
    # Text from 0.2 s, a delta every 0.1 s for 10 s: a deadline lands in the answer.
    Scenario.single("long_slow_answer", message_stream(
        blocks=[TextSpec(words(LONG)[:100], first_delay=0.2, interval=0.1)])),
    Scenario.single("inband_throttled", message_stream(
        blocks=[TextSpec(["Streams", " fail", " in"], interval=0.03)],
        interrupt=[error_event("rate_limit_error", "Too many tokens, please wait", delay=0.05)])),
]
PROVIDER: dict[Cloud, str] = {
    "bedrock": "aws.bedrock", "mantle": "aws.bedrock", "vertex": "gcp.vertex_ai",
    "foundry": "anthropic", "aws": "anthropic", "google_cloud": "anthropic",
}
AWS_KEYS = {"aws_access_key": AWS_ACCESS_KEY, "aws_secret_key": "test", "aws_region": "us-east-1"}


CLIENT_CLASS: dict[Cloud, str] = {
    "bedrock": "AnthropicBedrock", "mantle": "AnthropicBedrockMantle", "vertex": "AnthropicVertex",
    "foundry": "AnthropicFoundry", "aws": "AnthropicAWS", "google_cloud": "AnthropicGoogleCloud",
}
HERE: list[Cloud] = [c for c in CLOUDS if hasattr(anthropic, CLIENT_CLASS[c])]
"""The cloud clients the installed SDK line has (the newest has them all; anthropic 0.75 has Bedrock
and Vertex): the version matrix runs this file on each line."""


def test_the_newest_line_has_every_cloud_client() -> None:
    if hasattr(anthropic, "AnthropicAWS"):  # a line from after every client here shipped
        assert HERE == list(CLOUDS)
    assert {"bedrock", "vertex"} <= set(HERE)


def make_client(sim: CloudSimulator, cloud: Cloud, scenario: str, *, aio: bool) -> Any:
    """`cloud`'s real client, pointed at the simulator, with offline test credentials."""
    url = sim.base_url(cloud, scenario)
    common: dict[str, Any] = {"base_url": url, "max_retries": 0}
    cls = getattr(anthropic, ("Async" if aio else "") + CLIENT_CLASS[cloud])
    if cloud in ("bedrock", "mantle"):
        return cls(**AWS_KEYS, **common)
    if cloud == "vertex":
        return cls(region="us-east5", project_id=VERTEX_PROJECT, access_token="test", **common)
    if cloud == "foundry":
        return cls(api_key="test", **common)
    if cloud == "aws":
        return cls(workspace_id="wrkspc_test", **AWS_KEYS, **common)
    # The workspace is in the base URL already; anthropic 0.x's client asks for it as an argument too.
    return cls(token_provider=lambda: "test", workspace_id=GOOGLE_WORKSPACE, **common)


HEALTHY = Budgets(first_token=5.0, idle=3.0)  # loose: a loaded machine can take a second to a first event


@dataclass(frozen=True)
class Case:
    scenario: str
    label: str
    budgets: Budgets = HEALTHY
    """The call's budgets; the default never fires on a healthy scaled stream."""
    fired: str | None = None
    """The budget that must fire (raising `StreamTimeout`)."""
    raises: type[BaseException] | None = None
    request: dict[str, Any] = field(default_factory=dict)


# Healthy streams run under loose budgets that must not fire; each stall and deadline case sets
# the one budget it is about well inside its stall (idle 0.2 s against a 2 s stall, first_token
# 1 s against a 5 s silent start, a deadline of 1.5 or 2 s against 2 s of thinking or 10 s of
# answering). A loaded machine only makes a stream's events come later: the stall cases have no
# first-token budget (a CI run under six workers saw the three words of one after 1 s), and each
# deadline sits as late as its stall allows.
CASES = [
    Case("complete", "complete"),
    Case("thinking", "complete", request={"thinking": THINKING}),
    Case("truncated", "truncated"),
    Case("refused", "refused"),
    Case("inband_error", "upstream_error", raises=anthropic.APIStatusError),
    Case("inband_throttled", "upstream_error", raises=anthropic.APIStatusError),
    Case("cut_connection", "upstream_error", raises=sdk_lines.cut()),
    Case("pinging_stall", "stalled_mid_stream", Budgets(first_token=None, idle=0.2), fired="idle"),
    Case("silent_stall", "stalled_mid_stream", Budgets(first_token=None, idle=0.2), fired="idle"),
    # 5 s of silence (scaled): a budget of a second fires with room for a loaded machine to answer first.
    Case("long_silent_start", "stalled_before_first_content", Budgets(first_token=1.0, idle=1.0),
         fired="first_token"),
    Case("long_thinking", "deadline_in_thinking", Budgets(first_token=5.0, idle=1.0, deadline=1.5),
         fired="deadline", request={"thinking": THINKING}),
    # Text from 0.2 s: a deadline at 2 s lands in the answer with room for a loaded machine's delays
    # (a CI run under six workers saw the first text of one after 1 s).
    Case("long_slow_answer", "deadline_in_answer", Budgets(first_token=4.0, idle=1.5, deadline=2.0), fired="deadline"),
]
# What each client's in-band error turns into: Bedrock re-frames it as an exception frame.
ERROR_TYPE = {
    "inband_error": {"bedrock": "modelStreamErrorException"},
    "inband_throttled": {"bedrock": "throttlingException"},
}
FIRST_PARTY_ERROR = {"inband_error": "overloaded_error", "inband_throttled": "rate_limit_error"}


@pytest.fixture(scope="module")
def cloud_sim() -> Iterator[CloudSimulator]:
    with CloudSimulator({**SCENARIOS, **{s.name: s for s in EXTRA}}, time_scale=SCALE) as simulator:
        yield simulator


@pytest.fixture(autouse=True)
def offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ambient credential or endpoint may change which path a client takes, and no AWS
    metadata service is asked: every credential is the one the test gives."""
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "ANTHROPIC_AWS_API_KEY", "AWS_PROFILE", "ANTHROPIC_BEDROCK_BASE_URL",
                 "ANTHROPIC_BEDROCK_MANTLE_BASE_URL", "ANTHROPIC_VERTEX_BASE_URL", "ANTHROPIC_FOUNDRY_BASE_URL",
                 "ANTHROPIC_AWS_BASE_URL", "ANTHROPIC_GOOGLE_CLOUD_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")


def params(case: Case) -> dict[str, Any]:
    return {"model": "claude-sim-1", "max_tokens": 1024, "messages": USER, **case.request}


def run_sync(client: Any, path: str, case: Case) -> BaseException | None:
    try:
        if path == "create":
            for _ in client.messages.create(stream=True, **params(case)):
                pass
        else:
            with client.messages.stream(**params(case)) as stream:
                for _ in stream:
                    pass
    except Exception as exc:
        return exc
    return None


async def run_async(client: Any, path: str, case: Case) -> BaseException | None:
    try:
        if path == "create":
            async for _ in await client.messages.create(stream=True, **params(case)):
                pass
        else:
            async with client.messages.stream(**params(case)) as stream:
                async for _ in stream:
                    pass
    except Exception as exc:
        return exc
    return None


def final_usage(scenario: str) -> dict[str, Any]:
    """The usage the script's ``message_delta`` reports (what the span must carry)."""
    steps = {**SCENARIOS, **{s.name: s for s in EXTRA}}[scenario].steps_for(0)
    return next(s.data["usage"] for s in steps if isinstance(s, Event) and s.name == "message_delta")


def check(sim: CloudSimulator, telemetry: Telemetry, reader: InMemoryMetricReader, cloud: Cloud, case: Case,
          caught: BaseException | None, first: int) -> None:
    if case.fired is not None:
        assert isinstance(caught, StreamTimeout), repr(caught)
        assert caught.budget == case.fired
    elif case.scenario == "cut_connection":
        assert sdk_lines.is_cut(caught), repr(caught)
    elif case.raises is not None:
        assert isinstance(caught, case.raises), repr(caught)
    else:
        assert caught is None, repr(caught)

    span = telemetry.one()
    attrs = dict(span.attributes or {})
    assert attrs["streamscope.class"] == case.label == offline_class(span)
    assert attrs["gen_ai.provider.name"] == PROVIDER[cloud]
    assert len(sim.requests) == first + 1, "one request per call (no retries)"
    assert attrs["anthropic.request.id"] == cloud_request_id(cloud, sim.requests[first].request_id)
    assert attrs.get("streamscope.budget.fired") == case.fired
    # What the server saw: a budget closed the connection; a cut was the server's; else it finished.
    outcome = "disconnected" if case.fired else "cut" if case.scenario == "cut_connection" else "completed"
    assert sim.wait_for_outcome(first).outcome == outcome
    if case.scenario in ERROR_TYPE:
        assert attrs["error.type"] == ERROR_TYPE[case.scenario].get(cloud, FIRST_PARTY_ERROR[case.scenario])
    if case.scenario == "pinging_stall":
        assert attrs["streamscope.pings"] > 0, "the pings reached streamscope"
    if case.fired is None and case.raises is None:
        usage = final_usage(case.scenario)
        assert attrs["gen_ai.usage.input_tokens"] == usage["input_tokens"]
        assert attrs["gen_ai.usage.output_tokens"] == usage["output_tokens"]
        thinking = usage.get("output_tokens_details", {}).get("thinking_tokens")
        assert attrs.get("gen_ai.usage.reasoning.output_tokens") == thinking
    else:
        assert "gen_ai.usage.output_tokens" not in attrs, "a stream that ended early has no final usage"

    data = reader.get_metrics_data()
    points = [p for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
              if m.name == "streamscope.requests" for p in m.data.data_points]
    assert [(p.attributes["gen_ai.provider.name"], p.attributes["streamscope.class"]) for p in points] == [
        (PROVIDER[cloud], case.label)]
    telemetry.assert_each_ended_once()


@pytest.fixture
def metrics_reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


def meters(reader: InMemoryMetricReader) -> MeterProvider:
    return MeterProvider(metric_readers=[reader], shutdown_on_exit=False)


MATRIX = [pytest.param(cloud, path, case, id=f"{cloud}-{path}-{case.scenario}")
          for cloud in HERE for path in ("create", "stream") for case in CASES]


@pytest.mark.parametrize(("cloud", "path", "case"), MATRIX)
def test_matrix_sync(cloud_sim: CloudSimulator, instrument: Callable[..., Telemetry],
                     metrics_reader: InMemoryMetricReader, cloud: Cloud, path: str, case: Case) -> None:
    telemetry = instrument(budgets=case.budgets, meter_provider=meters(metrics_reader))
    first = len(cloud_sim.requests)
    with make_client(cloud_sim, cloud, case.scenario, aio=False) as client:
        caught = run_sync(client, path, case)
    check(cloud_sim, telemetry, metrics_reader, cloud, case, caught, first)


@pytest.mark.parametrize(("cloud", "path", "case"), MATRIX)
async def test_matrix_async(cloud_sim: CloudSimulator, instrument: Callable[..., Telemetry],
                            metrics_reader: InMemoryMetricReader, cloud: Cloud, path: str, case: Case) -> None:
    telemetry = instrument(budgets=case.budgets, meter_provider=meters(metrics_reader))
    first = len(cloud_sim.requests)
    async with make_client(cloud_sim, cloud, case.scenario, aio=True) as client:
        caught = await run_async(client, path, case)
    check(cloud_sim, telemetry, metrics_reader, cloud, case, caught, first)


# -- what each client sends --------------------------------------------------------------------

SENT: dict[Cloud, Callable[[dict[str, str], dict[str, Any]], bool]] = {
    "bedrock": lambda h, b: "/us-east-1/bedrock/aws4_request" in h["authorization"]
    and "anthropic_version" in b,
    "mantle": lambda h, b: "/us-east-1/bedrock-mantle/aws4_request" in h["authorization"] and "model" in b,
    "vertex": lambda h, b: h["authorization"] == "Bearer test" and "anthropic_version" in b,
    "foundry": lambda h, b: h["x-api-key"] == "test" and "authorization" not in h,
    "aws": lambda h, b: "/us-east-1/aws-external-anthropic/aws4_request" in h["authorization"]
    and h["anthropic-workspace-id"] == "wrkspc_test",
    "google_cloud": lambda h, b: h["authorization"] == "Bearer test" and "x-api-key" not in h,
}


@pytest.mark.parametrize("cloud", HERE)
def test_each_client_sends_its_own_credentials(cloud_sim: CloudSimulator, telemetry: Telemetry, cloud: Cloud) -> None:
    """The offline credentials took each client's real auth path (SigV4 per service, bearer, key),
    and streamscope's trace context went out with the request."""
    with make_client(cloud_sim, cloud, "complete", aio=False).messages.stream(**params(CASES[0])) as stream:
        stream.until_done()
    log = cloud_sim.requests[-1]
    assert SENT[cloud](log.headers, log.body), (log.headers, log.body)
    span = telemetry.one()
    assert log.headers["traceparent"].split("-")[1] == format(span.context.trace_id, "032x")


# -- the Bedrock event stream, byte for byte ---------------------------------------------------

# A message from botocore's own decoder tests: three string headers and a JSON payload.
REFERENCE_MESSAGE = (
    b"\x00\x00\x00~\x00\x00\x00O\xc5\xa3\xdd\xc6\r:message-type\x07\x00\x05event\x0b:event-type\x07\x00"
    b"\x10initial-response\r:content-type\x07\x00\ttext/json{\"InitialResponse\": \"sometext\"}\xf6\x98$\x83"
)


def test_eventstream_encoding_matches_the_reference_bytes() -> None:
    headers = ((":message-type", "event"), (":event-type", "initial-response"), (":content-type", "text/json"))
    assert eventstream_message(headers, b'{"InitialResponse": "sometext"}') == REFERENCE_MESSAGE


def raw_bedrock(sim: CloudSimulator, scenario: str) -> httpx2.Response:
    """The Bedrock route's response, read by a plain HTTP client (signed by botocore as the
    SDK signs it): the bytes on the wire, before any SDK decoding."""
    url = f"{sim.base_url('bedrock', scenario)}/model/claude-sim-1/invoke-with-response-stream"
    body = json.dumps({"max_tokens": 64, "messages": USER})
    signed = AWSRequest("POST", url, data=body, headers={"content-type": "application/json"})
    SigV4Auth(Credentials(AWS_ACCESS_KEY, "test"), "bedrock", "us-east-1").add_auth(signed)
    with httpx2.Client() as http:
        return http.post(url, content=body, headers=dict(signed.headers.items()))


def test_bedrock_frames_carry_the_first_party_events_byte_for_byte(cloud_sim: CloudSimulator) -> None:
    """Every chunk frame decodes (botocore checks both CRCs) to the exact JSON bytes of the
    first-party event, in order, pings included; ``message_stop`` gains Bedrock's metrics."""
    response = raw_bedrock(cloud_sim, "basic_text")
    assert response.status_code == 200
    assert response.headers["content-type"] == EVENTSTREAM
    assert response.headers["x-amzn-requestid"] and response.headers["request-id"].startswith("req_bdrk_")
    buffer = EventStreamBuffer()
    buffer.add_data(response.content)
    frames = list(buffer)
    decoded = []
    for frame in frames:
        assert frame.headers == {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}
        payload = json.loads(frame.payload)
        assert set(payload) == {"bytes", "p"}
        decoded.append(base64.b64decode(payload["bytes"]))
    wire = [data for _, data in _sse_events(SCENARIOS["basic_text"])]
    assert len(decoded) == len(wire)
    for got, want in zip(decoded[:-1], wire[:-1], strict=True):
        assert got == want
    stop = json.loads(decoded[-1])
    assert stop.pop("amazon-bedrock-invocationMetrics")["outputTokenCount"] > 0
    assert stop == json.loads(wire[-1])


def _sse_events(scenario: Scenario) -> list[tuple[str, bytes]]:
    """(event, data) of every event in a scenario's SSE bytes, however its steps carry them."""
    raw = b"".join(step.encode() for step in scenario.steps_for(0) if hasattr(step, "encode"))
    events = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        fields = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line)
        if b"data" in fields:
            events.append((fields.get(b"event", b"").decode(), fields[b"data"]))
    return events


def test_the_sdk_decoder_reads_the_frames_split_anywhere() -> None:
    """The SDK's own Bedrock decoder, fed the frames in odd-sized pieces, gives back the events,
    and an exception frame as the in-band ``error`` event the SDK raises from."""
    events = [b'{"type":"message_start","message":{"id":"msg_1"}}', b'{"type":"ping"}', b'{"type":"message_stop"}']
    wire = b"".join(chunk_frame(e) for e in events)
    wire += exception_frame({"type": "rate_limit_error", "message": "slow down"})
    pieces = [wire[i:i + 7] for i in range(0, len(wire), 7)]
    got = [(sse.event, sse.data) for sse in AWSEventStreamDecoder().iter_bytes(iter(pieces))]
    assert got[:3] == [("message_start", events[0].decode()), ("ping", events[1].decode()),
                       ("message_stop", events[2].decode())]
    assert got[3][0] == "error"
    assert json.loads(got[3][1]) == {"type": "error", "error": {"type": "throttlingException", "message": "slow down"}}


def test_a_corrupted_frame_fails_its_crc() -> None:
    frame = bytearray(chunk_frame(b'{"type":"ping"}'))
    frame[-10] ^= 0x01
    buffer = EventStreamBuffer()
    buffer.add_data(bytes(frame))
    with pytest.raises(ChecksumMismatch):
        list(buffer)


def test_model_stream_error_keeps_the_model_status() -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(exception_frame({"type": "overloaded_error", "message": "Overloaded"}))
    (frame,) = list(buffer)
    assert frame.headers[":exception-type"] == "modelStreamErrorException"
    assert frame.headers[":message-type"] == "exception"
    body = json.loads(frame.payload)
    assert body["originalStatusCode"] == 529
    assert json.loads(body["originalMessage"])["error"]["type"] == "overloaded_error"


# -- what each client's call cost --------------------------------------------------------------

CLOUD_MODEL: dict[Cloud, str] = {
    "bedrock": "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "mantle": "anthropic.claude-sonnet-4-5-20250929-v1:0",
    "vertex": "claude-sonnet-4-5@20250929", "foundry": "claude-sonnet-4-5", "aws": "claude-sonnet-4-5",
    "google_cloud": "claude-sonnet-4-5@20250929",
}
"""A Claude Sonnet 4.5 id as each platform spells it."""


@pytest.mark.parametrize("cloud", HERE)
def test_each_clients_model_id_is_priced(cloud_sim: CloudSimulator, instrument: Callable[..., Telemetry],
                                         metrics_reader: InMemoryMetricReader, cloud: Cloud) -> None:
    """A cloud's model id maps to its price: Bedrock's ids at Bedrock's rates (its in-region and
    geographic endpoints cost 10% over the first-party API for this model), Vertex and the rest at
    Anthropic's."""
    telemetry = instrument(meter_provider=meters(metrics_reader))
    with make_client(cloud_sim, cloud, "complete", aio=False) as client:
        for _ in client.messages.create(model=CLOUD_MODEL[cloud], max_tokens=1024, messages=USER, stream=True):
            pass
    attrs = telemetry.attrs()
    usage = final_usage("complete")
    model = attrs.get("gen_ai.response.model") or attrs["gen_ai.request.model"]
    first_party = shipped_rates("anthropic", "claude-sonnet-4-5")
    assert first_party is not None and first_party.input is not None and first_party.output is not None
    # Bedrock's in-region and geographic (`us.`) endpoints cost 10% more; its `global.` ones do not.
    premium = 1.1 if PROVIDER[cloud] == "aws.bedrock" and not model.startswith("global.") else 1.0
    r_in, r_out = first_party.input.base, first_party.output.base
    want = premium * (usage["input_tokens"] * r_in + usage["output_tokens"] * r_out) / 1e6
    assert attrs["streamscope.cost.usd"] == pytest.approx(want, rel=1e-9), (cloud, model)
    assert attrs["streamscope.cost.estimated"] is False
