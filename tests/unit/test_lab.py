"""`streamscope lab`: the model reproduces seed 000's findings in shape, deterministically and fast."""

from __future__ import annotations

import json
import math
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
    Request,
    StreamModel,
    evaluate,
    judge,
    run_lab,
)
from streamscope.tools.spend import usd


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


# -- what each policy costs ---------------------------------------------------------------------------


def long_answer(attempts: int) -> Request:
    """A 100 s answer without thinking, every attempt the same: headers at 0.5 s, generation from 1 s,
    a content event every second."""
    attempt = Attempt(headers=0.5, content=tuple(float(t) for t in range(1, 102)), pings=(), start=1.0, pace=1.0)
    return Request(0, True, 100.0, 0.0, (attempt,) * attempts)


def test_spend_by_hand_a_total_timeout_pays_for_the_answer_it_kills() -> None:
    """1,000 input tokens, 50 output tokens/s, Sonnet 4.5's rates ($3 and $15 per million): killed
    at 60 s, an attempt has generated (60 - 1) x 50 = 2,950 tokens: $0.003 + $0.04425 = $0.04725,
    all of it waste, and its retry wastes as much again; 120 s lets the 5,000 tokens finish: $0.078."""
    model = StreamModel(input_tokens=1000, decode_rate=50.0)
    request = long_answer(2)
    killed = evaluate([request], Policy("total 60 s", "total", total=60.0), 0, 600.0, model=model)
    assert (killed.completed, killed.spend_usd, killed.wasted_usd) == (0, pytest.approx(0.04725),
                                                                       pytest.approx(0.04725))
    assert killed.per_answer_usd == math.inf
    retried = evaluate([request], Policy("total 60 s", "total", total=60.0), 1, 600.0, model=model)
    assert retried.spend_usd == retried.wasted_usd == pytest.approx(2 * 0.04725)
    done = evaluate([request], Policy("total 120 s", "total", total=120.0), 0, 600.0, model=model)
    assert (done.completed, done.spend_usd, done.wasted_usd) == (1, pytest.approx(0.078), 0.0)
    assert done.per_answer_usd == pytest.approx(0.078)


def test_spend_by_hand_a_stall_pays_for_what_came_before_it_and_its_retry_for_everything() -> None:
    """Stalled at 11 s (10 s of generation: 500 tokens) and caught by idle at 26 s: $0.003 + $0.0075
    wasted, whenever the stall is caught; the retry completes: $0.078. Before its headers, nothing."""
    model = StreamModel(input_tokens=1000, decode_rate=50.0)
    stall = Attempt(headers=0.5, content=tuple(float(t) for t in range(1, 12)), pings=(), stall_at=11.0, start=1.0)
    healthy = long_answer(1).attempts[0]
    request = Request(0, True, 100.0, 0.0, (stall, healthy))
    budgets = Policy("b", "budgets", first_token=60, idle=15, deadline=300)
    row = evaluate([request], budgets, 1, 600.0, model=model)
    assert (row.completed, row.attempts) == (1, 2)
    assert row.wasted_usd == pytest.approx(0.0105) and row.spend_usd == pytest.approx(0.0105 + 0.078)
    early = evaluate([request], Policy("t", "total", total=0.4), 0, 600.0, model=model)
    assert early.spend_usd == 0.0  # ended before its headers: never billed


def test_retries_that_rarely_succeed_cost_money(lab: LabResult) -> None:
    """A retry under a 60 s total timeout mostly resends long answers it kills again: it wastes their
    input and 60 s of output once more, and the few answers it adds cost several times what an answer
    costs. Under the three budgets a retry resends only stalls, and each answer it adds costs about
    what any answer does."""
    total, total_retry = row(lab, "total 60 s"), row(lab, "total 60 s", 1)
    budgets, budgets_retry = row(lab, "budgets"), row(lab, "budgets", 1)
    assert total_retry.wasted_usd > 1.5 * total.wasted_usd
    assert lab.per_extra_answer_usd(total_retry) > 4 * budgets.per_answer_usd
    assert lab.per_extra_answer_usd(budgets_retry) < 1.5 * budgets.per_answer_usd
    assert budgets_retry.wasted_usd == pytest.approx(budgets.wasted_usd)  # every retried stall completed
    assert lab.per_extra_answer_usd(budgets) is None


