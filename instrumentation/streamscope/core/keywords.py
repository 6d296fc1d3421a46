"""Unknown keyword arguments, told in one line: what is wrong, what was probably meant, what is taken.

Python's own `TypeError` ("got an unexpected keyword argument 'idel'") names the mistake but not
the fix, and a keyword swallowed by `**kwargs` (`instrument(budget=...)`) says nothing at all:
the setting is simply not there. Both are the silent kind of mistake streamscope exists to catch,
so the public constructors and `relay()` name the spelling that was probably meant and every
keyword they take, and `instrument()` logs the same words (see `instrumentor.py` for why it
cannot raise).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar, cast

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def unknown(given: Iterable[str], accepted: Sequence[str]) -> list[str]:
    """The keywords of `given` that `accepted` lacks, in the order given."""
    known = frozenset(accepted)
    return [name for name in given if name not in known]


def _named(name: str, accepted: Sequence[str]) -> str:
    """`'idel' (did you mean 'idle'?)`, or just `'foo'` when nothing is close."""
    lowered = {a.lower(): a for a in accepted}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return f"{name!r} (did you mean {lowered[close[0]]!r}?)" if close else repr(name)


def message(where: str, wrong: Sequence[str], accepted: Sequence[str], *, ignored: bool = False) -> str:
    """One line: `where` got (or, `ignored`, ignores) the keywords `wrong`, each with its likely
    meaning, and what it takes."""
    if ignored:
        what = "ignores the unknown keyword argument" + ("s" if len(wrong) > 1 else "")
    else:
        what = "got an unexpected keyword argument" if len(wrong) == 1 else "got unexpected keyword arguments"
    return (f"{where} {what} {', '.join(_named(name, accepted) for name in wrong)}; "
            f"it takes {', '.join(accepted)}")


def _accepted(func: Callable[..., Any]) -> tuple[str, ...]:
    """The names `func` takes by keyword (`self` and `*args` / `**kwargs` left out)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in inspect.signature(func).parameters.values() if p.kind in kinds and p.name != "self")


def checked(where: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator: the function raises a one-line `TypeError` (see `message`) for a keyword it
    does not take, before it runs (an `async def` stays one: when awaited). Costs one set
    look-up per keyword passed."""

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        accepted = _accepted(func)
        known = frozenset(accepted)

        def check(kwargs: Mapping[str, Any]) -> None:
            if not known.issuperset(kwargs):
                raise TypeError(message(where, unknown(kwargs, accepted), accepted))

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def awaited(*args: P.args, **kwargs: P.kwargs) -> Any:
                check(kwargs)
                return await func(*args, **kwargs)

            return cast(Callable[P, R], awaited)

        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            check(kwargs)
            return func(*args, **kwargs)

        return wrapper

    return decorate


def real_number(where: str, value: object, what: str) -> float:
    """`value` as a float, or a one-line `TypeError` for anything that is not a real number (a
    string from a settings file, a bool): a wrong type is a `TypeError`, as Python's own are, and
    its range is the caller's to check (a `ValueError`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where} takes {what}, not {type(value).__name__} {value!r}")
    return float(value)


def whole_number(where: str, value: object, what: str) -> int:
    """`real_number` for a whole number (`int`)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where} takes {what}, not {type(value).__name__} {value!r}")
    return value


def checked_class(cls: type[T]) -> type[T]:
    """A class decorator (above `@dataclass`, whose `__init__` cannot be decorated in place): the
    class's `__init__` as `checked` makes it, named `ClassName()`."""
    cls.__init__ = checked(f"{cls.__name__}()")(cls.__init__)  # type: ignore[method-assign]
    return cls
