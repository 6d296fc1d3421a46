"""`deadline()`, `route()`, `attempt()`: left in another Context than the one they were entered in.

An ASGI server may finish a streamed response body in another task (another Context) than the one
that entered the block; leaving it must then restore the outer value, never raise `ValueError`.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

from streamscope.core.context import (
    attempt,
    current_attempt,
    current_deadline,
    current_route,
    deadline,
    route,
)

BLOCKS: list[tuple[str, Callable[[], AbstractContextManager[Any]], Callable[[], Any]]] = [
    ("deadline", lambda: deadline(30), current_deadline),
    ("route", lambda: route("chat"), current_route),
    ("attempt", lambda: attempt(2), current_attempt),
]


@pytest.mark.parametrize(("name", "block", "current"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_exit_in_another_context_does_not_raise(name, block, current) -> None:
    def enter_here_exit_in_a_copy() -> None:
        manager = block()
        manager.__enter__()
        inside = current()
        assert inside is not None
        # The exit runs in a copy of the context: the token was created in the original one.
        contextvars.copy_context().run(manager.__exit__, None, None, None)
        assert current() == inside  # the copy's restore does not touch the original Context

    contextvars.copy_context().run(enter_here_exit_in_a_copy)  # nothing leaks into the other tests


@pytest.mark.parametrize(("name", "block", "current"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_exit_in_another_context_restores_the_outer_value_there(name, block, current) -> None:
    def enter_then_exit_elsewhere() -> Any:
        manager = block()
        manager.__enter__()
        seen: list[Any] = []

        def leave() -> None:
            manager.__exit__(None, None, None)
            seen.append(current())

        contextvars.copy_context().run(leave)
        return seen[0]

    assert contextvars.copy_context().run(enter_then_exit_elsewhere) is None  # the outer value: none


async def test_exit_in_another_asyncio_task() -> None:
    """What an ASGI server does: the block entered in the handler's task, left in the task that ends the body."""
    with deadline(60):
        outer = current_deadline()
        manager = deadline(5)
        manager.__enter__()
        inner = current_deadline()
        assert inner is not None and outer is not None and inner < outer

        async def finish() -> float | None:
            manager.__exit__(None, None, None)
            return current_deadline()

        assert await asyncio.create_task(finish()) == outer  # the task's copy gets the outer value back
    assert current_deadline() is None


def test_exit_in_another_context_with_an_outer_deadline() -> None:
    with deadline(60):
        outer = current_deadline()
        manager = deadline(1)
        inner = manager.__enter__()
        seen = contextvars.copy_context().run(lambda: (manager.__exit__(None, None, None), current_deadline())[1])
        assert seen == outer  # the outer deadline, back in the Context that left the block
        assert current_deadline() == inner  # the entering Context is not touched by a copy's exit
    assert current_deadline() is None  # the outer block's ordinary reset restores what was before


def test_nested_keep_the_earliest() -> None:
    with deadline(10) as outer:
        with deadline(100) as inner:
            assert inner == outer == current_deadline()
        with deadline(1) as inner:
            assert inner < outer and current_deadline() == inner
        with deadline(math.inf) as inner:
            assert inner == outer == current_deadline()
        assert current_deadline() == outer
    with deadline(math.inf) as none:
        assert none == math.inf and current_deadline() is None
    start = time.monotonic()
    with deadline(5) as at:
        assert start + 4 < at <= time.monotonic() + 5


@pytest.mark.parametrize("bad", [0, -1, float("nan"), True, "5", None])
def test_seconds_are_checked(bad) -> None:
    with pytest.raises((TypeError, ValueError)):
        deadline(bad)
