"""streamscope: one span, three budgets and a failure class for every streamed Claude call."""

from ._version import __version__
from .budgets import Budgets
from .classify import classify
from .context import deadline, route
from .errors import StreamTimeout
from .instrumentor import AnthropicInstrumentor

__all__ = [
    "AnthropicInstrumentor",
    "Budgets",
    "StreamTimeout",
    "__version__",
    "classify",
    "deadline",
    "route",
]
