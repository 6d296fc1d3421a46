"""`streamscope validate` through the real command: budgets that hold at 5x, budgets that
false-kill at 3x, doomed requests cut in time (or not, with no idle budget), the in-flight peak
against a pool, the JSON and the PNG, and every wrong input as one line and exit 2.

The figures are checked against the scripts themselves: the test recomputes what the simulator
played and which healthy requests were scripted past a budget. A request scripted within
`BAND` of a budget may go either way on a loaded machine and is left out of the comparison;
every other one must be killed exactly when its script says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamscope.budgets.table import CallBudgets
from streamscope.tools import validate, validate_model
from streamscope.tools.cli import main

BAND = 1.3
"""Scripted values within this factor of a budget (either way) are left out of the comparison."""
REQUESTS, RATE, SEED, SCALE = 80, 0.5, 1, 0.05
RUN = ["--requests", str(REQUESTS), "--rate", str(RATE), "--seed", str(SEED), "--time-scale", str(SCALE)]
TIGHT_SCALE = 0.1
"""The 5 s / 3 s budgets run at twice the scale: 0.3 s of real idle budget, room for a loaded machine."""
HOLDS = "[budgets.default]\nfirst_token = 45\nidle = 20\n"
TIGHT = "[budgets.default]\nfirst_token = 5\nidle = 3\n"
NO_IDLE = "[budgets.default]\nfirst_token = 45\n"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def command(*argv: str) -> tuple[int, str, str]:
    """The installed `streamscope` command in a fresh process, for the runs whose kills are judged
    one by one: the test process's heap (every test before this one) makes long collector pauses
    that a user's own run does not have, and a pause longer than a scaled idle budget is a kill."""
    script = Path(sys.executable).with_name("streamscope")
    done = subprocess.run([str(script), *argv], capture_output=True, text=True, timeout=240)
    return done.returncode, done.stdout, done.stderr


def toml(tmp_path: Path, text: str, name: str = "budgets.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def expected(multiplier: float, first_token: float | None, idle: float | None,
             requests: int = REQUESTS, rate: float = RATE) -> tuple[set[int], set[int], int]:
    """From the scripts: healthy requests past a budget by more than BAND, those within it, and the healthy count."""
    budgets = CallBudgets(first_token, idle, None, "text")
    config = validate_model.Config(requests=requests, rate=rate, seed=SEED)
    scripts = validate_model.scripts(config, multiplier, budgets)
    over, near = set(), set()
    for s in scripts:
        if s.kind == "stall_before_first_content":
            continue
        if s.kind == "stall_mid_stream":  # its first content comes well within first_token
            assert first_token is None or s.ttft < first_token / BAND, s
            continue
        pairs = [(s.ttft, first_token), (s.gap, idle)]
        if any(b is not None and v > b * BAND for v, b in pairs):
            over.add(s.number)
        elif any(b is not None and v >= b / BAND for v, b in pairs):
            near.add(s.number)
    return over, near, sum(s.kind == "healthy" for s in scripts)


def by_multiplier(report: dict[str, Any]) -> dict[float, dict[str, Any]]:
    return {row["multiplier"]: row for row in report["multipliers"]}


def check_kills(row: dict[str, Any], over: set[int], near: set[int], healthy: int) -> None:
    killed = set(row["false_killed"])
    assert row["healthy"] == healthy
    assert over <= killed <= over | near, (sorted(killed), sorted(over), sorted(near))
    assert row["false_kills"] == len(killed)
    assert row["errors"] == 0


def check_dwell(row: dict[str, Any], first_token: float, idle: float) -> None:
    for kind, budget in (("stall_before_first_content", first_token), ("stall_mid_stream", idle)):
        d = row["dwell"][kind]
        assert d["requests"] >= 1 and d["cut"] == d["requests"], d
        assert d["limit"] == pytest.approx(validate.DWELL_FACTOR * budget)
        assert budget * 0.95 <= d["p99"] <= d["max"] <= d["limit"], d  # cut by its budget, not before it
        assert d["holds"]


