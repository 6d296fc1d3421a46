"""The `streamscope` command with one SDK installed, run as a user runs it (the environment's script).

`streamscope demo` drives the anthropic SDK: with anthropic only (the demo extra's environment) it
runs as `make demo` runs it and passes its self-check; with openai only it says in one line which
extra to install.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from one_sdk import PRESENT, Sdk, Spans

COMMAND = Path(sys.executable).parent / "streamscope"


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COMMAND), *args], capture_output=True, text=True, timeout=timeout)


def test_help() -> None:
    done = run("--help")
    assert done.returncode == 0, done.stderr
    for command in ("demo", "lab", "classify", "suggest", "check"):
        assert command in done.stdout


def test_classify_a_file_of_this_sdks_spans(sdk: Sdk, telemetry: Spans, tmp_path: Path) -> None:
    for scenario in (sdk.complete, sdk.cut):
        try:
            for _ in sdk.open(scenario):
                pass
        except Exception:
            pass
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(dict(s.attributes)) + "\n" for s in telemetry.spans()))
    done = run("classify", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "complete" in done.stdout and "upstream_error" in done.stdout


def test_check() -> None:
    fits = run("check", "--thinking-budget", "1500", "--json")
    assert fits.returncode == 0, fits.stderr
    assert json.loads(fits.stdout)
    assert run("check").returncode == 1  # the defaults cannot finish: a finding
    assert run("check", "--decode-rate", "0").returncode == 2


def test_lab_short() -> None:
    done = run("lab", "--streams", "40", "--json")
    assert done.returncode == 0, done.stderr
    assert all(r["requests"] == 40 for r in json.loads(done.stdout)["rows"])


def test_demo() -> None:
    done = run("demo", "--port", "0", timeout=300)
    if PRESENT == "anthropic":
        assert done.returncode == 0, done.stdout + done.stderr
        assert "every span carries the class its script was written for" in " ".join(done.stdout.split())
        assert "Traceback" not in done.stderr
    else:
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith("streamscope demo: ") and "anthropic" in line, line
        assert "pip install 'streamscope[demo]'" in line, line
