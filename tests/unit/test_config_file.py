"""The budget file is strict and says what is wrong: every table, key and value outside the layout
is an error naming the file, the table, the key and the spelling meant. Through the instrumentor
(zero-code or `instrument()` without `budgets=`) a bad file never raises into OpenTelemetry's
loader and never leaves budgets silently off: one error line, and streamscope runs observe-only.
Where no SDK provider receives streamscope's telemetry, one warning says so."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from test_autoinstrument import run_instrumented, spans_in

from conftest import USER, Telemetry, client
from streamscope import AnthropicInstrumentor, Budgets
from streamscope.budgets.table import BudgetFileError, BudgetTable, CallBudgets
from streamscope.simulator import Simulator

TABLES = '[budgets.default], [budgets.routes.<name>] and [budgets.models."<glob>"]'


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """Write a budget file and point STREAMSCOPE_CONFIG at it."""

    def write(text: str) -> Path:
        path = tmp_path / "budgets.toml"
        path.write_text(textwrap.dedent(text))
        monkeypatch.setenv("STREAMSCOPE_CONFIG", str(path))
        return path

    return write


def error_for(text: str, config: Callable[[str], Path]) -> tuple[str, Path]:
    path = config(text)
    with pytest.raises(BudgetFileError) as raised:
        BudgetTable.from_environment()
    return str(raised.value), path


# -- the five spellings that used to switch budgets off without a word ---------------------------------


@pytest.mark.parametrize(("text", "written", "meant"), [
    ("[budgets.defaults]\nfirst_token = 2\n", "unknown table [budgets.defaults]",
     "did you mean [budgets.default]?"),
    ('[budgets.model."claude-*"]\nfirst_token = 2\n', 'unknown table [budgets.model."claude-*"]',
     'did you mean [budgets.models."claude-*"]?'),
    ('[budgets."model:claude-*"]\nfirst_token = 2\n', 'unknown table [budgets."model:claude-*"]',
     'did you mean [budgets.models."claude-*"]? ("model:<glob>" and "route:<name>" are the keys of '
     'instrument(budgets=...), not of the file)'),
    ("[budgets]\nfirst_token = 2\n", "[budgets] first_token: budget fields go in a budget table, not directly "
     "in [budgets]", "[budgets.default] for every call"),
    ("first_token = 2\n", "top-level key first_token: budget fields go in a budget table, not at the top of "
     "the file", "[budgets.default] for every call"),
])
def test_the_silent_spellings_are_errors_with_the_spelling_meant(text: str, written: str, meant: str,
                                                                 config: Callable[[str], Path]) -> None:
    message, path = error_for(text, config)
    assert message.startswith(f"budget file {path} (STREAMSCOPE_CONFIG): "), message
    assert written in message and meant in message, message


def test_more_misplaced_tables(config: Callable[[str], Path]) -> None:
    message, _ = error_for('[budgets."route:chat"]\nidle = 2\n[budgets.route.batch]\nidle = 9\n', config)
    assert 'unknown table [budgets."route:chat"]; did you mean [budgets.routes.chat]?' in message, message
    assert "unknown table [budgets.route.batch]; did you mean [budgets.routes.batch]?" in message, message
    message, _ = error_for('[models."claude-*"]\nidle = 2\n', config)
    assert 'unknown table [models."claude-*"]; did you mean [budgets.models."claude-*"]?' in message, message
    message, _ = error_for("[budget.default]\nidle = 2\n", config)
    assert "unknown table [budget.default]; did you mean [budgets.default]?" in message, message
    message, _ = error_for("[budgets.default.routes.chat]\nidle = 2\n", config)
    assert "[budgets.default.routes] is not a budget table" in message and "[budgets.routes.chat]" in message
    message, _ = error_for("[budgets.routes]\nidle = 2\n", config)
    assert "[budgets.routes] idle: budget fields go in a table of their own, [budgets.routes.<name>]" in message
    message, _ = error_for("[server]\nport = 1\n", config)
    assert f"unknown table [server]; the file holds only the budget tables {TABLES}" in message, message


def test_an_unknown_field_names_the_table_and_the_field_meant(config: Callable[[str], Path]) -> None:
    message, path = error_for('[budgets.models."claude-opus-*"]\nfirst-token = 60\nttft = 1\n', config)
    assert message.startswith(f"budget file {path} (STREAMSCOPE_CONFIG) has 2 problems: "), message
    assert ('(1) [budgets.models."claude-opus-*"] first-token: unknown key; did you mean first_token? '
            "The budget fields are first_token, idle, deadline, first_content") in message, message
    assert ('(2) [budgets.models."claude-opus-*"] ttft: unknown key; the budget fields are first_token, idle, '
            "deadline, first_content") in message, message


# -- values -----------------------------------------------------------------------------------------------

NUMBER = 'must be a number of seconds > 0, or "off" (or "inf") to switch it off'


@pytest.mark.parametrize(("line", "says"), [
    ("first_token = -5", f"first_token = -5: {NUMBER} (to inherit it instead, leave the key out)"),
    ("idle = 0", f"idle = 0: {NUMBER} (to inherit it instead, leave the key out)"),
    ("deadline = nan", f"deadline = nan: {NUMBER}"),
    ("deadline = -inf", f"deadline = -inf: {NUMBER} (to inherit it instead, leave the key out)"),
    ('idle = "ten"', f'idle = "ten": {NUMBER}'),
    ('idle = "10s"', f'idle = "10s": {NUMBER} (write the number without quotes: idle = 10)'),
    ('idle = "Off"', f'idle = "Off": {NUMBER} (did you mean "off"?)'),
    ("first_token = true", f"first_token = true: {NUMBER}"),
    ("first_token = [1, 2]", f"first_token = an array: {NUMBER}"),
    ("first_content = 1", 'first_content = 1: must be "text" or "any"'),
    ('first_content = "Text"', 'first_content = "Text": must be "text" or "any" (did you mean "text"?)'),
    ('first_content = "all"', 'first_content = "all": must be "text" or "any"'),
])
def test_bad_values_name_the_table_the_key_and_what_is_allowed(line: str, says: str,
                                                               config: Callable[[str], Path]) -> None:
    message, path = error_for(f"[budgets.routes.chat]\n{line}\n", config)
    assert message == f"budget file {path} (STREAMSCOPE_CONFIG): [budgets.routes.chat] {says}", message


def test_every_problem_of_a_file_in_one_message(config: Callable[[str], Path]) -> None:
    message, _ = error_for(
        """
        first_token = 2
        [budgets.defaults]
        idle = 1
        [budgets.default]
        idle = 0
        [budgets.routes.chat]
        first_content = "all"
        """, config)
    assert "has 4 problems: (1) top-level key first_token" in message, message
    assert "(2) unknown table [budgets.defaults]; did you mean [budgets.default]?" in message
    assert "(3) [budgets.default] idle = 0" in message
    assert '(4) [budgets.routes.chat] first_content = "all"' in message
    assert "\n" not in message  # one line in a log


# -- files that cannot be read ----------------------------------------------------------------------------


def test_a_syntax_error_names_the_variable_the_file_and_the_line(config: Callable[[str], Path]) -> None:
    message, path = error_for("[budgets.default]\nfirst_token = 2\nidle = 10 s\n", config)
    assert message.startswith(f"budget file {path} (STREAMSCOPE_CONFIG): not valid TOML: "), message
    assert "(at line 3, column" in message and message.endswith("; line 3 reads: idle = 10 s"), message


def test_a_missing_file_or_a_directory_names_the_variable_and_the_path(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    fix = "set STREAMSCOPE_CONFIG to the path of a TOML budget file, or unset it to run without budgets"
    missing = tmp_path / "nowhere.toml"
    for path, says in [(missing, "no such file"), (tmp_path, "this is a directory, not a TOML file")]:
        monkeypatch.setenv("STREAMSCOPE_CONFIG", str(path))
        with pytest.raises(BudgetFileError) as raised:
            BudgetTable.from_environment()
        assert str(raised.value) == f"budget file {path} (STREAMSCOPE_CONFIG): {says}; {fix}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STREAMSCOPE_CONFIG", "conf/budgets.toml")
    with pytest.raises(BudgetFileError, match=f"no such file \\(relative to the working directory {tmp_path}\\)"):
        BudgetTable.from_environment()
    # Called directly, the path is named and the variable is not.
    with pytest.raises(BudgetFileError) as raised:
        BudgetTable.from_toml(missing)
    assert str(raised.value) == f"budget file {missing}: no such file; give the path of a TOML budget file"


def test_a_valid_file_resolves_as_before(config: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    config(
        """
        # the whole layout
        [budgets.default]
        first_token = 20
        idle = 10.5
        deadline = inf

        [budgets.models."claude-opus-*"]
        first_token = 90

        [budgets.routes.interactive]
        deadline = 30
        first_content = "any"

        [budgets.routes."batch jobs"]
        idle = "off"
        first_token = "inf"
        """)
    table = BudgetTable.from_environment()
    assert table.resolve("claude-opus-4", "interactive") == CallBudgets(90, 10.5, 30, "any")
    assert table.resolve("claude-haiku", "batch jobs") == CallBudgets(None, None, None, "text")
    assert table.resolve("claude-haiku", None) == CallBudgets(20, 10.5, None, "text")
    config("# no budgets yet\n")
    assert not BudgetTable.from_environment().resolve("m", None).enforced
    monkeypatch.setenv("STREAMSCOPE_CONFIG", "")
    assert not BudgetTable.from_environment().resolve("m", None).enforced


# -- through the instrumentor -----------------------------------------------------------------------------


def test_instrument_with_a_bad_file_runs_observe_only_after_one_error_line(
        sim: Simulator, instrument: Callable[..., Telemetry], config: Callable[[str], Path],
        caplog: pytest.LogCaptureFixture) -> None:
    path = config("[budgets.defaults]\nfirst_token = 0.1\n")
    caplog.set_level(logging.DEBUG, logger="streamscope")
    telemetry = instrument(meter_provider=MeterProvider())  # no budgets=: the file is read, and raises nothing
    [record] = [r for r in caplog.records if r.name == "streamscope" and r.levelno >= logging.WARNING]
    assert record.levelno == logging.ERROR and record.exc_info is None
    assert record.getMessage() == (
        "streamscope: budgets are OFF, running observe-only (spans and metrics, no budget enforced) until this is "
        f"fixed and the process restarted: budget file {path} (STREAMSCOPE_CONFIG): unknown table "
        f"[budgets.defaults]; did you mean [budgets.default]? The budget tables are {TABLES}")
    with client(sim, "thinking") as c:
        for _ in c.messages.create(model="claude-x", max_tokens=64, messages=USER, stream=True):
            pass
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "complete"
    assert not [key for key in attrs if key.startswith("streamscope.budget")]


def test_explicit_budgets_in_code_still_raise_clearly() -> None:
    instrumentor = AnthropicInstrumentor()
    with pytest.raises(ValueError, match=r"""instrument\(budgets=...\): unknown key 'models:claude-\*' """
                                         r"""\(did you mean "model:claude-\*"\?\)"""):
        instrumentor.instrument(budgets={"models:claude-*": Budgets(idle=2)})
    assert not instrumentor.is_instrumented_by_opentelemetry
    with pytest.raises(TypeError, match=r"first_token is a field of Budgets: budgets=Budgets\(first_token=...\)"):
        BudgetTable.from_config({"first_token": 2})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r'unknown key \'defaults\' \(did you mean "default"\?\)'):
        BudgetTable.from_config({"defaults": Budgets(idle=2)})
    with pytest.raises(TypeError, match=r"not str \(for a TOML file: BudgetTable.from_toml\(path\)"):
        BudgetTable.from_config("budgets.toml")  # type: ignore[arg-type]
    assert BudgetTable.from_config({"route:chat": Budgets(idle=math.inf)}).resolve("m", "chat").idle is None


# -- zero-code ------------------------------------------------------------------------------------------

PROBE = textwrap.dedent(
    """
    from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

    class Probe(BaseInstrumentor):
        def instrumentation_dependencies(self):
            return ()

        def _instrument(self, **kwargs):
            print("PROBE instrumented", flush=True)

        def _uninstrument(self, **kwargs):
            pass

    def after_all():
        print("PROBE post-instrument", flush=True)
    """
)


def probe_distribution(directory: Path) -> Path:
    """Another instrumentor, and a hook OpenTelemetry's loader runs only after every instrumentor loaded."""
    directory.mkdir()
    (directory / "zz_probe.py").write_text(PROBE)
    info = directory / "zz_probe-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-probe\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[opentelemetry_instrumentor]\nzz_probe = zz_probe:Probe\n\n"
                                           "[opentelemetry_post_instrument]\nzz_probe = zz_probe:after_all\n")
    return directory