def test_budgets_that_hold_at_5x(tmp_path: Path) -> None:
    plot = tmp_path / "validate.png"
    # At scale 0.2 (the 20 s idle budget is 4 s real): a CI machine with six test workers ran the 5x
    # run 0.31 s real late, 31 % of the 1 s it is at 0.05, a lateness the run rightly reports as a
    # problem (over 10 % of the budget); 0.4 s real is room for that machine.
    run = [*RUN[:-1], "0.2"]
    code, out, err = command("validate", "--config", toml(tmp_path, HOLDS), *run, "--multipliers", "1,3,5",
                             "--pool-size", "1000", "--json", "--plot", str(plot))
    assert code == 0, err + out
    report = json.loads(out)
    assert report["holds"] and report["problems"] == []
    assert report["budgets"]["first_token"] == 45 and report["budgets"]["idle"] == 20
    rows = by_multiplier(report)
    assert sorted(rows) == [1, 3, 5]
    for m, row in rows.items():
        over, near, healthy = expected(m, 45, 20)
        assert not over and not near  # the design: every healthy request well within its budgets
        check_kills(row, over, near, healthy)
        assert row["false_kill_rate"] == 0
        check_dwell(row, 45, 20)
        assert sum(row["fired"].values()) == row["dwell"]["stall_before_first_content"]["cut"] + \
            row["dwell"]["stall_mid_stream"]["cut"]
    peaks = [rows[m]["in_flight_peak"] for m in (1, 3, 5)]
    assert peaks[0] < peaks[1] < peaks[2], peaks  # m times the rate, and slower: Little's law
    assert rows[5]["ttft_p99"] > rows[1]["ttft_p99"]
    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_budgets_that_false_kill_at_3x(tmp_path: Path) -> None:
    code, out, err = command("validate", "--config", toml(tmp_path, TIGHT), *RUN[:-1], str(TIGHT_SCALE),
                             "--multipliers", "1,3", "--json")
    assert code == 1, err + out
    report = json.loads(out)
    rows = by_multiplier(report)
    over, near, healthy = expected(1, 5, 3)
    assert not over and not near
    check_kills(rows[1], over, near, healthy)
    assert rows[1]["false_kills"] == 0
    over, near, healthy = expected(3, 5, 3)
    assert len(over) / healthy > 0.005  # the design: at 3x some healthy requests are scripted well past a budget
    check_kills(rows[3], over, near, healthy)
    assert rows[3]["false_kill_rate"] > 0.005
    for row in rows.values():  # cut by their budgets (their dwell limit is tight at this scale: not judged here)
        assert all(d["cut"] == d["requests"] >= 1 for d in row["dwell"].values()), row["dwell"]
    assert any(p.startswith("at 3x, budgets ended") for p in report["problems"]), report["problems"]
    assert not any(p.startswith("at 1x, budgets ended") for p in report["problems"]), report["problems"]


def test_table_names_the_false_kills(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "validate", "--config", toml(tmp_path, TIGHT), "--requests", "40", "--rate", "1",
                         "--time-scale", "0.2", "--multipliers", "3", "--max-false-kills", "0.5")
    # A tolerance of 50 %: the same kills are no longer a failure. (With budgets this tight, a
    # loaded machine can cut a doomed stream a little past 1.2 x its 3 s idle budget: that is the
    # dwell check's finding, tested with roomier budgets above, not this table's.)
    assert code in (0, 1) and "Traceback" not in err, err + out
    text = " ".join(out.split())
    assert "false kills" in text and "3x" in text
    assert "budgets ended" not in text  # the false kills are within the tolerance
    if code == 1:
        assert "The budgets do not hold" in text and "held their slot" in text, out
    else:
        assert "The budgets hold" in out


