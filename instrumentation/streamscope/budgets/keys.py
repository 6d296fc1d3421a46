"""The keys of a per-call table given in code (`instrument(budgets=...)`, `instrument(breaker=...)`).

Both tables are keyed alike: `default`, `route:<name>`, `model:<glob>`; a mistyped key gets a
did-you-mean. What each value must be is the table's own business (`check`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

V = TypeVar("V")

API_KEYS = 'the keys are "default", "route:<name>" and "model:<glob>"'


def key_hint(key: str) -> str:
    """A did-you-mean for a mistyped key ("models:x", "defaults"), or ""."""
    prefix, colon, rest = key.partition(":")
    if colon:
        close = difflib.get_close_matches(prefix.strip().lower(), ["route", "model", "routes", "models"], n=1)
        if close:
            return f' (did you mean "{close[0].rstrip("s")}:{rest.strip()}"?)'
        return ""
    if difflib.get_close_matches(key.strip().lower(), ["default"], n=1):
        return ' (did you mean "default"?)'
    return ""


def split_keys(config: Mapping[Any, Any], option: str,
               check: Callable[[str, object], V]) -> tuple[V | None, dict[str, V], dict[str, V]]:
    """(default, routes, models) of a table given in code as `option=...`; `check(key, value)`
    returns the value, or raises a one-line `TypeError`. A key that is not a string, or not one
    of the three forms, raises a one-line error naming them."""
    default: V | None = None
    routes: dict[str, V] = {}
    models: dict[str, V] = {}
    for key, raw in config.items():
        if not isinstance(key, str):
            raise TypeError(f"instrument({option}=...): key {key!r} is not a string; {API_KEYS}")
        value = check(key, raw)
        if key == "default":
            default = value
        elif key.startswith("route:"):
            routes[key[len("route:"):]] = value
        elif key.startswith("model:"):
            models[key[len("model:"):]] = value
        else:
            raise ValueError(f"instrument({option}=...): unknown key {key!r}{key_hint(key)}; {API_KEYS}")
    return default, routes, models