def test_opentelemetry_instrument_with_a_bad_file(tmp_path: Path) -> None:
    """Exit 0, the call works and still has its span (observe-only), one error line on stderr and
    no traceback, and OpenTelemetry's loader went on past streamscope to the end: the probe's
    post-instrument hook, which it runs only after the last instrumentor, ran. (The probe's own
    instrumentor loads before streamscope's: PYTHONPATH comes before site-packages.)"""
    config = tmp_path / "budgets.toml"
    config.write_text('[budgets."model:claude-*"]\nfirst_token = 0.5\n')
    probe = probe_distribution(tmp_path / "probe")
    pythonpath = os.pathsep.join(filter(None, [str(probe), os.environ.get("PYTHONPATH")]))
    with Simulator() as sim:
        result = run_instrumented(tmp_path, sim.url("thinking"), STREAMSCOPE_CONFIG=str(config), PYTHONPATH=pythonpath)
    assert result.returncode == 0, result.stderr
    assert "RESULT ok" in result.stdout
    [span] = spans_in(result.stdout)
    assert span["attributes"]["streamscope.class"] == "complete"
    assert not [key for key in span["attributes"] if key.startswith("streamscope.budget")]
    lines = [line for line in ours(result.stderr) if "streamscope" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("streamscope: budgets are OFF, running observe-only"), lines
    assert f'budget file {config} (STREAMSCOPE_CONFIG): unknown table [budgets."model:claude-*"]; did you mean ' \
           '[budgets.models."claude-*"]?' in lines[0], lines
    for noise in ("Traceback", "Failed to auto initialize", "Instrumenting of", "go nowhere"):
        assert noise not in result.stderr, result.stderr
    assert "PROBE instrumented" in result.stdout and "PROBE post-instrument" in result.stdout, result.stdout


# -- telemetry that goes nowhere ------------------------------------------------------------------------

APP = textwrap.dedent(
    """
    import sys, anthropic
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from streamscope import AnthropicInstrumentor

    mode, url = sys.argv[1], sys.argv[2]
    kwargs = {}
    if mode in ("explicit", "tracer only"):
        kwargs["tracer_provider"] = TracerProvider()
    if mode == "explicit":
        kwargs["meter_provider"] = MeterProvider()
    AnthropicInstrumentor().instrument(**kwargs)
    if mode == "set later":  # instrument first, providers after: not a mistake
        trace.set_tracer_provider(TracerProvider())
        metrics.set_meter_provider(MeterProvider())
    client = anthropic.Anthropic(base_url=url, api_key="test-key", max_retries=0)
    for _ in range(2):
        for event in client.messages.create(model="claude-x", max_tokens=64, stream=True,
                                            messages=[{"role": "user", "content": "hi"}]):
            pass
    print("DONE")
    """
)


def run_app(tmp_path: Path, mode: str, url: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "plain_app.py"
    script.write_text(APP)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "STREAMSCOPE_CONFIG"}
    return subprocess.run([sys.executable, str(script), mode, url], capture_output=True, text=True,
                          env={**environment, **env}, timeout=60, cwd=tmp_path)


UNPRICED = "streamscope: no price is known for "
"""The simulator's model has no price: that line is its own (tests/integration/test_cost.py)."""


def ours(stderr: str) -> list[str]:
    """stderr's lines but the unpriced model's."""
    return [line for line in stderr.splitlines() if not line.startswith(UNPRICED)]


def test_no_sdk_provider_is_one_warning_at_the_first_call(tmp_path: Path) -> None:
    with Simulator() as sim:
        nothing = run_app(tmp_path, "nothing", sim.url("complete"))
        tracer_only = run_app(tmp_path, "tracer only", sim.url("complete"))
        quiet = {mode: run_app(tmp_path, mode, sim.url("complete")) for mode in ("explicit", "set later")}
        disabled = run_app(tmp_path, "nothing", sim.url("complete"), OTEL_SDK_DISABLED="true")
    assert nothing.returncode == 0 and "DONE" in nothing.stdout, nothing.stderr
    [line] = ours(nothing.stderr)  # two calls, one line
    assert line.startswith("streamscope: spans and metrics go nowhere: no OpenTelemetry SDK tracer provider or "
                           "meter provider is configured"), line
    assert "pip install opentelemetry-distro opentelemetry-exporter-otlp" in line, line
    assert "streamscope.telemetry.setup()" in line and "tracer_provider= / meter_provider=" in line, line
    [line] = ours(tracer_only.stderr)
    assert line.startswith("streamscope: metrics go nowhere: no OpenTelemetry SDK meter provider"), line
    for result in (*quiet.values(), disabled):
        assert result.returncode == 0 and "DONE" in result.stdout, result.stderr
        assert ours(result.stderr) == [], result.stderr


def test_zero_code_with_the_distro_does_not_warn(tmp_path: Path) -> None:
    """The distro sets the providers before instrumentors load: the check finds them."""
    with Simulator() as sim:
        result = run_instrumented(tmp_path, sim.url("complete"))
    assert result.returncode == 0 and "RESULT ok" in result.stdout, result.stderr
    assert not [line for line in ours(result.stderr) if "streamscope" in line], result.stderr


def test_providers_passed_to_instrument_are_not_checked(sim: Simulator, instrument: Callable[..., Telemetry],
                                         caplog: pytest.LogCaptureFixture) -> None:
    """Providers passed to `instrument()`: nothing is checked, nothing is logged."""
    caplog.set_level(logging.DEBUG, logger="streamscope")
    telemetry = instrument(meter_provider=MeterProvider(), budgets=Budgets(first_token=30))
    with client(sim, "complete") as c:
        for _ in c.messages.create(model="m", max_tokens=64, messages=USER, stream=True):
            pass
    assert telemetry.attrs()["streamscope.budget.first_token"] == 30
    assert not [r for r in caplog.records if r.name == "streamscope"]
