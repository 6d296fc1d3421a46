"""With one SDK installed: its instrumentor works, the other's is skipped in one line, nothing raises.

In code (`XInstrumentor().instrument()`, both called, as a program written for both SDKs does) and
with OpenTelemetry's zero-code runner (`opentelemetry-instrument`, which loads both entry points).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider

from one_sdk import MISSING, PRESENT, Sdk, Spans, instrumentor
from streamscope.adapters import providers

BIN = Path(sys.executable).parent


def test_this_environment_has_exactly_one_sdk() -> None:
    assert importlib.util.find_spec(PRESENT) is not None, f"{PRESENT} is not installed here"
    assert importlib.util.find_spec(MISSING) is None, f"{MISSING} is installed here: this is not a one-SDK environment"


def test_the_missing_sdks_instrumentor_says_one_line_and_the_other_works(
        sdk: Sdk, caplog: pytest.LogCaptureFixture) -> None:
    spans = Spans()
    caplog.set_level(logging.DEBUG)
    off, on = instrumentor(MISSING), instrumentor(PRESENT)
    off.instrument(tracer_provider=spans.provider, meter_provider=MeterProvider())  # raises nothing
    on.instrument(tracer_provider=spans.provider, meter_provider=MeterProvider())
    try:
        assert not off.is_instrumented_by_opentelemetry and on.is_instrumented_by_opentelemetry
        said = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(said) == 1, [r.getMessage() for r in said]
        assert MISSING in said[0].getMessage() and said[0].exc_info is None
        # The missing SDK's adapter is never asked about anything (it would have to import its SDK).
        assert providers.loaded() == [importlib.import_module(f"streamscope.adapters.{PRESENT}").HELPERS]
        text = "".join(sdk.text_of(e) for e in sdk.open(sdk.complete))
        assert text
        (span,) = spans.spans()
        assert span.attributes["streamscope.class"] == "complete"
    finally:
        on.uninstrument()
    off.uninstrument()  # never on: a no-op, raising nothing
    assert MISSING not in sys.modules


ZERO_CODE = textwrap.dedent("""
    import json, sys
    import streamscope
    on = streamscope.{present}()
    off = streamscope.{missing}()
    print(json.dumps({{"on": on.is_instrumented_by_opentelemetry, "off": off.is_instrumented_by_opentelemetry,
                      "missing_imported": {missing_sdk!r} in sys.modules}}))
""")


def test_the_zero_code_runner_turns_on_the_present_sdk_only() -> None:
    from one_sdk import INSTRUMENTORS

    script = ZERO_CODE.format(present=INSTRUMENTORS[PRESENT], missing=INSTRUMENTORS[MISSING], missing_sdk=MISSING)
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none",
           "OTEL_LOGS_EXPORTER": "none"}
    done = subprocess.run([BIN / "opentelemetry-instrument", sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"on": True, "off": False, "missing_imported": False}
    assert "Traceback" not in done.stderr and "error" not in done.stderr.lower(), done.stderr
