"""`streamscope lab`: the model reproduces seed 000's findings in shape, deterministically and fast."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from streamscope.tools.cli import main
from streamscope.tools.lab import (
    Attempt,
    LabConfig,
    LabResult,
    Policy,
    PolicyResult,
    StreamModel,
    judge,
    run_lab,
)


@pytest.fixture(scope="module")
def lab() -> LabResult:
    return run_lab()


def row(result: LabResult, name_start: str, retries: int = 0) -> PolicyResult:
    (found,) = [r for r in result.rows if r.policy.name.startswith(name_start) and r.retries == retries]
    return found


def test_three_budgets_complete_every_healthy_answer_and_detect_every_stall(lab: LabResult) -> None:
    budgets = row(lab, "budgets")
    assert budgets.stalls > 0
    assert budgets.healthy_killed == 0
    assert budgets.stalls_detected == budgets.stalls
    assert budgets.completed == budgets.requests - budgets.stalls


def test_a_read_timeout_misses_exactly_the_stalls_that_keep_pinging(lab: LabResult) -> None:
    read = row(lab, "read 30 s, pings")
    pinging = lab.workload()["stalled_pinging"]
    assert read.healthy_killed == 0
    assert read.pinging_stalls_missed == read.stalls_missed == pinging >= 1
    assert 0.25 <= read.stalls_missed / read.stalls <= 0.75  # roughly the pinging share, 0.5
    assert read.stall_wait_max > 0.9 * lab.model.horizon  # undetected: still waiting at the horizon


def test_a_read_timeout_without_pings_catches_stalls_but_kills_thinking_streams(lab: LabResult) -> None:
    read = row(lab, "read 30 s, no pings")
    assert read.stalls_detected == read.stalls
    assert read.killed_thinking >= 1
    assert read.killed_thinking == read.healthy_killed  # only the silent thinking phase overruns it


def test_a_total_timeout_kills_long_answers_and_a_longer_one_fewer(lab: LabResult) -> None:
    short, long = row(lab, "total 60 s"), row(lab, "total 120 s")
    assert short.killed_long >= 1
    assert long.healthy_killed < short.healthy_killed
    assert long.stall_wait_mean > short.stall_wait_mean  # the trade: every stall waits longer


def test_findings_are_computed_and_hold_on_the_defaults(lab: LabResult) -> None:
    assert len(lab.findings) == 3
    assert all(f.holds for f in lab.findings), lab.findings


@pytest.mark.parametrize("seed", range(1, 11))
def test_findings_hold_across_seeds(seed: int) -> None:
    assert all(f.holds for f in run_lab(StreamModel(seed=seed)).findings)


def test_same_seed_same_results_other_seed_other_streams() -> None:
    assert run_lab(StreamModel(seed=3)).rows == run_lab(StreamModel(seed=3)).rows
    assert run_lab(StreamModel(seed=3)).requests != run_lab(StreamModel(seed=4)).requests


def test_a_first_attempt_does_not_depend_on_the_retry_count() -> None:
    once = run_lab(config=LabConfig(retries=0))
    twice = run_lab(config=LabConfig(retries=2))
    assert [r.attempts[0] for r in once.requests] == [r.attempts[0] for r in twice.requests]
    assert list(once.rows) == [r for r in twice.rows if r.retries == 0]


def test_a_retry_under_three_budgets_rescues_stalls(lab: LabResult) -> None:
    without, with_retry = row(lab, "budgets"), row(lab, "budgets", retries=1)
    assert with_retry.completed > without.completed
    assert with_retry.healthy_killed == 0
    assert with_retry.retries_sent == without.stalls  # only the stalls were retried


def test_a_retry_under_a_total_timeout_kills_the_long_answer_again(lab: LabResult) -> None:
    without, with_retry = row(lab, "total 60 s"), row(lab, "total 60 s", retries=1)
    assert with_retry.healthy_killed > 1.5 * without.healthy_killed  # a retried long answer is just as long
    assert with_retry.seconds_thrown_away == pytest.approx(60.0 * with_retry.healthy_killed)


def test_retry_scope_before_content_retries_no_attempt_that_showed_content(lab: LabResult) -> None:
    scoped = run_lab(config=LabConfig(retry_partial=False))
    assert row(scoped, "total 60 s", 1).retries_sent < row(lab, "total 60 s", 1).retries_sent


def test_retries_share_the_callers_deadline() -> None:
    stall = Attempt(headers=0.5, content=(1.0, 2.0), pings=(), stall_at=2.0)
    policy = Policy("budgets", "budgets", first_token=60, idle=15, deadline=20)
    assert judge(stall, policy, horizon=600).at == 17.0  # idle: 2 + 15
    assert judge(stall, policy, horizon=600, deadline_left=3.0).rule == "deadline"


def test_pings_reset_a_read_timeout_but_never_a_budget() -> None:
    pings = tuple(float(t) for t in range(5, 600, 5))
    stall = Attempt(headers=0.5, content=(1.0, 2.0), pings=pings, stall_at=2.0, stall_pings=True)
    assert judge(stall, Policy("r", "read", read_timeout=30), horizon=600).status == "undetected"
    assert judge(stall, Policy("r", "read", read_timeout=30, pings=False), horizon=600).at == 32.0
    budgets = judge(stall, Policy("b", "budgets", first_token=60, idle=15, deadline=300), horizon=600)
    assert (budgets.status, budgets.rule, budgets.at, budgets.partial) == ("ended", "idle", 17.0, True)


def test_thinking_silence_counts_against_the_first_token_budget_only() -> None:
    thinking = Attempt(headers=0.5, content=(45.0, 46.0, 47.0), pings=(5.5, 10.5, 15.5, 20.5, 25.5, 30.5, 35.5, 40.5))
    assert judge(thinking, Policy("b", "budgets", first_token=60, idle=15), horizon=600).status == "completed"
    early = judge(thinking, Policy("b", "budgets", first_token=30, idle=15), horizon=600)
    assert (early.rule, early.at, early.partial) == ("first_token", 30.0, False)


def test_the_default_run_is_fast() -> None:
    start = time.perf_counter()
    run_lab()
    assert time.perf_counter() - start < 1.0


def test_cli_prints_the_table_and_the_findings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab"]) == 0
    out = capsys.readouterr().out
    for text in ("total 60 s", "total 120 s", "read 30 s, pings", "read 30 s, no pings", "budgets 60/15/300 s",
                 "+ 1 retry", "healthy", "thrown"):
        assert text in out
    assert out.count("holds:") == 3 and "does not hold" not in out


def test_cli_flags_reach_the_model_and_json_is_machine_readable(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["lab", "--json", "--streams", "60", "--seed", "5", "--total", "30,90", "--read-timeout", "20",
            "--first-token", "55", "--idle", "12", "--deadline", "250", "--retries", "2", "--ping-every", "4"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["streams"] == 60 and data["model"]["ping_every"] == 4.0
    assert data["config"]["totals"] == [30.0, 90.0]
    names = {(r["policy"]["name"], r["retries"]) for r in data["rows"]}
    assert ("total 30 s", 2) in names and ("read 20 s, no pings", 0) in names
    assert ("budgets 55/12/250 s", 2) in names
    assert all(r["requests"] == 60 for r in data["rows"])
    assert [f["holds"] for f in data["findings"]] == [True, True, True]


def test_cli_rejects_an_impossible_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "--thinking-min", "60", "--thinking-max", "50"]) == 2
    assert "--thinking-min" in capsys.readouterr().err  # the model's constraint, in the flag's name


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "lab.png"
    assert main(["lab", "--plot", str(target)]) == 0
    assert target.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert target.stat().st_size > 10_000
