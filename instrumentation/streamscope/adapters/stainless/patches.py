"""All or nothing: the hooks an adapter puts on an SDK, applied as one change and undone as one.

A hook that cannot be applied (a renamed private method, a property that became a function)
must not leave the ones before it in place: the SDK would run half-instrumented, and
`uninstrument()` would not know what to take off. So every change is recorded as it is made,
and a failure undoes them all, newest first, leaving the classes exactly as they were.

A library the SDK does not need (the HTTP clients a framework posts with) is hooked when the
process imports it (`when_imported`), never imported for the hook: that would load a whole library
(httpx: 117 modules, some 8,000 objects) into a service that does not use it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import wrapt

from streamscope.core.guard import internal_error

_MISSING = object()


class Patches:
    """The changes made to an SDK's classes, in order, so that they can be undone."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        self._waiting: list[list[Callable[[ModuleType], None]]] = []
        """The hooks waiting for an import, each in a holder that `undo()` empties: the import
        system keeps a waiting hook for good, so it holds nothing of streamscope's once undone."""

    def when_imported(self, name: str, apply: Callable[[ModuleType], None]) -> None:
        """`apply(module)` now if module `name` is imported (raising, as any change), else when the
        process imports it, unless these changes are undone by then; a failure then is counted as
        an internal error, never raised into the import."""
        module = sys.modules.get(name)
        if module is not None:
            apply(module)
            return
        holder = [apply]
        self._waiting.append(holder)

        def late(module: ModuleType) -> None:
            for armed in holder:
                try:
                    armed(module)
                except Exception:
                    internal_error(f"hooks on {name}")

        wrapt.register_post_import_hook(late, name)

    def wrap(self, owner: type, name: str, wrapper: Callable[..., Any]) -> None:
        """`owner.name` behind a wrapt `wrapper`; the attribute must be the class's own."""
        original = owner.__dict__.get(name, _MISSING)
        if original is _MISSING:
            raise AttributeError(f"{owner.__module__}.{owner.__qualname__} has no {name}")
        wrapt.wrap_function_wrapper(owner, name, wrapper)
        wrapped = owner.__dict__[name]
        self._undo.append(lambda: self._restore(owner, name, original, wrapped))

    def replace(self, owner: type, name: str, value: Any) -> Any:
        """`owner.name = value`; returns what was there (the class's own attribute)."""
        original = owner.__dict__.get(name, _MISSING)
        if original is _MISSING:
            raise AttributeError(f"{owner.__module__}.{owner.__qualname__} has no {name}")
        setattr(owner, name, value)
        self._undo.append(lambda: self._restore(owner, name, original, value))
        return original

    @staticmethod
    def _restore(owner: type, name: str, original: Any, ours: Any) -> None:
        """Put `original` back where ours still is on top. Where another library wrapped ours
        since, theirs stays and ours stays under it: the hooks pass through once uninstalled."""
        if owner.__dict__.get(name, _MISSING) is ours:
            setattr(owner, name, original)

    def undo(self) -> None:
        """Undo every change, newest first; hooks still waiting for an import are dropped. Never raises."""
        for holder in self._waiting:
            holder.clear()
        self._waiting.clear()
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:
                pass
