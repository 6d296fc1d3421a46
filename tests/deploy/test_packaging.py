"""What `pip install` gives: the instrumentation with the least it needs, everything else an extra.

A wheel is built from the working tree and installed into a fresh virtualenv (from the package
index, as a user would), first plain, then with the `demo` extra: the plain install imports,
answers `--help`, names the extra a command needs, and leaves OpenTelemetry's zero-code runner
working; the demo extra runs the demo and brings no test tools.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE = {"opentelemetry-api", "opentelemetry-sdk", "opentelemetry-instrumentation", "wrapt", "genai-prices"}
EXTRAS = {"instruments-any", "telemetry", "cli", "lab", "demo", "dashboards", "serve", "redis", "test"}
NOT_IN_A_SERVICE = {"starlette", "redis", "uvicorn", "rich", "grpcio", "opentelemetry-exporter-otlp-proto-grpc",
                    "anthropic", "openai", "matplotlib", "numpy", "pytest", "hypothesis", "prometheus-client"}
TEST_TOOLS = {"pytest", "hypothesis", "matplotlib", "numpy", "gunicorn", "grafana-foundation-sdk", "grpcio"}


def _name(requirement: str) -> str:
    head = requirement.split(";")[0]
    for stop in "<>=!~[ (":
        head = head.split(stop)[0]
    return head.strip().lower().replace("_", "-")


def run(*args: str | Path, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kwargs)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The working tree as a user's checkout has it: nothing built in it."""
    copy = tmp_path_factory.mktemp("source") / "streamscope"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "*.egg-info", "build", "dist", "__pycache__", ".pytest_cache", ".hypothesis", "*.so"))
    return copy


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory, source: Path) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, source)
    assert built.returncode == 0, built.stderr
    (found,) = out.glob("streamscope-*.whl")
    return found


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("venv")
    venv.create(home, with_pip=True)
    installed = run(home / "bin" / "python", "-m", "pip", "install", "--quiet", wheel)
    assert installed.returncode == 0, installed.stderr
    yield home


def installed(home: Path) -> set[str]:
    listed = run(home / "bin" / "python", "-m", "pip", "list", "--format=freeze")
    return {_name(line) for line in listed.stdout.splitlines() if line}


def test_the_wheel_asks_for_the_instrumentation_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        message = email.parser.Parser().parsestr(archive.read(meta).decode())
    requires = message.get_all("Requires-Dist") or []
    assert {_name(r) for r in requires if "extra ==" not in r} == BASE
    assert set(message.get_all("Provides-Extra") or []) == EXTRAS
    demo = {_name(r) for r in requires if 'extra == "demo"' in r}
    assert {"starlette", "uvicorn", "streamscope"} <= demo and not demo & TEST_TOOLS
    # What OpenTelemetry's loader checks: any one of the SDKs (`instruments-any`), none required by
    # all (`instruments`); each instrumentor then checks its own SDK.
    assert not [r for r in requires if 'extra == "instruments"' in r]
    instruments = [r for r in requires if 'extra == "instruments-any"' in r]
    assert sorted(_name(r) for r in instruments) == ["anthropic", "openai"]


def test_a_plain_install_is_the_instrumentation_and_says_what_else_to_install(env: Path) -> None:
    assert not installed(env) & NOT_IN_A_SERVICE
    python, command = env / "bin" / "python", env / "bin" / "streamscope"
    imported = run(python, "-c", "import sys, streamscope; from streamscope import Budgets, deadline, route, "
                                 "StreamTimeout, classify, AnthropicInstrumentor; print(streamscope.__version__); "
                                 "print('genai_prices' in sys.modules)")
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.split()[1:] == ["False"], "the price table loads at the first priced call, not at import"
    assert run(command, "--help").returncode == 0
    assert run(command, "--version").stdout.startswith("streamscope ")
    for args, extra in ((["check"], "cli"), (["demo", "--tour"], "demo")):
        done = run(command, *args)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"streamscope {args[0]}: ") and f"pip install 'streamscope[{extra}]'" in line, line
    # The relay without its extra: the import names the extra to install.
    serve = run(python, "-c", "from streamscope.serve import relay")
    assert serve.returncode == 1 and "pip install 'streamscope[serve]'" in serve.stderr.splitlines()[-1], serve.stderr
    # OpenTelemetry's zero-code runner finds the entry points, sees neither SDK of the
    # `instruments-any` extra and skips streamscope without an error: the program runs as it would
    # without it.
    runner = run(env / "bin" / "opentelemetry-instrument", python, "-c", "print('the app ran')")
    assert runner.returncode == 0, runner.stderr
    assert runner.stdout.strip() == "the app ran"
    assert "Traceback" not in runner.stderr


def test_the_demo_extra_runs_the_demo_without_test_tools(env: Path, wheel: Path) -> None:
    added = run(env / "bin" / "python", "-m", "pip", "install", "--quiet", f"{wheel}[demo]")
    assert added.returncode == 0, added.stderr
    assert not installed(env) & TEST_TOOLS
    demo = run(env / "bin" / "streamscope", "demo", "--tour", "--port", "0", "--time-scale", "0.1")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "every span carries the class its script was written for" in " ".join(demo.stdout.split())
    assert "Traceback" not in demo.stderr


def test_the_wheel_builds_the_compiled_reader_and_the_install_reads_with_it(wheel: Path, env: Path) -> None:
    """With a C compiler (as here) the wheel carries the compiled sync reader, keep-alive counter and
    chunk tally, with their type stubs, and an installed streamscope uses them."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    for module in ("adapters/stainless/_reader", "export/_tally"):
        assert [n for n in names if n.startswith(f"streamscope/{module}.") and n.endswith(".so")], module
        assert f"streamscope/{module}.pyi" in names
    found = run(env / "bin" / "python", "-c", "from streamscope.adapters.stainless import stream, pings; "
                                              "from streamscope.export import chunk_histogram as c; "
                                              "print(stream._reader is not None, pings._reader is not None, "
                                              "c._tally is not None)")
    assert found.stdout.strip() == "True True True", found.stderr


def test_without_a_c_compiler_it_installs_and_reads_in_python(tmp_path: Path, source: Path) -> None:
    """The compiled modules are optional: where their build fails (here the compiler is `false`) the
    wheel is the pure-Python one and the install reads streams, counts keep-alives and tallies
    chunk gaps in Python."""
    fresh = tmp_path / "streamscope"  # not the one the other wheel was built in (its build/ holds the module)
    shutil.copytree(source, fresh, ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so"))
    out = tmp_path / "dist"
    built = run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, fresh,
                env={**os.environ, "CC": "false"})
    assert built.returncode == 0, built.stderr
    (pure,) = out.glob("streamscope-*.whl")
    with zipfile.ZipFile(pure) as archive:
        assert not [n for n in archive.namelist() if n.endswith(".so")]
    home = tmp_path / "venv"
    venv.create(home, with_pip=True)
    assert run(home / "bin" / "python", "-m", "pip", "install", "--quiet", pure).returncode == 0
    found = run(home / "bin" / "python", "-c", "from streamscope.adapters.stainless import stream, pings; "
                                               "from streamscope.export import chunk_histogram as c; "
                                               "print(stream._reader is None, pings._reader is None, "
                                               "c._tally is None)")
    assert found.stdout.strip() == "True True True", found.stderr
