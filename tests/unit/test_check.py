"""`streamscope check`: seed 003's arithmetic, its retries division, and a consistent largest budget."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscope.budgets.feasibility import budget_unreachable, check, tokens_fit
from streamscope.tools.cli import main

SEED = dict(deadline=30.0, decode_rate=75.0, answer_tokens=500, reserve=3.0)


def test_seed_003_figures() -> None:
    result = check(thinking_budget=10_000, **SEED)
    assert result.generation == pytest.approx(27.0)
    assert result.whole_tokens == 2_025  # "about 2,025 tokens in total"
    assert 10_000 / result.decode_rate == pytest.approx(133.3, abs=0.05)  # "133 seconds"
    assert result.largest_thinking == 1_525  # "cannot exceed roughly 1,500"
    assert not result.fits
    assert check(thinking_budget=1_500, **SEED).fits


def test_retries_divide_a_shared_deadline() -> None:
    # Seed 003's "three retries inside a shared 30-second budget" counts three attempts in all,
    # as its "90-second worst case" (3 x 30 s) shows: the first try and two retries.
    result = check(thinking_budget=1_024, deadline=30.0, decode_rate=75.0, reserve=3.0, retries=2)
    assert result.attempts == 3
    assert result.per_attempt == pytest.approx(10.0)
    assert result.whole_tokens == 525  # "no thinking budget above about 500 tokens fits"
    assert result.largest_thinking == 525 and not result.fits
    assert check(thinking_budget=500, deadline=30.0, decode_rate=75.0, reserve=3.0, retries=2).fits


def test_an_answer_that_cannot_fit_leaves_no_thinking_budget() -> None:
    result = check(thinking_budget=0, deadline=30.0, decode_rate=75.0, answer_tokens=500, reserve=12.0, retries=2)
    assert result.largest_thinking is None and not result.fits
    assert "not even the 500-token answer fits" in result.sentence()


@given(
    deadline=st.floats(1.0, 600.0), rate=st.floats(5.0, 300.0), reserve=st.floats(0.0, 10.0),
    ttft=st.floats(0.0, 10.0), retries=st.integers(0, 4), answer=st.integers(0, 4_000),
)
def test_the_largest_thinking_budget_fits_and_one_token_more_does_not(
    deadline: float, rate: float, reserve: float, ttft: float, retries: int, answer: int,
) -> None:
    args = dict(deadline=deadline, decode_rate=rate, answer_tokens=answer, reserve=reserve,
                retries=retries, time_to_first_token=ttft)
    largest = check(thinking_budget=0, **args).largest_thinking
    if largest is None:
        assert not check(thinking_budget=0, **args).fits
    else:
        assert check(thinking_budget=largest, **args).fits
        assert not check(thinking_budget=largest + 1, **args).fits


@pytest.mark.parametrize(("budget", "rate", "ttfc", "deadline"), [
    (10_000, 75.0, 1.0, 30.0), (2_000, 75.0, 2.0, 30.0), (2_100, 75.0, 2.0, 30.0), (1_024, 40.0, 5.0, 30.0),
])
def test_the_metrics_predicate_is_the_documented_rule(budget: int, rate: float, ttfc: float, deadline: float) -> None:
    assert budget_unreachable(budget, rate, ttfc, deadline) == (budget / rate + ttfc > deadline)


@given(budget=st.integers(0, 50_000), rate=st.floats(1.0, 500.0), ttfc=st.floats(0.0, 60.0),
       deadline=st.floats(0.5, 600.0))
def test_check_and_the_metrics_predicate_agree(budget: int, rate: float, ttfc: float, deadline: float) -> None:
    """With no reserve, no answer and no retries, `check` is the metrics rule exactly."""
    result = check(deadline=deadline, decode_rate=rate, thinking_budget=budget, time_to_first_token=ttfc)
    assert result.fits is not budget_unreachable(budget, rate, ttfc, deadline)
    assert tokens_fit(budget, deadline - ttfc, rate) is result.fits


def test_exit_code_is_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 1  # the defaults are seed 003's trap
    out = capsys.readouterr().out
    assert "It cannot finish" in out and "2,025 tokens" in out and "1,525 tokens" in out and "133.3 s" in out
    assert main(["check", "--thinking-budget", "1500"]) == 0
    assert "It can finish" in capsys.readouterr().out


def test_every_flag_reaches_the_arithmetic(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["check", "--json", "--deadline", "60", "--reserve", "2", "--decode-rate", "50", "--answer-tokens", "300",
            "--thinking-budget", "2048", "--retries", "1", "--time-to-first-token", "4"]
    assert main(argv) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["attempts"] == 2 and data["per_attempt"] == 30.0 and data["generation"] == 24.0
    assert data["largest_thinking"] == 24 * 50 - 300 == 900
    assert data["needed_tokens"] == 2_348 and (data["fits"], data["verdict"]) == (False, "cannot finish")


def test_invalid_arguments_exit_2() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["check", "--decode-rate", "0"])
    assert exit_info.value.code == 2
