"""Which adapter speaks for an SDK object, found by the SDK's package name: a new adapter is found
without a list to add it to, and nothing below the adapters imports one.

An adapter for the SDK whose top-level package is `<sdk>` lives in `streamscope.adapters.<sdk>`
and exports `HELPERS` (a `core.calls.Helpers`). Looking one up imports it on first use; an object of
a package with no adapter of its own (a transport library's exception, a caller's own) is offered
to every adapter already loaded whose SDK the process has imported, and the first that claims it
answers.

Each SDK is optional: an adapter whose SDK is not imported (not installed, or installed and never
used) is never asked, so it imports nothing and raises nothing. None of its SDK's objects can
exist yet, so it has nothing to say.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from streamscope.core.calls import Helpers
from streamscope.core.errors import StreamTimeout
from streamscope.core.failures import CANCELLED, INTERNAL, Failure, budget_fired

_PACKAGE = "streamscope.adapters"
_NONE: set[str] = set()
"""Top-level packages known to have no adapter (looked up once, not at every event)."""
_BY_TYPE: dict[type, Helpers] = {}
"""Types already answered for: the relay's default map asks for every event it relays."""


def helpers_for(obj: Any) -> Helpers | None:
    """The helpers of the adapter for `obj`'s SDK (by its class's top-level package), or None."""
    kind = type(obj)
    found = _BY_TYPE.get(kind)
    if found is not None:
        return found
    module_name = getattr(kind, "__module__", None)
    sdk = module_name.partition(".")[0] if isinstance(module_name, str) else ""
    if sdk in _NONE or not sdk.isidentifier() or sdk not in sys.modules:
        return None
    name = f"{_PACKAGE}.{sdk}"
    module = sys.modules.get(name)
    if module is None:
        try:
            module = importlib.import_module(name)
        except ImportError:
            _NONE.add(sdk)
            return None
    helpers = getattr(module, "HELPERS", None)
    if helpers is None:
        _NONE.add(sdk)
    elif len(_BY_TYPE) < 4096:  # an SDK has a few hundred event and error classes
        _BY_TYPE[kind] = helpers
    return helpers


def loaded() -> list[Helpers]:
    """The helpers of every adapter imported so far whose SDK is imported too.

    Read from a copy of `sys.modules`, made in one step: iterating the live dict lets a finalizer
    that the garbage collector runs mid-iteration, or another thread, import something and end the
    loop with "dictionary changed size during iteration"."""
    prefix = f"{_PACKAGE}."
    modules = sys.modules.copy()
    return [m.HELPERS for name, m in modules.items()
            if name.startswith(prefix) and name.count(".") == 2 and name[len(prefix):] in modules
            and getattr(m, "HELPERS", None) is not None]


def failure(exc: BaseException) -> Failure | None:
    """What the adapter that knows `exc` says it means (`retry_decision` decides the rest);
    None if no adapter does."""
    own = helpers_for(exc)
    for helpers in ([own] if own is not None else []) + [h for h in loaded() if h is not own]:
        answer = helpers.failure(exc)
        if answer is not None:
            return answer
    return None


def retry_decision(exc: BaseException) -> Failure | None:
    """The one decision on an exception that ended an attempt: its code and whether to retry.
    None for a cancel (the caller's own doing: no code, never retried)."""
    if isinstance(exc, CANCELLED):
        return None
    if isinstance(exc, StreamTimeout):  # first: on an SDK's call it is also the SDK's timeout error
        return budget_fired(exc)
    code = getattr(exc, "code", None)
    if code == "circuit_open":
        return Failure("circuit_open", False, getattr(exc, "retry_after", None))
    return failure(exc) or INTERNAL
