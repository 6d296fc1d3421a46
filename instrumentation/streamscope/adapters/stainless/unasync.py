"""Sync code derived from async code: what has a sync and an async form is written once, async.

The SDK's `_streaming` and the hooks on it come in pairs (`Stream` and `AsyncStream`, `__next__`
and `__anext__`, `iter_bytes` and `aiter_bytes`) whose bodies differ only where one awaits. Each
pair is written here once, in its async form; the sync form is derived from that source
mechanically (as the unasync tool does), then compiled into the same module:

* `async def`, `async for`, `async with` lose `async`; `await x` is `x`;
* the async names become their sync ones (`NAMES`, and the names a caller adds: `aread` → `read`);
* an async generator that only re-yields what it iterates (`async for x in y: yield x`, as async
  generators cannot delegate) is `yield from y`, as the SDK writes its sync form;
* a caller's `phrases` first: the few places where a sync form does something else than not
  awaiting (a sync read is its thread's own: the budgets' watch needs no task).

The derived function has the async one's globals (its module's, so a test that patches the module
patches both) and its line numbers (a traceback points at the one source). Derived at import: the
sync form costs nothing per call that the async one does not.

It reads streamscope's own `.py` files. Where they are not installed (an application frozen to
bytecode only), nothing is derived and nothing raises at import: the functions that could not be
made are named in `MISSING`, and the adapters refuse to install, saying why in one line.
"""

from __future__ import annotations
import __future__

import inspect
import re
import textwrap
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

NAMES: Mapping[str, str] = {
    "__anext__": "__next__", "__aiter__": "__iter__", "StopAsyncIteration": "StopIteration", "aclose": "close",
    "aiter_bytes": "iter_bytes", "_aiter_chunks": "_iter_chunks", "async_iter_response_bytes": "iter_response_bytes",
    "AsyncIterator": "Iterator", "AsyncStream": "Stream", "AsyncWatch": "SyncWatch",
}
"""Async names and their sync twins, in the SDK's `_streaming` and in streamscope's budgets."""
MISSING: list[str] = []
"""The async functions whose sync form could not be derived: their source is not installed."""
_KEYWORD = re.compile(r"\basync (def|for|with)\b")
_AWAIT = re.compile(r"\bawait ")
_RE_YIELD = re.compile(r"^( *)for (\w+) in (.+):\n *yield \2$", re.MULTILINE)
_ASYNC_LEFT = re.compile(r"\b(async|await|__anext__|__aiter__|StopAsyncIteration|aclose|AsyncWatch)\b")


def sync_source(source: str, names: Mapping[str, str] | None = None, phrases: Mapping[str, str] | None = None) -> str:
    """The sync form of async `source` (see the module's docstring). A phrase that is not in the
    source is a mistake (the source changed under its rule): `ValueError`."""
    for phrase, sync in (phrases or {}).items():
        if phrase not in source:
            raise ValueError(f"no {phrase!r} in the source")
        source = source.replace(phrase, sync)
    source = _AWAIT.sub("", _KEYWORD.sub(r"\1", source))
    words = {**NAMES, **(names or {})}
    source = re.sub(r"\b(" + "|".join(map(re.escape, words)) + r")\b", lambda m: words[m.group(1)], source)
    source = _RE_YIELD.sub(r"\1yield from \3", source)
    left = _ASYNC_LEFT.search(source)
    if left is not None:
        raise ValueError(f"the sync form still says {left.group(0)!r}")
    return source


def sync_twin(func: Callable[..., Any], names: Mapping[str, str], phrases: Mapping[str, str] | None = None) -> Any:
    """The sync form of `func` (a function or method written in a module's source), compiled into
    `func`'s module: its name is `names[func.__name__]`. Without the source: `_without_source`."""
    try:
        lines, first = inspect.getsourcelines(func)
        filename = inspect.getsourcefile(func)
    except (OSError, TypeError):
        MISSING.append(func.__qualname__)
        return _without_source
    source = sync_source(textwrap.dedent("".join(lines)), names, phrases)
    # The modules it uses, imported after it as in its module: the compiler then calls their
    # functions as it does in the module (an attribute, not a method, look-up).
    source += "".join(f"\nimport {value.__name__} as {name}" for name, value in func.__globals__.items()
                      if isinstance(value, ModuleType) and re.search(rf"\b{re.escape(name)}\.", source))
    code = compile("\n" * (first - 1) + source, filename or "<unasync>", "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    made: dict[str, Any] = {}
    exec(code, func.__globals__, made)  # streamscope's own source, rewritten above
    twin = made[names[func.__name__]]
    twin.__qualname__ = func.__qualname__.replace(func.__name__, twin.__name__)
    return twin


def _without_source(*args: Any, **kwargs: Any) -> Any:
    """Stands in for a sync form that could not be derived; never called, as the adapters do not
    install while `MISSING` names anything."""
    raise RuntimeError("streamscope's sync stream readers need its .py files: " + ", ".join(MISSING))
