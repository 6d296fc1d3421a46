"""streamscope: one span, three budgets and a failure class for every streamed Claude call."""

from ._version import __version__
from .budgets import Budgets
from .classify import classify
from .context import deadline, route
from .errors import StreamTimeout
from .instrumentor import AnthropicInstrumentor
from .result import StreamResult, acollect, collect
from .retry import Backoff, astream_with_retry, stream_with_retry

__all__ = [
    "AnthropicInstrumentor",
    "Backoff",
    "Budgets",
    "StreamResult",
    "StreamTimeout",
    "__version__",
    "acollect",
    "astream_with_retry",
    "classify",
    "collect",
    "deadline",
    "route",
    "stream_with_retry",
]
