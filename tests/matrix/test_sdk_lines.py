"""Every SDK line a service may pin: the adapters' tests on the floor, the last release of each
major line and the newest release of each SDK, each in an environment of its own.

The versions are not written down here: the floor is the lower bound `instruments-any` declares in
pyproject.toml, and the last release of each major line and the newest release are read from the
package index when the test runs (`pip index versions`), so a release that ships today is tested
today. Each line gets an overlay environment, `.venv-lines/<sdk>-<version>` (git-ignored; built on
first use, kept, rebuilt when what it is made from changes): a venv whose `.pth` file adds the main
environment's site-packages (streamscope, pytest, OpenTelemetry, the simulator's server), with that
one SDK release pip-installed on top and whatever it needs that the base lacks (httpx for the lines
that read through it): the overlay's SDK shadows the base's, pip never touches the base.

In each, the adapters' tests for that SDK run under the overlay's Python: the stream shapes over
every entry point, the budgets, the classes, the never-break-the-host checks, the layers the
adapter takes over (and the same spans with them forced to "unknown SDK"), and the cloud clients
the line has. This reads their report: all passed, none skipped, none missing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

import environments

ROOT = Path(__file__).resolve().parents[2]
HOMES = ROOT / ".venv-lines"
BASE = sysconfig.get_paths()["purelib"]
BUILD_TIMEOUT = 240
RUN_TIMEOUT = 1500
"""The inner run of one line takes minutes (timers and live servers); the marker below lifts the
suite's 300 s per-test limit for it, and this bounds it instead."""

FILES = {
    "anthropic": ["tests/adapters/test_stream_shapes.py", "tests/adapters/test_paths.py",
                  "tests/adapters/test_layers.py", "tests/adapters/test_never_break_the_host.py",
                  "tests/adapters/test_cut_usage.py", "tests/adapters/test_cloud_clients.py",
                  "tests/integration/test_budgets_live.py", "tests/integration/test_classes_live.py",
                  "tests/adapters/test_privacy.py", "tests/adapters/test_trace_context.py",
                  "tests/adapters/test_raw_paths.py", "tests/adapters/test_posted.py"],
    "openai": ["tests/adapters/test_openai_streams.py", "tests/adapters/test_openai_raw_paths.py"],
}
"""What runs on each line: the tests of the adapter for that SDK."""

LEFT_OUT = {
    ("anthropic", 0): "not (bedrock and (inband or pinging_stall)) and not split_anywhere",
}
"""(sdk, major line): the tests that line cannot pass because of what its SDK does, as a `-k`
expression; each is said in docs/reference.md ("SDK lines"). anthropic 0.x's Bedrock client
raises a bare `ValueError` for an in-band exception frame (not an API error: the exception's type
is in its message only), and on its Bedrock streams streamscope counts no pings."""

ROLES = {
    "anthropic": ["floor", "last 0.x", "last 1.x", "newest"],
    "openai": ["floor", "last 1.x", "last 2.x", "newest"],
}
"""The lines of each SDK: the declared floor, the last release of every major line from the floor's
up to the newest's (`test_every_major_line_has_a_role` says when a new major needs one), the newest."""


def floor_spec(sdk: str) -> str:
    """The lower bound `instruments-any` declares for `sdk` (`0.75`)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (found,) = [r for r in extras["instruments-any"] if re.split(r"[<>=!~\[; ]", r)[0] == sdk]
    match = re.fullmatch(rf"{sdk}>=([0-9.]+)", found)
    assert match, f"instruments-any names {found!r}: a lower bound only, no upper bound"
    return match.group(1)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


@functools.cache
def releases(sdk: str) -> list[str]:
    """The releases on the package index, newest first (pre-releases aside)."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", sdk], capture_output=True, text=True,
                          timeout=120, env=environments.clean_environ(PIP_DISABLE_PIP_VERSION_CHECK="1"))
    assert done.returncode == 0, f"cannot read {sdk}'s releases from the package index: {done.stderr[-2000:]}"
    line = next(x for x in done.stdout.splitlines() if x.startswith("Available versions:"))
    found = [v.strip() for v in line.split(":", 1)[1].split(",")]
    return sorted((v for v in found if re.fullmatch(r"[0-9]+(\.[0-9]+)*", v)), key=_version, reverse=True)


def resolve(sdk: str, role: str) -> str:
    """The release a role names, today."""
    known = releases(sdk)
    if role == "newest":
        return known[0]
    if role == "floor":
        floor = _version(floor_spec(sdk))
        return min((v for v in known if _version(v) >= floor), key=_version)
    major = int(role.split()[1].split(".")[0])
    return next(v for v in known if _version(v)[0] == major)


def _key(sdk: str, version: str) -> str:
    made = {"python": sys.version, "executable": os.path.realpath(sys.executable), "base": BASE,
            "requirement": f"{sdk}=={version}"}
    return hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()


def _without_pip_noise(text: str) -> str:
    noise = "is ignored: it is neither a file nor a directory"
    return "\n".join(line for line in text.splitlines() if noise not in line)


INSTRUMENT_SCRIPT = """#!{python}
import sys
from opentelemetry.instrumentation.auto_instrumentation import run
if __name__ == '__main__':
    sys.exit(run())
"""
"""The console script pip writes for opentelemetry-instrumentation, for the overlay's own Python."""


