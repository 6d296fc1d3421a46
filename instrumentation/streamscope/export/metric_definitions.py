"""What each metric is, apart from how it is recorded: the bucket boundaries, the GenAI
instruments' names in either naming mode, and the metric-only attribute names (docs/metrics.md).
The instruments themselves (name, kind, unit, description, buckets) are listed in `instruments.py`.

The GenAI names. The conventions are renaming the client inference metrics (changelog.d of
open-telemetry/semantic-conventions-genai): `gen_ai.client.operation.duration` becomes
`gen_ai.client.inference.duration`, the chunk histograms move under `gen_ai.client.inference.*`,
and `gen_ai.client.token.usage` (one histogram, `gen_ai.token.type`) gives way to per-direction
token counters (`gen_ai.client.inference.usage.*`, `gen_ai.token.modality`) and histograms
(`gen_ai.client.inference.operation.{input,output}_tokens`). As other OpenTelemetry
instrumentations do for a rename in progress, the new names are emitted only when
`OTEL_SEMCONV_STABILITY_OPT_IN` (comma-separated) contains `gen_ai_latest_experimental`; without
it the names are today's, as `opentelemetry-util-genai` emits them. The variable is read once,
when the writer (the instruments) is created at `instrument()`. Nothing else depends on it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# -- Bucket boundaries --------------------------------------------------------------------------
# Semantic conventions: open-telemetry/semantic-conventions-genai, docs/gen-ai/gen-ai-metrics.md
# ("This metric SHOULD be specified with ExplicitBucketBoundaries of [...]"):
#   gen_ai.client.operation.duration and gen_ai.client.operation.time_to_first_chunk:
#     [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
#   gen_ai.client.token.usage:
#     [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
# Floats throughout, so the Prometheus `le` labels read "1.0" as prometheus-client writes them.
SEMCONV_DURATION_BUCKETS: tuple[float, ...] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)
SEMCONV_TOKEN_BUCKETS: tuple[float, ...] = tuple(float(4**i) for i in range(14))  # 1 .. 67108864

# streamscope's own, chosen per quantity (seconds unless said otherwise).
TIME_TO_HEADERS_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
)
"""Connection, queueing and the SDK's own retries: milliseconds when healthy, a minute when not."""
TIME_TO_FIRST_CONTENT_BUCKETS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
    90.0, 120.0, 180.0, 300.0,
)
"""Sub-second for plain answers; tens of seconds (up to minutes) behind thinking. First-token
budgets are sized against its p99, so the tens-of-seconds range is resolved finely."""
THINKING_DURATION_BUCKETS: tuple[float, ...] = (
    0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0,
    300.0, 600.0,
)
"""Thinking lasts seconds to minutes."""
MAX_GAP_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
)
"""Fractions of a second between healthy deltas; seconds to minutes for a stall (idle budgets)."""
DECODE_RATE_BUCKETS: tuple[float, ...] = (
    1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0, 100.0, 150.0, 200.0, 300.0,
    500.0, 1000.0,
)
"""Output tokens per second: 1 to 1,000, finest where models actually decode (20-200)."""
BUDGET_USED_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 1.0, 1.05, 1.2,
)
"""Reasoning tokens / budget_tokens, 0 to 1.2; 0.95 is the `silently_unverified` threshold."""
REASONING_TOKENS_BUCKETS = SEMCONV_TOKEN_BUCKETS
SERVER_TOOL_BUCKETS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0,
)
"""One server-side tool run: a web search or fetch takes seconds, code execution up to minutes."""
ATTEMPTS_BUCKETS: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
"""Attempts per logical request: one, a few, or a retry storm."""

BUDGET_NAMES = ("first_token", "idle", "deadline")
ERROR_TYPE_LIMIT = 32
"""error.type is a closed set in practice (timeout, cancelled, provider error types, exception
class names); the cap only guards against an upstream inventing new error types."""

# The semantic conventions' opt-in to the GenAI names being introduced (see the module docstring).
SEMCONV_OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
GEN_AI_LATEST = "gen_ai_latest_experimental"


def gen_ai_latest(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `OTEL_SEMCONV_STABILITY_OPT_IN` (comma-separated) asks for `gen_ai_latest_experimental`."""
    value = (os.environ if environ is None else environ).get(SEMCONV_OPT_IN_ENV, "")
    return GEN_AI_LATEST in {part.strip() for part in value.split(",")}


#: The GenAI client instruments' names: today's, and under the opt-in (`gen_ai_latest_experimental`).
CURRENT_NAMES: Mapping[str, str] = {
    "duration": "gen_ai.client.operation.duration",
    "time_to_first_chunk": "gen_ai.client.operation.time_to_first_chunk",
    "time_per_output_chunk": "gen_ai.client.operation.time_per_output_chunk",
    "token_usage": "gen_ai.client.token.usage",
}
LATEST_NAMES: Mapping[str, str] = {
    "duration": "gen_ai.client.inference.duration",
    "time_to_first_chunk": "gen_ai.client.inference.time_to_first_chunk",
    "time_per_output_chunk": "gen_ai.client.inference.time_per_output_chunk",
    "input_tokens": "gen_ai.client.inference.usage.input_tokens",
    "output_tokens": "gen_ai.client.inference.usage.output_tokens",
    "cache_read_tokens": "gen_ai.client.inference.usage.cache_read.input_tokens",
    "cache_write_tokens": "gen_ai.client.inference.usage.cache_write.input_tokens",
    "reasoning_tokens": "gen_ai.client.inference.usage.reasoning.output_tokens",
    "operation_input_tokens": "gen_ai.client.inference.operation.input_tokens",
    "operation_output_tokens": "gen_ai.client.inference.operation.output_tokens",
}

# Metric attribute names that are not span attributes.
TOKEN_TYPE = "gen_ai.token.type"
TOKEN_MODALITY = "gen_ai.token.modality"
INPUT_MODALITY = "unknown"
"""The providers' usage does not split input by modality (a prompt may hold images): `unknown`."""
OUTPUT_MODALITY = "text"
"""What streamscope's streams deliver (text, thinking, tool-call JSON) is text."""
BREAKER_TO = "streamscope.breaker.to"
BREAKER_STATE = {"closed": 0, "half_open": 1, "open": 2}
"""`streamscope.breaker.state`'s values (breaker/circuit.py's states)."""
FLEET_MAX_GAUGES = frozenset({"streamscope.breaker.state"})
"""Gauges whose value over several worker processes (the multiprocess Prometheus export) is the
largest of the live workers': a breaker open in any worker reads open, whichever worker moved
last. Every other gauge reads the value set last in any worker."""
