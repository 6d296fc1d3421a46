"""Span attribute names, and the attributes of a finished record.

The classifier reads only what is written here, so `classify()` on an exported span gives the
label the instrumentation wrote live.
"""

from __future__ import annotations

from opentelemetry.util.types import AttributeValue

from .failures import code_of
from .record import RequestInfo, StreamRecord

# OpenTelemetry GenAI semantic conventions (v1.41).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_STREAM = "gen_ai.request.stream"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_TOP_P = "gen_ai.request.top_p"
REQUEST_TOP_K = "gen_ai.request.top_k"
REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
REQUEST_FREQUENCY_PENALTY = "gen_ai.request.frequency_penalty"
REQUEST_PRESENCE_PENALTY = "gen_ai.request.presence_penalty"
REQUEST_SEED = "gen_ai.request.seed"
REQUEST_CHOICE_COUNT = "gen_ai.request.choice.count"
REQUEST_REASONING_LEVEL = "gen_ai.request.reasoning.level"
REQUEST_PREVIOUS_RESPONSE_ID = "gen_ai.request.previous_response.id"
OUTPUT_TYPE = "gen_ai.output.type"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
RESPONSE_ID = "gen_ai.response.id"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_write.input_tokens"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
# On the `gen_ai.client.operation.exception` event only (never on the span): an adapter records
# them with the response's facts (`StreamRecorder.response_attribute`), `record_attributes` leaves
# them off the span, and the span exporter puts them on the event.
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
EVENT_ONLY = (EXCEPTION_TYPE, EXCEPTION_MESSAGE)
# Carried over from the SDK's own span, which streamscope replaces. The request id's key, and
# any attribute only one provider has, come from that provider's adapter (`RequestInfo`).
HTTP_STATUS = "http.response.status_code"
RELAY_OUTCOME = "streamscope.relay.outcome"
"""How a relayed stream ended for the browser: `done`, `error`, `client_disconnect`."""
RESEND_COUNT = "http.request.resend_count"

# streamscope.
CLASS = "streamscope.class"
PARTIAL = "streamscope.partial"
FAILURE_CODE = "streamscope.failure.code"
VERIFIED = "streamscope.verified"
ROUTE = "streamscope.route"
STOP_REASON = "streamscope.stop_reason"  # the provider's own
REFUSAL = "streamscope.refusal"
PAUSED = "streamscope.paused"
TIME_TO_HEADERS = "streamscope.time_to_headers"
TIME_TO_FIRST_CONTENT = "streamscope.time_to_first_content"
TIME_TO_FIRST_TEXT = "streamscope.time_to_first_text"
THINKING_START = "streamscope.thinking.start"
THINKING_END = "streamscope.thinking.end"
THINKING_BUDGET_TOKENS = "streamscope.thinking.budget_tokens"
MAX_GAP = "streamscope.max_gap"
PINGS = "streamscope.pings"
CONTENT_EVENTS = "streamscope.content_events"
TEXT_CHARS = "streamscope.text_chars"
DECODE_RATE = "streamscope.decode_rate"
BUDGET_FIRED = "streamscope.budget.fired"
BUDGET_FIRST_TOKEN = "streamscope.budget.first_token"
BUDGET_IDLE = "streamscope.budget.idle"
BUDGET_DEADLINE = "streamscope.budget.deadline"
ATTEMPTS = "streamscope.attempts"
CONTINUATION = "streamscope.continuation"  # which continuation of a relayed answer a call is (1, 2, ...)
RESUME_OUTCOME = "streamscope.resume.outcome"  # a resumed connection's span, and the resumes metric's label
RESUME_REPLAYED_EVENTS = "streamscope.resume.replayed_events"
RESUME_COUNT = "streamscope.resume.count"  # the generating call's span
RESUME_ABANDONED = "streamscope.resume.abandoned"
ATTEMPT = "streamscope.attempt"
"""Which try of one logical call a framework's retry is (2, 3, ...; `core.attempts`): span only."""
LINK = "streamscope.link"
PREVIOUS_ATTEMPT = "previous_attempt"
"""The span link from a framework's retry to the attempt before it (`streamscope.link`)."""
COST_USD = "streamscope.cost.usd"
COST_ESTIMATED = "streamscope.cost.estimated"
SERVER_TOOL_CALLS = "streamscope.server_tool.calls"
SERVER_TOOL_DURATION = "streamscope.server_tool.duration"
SERVER_TOOL_NAME = "streamscope.server_tool.name"  # on the server_tool event
BUDGET = "streamscope.budget"  # on the budget_fired event and the firings metric
UNOBSERVED_BY = "streamscope.unobserved.by"  # on streamscope.unobserved_calls: who took the call over

# Span events.
EVENT_FIRST_CONTENT = "streamscope.first_content"
EVENT_THINKING_DONE = "streamscope.thinking_done"
EVENT_BUDGET_FIRED = "streamscope.budget_fired"
EVENT_SERVER_TOOL = "streamscope.server_tool"

