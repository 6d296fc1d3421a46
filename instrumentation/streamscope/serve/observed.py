"""What the relay checks on each stream it opens, and what it reads itself when streamscope did not
observe the call.

Two set-ups relay streams but leave a mistake that shows only much later, so the relay says each
once per process (WARNING, logger `streamscope`) at the first stream that has it:

* the SDK's instrumentation is off (or the call was taken over before streamscope saw it): no
  span, no budgets, no class. The relay keeps its answers right without it rather than turning
  instrumentation on itself (that would hook every call of the process, read the budget file and
  export spans as a side effect of one endpoint): the provider's finish reason is read from the
  SDK's own events (`stop_reason`), a stream that ends without one is an `error`, as it is when
  observed, and the class is null (not verified);
* nothing bounds a stall (no deadline, and no `first_token` or no `idle` budget): a provider that
  goes quiet holds the browser on keep-alives until the HTTP client's read timeout (600 s in the
  SDKs). No default budget is set instead: a budget that cuts a healthy stream (a long thinking
  phase) is worse than none, and what is healthy depends on the model and the prompt.
"""

from __future__ import annotations

import threading
from typing import Any

from streamscope.core.calls import call_of
from streamscope.core.guard import internal_error, logger

PREFIX = "streamscope.serve.relay: "
INSTRUMENTORS = {"anthropic": "AnthropicInstrumentor", "openai": "OpenAIInstrumentor"}
_said: set[str] = set()
_lock = threading.Lock()


def _once(key: str, line: str) -> None:
    with _lock:
        if key in _said:
            return
        _said.add(key)
    logger.warning(line)


def check_opened(stream: Any) -> None:
    """The checks on one opened stream (before any event is read). Never raises."""
    try:
        call = call_of(stream)
        if call is None:
            _unobserved(stream)
            return
        budgets = call.recorder.request.budgets
        if budgets.deadline is None and (budgets.first_token is None or budgets.idle is None):
            _once("unbounded", _unbounded(budgets.first_token is None, budgets.idle is None))
    except Exception:
        internal_error("serve.check_opened")


def _unobserved(stream: Any) -> None:
    sdk = str(getattr(type(stream), "__module__", "")).partition(".")[0]
    name = INSTRUMENTORS.get(sdk)
    if name is None:
        return
    from streamscope import instrumentor

    on = getattr(instrumentor, name)().is_instrumented_by_opentelemetry
    why = (f"streamscope did not observe this {sdk} call (another package took it over: see "
           f"streamscope_unobserved_calls_total)" if on else f"the {sdk} instrumentation is off")
    fix = "" if on else f"; call {name}().instrument() at startup (or run under opentelemetry-instrument)"
    _once(f"unobserved:{sdk}", f"{PREFIX}{why}, so its relayed streams have no span, no budgets and no class "
                               f"(done says the provider's finish_reason, class null, verified false){fix}. "
                               "Logged once.")


def _unbounded(start: bool, middle: bool) -> str:
    where = " or ".join(w for w, missing in (("before the first token", start), ("mid-answer", middle)) if missing)
    budgets = " or ".join(b for b, missing in (("first_token", start), ("idle", middle)) if missing)
    return (f"{PREFIX}nothing bounds a provider that stalls {where} (no deadline, no {budgets} budget): the "
            "browser waits on keep-alives until the HTTP client's read timeout (600 s in the SDKs). Set budgets "
            "(instrument(budgets=Budgets(first_token=..., idle=..., deadline=...)) or the STREAMSCOPE_CONFIG file) "
            "or give requests a deadline (DeadlineMiddleware, streamscope.deadline()). Logged once.")


def stop_reason(event: Any) -> str | None:
    """The provider's own stop reason, where `event` carries the stream's final one (Anthropic's
    `message_delta` / the helper's `message_stop`, a chat chunk's `finish_reason`, a Responses
    `response.completed` / `.incomplete`), as the adapters write `streamscope.stop_reason`."""
    kind = getattr(event, "type", None)
    if kind == "message_delta":
        return _text(getattr(getattr(event, "delta", None), "stop_reason", None))
    if kind == "message_stop":
        return _text(getattr(getattr(event, "message", None), "stop_reason", None))
    if kind == "response.completed":
        return "completed"
    if kind == "response.incomplete":
        details = getattr(getattr(event, "response", None), "incomplete_details", None)
        return _text(getattr(details, "reason", None)) or "incomplete"
    chunk = getattr(event, "chunk", None) if kind == "chunk" else event if kind is None else None
    for choice in getattr(chunk, "choices", None) or ():
        found = _text(getattr(choice, "finish_reason", None))
        if found is not None:
            return found
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