def test_a_budget_that_cuts_long_answers_wastes_their_input_and_output_so_far(lab: LabResult) -> None:
    """Every policy wastes the same on stalls (what the stalled attempts generated); a 60 s total
    timeout adds the long answers it kills, each its input and 60 s of output, at least."""
    total, budgets = row(lab, "total 60 s"), row(lab, "budgets")
    m = lab.model
    killed_at_least = total.healthy_killed * (m.input_tokens * 3 + 0.9 * 60 * m.decode_rate * 15) / 1e6
    assert total.wasted_usd - budgets.wasted_usd > killed_at_least * 0.8
    assert budgets.wasted_usd == row(lab, "total 120 s").wasted_usd > 0
    assert total.per_answer_usd > budgets.per_answer_usd


def test_cli_shows_spend_per_policy_and_its_rates(capsys: pytest.CaptureFixture[str], lab: LabResult) -> None:
    assert main(["lab"]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    assert "spend" in out and "wasted" in out and "per extra" in out
    assert ("Spend, priced as a simulated model at Claude Sonnet 4.5's rates ($3 input, $15 output per million "
            "tokens); 4,000 input tokens a request, 75 output tokens per second") in flat
    retried = row(lab, "total 60 s", 1)
    line = next(line for line in out.splitlines() if line.startswith("  + 1 retry") and "168/200" in line)
    assert line.split()[-5:] == [usd(retried.spend_usd), usd(retried.wasted_usd),
                                 f"{retried.wasted_usd / retried.spend_usd:.1%}", usd(retried.per_answer_usd),
                                 usd(lab.per_extra_answer_usd(retried))]
    for figure in (usd(retried.spend_usd), usd(retried.wasted_usd), usd(retried.per_answer_usd),
                   usd(lab.per_extra_answer_usd(retried))):
        assert figure in line


def test_cli_json_has_the_spend_and_model_prices_at_its_rates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "--json", "--streams", "50"]) == 0
    sonnet = json.loads(capsys.readouterr().out)
    assert sonnet["pricing"] == {"model": "claude-sim-lab", "simulated": True, "input_per_million_usd": 3.0,
                                 "output_per_million_usd": 15.0}
    first = sonnet["rows"][0]
    assert first["spend_usd"] > first["wasted_usd"] > 0
    assert first["per_answer_usd"] == pytest.approx(first["spend_usd"] / first["completed"])
    assert first["per_extra_answer_usd"] is None and sonnet["rows"][1]["per_extra_answer_usd"] > 0
    # Claude Opus 4.1 costs five times Sonnet 4.5 on both sides: so does every row.
    assert main(["lab", "--json", "--streams", "50", "--model", "claude-opus-4-1"]) == 0
    opus = json.loads(capsys.readouterr().out)
    assert opus["pricing"]["model"] == "claude-opus-4-1" and not opus["pricing"]["simulated"]
    assert [r["spend_usd"] for r in opus["rows"]] == pytest.approx([5 * r["spend_usd"] for r in sonnet["rows"]])
    # The tokens are flags of the model: no input, no input cost.
    assert main(["lab", "--json", "--streams", "50", "--input-tokens", "0", "--decode-rate", "150"]) == 0
    cheap = json.loads(capsys.readouterr().out)
    assert cheap["model"]["input_tokens"] == 0 and cheap["model"]["decode_rate"] == 150.0
    assert cheap["rows"][0]["spend_usd"] != first["spend_usd"]


def test_an_unknown_model_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "--model", "claude-sim-nothing"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (
        "streamscope lab: argument --model: no known price for 'claude-sim-nothing'; give a model id the price "
        "table knows, such as claude-sonnet-4-5, claude-opus-4-1 or gpt-4.1, or leave --model out for a simulated "
        "model at Claude Sonnet 4.5's rates\n")


def test_the_spend_figures_in_the_docs_are_the_default_runs(lab: LabResult) -> None:
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "lab.md").read_text().split())
    total, total_retry = row(lab, "total 60 s"), row(lab, "total 60 s", 1)
    budgets, budgets_retry = row(lab, "budgets"), row(lab, "budgets", 1)
    said = (f"{usd(total.wasted_usd)} of its {usd(total.spend_usd)} ({total.wasted_usd / total.spend_usd:.1%}",
            f"against {usd(budgets.wasted_usd)} (3 %, the stalls)",
            f"an answer costs {usd(total.per_answer_usd)} against {usd(budgets.per_answer_usd)}",
            f"{usd(total_retry.spend_usd - total.spend_usd)} more for {total_retry.completed - total.completed} more "
            f"answers, {usd(lab.per_extra_answer_usd(total_retry))} for each",
            f"and {usd(total_retry.wasted_usd)} wasted in all",
            f"{usd(budgets_retry.spend_usd - budgets.spend_usd)} for {budgets_retry.completed - budgets.completed} "
            f"more answers, {usd(lab.per_extra_answer_usd(budgets_retry))} each")
    assert [s for s in said if s.replace("%", " %") not in text and s not in text] == []