def _put(attrs: dict[str, AttributeValue], key: str, value: AttributeValue | None) -> None:
    if value is not None:
        attrs[key] = value


def start_attributes(request: RequestInfo) -> dict[str, AttributeValue]:
    """What the span starts with, so that samplers see it."""
    attrs: dict[str, AttributeValue] = {OPERATION: "chat", PROVIDER: request.provider, REQUEST_STREAM: True}
    _put(attrs, REQUEST_MODEL, request.model)
    _put(attrs, REQUEST_MAX_TOKENS, request.max_tokens)
    _put(attrs, SERVER_ADDRESS, request.server_address)
    _put(attrs, SERVER_PORT, request.server_port)
    _put(attrs, ROUTE, request.route)
    _put(attrs, THINKING_BUDGET_TOKENS, request.thinking_budget)
    attrs.update(request.attributes)
    budgets = request.budgets
    _put(attrs, BUDGET_FIRST_TOKEN, budgets.first_token)
    _put(attrs, BUDGET_IDLE, budgets.idle)
    _put(attrs, BUDGET_DEADLINE, budgets.deadline)
    return attrs


def error_type(record: StreamRecord) -> str | None:
    """`error.type`, first match wins; None for a normal end (the final event, a finish reason)."""
    if record.budget_fired is not None:
        return "timeout"
    if record.end == "error":
        return record.error_type or "_OTHER"
    if record.completed and record.finish_reason is not None:
        return None
    if record.end in ("closed", "abandoned", "cancelled") and not record.completed:
        return "cancelled"
    return "incomplete_stream"  # the body ended without its final events (or the final event came alone)


def finish_reasons(record: StreamRecord) -> list[str]:
    """The semconv finish reason; `["error"]` whenever `error.type` is set, so the two agree."""
    if error_type(record) is not None or record.finish_reason is None:
        return ["error"]
    return [record.finish_reason]


def record_attributes(record: StreamRecord) -> dict[str, AttributeValue]:
    """Every attribute of the finished span but the class (see `classify`)."""
    attrs = start_attributes(record.request)
    err = error_type(record)
    _put(attrs, ERROR_TYPE, err)
    attrs[FINISH_REASONS] = finish_reasons(record)
    _put(attrs, RESPONSE_ID, record.response_id)
    _put(attrs, RESPONSE_MODEL, record.response_model)
    attrs.update((key, value) for key, value in record.attributes if key not in EVENT_ONLY)
    _put(attrs, TIME_TO_FIRST_CHUNK, record.time_to_first_chunk)
    # Input-side usage is known from the first event (message_start) and billed even when the
    # stream is cut later: on every span that got that far, the final usage overriding it where it
    # restates it. Output-side usage only from the final usage: before it, message_start's
    # output_tokens is a placeholder.
    _put(attrs, INPUT_TOKENS, record.input_tokens)
    _put(attrs, CACHE_READ_TOKENS, record.cache_read_tokens)
    _put(attrs, CACHE_WRITE_TOKENS, record.cache_write_tokens)
    if record.usage_final:
        _put(attrs, OUTPUT_TOKENS, record.output_tokens)
        _put(attrs, REASONING_TOKENS, record.reasoning_tokens)
    _put(attrs, HTTP_STATUS, record.http_status)
    _put(attrs, RESEND_COUNT, record.resend_count or None)
    _put(attrs, record.request.request_id_key, record.request_id)
    attrs[PARTIAL] = err is not None and record.time_to_first_content is not None
    _put(attrs, STOP_REASON, record.stop_reason)
    if record.refusal:
        attrs[REFUSAL] = True
    if record.paused:
        attrs[PAUSED] = True
    for key, seconds in ((TIME_TO_HEADERS, record.time_to_headers),
                         (TIME_TO_FIRST_CONTENT, record.time_to_first_content),
                         (TIME_TO_FIRST_TEXT, record.time_to_first_text),
                         (THINKING_START, record.thinking_start), (THINKING_END, record.thinking_end),
                         (MAX_GAP, record.max_gap)):
        _put(attrs, key, seconds)
    if record.server_tool_calls:
        attrs[SERVER_TOOL_CALLS] = record.server_tool_calls
        _put(attrs, SERVER_TOOL_DURATION, record.server_tool_duration)
    attrs[PINGS] = record.pings
    attrs[CONTENT_EVENTS] = record.content_events
    attrs[TEXT_CHARS] = record.text_chars
    _put(attrs, DECODE_RATE, record.decode_rate)
    _put(attrs, BUDGET_FIRED, record.budget_fired)
    _put(attrs, FAILURE_CODE, code_of(record))
    _put(attrs, ATTEMPTS, record.request.attempts)
    return attrs
