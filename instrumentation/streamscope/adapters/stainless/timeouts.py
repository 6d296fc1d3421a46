"""A budget's `StreamTimeout` as each Stainless SDK's own timeout, made once per SDK.

Frameworks key their policies on the SDK's exceptions (a fallback on its API errors, a retry of
its network errors), so on an SDK's call the `StreamTimeout` is also that SDK's `APITimeoutError`
(`core.errors.sdk_timeout`). The SDKs are generated alike: the same class name, and a request of
the HTTP library their `_base_client` reads through.
"""

from __future__ import annotations

import functools
import importlib

from streamscope.core.errors import BudgetName, SDKTimeout, StreamTimeout, sdk_timeout
from streamscope.core.guard import internal_error

from .client import transport_of


@functools.cache
def timeout_class(sdk: str) -> type[SDKTimeout] | None:
    """The `StreamTimeout` of `sdk`'s calls (`anthropic`, `openai`), also its `APITimeoutError`:
    made once, when first asked (the SDK is imported by then). None if the SDK's class cannot be
    combined: a plain `StreamTimeout` then."""
    try:
        package = importlib.import_module(sdk)
        request = functools.partial(transport_of(importlib.import_module(f"{sdk}._base_client")).Request, "POST")
        return sdk_timeout(package.APITimeoutError, request, functools.partial(rebuilt, sdk),
                           f"streamscope.adapters.{sdk}")
    except Exception:
        internal_error(f"{sdk}.timeout_class")
        return None


def rebuilt(sdk: str, budget: BudgetName, partial: bool, after: float | None) -> StreamTimeout:
    """A pickled `StreamTimeout` of `sdk`'s calls, made again (pickle names this, not the class,
    which is made at run time)."""
    cls = timeout_class(sdk)
    return StreamTimeout(budget, partial, after) if cls is None else cls(budget, partial, after)