def test_stall_without_an_idle_budget_holds_its_slot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "validate", "--config", toml(tmp_path, NO_IDLE), "--requests", "40", "--rate", "1",
                         "--seed", str(SEED), "--time-scale", str(SCALE), "--multipliers", "1", "--json")
    assert code == 1, err + out
    report = json.loads(out)
    row = by_multiplier(report)[1]
    mid = row["dwell"]["stall_mid_stream"]
    assert mid["requests"] >= 1 and mid["cut"] == 0 and mid["limit"] is None and not mid["holds"]
    assert mid["max"] >= validate_model.STALL_SECONDS * 0.95  # the whole stall
    assert row["dwell"]["stall_before_first_content"]["holds"]
    assert len(report["problems"]) == 1 and "no idle budget" in report["problems"][0]


def test_in_flight_peak_over_the_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "validate", "--config", toml(tmp_path, HOLDS), "--requests", "30", "--rate", "2",
                         "--time-scale", str(SCALE), "--multipliers", "1", "--pool-size", "1", "--json")
    assert code == 1, err + out
    report = json.loads(out)
    assert report["multipliers"][0]["in_flight_peak"] > 1 and report["multipliers"][0]["false_kills"] == 0
    assert len(report["problems"]) == 1 and "over the pool of 1" in report["problems"][0]



LATE_RUN = """
import json, sys, threading
from streamscope.budgets.table import CallBudgets
from streamscope.tools import validate, validate_model

budgets = CallBudgets(45, 20, None, "text")
config = validate_model.Config(multipliers=(1.0,), requests=6, rate=2, seed=1, time_scale=0.2)

def summary(report):
    f = report.figures[0]
    return {"lag": f.lag, "false_kills": f.false_kills, "notes": list(report.notes),
            "problems": list(report.problems), "holds": report.holds}

quiet = validate.run(config, budgets)
stop = threading.Event()

def hog():
    while not stop.is_set():
        pass

sys.setswitchinterval(0.25)
threading.Thread(target=hog, daemon=True).start()
try:
    late = validate.run(config, budgets)
finally:
    stop.set()
    sys.setswitchinterval(0.005)
print(json.dumps({"quiet": summary(quiet), "late": summary(late)}))
"""


