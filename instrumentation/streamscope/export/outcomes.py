"""What the layers above one call count: attempts and retries of a logical request, relayed streams.

A logical request (one `stream_with_retry`, one relayed stream) spans several calls; its counts are
written once, by the helper or the relay that knows them, with the provider, model and route of
its last attempt (the same guarded attributes every streamscope instrument carries).
"""

from __future__ import annotations

from opentelemetry.metrics import Meter
from opentelemetry.util.types import AttributeValue

from streamscope.core import attributes as A
from streamscope.core.record import RequestInfo

from .instruments import counter, histogram
from .metrics import MetricsWriter

OUTCOME = A.RELAY_OUTCOME
HTTP_STATUS = A.HTTP_STATUS


class OutcomeWriter:
    """`streamscope.attempts`, `streamscope.retries`, `streamscope.relay.streams`,
    `streamscope.relay.continuations`."""

    def __init__(self, meter: Meter, metrics: MetricsWriter) -> None:
        self.metrics = metrics
        self.attempts = histogram(meter, "streamscope.attempts")
        self.retries = counter(meter, "streamscope.retries")
        self.relay_streams = counter(meter, "streamscope.relay.streams")
        self.continuations = counter(meter, "streamscope.relay.continuations")

    def _base(self, request: RequestInfo | None) -> dict[str, AttributeValue]:
        return self.metrics.base_attributes(request) if request is not None else {}

    def attempted(self, request: RequestInfo | None, attempts: int) -> None:
        self.attempts.record(attempts, self._base(request))

    def retried(self, request: RequestInfo | None, code: str) -> None:
        self.retries.add(1, {**self._base(request), A.FAILURE_CODE: code})

    def relayed(self, request: RequestInfo | None, outcome: str, code: str | None, partial: bool,
                status: int) -> None:
        attrs = {**self._base(request), OUTCOME: outcome, A.PARTIAL: partial, HTTP_STATUS: status}
        if code is not None:
            attrs[A.FAILURE_CODE] = code
        self.relay_streams.add(1, attrs)

    def continued(self, request: RequestInfo | None, continuations: int, outcome: str) -> None:
        """The continuations one relayed stream made, by how the stream ended for the browser."""
        if continuations:
            self.continuations.add(continuations, {**self._base(request), OUTCOME: outcome})
