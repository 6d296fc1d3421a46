"""Where budgets come from: one Budgets, a mapping by route and model, or the TOML file."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import pytest
from opentelemetry.trace import NoOpTracer

import streamscope
from streamscope import Budgets
from streamscope.budgets.table import BudgetTable, CallBudgets
from streamscope.pipeline import Pipeline


def test_most_specific_entry_wins_field_by_field() -> None:
    table = BudgetTable.from_config({
        "default": Budgets(first_token=10, idle=5, deadline=60),
        "model:claude-*": Budgets(first_token=30),
        "model:claude-opus-*": Budgets(first_token=90, idle=20),
        "route:chat": Budgets(deadline=15, first_content="any"),
        "route:batch": Budgets(deadline=math.inf),
    })
    assert table.resolve("gpt-x", None) == CallBudgets(10, 5, 60, "text")
    assert table.resolve("claude-sonnet-4", None) == CallBudgets(30, 5, 60, "text")
    assert table.resolve("claude-opus-4-1", None) == CallBudgets(90, 20, 60, "text")  # the longest pattern wins
    assert table.resolve("claude-opus-4-1", "chat") == CallBudgets(90, 20, 15, "any")  # route over model
    assert table.resolve("claude-opus-4-1", "batch") == CallBudgets(90, 20, None, "text")  # inf = off
    assert table.resolve("Claude-opus", None).first_token == 10  # patterns are case-sensitive


def test_nothing_set_is_not_enforced() -> None:
    budgets = BudgetTable.from_config(Budgets(idle=3)).resolve("m", None)
    assert budgets == CallBudgets(None, 3, None, "text") and budgets.enforced
    assert not BudgetTable().resolve("m", None).enforced


@pytest.mark.parametrize("bad", [dict(first_token=0), dict(idle=-1), dict(deadline="5"), dict(first_content="all"),
                                 dict(idle=float("nan"))])
def test_invalid_budgets_are_refused(bad: dict) -> None:
    with pytest.raises((TypeError, ValueError)):
        Budgets(**bad)


def test_bad_mapping_keys_are_refused() -> None:
    with pytest.raises(ValueError) as raised:
        BudgetTable.from_config({"models:x": Budgets()})
    assert str(raised.value) == ("instrument(budgets=...): unknown key 'models:x' (did you mean \"model:x\"?); "
                                 'the keys are "default", "route:<name>" and "model:<glob>"')
    with pytest.raises(TypeError, match=r"budgets\['default'\] must be a streamscope.Budgets, not float"):
        BudgetTable.from_config({"default": 2.0})  # type: ignore[dict-item]


def test_toml_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "budgets.toml"
    path.write_text("""
[budgets.default]
first_token = 20
idle = 10

[budgets.models."claude-opus-*"]
first_token = 90

[budgets.routes.interactive]
deadline = 30
first_content = "any"

[budgets.routes.batch]
idle = "off"
""")
    monkeypatch.setenv("STREAMSCOPE_CONFIG", str(path))
    table = BudgetTable.from_environment()
    assert table.resolve("claude-opus-4", "interactive") == CallBudgets(90, 10, 30, "any")
    assert table.resolve("claude-haiku", "batch") == CallBudgets(20, None, None, "text")
    path.write_text("[budgets.default]\nfirst_tokn = 3\n")
    with pytest.raises(ValueError, match=r"\[budgets.default\] first_tokn: unknown key; did you mean first_token\?"):
        BudgetTable.from_environment()


def test_deadline_context_caps_the_deadline_budget() -> None:
    pipeline = Pipeline(NoOpTracer(), BudgetTable.from_config(Budgets(deadline=60)))
    assert pipeline.request(provider="anthropic", model="m").budgets.deadline == 60
    with streamscope.deadline(5):
        with streamscope.deadline(30):  # nested: the earliest wins
            capped = pipeline.request(provider="anthropic", model="m", now=time.monotonic()).budgets.deadline
    assert capped is not None and 4.5 < capped <= 5
    with streamscope.route("r"), streamscope.deadline(2):
        # Enforced even with no budgets configured:
        request = Pipeline(NoOpTracer()).request(provider="anthropic", model="m")
    assert request.route == "r" and request.budgets.deadline is not None and request.budgets.deadline <= 2


@pytest.mark.parametrize(("seconds", "error", "says"), [
    (-5, ValueError, "deadline(seconds) must be > 0 (math.inf for no deadline of its own), not -5"),
    (0, ValueError, "deadline(seconds) must be > 0 (math.inf for no deadline of its own), not 0"),
    (float("nan"), ValueError, "deadline(seconds) must be > 0 (math.inf for no deadline of its own), not nan"),
    (-math.inf, ValueError, "deadline(seconds) must be > 0 (math.inf for no deadline of its own), not -inf"),
    ("ten", TypeError, "deadline(seconds) takes a number of seconds > 0 (math.inf for no deadline of its own), "
                       "not str 'ten'"),
    ("5", TypeError, "deadline(seconds) takes a number of seconds > 0 (math.inf for no deadline of its own), "
                     "not str '5'"),
    (True, TypeError, "deadline(seconds) takes a number of seconds > 0 (math.inf for no deadline of its own), "
                      "not bool True"),
    (None, TypeError, "deadline(seconds) takes a number of seconds > 0 (math.inf for no deadline of its own), "
                      "not NoneType None"),
])
def test_deadline_refuses_what_budgets_refuse(seconds: object, error: type[Exception], says: str) -> None:
    """At the call, before the block: zero or less would fail every call inside, NaN mean none."""
    with pytest.raises(error) as raised:
        streamscope.deadline(seconds)  # type: ignore[arg-type]
    assert str(raised.value) == says
    assert streamscope.core.context.current_deadline() is None


def test_an_infinite_deadline_sets_none_of_its_own() -> None:
    from fractions import Fraction

    from streamscope.core.context import current_deadline

    with streamscope.deadline(math.inf) as at:
        assert at == math.inf and current_deadline() is None
        unbounded = Pipeline(NoOpTracer()).request(provider="anthropic", model="m")
        assert unbounded.budgets.deadline is None  # nothing enforced
    with streamscope.deadline(5) as outer, streamscope.deadline(math.inf) as inner:
        assert inner == outer == current_deadline()  # the outer one still applies
    with streamscope.deadline(Fraction(1, 2)) as half:
        assert half - time.monotonic() <= 0.5
    assert current_deadline() is None


async def test_the_fast_current_task_is_asyncio_s() -> None:
    """The watch finds the reading task by its loop (a dict look-up on 3.11): the same task."""
    from streamscope.budgets.async_watch import current_task

    loop = asyncio.get_running_loop()

    async def inside() -> bool:
        return current_task(loop) is asyncio.current_task() is not None

    assert await asyncio.create_task(inside())
    assert current_task(loop) is asyncio.current_task()