def build(sdk: str, version: str) -> Path:
    """`.venv-lines/<sdk>-<version>`, built if missing or made from something else; its root."""
    home = HOMES / f"{sdk}-{version}"
    key, stamp = _key(sdk, version), home / ".installed-line"
    with environments.locked(home, "lines"):
        if (home / "bin" / "python").exists() and stamp.exists() and stamp.read_text() == key:
            return home
        shutil.rmtree(home, ignore_errors=True)
        env = environments.clean_environ(PIP_DISABLE_PIP_VERSION_CHECK="1")
        environments.create(home, env, BUILD_TIMEOUT)
        site = Path(sysconfig.get_paths(vars={"base": str(home), "platbase": str(home)})["purelib"])
        (site / "_streamscope_base.pth").write_text(f"import site; site.addsitedir({BASE!r})\n")
        # What the release needs that the base lacks, then the release itself in the overlay even
        # where the base has the same one (the newest): the line's own copy, never the base's.
        for extra in ([], ["--no-deps", "--ignore-installed"]):
            installed = environments.install(home, [*extra, f"{sdk}=={version}"], env, BUILD_TIMEOUT, cwd=home)
            assert installed.returncode == 0, (f"cannot install {sdk}=={version} into {home.name}:\n"
                                               f"{_without_pip_noise(installed.stderr)[-4000:]}")
        script = home / "bin" / "opentelemetry-instrument"
        if not script.exists():  # pip writes console scripts only for what it installs in the overlay
            script.write_text(INSTRUMENT_SCRIPT.format(python=home / "bin" / "python"))
            script.chmod(0o755)
        stamp.write_text(key)
    return home


def installed_version(home: Path, sdk: str) -> str:
    script = f"import {sdk}; print({sdk}.__version__, {sdk}.__file__)"
    done = subprocess.run([str(home / "bin" / "python"), "-c", script], capture_output=True, text=True,
                          timeout=120, env=environments.clean_environ(), cwd=home)
    assert done.returncode == 0, done.stderr
    version, where = done.stdout.split()
    assert where.startswith(str(home)), f"{sdk} came from {where}, not from the line's own environment"
    return version


def selection(sdk: str, version: str) -> list[str]:
    """The inner run's arguments: the SDK's test files, less what its line cannot pass (`LEFT_OUT`)."""
    left_out = LEFT_OUT.get((sdk, _version(version)[0]))
    return [*FILES[sdk], *(["-k", left_out] if left_out else [])]


def expected_count(home: Path, files: list[str]) -> int:
    """How many tests the overlay's pytest collects: the report must have them all."""
    done = subprocess.run([str(home / "bin" / "python"), "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *files], capture_output=True, text=True, timeout=300,
                          env=environments.clean_environ(), cwd=ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return sum(1 for line in done.stdout.splitlines() if "::" in line)


@pytest.mark.timeout(RUN_TIMEOUT + 600)
@pytest.mark.parametrize(("sdk", "role"), [(sdk, role) for sdk, roles in ROLES.items() for role in roles])
def test_the_adapter_on_each_line(sdk: str, role: str, tmp_path: Path) -> None:
    version = resolve(sdk, role)
    home = build(sdk, version)
    assert installed_version(home, sdk) == version
    files = selection(sdk, version)
    expected = expected_count(home, files)
    report = tmp_path / "report.xml"
    done = subprocess.run(
        [str(home / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
         *files],
        capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=ROOT, env=environments.clean_environ())
    output = f"{sdk} {version} ({role}) in {home.name}, exit {done.returncode}:\n{done.stdout[-12000:]}\n" \
             f"{done.stderr[-3000:]}"
    assert done.returncode == 0, output
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None, output
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["failures"] == counts["errors"] == counts["skipped"] == 0, (counts, output)
    assert counts["tests"] == expected > 0, (counts, expected, output)


@pytest.mark.parametrize("sdk", list(ROLES))
def test_every_major_line_has_a_role(sdk: str) -> None:
    """A new major line (anthropic 3.0) needs its last release tested once the next one ships:
    this fails until ROLES names every major line between the floor's and the newest's."""
    floor, newest = _version(resolve(sdk, "floor"))[0], _version(resolve(sdk, "newest"))[0]
    named = {int(r.split()[1].split(".")[0]) for r in ROLES[sdk] if r.startswith("last ")}
    assert set(range(floor, newest)) <= named, f"{sdk}: name the last release of each major line in ROLES"


def test_the_declared_ranges_agree() -> None:
    """The instrumentors check what the extras declare: one floor per SDK, no upper bound anywhere."""
    from streamscope import AnthropicInstrumentor, OpenAIInstrumentor

    assert AnthropicInstrumentor().instrumentation_dependencies() == (f"anthropic >= {floor_spec('anthropic')}",)
    assert OpenAIInstrumentor().instrumentation_dependencies() == (f"openai >= {floor_spec('openai')}",)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, requirements in extras.items():
        for requirement in requirements:
            base = re.split(r"[\[<>=!~; ]", requirement)[0]
            if base in ("anthropic", "openai"):
                assert "<" not in requirement, f"{name}: {requirement} caps an SDK a service already runs"

