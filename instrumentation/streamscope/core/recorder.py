"""The recorder: clocks, gaps and phases of one stream. This is the hot path.

An adapter calls it once per event with a monotonic timestamp, in the GenAI conventions' terms,
whatever the provider's wire looks like: the response `started`, `usage`, reasoning started and
ended, a content `delta` the user sees or not, a server-side tool run started and ended, the
provider's `stop` (a normalised finish reason, a refusal, a pause) and its final event
(`completed`), or an error it reports in the stream (`failed`). Per content event it does a few
attribute updates and one compare (the largest gap); nothing is allocated. When the stream ends,
`finish()` freezes what it saw into a `StreamRecord` and hands it on, exactly once.

Chunk gaps. Every content event after the stream's first one closes a gap (`gaps`, a list):
the provider's time from the previous content event to this one, on the clock below (the
caller's time away and server tool runs left out), which is what
`gen_ai.client.*.time_per_output_chunk` records when the stream ends (export/chunk_histogram.py,
once per stream). Per content event that is one `list.append` of the gap's float, which exists
anyway (32 bytes a chunk kept). Not an `array('d')`: its append parses its argument with
`PyArg_Parse`, about 450 instructions per event where the list's takes a few dozen. The list
exists only where the metrics go somewhere (a meter provider is set: the pipeline gives it);
otherwise `gaps` is None and nothing is kept or recorded, so a stream without metrics pays one
compare.

The provider's clock. `origin` is where the provider's current silence began, on the monotonic
clock, moved later by every moment the caller spent away from the stream (holding an event, or
not yet reading): when the caller asks for the next event, `asked()` adds `ask - delivered`. So
`now - origin`, while the caller waits, is how long the provider has been silent *while the
caller waited*; a content event at `t` closes a gap of `t - origin` and starts the next one.
The budgets (first-token, idle) and `max_gap` read this one clock. A server-side tool run is
a phase of its own: while one runs, every ping restarts the silence (the server is working),
and when its result arrives the clock resumes where it was when the run began, so the run is
never part of a gap. Budgets read the recorder and never write anything but `fire()`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from opentelemetry.util.types import AttributeValue

from .content import CapturedContent
from .freeze import frozen
from .record import End, RequestInfo, StreamRecord

if TYPE_CHECKING:
    from .errors import SDKTimeout

FinishHook = Callable[["StreamRecorder", StreamRecord], None]


class Watch(Protocol):
    """The budget watch of a stream (`budgets`): told when an expiry may have moved sooner, and
    stopped when the stream ends (`finish`)."""

    def rearm(self) -> None: ...

    def stop(self) -> None: ...


def _last(a: float | None, b: float | None) -> float | None:
    """The later of two optional times."""
    if a is None:
        return b
    return a if b is None or a >= b else b


class StreamRecorder:
    """Mutable per-stream state. One adapter thread/task writes it; budgets only read it."""

    __slots__ = (
        "__weakref__", "any_content", "cache_read", "cache_write", "cache_write_1h", "completed", "content",
        "content_events", "finish_reason", "fired", "fired_at", "first_content", "first_delta", "first_text",
        "gap_mark", "gaps", "held", "hidden_chars", "http_request", "http_status", "input_tokens", "item_id",
        "item_kind", "item_name", "last_content", "last_delta", "last_event", "max_gap", "on_finish", "origin",
        "output_tokens", "paused", "pings", "provider_facts", "reasoning_tokens", "record", "refusal", "request",
        "request_id", "resend_count", "response_id", "response_model", "start_ns", "stop_reason", "t0",
        "t_first_chunk", "t_headers", "text_chars", "thinking_end", "thinking_start", "timeout_class", "tool_calls",
        "tool_pre", "tool_runs", "tool_time", "tools", "usage_final", "watch", "web_searches"
    )

    def __init__(self, request: RequestInfo, on_finish: FinishHook | None = None, t0: float | None = None) -> None:
        self.request = request
        self.t0 = time.monotonic() if t0 is None else t0
        self.start_ns = time.time_ns()
        self.any_content = request.budgets.first_content == "any"
        self.on_finish = on_finish
        self.record: StreamRecord | None = None
        self.watch: Watch | None = None
        """The budget watch, when budgets are enforced."""
        self.timeout_class: type[SDKTimeout] | None = None
        """What a budget's firing raises: the SDK's flavour of `StreamTimeout` (its adapter's,
        given to `Pipeline.open`), so it is also the SDK's `APITimeoutError`; None: a plain one."""
        self.http_request: object = None
        """The HTTP request the stream was read through, where the hooks keep it: the
        `request` of that timeout (else a stand-in). Dropped when the stream ends."""
        self.content: CapturedContent | None = None
        """The captured prompt and answer: only when the user opted in."""
        self.origin = self.t0
        """Where the provider's current silence began, moved by the caller's time away (see above)."""
        self.held = self.t0
        """When the last event (or, before any, the stream itself) reached the caller."""
        self.t_headers: float | None = None
        self.t_first_chunk: float | None = None
        self.first_content: float | None = None
        self.last_content: float | None = None
        self.first_text: float | None = None
        self.first_delta: float | None = None
        self.last_delta: float | None = None
        self.last_event: float | None = None
        self.thinking_start: float | None = None
        self.thinking_end: float | None = None
        self.max_gap = 0.0
        self.gaps: list[float] | None = None
        """One gap per content event after the first (see above): the time per output chunk;
        None where no metrics are recorded."""
        self.gap_mark = 0.0
        """Before the first content (under the `first_content` setting) `origin` does not move at
        content events: `t - origin` at the last content event, so the next one's gap is
        `t - origin - gap_mark`. 0 once content flows (`origin` is then the last content event)."""
        self.pings = 0
        self.content_events = 0
        self.text_chars = 0
        self.hidden_chars = 0
        """Characters of output the user does not see (thinking): with `text_chars`, what a cut
        stream's output is estimated from when its final usage never arrives."""
        self.item_kind: str | None = None
        self.item_id: str | None = None
        self.item_name: str | None = None
        """The output item (content block) in progress, as the adapter names it: the recorder
        never reads these; an adapter keeps them to know what an item's end means."""
        self.tools: dict[str | None, tuple[str | None, float]] | None = None
        """Server tool runs in progress: tool-use id → (tool name, when the run began)."""
        self.tool_pre = 0.0
        """The provider's silence before the current run began (the gap resumes from it)."""
        self.tool_calls = 0
        self.tool_time = 0.0
        self.tool_runs: list[tuple[str | None, float, float]] | None = None
        """Finished runs: (tool name, when it ended, how long it ran)."""
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.finish_reason: str | None = None
        self.stop_reason: str | None = None
        self.refusal = False
        self.paused = False
        self.completed = False
        self.usage_final = False
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.reasoning_tokens: int | None = None
        self.cache_read: int | None = None
        self.cache_write: int | None = None
        self.cache_write_1h: int | None = None
        self.web_searches: int | None = None
        self.http_status: int | None = None
        self.resend_count: int | None = None
        self.request_id: str | None = None
        self.fired: str | None = None
        self.fired_at: float | None = None
        self.provider_facts: tuple[tuple[str, AttributeValue], ...] = ()
        """What only this provider says about the response, under its names (`response_attribute`)."""

    # -- the stream, event by event -------------------------------------------------------

    def headers(self, t: float, status: int | None, request_id: str | None, resend_count: int | None) -> None:
        """The response headers arrived: the stream is open, and in the caller's hands."""
        self.t_headers = self.held = t
        self.http_status = status
        self.request_id = request_id
        self.resend_count = resend_count

    def asked(self, now: float) -> None:
        """The caller asks for the next event at `now`: the provider's clock moves past the time
        the caller held the last one (or, before any, the stream), so that time is never the
        provider's silence. The stream hooks' per-event loops write this rule out inline."""
        self.origin += now - self.held

    def started(self, t: float, response_id: str | None, model: str | None) -> None:
        """The response's first event: its id and the model that answers."""
        self.last_event = t
        if self.t_first_chunk is None:
            self.t_first_chunk = t
        self.response_id = response_id
        self.response_model = model

    def response_attribute(self, key: str, value: AttributeValue | None) -> None:
        """A fact about the response only this provider has (`openai.response.service_tier`), under
        the provider's name: on the span as given, the last value for a key winning. None: nothing."""
        if value is not None:
            self.provider_facts += ((key, value),)

    def usage(self, input_tokens: int | None, output_tokens: int | None, reasoning_tokens: int | None = None,
              cache_read: int | None = None, cache_write: int | None = None, final: bool = True, *,
              cache_write_1h: int | None = None, web_searches: int | None = None) -> None:
        """Token usage as the provider reported it so far; `final` for the stream's final usage
        (output-side usage is reported from it only; input-side from the first usage on).
        `input_tokens` counts cached input too, `cache_write` all cache writes, of which
        `cache_write_1h` were 1-hour writes (priced apart); `web_searches` the server-side searches
        billed per request. A non-final usage after the final one (a repeated start event) changes
        nothing: its output count is a placeholder."""
        if final:
            self.usage_final = True
        elif self.usage_final:
            return
        for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens),
                            ("reasoning_tokens", reasoning_tokens), ("cache_read", cache_read),
                            ("cache_write", cache_write), ("cache_write_1h", cache_write_1h),
                            ("web_searches", web_searches)):
            if value is not None:  # a count not reported keeps the one reported before
                setattr(self, name, value)

    def reasoning_started(self, t: float) -> None:
        """The model started reasoning at `t` (the first time only). `t` may be before the event
        that tells: reasoning that arrives whole began when the previous event arrived."""
        if self.thinking_start is None:
            self.thinking_start = t

    def reasoning_ended(self, t: float) -> None:
        """Reasoning that precedes the answer ended (reasoning after the answer began changes nothing).
        An end with no start seen (a reasoning item with nothing in it) started there too."""
        self.last_event = t
        if self.first_text is None:
            if self.thinking_start is None:
                self.thinking_start = t
            self.thinking_end = t

    def delta(self, t: float, visible: int) -> None:
        """A content delta: `visible` characters of visible output (text or tool input; 0 when
        empty, as the delta that opens every tool block), or `-1 - n` for a delta the user does not
        see carrying `n` characters of output (thinking: `n` its length; a signature: -1).

        The common case, once content flows, is the first branch: a gap compare, the gap's
        append to `gaps` (where metrics are on) and a few writes, then the character count both
        branches share. `last_event` and `last_delta` are not written there: once content flows they
        equal `last_content` or an event after it, which `_last()` works out at the end. The
        stream hooks' fast path (`StreamHooks.read`, `aread`) writes that branch out inline for
        a text delta, a call fewer per event, and so does the compiled reader
        (`adapters/stainless/_reader.c`, `steady`): a change here is a change in both.
        """
        self.content_events += 1
        if self.last_content is not None:
            gap = t - self.origin
            if gap > self.max_gap:
                self.max_gap = gap
            if (gaps := self.gaps) is not None:
                gaps.append(gap)
            self.last_content = self.origin = t
        else:
            self.last_event = self.last_delta = t
            since = t - self.origin  # the provider's time since the silence began
            if self.content_events > 1 and (gaps := self.gaps) is not None:  # a content event before: its gap
                gaps.append(max(since - self.gap_mark, 0.0))
            self.gap_mark = since
            if visible > 0 or self.any_content:
                self.first_content = self.last_content = self.origin = t
                self.gap_mark = 0.0
                if self.watch is not None:
                    self.watch.rearm()  # idle replaces first-token: it may expire sooner
            if self.first_delta is None:
                self.first_delta = t
        if visible > 0:
            self.text_chars += visible
            if self.first_text is None:
                self.first_text = t
        elif visible < -1:
            self.hidden_chars -= visible + 1

    # -- server-side tool runs (rare: a few per stream at most) ------------------------------

    def tool_run_started(self, t: float, run_id: str | None, name: str | None) -> None:
        """A server-side tool run began (the provider works; the caller sees nothing but pings)."""
        self.last_event = t
        self.tool_calls += 1
        if not self.tools:
            self.tools = {}
            self.tool_pre = max(t - self.origin, 0.0)
            self.origin = t  # during the run, silence counts from its start or the last ping
        self.tools[run_id] = (name, t)

    def tool_run_ended(self, t: float, run_id: str | None) -> None:
        """A server-side tool run's result arrived (ignored when no run is in progress)."""
        self.last_event = t
        tools = self.tools
        if not tools:
            return
        key = run_id if run_id in tools else next(iter(tools))
        name, began = tools.pop(key)
        self.tool_time += t - began
        if self.tool_runs is None:
            self.tool_runs = []
        self.tool_runs.append((name, t, t - began))
        if not tools:
            self.origin = t - self.tool_pre  # the gap resumes where it stood when the run began
            if self.watch is not None:
                self.watch.rearm()  # the expiry may be sooner than the timer

    def pinged(self, t: float | None = None) -> None:
        """A ping (the SDK drops them before the caller sees them): counted, and while a server
        tool runs, the sign that the server is still working: the silence starts again."""
        self.pings += 1
        if self.tools:
            self.origin = time.monotonic() if t is None else t

    def stop(self, t: float, finish_reason: str | None, stop_reason: str | None, *, refusal: bool = False,
             paused: bool = False) -> None:
        """Why the provider stopped: the normalised finish reason, its own `stop_reason`, whether
        the model refused, whether the provider paused the turn."""
        self.last_event = t
        if finish_reason is not None:
            self.finish_reason = finish_reason
            self.stop_reason = stop_reason
            self.paused = paused
        self.refusal = self.refusal or refusal

    def completed_at(self, t: float) -> None:
        """The provider's final event: the stream is complete (whatever it said before)."""
        self.last_event = t
        self.completed = True

    def failed(self, t: float, error_type: str, code: str | None = None) -> None:
        """The provider said in the stream that the response failed (an error event the SDK
        yields rather than raises): the stream ended at `t`, an error of `error_type` (`code`)."""
        self.last_event = t
        self.finish("error", error_type, None, t, code)

    def other(self, t: float) -> None:
        """An event of a type this version does not know: delivered, never content."""
        self.last_event = t

    # -- budgets ---------------------------------------------------------------------------

    def fire(self, budget: str, t: float) -> bool:
        """A budget expired at `t`. Returns False when the stream had already ended or fired."""
        if self.record is not None or self.fired is not None:
            return False
        self.fired = budget
        self.fired_at = t
        return True

    # -- the end ---------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self.record is not None

    def finish(self, end: End, error_type: str | None = None, budget: str | None = None,
               t: float | None = None, code: str | None = None) -> StreamRecord | None:
        """End the stream: freeze the record, stop its budgets' watch, hand the record on. Every
        way out (the end, an error, a budget, close, a dropped stream, a cancel) comes here and
        only the first counts: nothing else ends a stream. Returns the record, or None if it had
        already ended."""
        if self.record is not None:
            return None
        now = time.monotonic() if t is None else t
        self.http_request = None  # the request (and the prompt in it) is not kept past the stream's end
        self.last_event = _last(self.last_event, self.last_content)
        self.last_delta = _last(self.last_delta, self.last_content)
        self.record = record = frozen(self, end, error_type, budget, now, code)
        if self.watch is not None:
            self.watch.stop()
        if self.on_finish is not None:
            self.on_finish(self, record)
        return record
