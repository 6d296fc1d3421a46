"""`opentelemetry-instrument python script.py` turns streamscope on with no code change, through
the `opentelemetry_instrumentor` entry point, and its budgets come from STREAMSCOPE_CONFIG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from streamscope.simulator import Simulator

SCRIPT = textwrap.dedent(
    """
    import sys, anthropic
    client = anthropic.Anthropic(base_url=sys.argv[1], api_key="test-key", max_retries=0)
    try:
        for event in client.messages.create(model="claude-auto", max_tokens=64, stream=True,
                                            messages=[{"role": "user", "content": "secret prompt text"}]):
            pass
        print("RESULT ok")
    except TimeoutError as exc:
        print(f"RESULT {type(exc).__name__} {exc.budget}", flush=True)  # one write, apart from the exporter thread's
    """
)


def run_instrumented(tmp_path: Path, url: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    environment = {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "autoinstrument-test",
        **env,
    }
    return subprocess.run([str(launcher), sys.executable, str(script), url], capture_output=True, text=True,
                          env=environment, timeout=60, cwd=tmp_path)


def spans_in(stdout: str) -> list[dict]:
    """The console exporter prints one JSON object per span; pick them out of stdout."""
    spans, depth, buf = [], 0, []
    for line in stdout.splitlines():
        if line.startswith("{") and depth == 0:
            buf = []
        depth += line.count("{") - line.count("}")
        buf.append(line)
        if depth == 0 and buf and buf[0].startswith("{"):
            spans.append(json.loads("\n".join(buf)))
            buf = []
    return spans


def test_opentelemetry_instrument_produces_the_span(tmp_path: Path) -> None:
    with Simulator() as sim:
        result = run_instrumented(tmp_path, sim.url("thinking"))
    assert result.returncode == 0, result.stderr
    assert "RESULT ok" in result.stdout
    spans = spans_in(result.stdout)
    assert [s["name"] for s in spans] == ["chat claude-auto"], result.stdout
    attrs = spans[0]["attributes"]
    assert attrs["streamscope.class"] == "complete"
    assert spans[0]["kind"] == "SpanKind.CLIENT"
    assert "secret prompt text" not in result.stdout


def test_budgets_from_the_toml_file(tmp_path: Path) -> None:
    config = tmp_path / "streamscope.toml"
    config.write_text(textwrap.dedent(
        """
        [budgets.default]
        first_token = 30

        [budgets.models."claude-auto*"]
        first_token = 0.8
        idle = 0.3
        """
    ))
    with Simulator() as sim:
        result = run_instrumented(tmp_path, sim.url("timed_silent_start"), STREAMSCOPE_CONFIG=str(config))
    assert result.returncode == 0, result.stderr
    assert "RESULT StreamTimeout first_token" in result.stdout
    attrs = spans_in(result.stdout)[0]["attributes"]
    assert attrs["streamscope.class"] == "stalled_before_first_content"
    assert attrs["streamscope.budget.first_token"] == 0.8
    assert attrs["streamscope.budget.idle"] == 0.3
