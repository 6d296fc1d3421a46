"""Another library on the request path: find it, go around it where we can, name it where we cannot.

streamscope sees a streamed call at the SDK's `SyncAPIClient.request` / `AsyncAPIClient.request`.
A library that traces the same calls may put its own `request` in front of that method:
* on a client class (Logfire's `instrument_anthropic()` sets `Anthropic.request`): a function
  bound to the method it found there. Installed before streamscope, it calls the SDK's method
  unwrapped and streamscope would never see the call. `shadowing` finds such classes when
  streamscope is installed, and the adapter wraps their `request` too (the outer hook records
  the call; the inner one sees a call in progress and passes through). Installed after
  streamscope, it calls streamscope's hook: nothing to do.
* on one client instance (`logfire.instrument_anthropic(client)`): nothing at install time can
  reach it. Such a stream reaches streamscope's stream hooks without its call: `taken_by` names
  the library, which the pipeline counts (`streamscope.unobserved_calls`) and warns about once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

KNOWN = frozenset({
    "agento11y", "agentops", "braintrust", "ddtrace", "helicone", "langfuse", "langsmith", "logfire",
    "mlflow", "openinference", "openlit", "opentelemetry", "promptlayer", "sentry_sdk", "traceloop", "weave",
})
"""Libraries known to trace LLM calls: the values `streamscope.unobserved.by` may take (else `_OTHER`)."""
OTHER = "_OTHER"
MAX_DEPTH = 16


def shadowing(base: type, name: str) -> Iterator[type]:
    """Every subclass of `base` (any depth) with its own `name`: a method in front of `base`'s."""
    seen: set[type] = set()
    todo: list[type] = list(base.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
        if name in cls.__dict__:
            yield cls


def _chain(found: Any) -> Iterator[Any]:
    """`found`, then what it wraps (`__wrapped__`, as functools and wrapt keep it), and so on."""
    for _ in range(MAX_DEPTH):
        if found is None:
            return
        yield found
        found = getattr(found, "__wrapped__", None)


def runs_through(found: Any, ours: Callable[[Any], bool]) -> bool:
    """Whether `found`, or what it wraps, is ours."""
    return any(ours(f) for f in _chain(found))


def taken_by(stream: Any, ours: Callable[[Any], bool]) -> str | None:
    """The package whose `request` stood in front of streamscope's on the client that opened
    `stream`, or None if the request path runs through streamscope's hook (`ours` says which
    callable is). `_OTHER` for a package not in `KNOWN`; the SDK itself is never named."""
    client = getattr(stream, "_client", None)
    if client is None:
        return None
    found = getattr(client, "__dict__", {}).get("request")
    if found is None:
        found = next((c.__dict__["request"] for c in type(client).__mro__ if "request" in c.__dict__), None)
    if runs_through(found, ours):
        return None
    sdk = type(client).__module__.partition(".")[0]
    foreign = next((p for p in map(_package, _chain(found)) if p not in (None, sdk)), None)
    if foreign is None:
        return None
    return foreign if foreign in KNOWN else OTHER


def _package(found: Any) -> str | None:
    """The top-level package that wrote `found` (for a wrapt wrapper, its wrapper's). From the
    module the code runs in: `functools.wraps` copies the wrapped method's `__module__`."""
    function = getattr(found, "_self_wrapper", None) or found
    function = getattr(function, "__func__", function)
    namespace = getattr(function, "__globals__", None)
    module = namespace.get("__name__") if isinstance(namespace, dict) else getattr(function, "__module__", None)
    return module.partition(".")[0] if isinstance(module, str) and module else None
