"""streamscope: one span, three budgets and a failure class for every streamed LLM call.

The names that need the OpenTelemetry SDK or the Anthropic adapter load on first use (PEP 562),
so importing a light submodule (the `streamscope` command's parser, `streamscope.tools.lab`) does not
pay for them. The stdlib-only names load eagerly: `classify` must be the function, not the
submodule of the same name, whatever is imported later.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .breaker import Breaker
from .budgets import Budgets
from .core.classifier import classify
from .core.context import deadline, route
from .core.errors import CircuitOpen, StreamTimeout

if TYPE_CHECKING:
    from .helpers.result import StreamResult, acollect, collect
    from .helpers.retry import Backoff, astream_with_retry, stream_with_retry
    from .instrumentor import AnthropicInstrumentor, OpenAIInstrumentor

_LAZY = {
    "AnthropicInstrumentor": ".instrumentor",
    "OpenAIInstrumentor": ".instrumentor",
    "StreamResult": ".helpers.result",
    "acollect": ".helpers.result",
    "collect": ".helpers.result",
    "Backoff": ".helpers.retry",
    "astream_with_retry": ".helpers.retry",
    "stream_with_retry": ".helpers.retry",
}

__all__ = ["AnthropicInstrumentor", "Backoff", "Breaker", "Budgets", "CircuitOpen", "OpenAIInstrumentor",
           "StreamResult", "StreamTimeout", "__version__", "acollect", "astream_with_retry", "classify", "collect",
           "deadline", "route", "stream_with_retry"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
