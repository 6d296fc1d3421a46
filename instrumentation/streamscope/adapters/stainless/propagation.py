"""Trace context on the SDK lines that do not send it themselves.

From anthropic 2.10 the SDK traces itself and sends its current span's trace context with every
attempt; inside an instrumented call streamscope's `ContextTracer` makes that span streamscope's
own (`tracing.py`). The older lines (anthropic 0.x, 1.x, 2.0 to 2.9) send none, so there
streamscope adds the headers the registered propagators write for its span to the request's
options before the SDK sends it: the same headers on every attempt of the call, the same switch
(`ANTHROPIC_OPEN_TELEMETRY_PROPAGATION=false`) and `OTEL_PROPAGATORS` honoured.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import NonRecordingSpan

from streamscope.core.calls import Call


def with_trace_context(call: Call, options: Any, switch: str) -> Any:
    """A copy of the SDK's request `options` whose headers carry `call`'s trace context; `options`
    itself where the switch `switch` (an environment variable) says false or nothing is written."""
    started = call.span
    if started is None or os.environ.get(switch, "").lower() == "false":
        return options
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(NonRecordingSpan(started.context)))
    if not carrier:
        return options
    headers = options.headers if isinstance(options.headers, Mapping) else {}
    carried = options.model_copy()
    carried.headers = {**headers, **carrier}
    return carried