def test_a_machine_that_runs_late_is_noted() -> None:
    """Another thread holding the interpreter a quarter second at a time (a long switch interval and a busy
    loop) makes the run's reads late, as a loaded machine does: the run says so in a note (at time
    scale 0.2 the 20 s idle budget is 4 s real; 0.4 s late is 10 % of it). The reads may come late
    enough for the budgets to cut healthy streams: those kills are findings, the lateness a note
    beside them. Without the busy thread, the same run has no note and no kill. (A fresh process:
    the test process's own collector pauses would be lateness too.)"""
    done = subprocess.run([sys.executable, "-c", LATE_RUN], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    quiet, late = found["quiet"], found["late"]
    assert quiet["holds"] and quiet["false_kills"] == 0 and quiet["notes"] == [], quiet
    assert 0 <= quiet["lag"] < validate.LAG_NOTE * 20, quiet
    assert late["lag"] >= validate.LAG_NOTE * 20, late
    [note] = late["notes"]
    assert note.startswith("at 1x this machine ran up to ") and "of the 20 s idle budget" in note, note
    assert "A larger --time-scale gives the run more real time" in note
    assert not any("ran up to" in p for p in late["problems"])  # a note, never a finding by itself


def test_notes_are_printed_under_the_table_and_leave_the_verdict() -> None:
    import io

    from rich.console import Console

    from streamscope.tools.commands.validate import render, to_json

    figure = validate.figures(3, [], CallBudgets(5, 3, None, "text"), 1.0, lag=0.45)
    budgets = CallBudgets(5, 3, None, "text")
    [note] = validate.notes([figure], budgets, 0.05)
    assert note == ("at 3x this machine ran up to 0.45 s late (15% of the 3 s idle budget; model seconds, 0.023 s "
                    "real): kills close to a budget may be the machine's delay, not the budgets'. A larger "
                    "--time-scale gives the run more real time")
    assert validate.notes([validate.figures(3, [], budgets, 1.0, lag=0.29)], budgets, 0.05) == ()
    report = validate.Report(validate_model.Config(multipliers=(3.0,)), budgets, (figure,), 0.005, notes=(note,))
    out = io.StringIO()
    render(report, "budgets.toml", Console(file=out, width=200))
    text = out.getvalue()
    assert "The budgets hold" in text and f"Note: {note}." in " ".join(text.split())
    assert to_json(report, "budgets.toml")["notes"] == [note] and report.holds

def test_spans_file_is_the_1x_distribution(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spans = tmp_path / "spans.jsonl"
    lines = [{"streamscope.class": "complete", "streamscope.time_to_first_content": 0.5, "streamscope.max_gap": 0.2}
             ] * 5 + [{"streamscope.class": "stalled_before_first_content", "streamscope.budget.fired": "first_token",
                       "streamscope.time_to_first_content": 30.0}]
    spans.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out, err = cli(capsys, "validate", "--config", toml(tmp_path, HOLDS), "--spans", str(spans),
                         "--requests", "20", "--rate", "4", "--time-scale", str(SCALE), "--multipliers", "1", "--json")
    assert code == 0, err + out
    report = json.loads(out)
    assert str(spans) in report["latency_model"]["baseline"]
    row = report["multipliers"][0]
    assert row["ttft_p50"] == row["ttft_p99"] == 0.5 and row["gap_p99"] == 0.2  # the cut span is left out


def test_environment_names_the_budget_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMSCOPE_CONFIG", toml(tmp_path, "[budgets.default]\nfirst_token = -1\n"))
    code, _, err = cli(capsys, "validate")
    assert code == 2 and "STREAMSCOPE_CONFIG" in one_line(err) and "first_token" in err


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("streamscope validate: "), lines[0]
    return lines[0]


@pytest.mark.parametrize(("argv", "expect"), [
    (["--multipliers", "1,x"], "argument --multipliers: expected up to 10 load multipliers"),
    (["--multipliers", "0.5"], "argument --multipliers"),
    (["--rate", "-1"], "argument --rate: expected a number of requests per model second > 0"),
    (["--requests", "0"], "argument --requests"),
    (["--time-scale", "0"], "argument --time-scale"),
    (["--config", "{tmp}/missing.toml"], "no such file"),
    (["--config", "{bad}"], "idle = -3: must be a number of seconds > 0"),
    (["--plot", "{tmp}/no/such/dir/v.png"], "argument --plot: cannot write"),
    (["--plot", "{tmp}/v.svg"], "argument --plot: expected a file name ending in .png"),
    (["--spans", "{tmp}/missing.jsonl"], "missing.jsonl"),
    (["--prometheus", "ftp://x"], "argument --prometheus: expected an http:// or https:// URL"),
    (["--prometheus", "localhost:9090", "--window", "an hour"], "argument --window"),
    ([], "no budget file: pass --config FILE"),
])
def test_wrong_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                 argv: list[str], expect: str) -> None:
    monkeypatch.delenv("STREAMSCOPE_CONFIG", raising=False)
    good, bad = toml(tmp_path, HOLDS), toml(tmp_path, "[budgets.default]\nidle = -3\n", "bad.toml")
    argv = [a.format(tmp=tmp_path, bad=bad) for a in argv]
    if argv and "--config" not in argv:
        argv += ["--config", good]
    code, out, err = cli(capsys, "validate", *argv)
    assert code == 2, err + out
    assert expect in one_line(err), err


def test_help_names_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "validate", "--help")
    assert code == 0
    for option in ("--config", "--multipliers", "--rate", "--requests", "--spans", "--prometheus", "--time-scale",
                   "--seed", "--pool-size", "--ttft-stretch", "--gap-stretch", "--max-false-kills", "--plot", "--json"):
        assert option in out
