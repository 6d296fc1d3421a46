"""`streamscope check`: seed 003's arithmetic, its retries division, and a consistent largest budget."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscope.budgets.feasibility import budget_unreachable, check, tokens_fit
from streamscope.tools.cli import main
from streamscope.tools.suggest import quantile

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
    result = check(thinking_budget=1_024, deadline=30.0, decode_rate=75.0, reserve=3.0, retries=2, backoff=0.0)
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
            "--thinking-budget", "2048", "--retries", "1", "--time-to-first-token", "4", "--backoff-base", "2",
            "--backoff-cap", "1.5", "--ttft-p999", "30"]
    assert main(argv) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["backoff"] == 1.5 and data["attempts"] == 2 and data["per_attempt"] == 29.25
    assert data["generation"] == 23.25 and data["attempt_too_short"]
    assert data["largest_thinking"] == math.floor(23.25 * 50) - 300 == 862
    assert data["needed_tokens"] == 2_348 and (data["fits"], data["verdict"]) == (False, "cannot finish")


def test_invalid_arguments_exit_2() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["check", "--decode-rate", "0"])
    assert exit_info.value.code == 2


# -- the backoff set aside, the p99.9 time to first token, the pool (the attempt plan) ----------------


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = main(["check", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_the_backoff_comes_off_the_deadline_before_it_is_split(capsys: pytest.CaptureFixture[str]) -> None:
    """The retry helpers' default Backoff (0.5 s, doubling, at most 8 s a wait): two retries wait
    at most 0.5 + 1 s, so three attempts share 28.5 s, not 30."""
    from streamscope.helpers.retry import Backoff

    assert Backoff().total(2) == pytest.approx(1.5)
    assert Backoff().total(6) == pytest.approx(0.5 + 1 + 2 + 4 + 8 + 8)
    code, found = cli_json(capsys, "--retries", "2", "--answer-tokens", "0", "--thinking-budget", "0")
    assert code == 0
    assert found["backoff"] == pytest.approx(1.5) and found["per_attempt"] == pytest.approx(9.5)
    assert found["largest_thinking"] == 487  # (9.5 - 3) x 75, no answer
    # With no backoff the published example's division again: 10 s, 525 tokens.
    _, found = cli_json(capsys, "--retries", "2", "--backoff-base", "0", "--thinking-budget", "0",
                        "--answer-tokens", "0")
    assert found["per_attempt"] == pytest.approx(10.0) and found["largest_thinking"] == 525
    _, found = cli_json(capsys)  # no retries: nothing set aside
    assert found["backoff"] == 0 and found["per_attempt"] == pytest.approx(30.0)


def test_an_attempt_shorter_than_the_p999_time_to_first_token_is_a_finding(capsys: pytest.CaptureFixture[str]) -> None:
    """A published attempt plan: a 25 s budget, 2 retries with 250 ms doubling backoff capped at
    4 s (0.75 s set aside) leaves about 8.1 s per attempt, above a 6.2 s p99.9: it fits. A 9 s
    p99.9 does not: the slowest requests would be cut before their first token."""
    plan = ["--deadline", "25", "--retries", "2", "--backoff-base", "0.25", "--backoff-cap", "4",
            "--thinking-budget", "0", "--answer-tokens", "0", "--reserve", "0"]
    code, found = cli_json(capsys, *plan, "--ttft-p999", "6.2")
    assert code == 0 and found["per_attempt"] == pytest.approx(24.25 / 3) and not found["attempt_too_short"]
    code, found = cli_json(capsys, *plan, "--ttft-p999", "9")
    assert code == 1 and found["attempt_too_short"]
    assert "below the measured p99.9 time to first token (9.0 s)" in str(found["attempt_warning"])
    assert main(["check", *plan, "--ttft-p999", "9"]) == 1
    assert "Fewer retries or a longer deadline" in " ".join(capsys.readouterr().out.split())



def test_the_p999_time_to_first_token_measured_from_a_span_file(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    """`--spans`: the p99.9 of every span's time to first content (spans without one, such as a
    stall a budget cut, are left out), the same quantile `suggest` takes; the attempt plan above
    with 2,000 measured times whose slowest tail reaches past the 8.1 s an attempt has."""
    rng = random.Random(5)
    times = [rng.lognormvariate(0.0, 0.5) for _ in range(1_994)] + [9.0, 9.5, 10.0, 11.0, 12.0, 14.0]
    lines = [{"streamscope.time_to_first_content": t, "streamscope.class": "complete"} for t in times]
    lines.append({"streamscope.class": "stalled_before_first_content", "streamscope.budget.fired": "first_token"})
    spans = tmp_path / "spans.jsonl"
    spans.write_text("".join(json.dumps(line) + "\n" for line in lines))
    plan = ["--deadline", "25", "--retries", "2", "--backoff-base", "0.25", "--backoff-cap", "4",
            "--thinking-budget", "0", "--answer-tokens", "0", "--reserve", "0"]
    code, found = cli_json(capsys, *plan, "--spans", str(spans))
    assert found["ttft_p999"] == pytest.approx(quantile(sorted(times), 0.999)) and found["ttft_p999"] > 24.25 / 3
    assert code == 1 and found["attempt_too_short"]
    assert found["ttft_p999_from"] == f"{spans}: 2,000 times to first content"
    code, found = cli_json(capsys, *plan[:2], *plan[8:], "--spans", str(spans))  # no retries: one attempt of 25 s
    assert code == 0 and not found["attempt_too_short"]
    assert main(["check", *plan, "--spans", str(spans)]) == 1
    raw = capsys.readouterr().out
    out = " ".join(raw.split())
    said = f"The p99.9 time to first token is measured from {spans}: 2,000 times to first content."
    assert "".join(said.split()) in "".join(raw.split())  # a long path may wrap anywhere
    assert "below the measured p99.9 time to first token" in out


@pytest.mark.parametrize(("argv", "line"), [
    (["--spans", "SPANS", "--ttft-p999", "3"], "streamscope check: argument --ttft-p999: not allowed with argument "
                                              "--spans"),
    (["--spans", "EMPTY"], "streamscope check: EMPTY has no span with streamscope.time_to_first_content; give spans "
                           "of streamed calls that got content"),
    (["--window", "10m"], "streamscope check: --window is the range to read from Prometheus: give --prometheus too"),
    (["--prometheus", "ftp://x"], "streamscope check: argument --prometheus: "),
    (["--prometheus", "localhost:9", "--window", "ten"], "streamscope check: argument --window: expected a "
                                                          "Prometheus duration"),
])
def test_measuring_mistakes_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str],
                                         line: str) -> None:
    spans, empty = tmp_path / "spans.jsonl", tmp_path / "empty.jsonl"
    spans.write_text(json.dumps({"streamscope.time_to_first_content": 1.0}) + "\n")
    empty.write_text(json.dumps({"streamscope.class": "stalled_before_first_content"}) + "\n")
    argv = [str(spans) if a == "SPANS" else str(empty) if a == "EMPTY" else a for a in argv]
    assert_one_line(capsys, argv, line.replace("EMPTY", str(empty)))


def assert_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], line: str) -> None:
    """`check` with `argv` exits 2 with `line` (its start) as the one line on stderr."""
    try:
        code = main(["check", *argv])
    except SystemExit as exit_:  # argparse's own errors
        code = int(exit_.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1, err


def test_pool_headroom_by_littles_law(capsys: pytest.CaptureFixture[str]) -> None:
    """200 workers, 20 requests/s: 5 s normally is 100 in flight; 40 s in a slowdown is 800, and
    the pool runs out. Without --slow-latency, the deadline is the slow latency."""
    base = ["--thinking-budget", "0"]
    code, found = cli_json(capsys, *base, "--pool-size", "200", "--rate", "20", "--latency", "5",
                           "--slow-latency", "40")
    pool = found["pool"]
    assert isinstance(pool, dict)
    assert (pool["normal_in_flight"], pool["slow_in_flight"], pool["exhausted"]) == (100, 800, True)
    assert code == 1 and "the queue grows without bound" in pool["sentence"]
    code, found = cli_json(capsys, *base, "--pool-size", "200", "--rate", "5", "--latency", "5")
    pool = found["pool"]
    assert isinstance(pool, dict)
    assert code == 0 and pool["slow_latency"] == 30 and pool["slow_in_flight"] == 150 and not pool["exhausted"]


@pytest.mark.parametrize(("argv", "line"), [
    (["--rate", "3"], "streamscope check: --rate is for the pool check: give --pool-size too"),
    (["--pool-size", "3"], "streamscope check: --pool-size needs --rate too"),
    (["--pool-size", "3", "--rate", "2"], "streamscope check: --pool-size needs --latency too"),
    (["--pool-size", "0"], "streamscope check: argument --pool-size: expected a whole number of slots >= 1"),
    (["--ttft-p999", "-1"], "streamscope check: argument --ttft-p999: expected a number of seconds >= 0"),
    (["--backoff-cap", "x"], "streamscope check: argument --backoff-cap: expected a number of seconds"),
])
def test_pool_and_plan_mistakes_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], line: str) -> None:
    assert_one_line(capsys, argv, line)


# -- what the plan costs ------------------------------------------------------------------------------


def test_a_plan_that_cannot_finish_wastes_every_attempt(capsys: pytest.CaptureFixture[str]) -> None:
    """The defaults at Claude Sonnet 4.5's rates ($3 input, $15 output per million tokens), 4,000
    input tokens: the attempt is cut after the 2,025 tokens that fit, $0.012 + $0.030375, for no
    answer; had it finished, 10,500 output tokens: $0.1695."""
    code, found = cli_json(capsys)
    cost = found["cost"]
    assert code == 1 and isinstance(cost, dict)
    assert cost["pricing"] == {"model": "claude-sim-lab", "simulated": True, "input_per_million_usd": 3.0,
                               "output_per_million_usd": 15.0}
    assert cost["input_tokens"] == 4_000
    assert cost["cut_attempt_usd"] == pytest.approx(0.042375)
    assert cost["finished_attempt_usd"] == pytest.approx(0.1695)
    assert cost["input_only_attempt_usd"] == pytest.approx(0.012)
    assert cost["worst_case_usd"] == cost["worst_case_wasted_usd"] == pytest.approx(0.042375)
    assert cost["sentence"] == ("Every request that uses its whole thinking budget is cut (4,000 input + 2,025 "
                                "output tokens): it wastes $0.0424 and buys no answer.")
    # Two retries in the same 30 s: three attempts of 525 tokens each, every one cut.
    code, found = cli_json(capsys, "--retries", "2", "--backoff-base", "0", "--answer-tokens", "0",
                           "--thinking-budget", "1024")
    cost = found["cost"]
    assert code == 1 and isinstance(cost, dict)
    assert cost["cut_attempt_usd"] == pytest.approx(0.012 + 525 * 15e-6)
    assert cost["worst_case_usd"] == cost["worst_case_wasted_usd"] == pytest.approx(3 * (0.012 + 525 * 15e-6))
    assert "is cut on each of its 3 attempts (4,000 input + 525 output tokens each): it wastes $0.0596" in str(
        cost["sentence"])


def test_retries_of_a_plan_that_fits_cost_up_to_a_whole_attempt_each(capsys: pytest.CaptureFixture[str]) -> None:
    """1,024 thinking + 500 answer tokens fit the 26.5 s each of three attempts has in 90 s: an
    answer on the first attempt costs $0.012 + 1,524 x $0.000015 = $0.03486; each retry before it up
    to as much again, so an answer on the last attempt costs up to three times that."""
    code, found = cli_json(capsys, "--deadline", "90", "--retries", "2", "--thinking-budget", "1024")
    cost = found["cost"]
    assert code == 0 and isinstance(cost, dict)
    one = 0.012 + 1_524 * 15e-6
    assert cost["finished_attempt_usd"] == cost["cut_attempt_usd"] == pytest.approx(one)
    assert cost["worst_case_usd"] == pytest.approx(3 * one) and cost["worst_case_wasted_usd"] == pytest.approx(2 * one)
    assert main(["check", "--deadline", "90", "--retries", "2", "--thinking-budget", "1024"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Cost per request" in out
    assert "Priced as a simulated model at Claude Sonnet 4.5's rates ($3 input, $15 output per million tokens)." in out
    assert ("An answer on the first attempt costs $0.0349; each retry before it adds up to $0.0349 (4,000 input + "
            "1,524 output tokens of an attempt cut at its allowance), so an answer on the last attempt costs up to "
            "$0.105, of which $0.0697 bought nothing.") in out


def test_the_input_is_paid_on_every_attempt_at_the_models_rates(capsys: pytest.CaptureFixture[str]) -> None:
    """GPT-4.1 at its rates in the price table ($2 input, $8 output per million tokens), 20,000 input
    tokens: an attempt cut before any output still costs $0.04."""
    code, found = cli_json(capsys, "--model", "gpt-4.1", "--input-tokens", "20000", "--thinking-budget", "0")
    cost = found["cost"]
    assert code == 0 and isinstance(cost, dict)
    assert cost["pricing"] == {"model": "gpt-4.1", "simulated": False, "input_per_million_usd": 2.0,
                               "output_per_million_usd": 8.0}
    assert cost["input_only_attempt_usd"] == pytest.approx(0.04)
    assert cost["finished_attempt_usd"] == pytest.approx(0.04 + 500 * 8e-6)
    assert main(["check", "--model", "gpt-4.1", "--thinking-budget", "0"]) == 0
    assert ("Priced as gpt-4.1 at its rates in the price table ($2 input, $8 output per million tokens)."
            in " ".join(capsys.readouterr().out.split()))


@pytest.mark.parametrize(("argv", "line"), [
    (["--model", "claude-sim-nothing"], "streamscope check: argument --model: no known price for "
                                        "'claude-sim-nothing'; give a model id the price table knows, such as "
                                        "claude-sonnet-4-5, claude-opus-4-1 or gpt-4.1, or leave --model out"),
    (["--model", ""], "streamscope check: argument --model: no known price for ''"),
    (["--input-tokens", "-1"], "streamscope check: argument --input-tokens: expected a whole number of tokens >= 0"),
    (["--input-tokens", "2.5"], "streamscope check: argument --input-tokens: expected a whole number of tokens >= 0"),
])
def test_cost_mistakes_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], line: str) -> None:
    assert_one_line(capsys, argv, line)
