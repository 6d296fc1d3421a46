"""Which adapter speaks for an SDK object, found by name, so the core never imports an adapter.

An adapter for the SDK whose top-level package is `<sdk>` lives in `streamscope.adapters.<sdk>`
and exports `HELPERS` (a `calls.Helpers`). Looking one up imports it on first use; an object of
a package with no adapter of its own (a transport library's exception, say) is offered to every
adapter already loaded, and the first that claims it answers.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from .calls import Helpers

_PACKAGE = "streamscope.adapters"


def helpers_for(obj: Any) -> Helpers | None:
    """The helpers of the adapter for `obj`'s SDK (by its class's top-level package), or None."""
    sdk = type(obj).__module__.partition(".")[0]
    name = f"{_PACKAGE}.{sdk}"
    module = sys.modules.get(name)
    if module is None:
        try:
            module = importlib.import_module(name)
        except ImportError:
            return None
    return getattr(module, "HELPERS", None)


def loaded() -> list[Helpers]:
    """The helpers of every adapter imported so far."""
    prefix = f"{_PACKAGE}."
    return [m.HELPERS for name, m in list(sys.modules.items())
            if name.startswith(prefix) and name.count(".") == 2 and getattr(m, "HELPERS", None) is not None]


def retry_decision(exc: BaseException) -> tuple[bool, float | None]:
    """(retryable, retry-after seconds) from the adapter that knows `exc`; (False, None) if none does."""
    own = helpers_for(exc)
    for helpers in ([own] if own is not None else []) + loaded():
        answer = helpers.retry_decision(exc)
        if answer is not None:
            return answer
    return False, None
