"""Each SDK optional for real: streamscope in environments where only ONE of the two SDKs is installed.

Every other test runs with both SDKs installed, which hid a defect a new user met at once: with
only anthropic (the demo extra's environment), a caller's own exception in the retry line came out
as `ModuleNotFoundError: No module named 'openai'`. Here, two virtualenvs beside the repository's
`.venv` (git-ignored; built on first use, kept, and rebuilt when what they install changes:
the Python, or `[project]` in pyproject.toml but for the extras they do not use):

* `.venv-anthropic-only`: `pip install -e '.[demo]'` and pytest, the demo's environment as
  `make demo` builds it;
* `.venv-openai-only`: the `cli` extra, openai, the simulator's server (starlette, uvicorn) and
  pytest, each requirement as pyproject.toml writes it (openai's from `instruments-any`, the
  server's from `demo`, pytest's from `test`).

In each, the tests in `inside/` run under the environment's own pytest, against the real simulator
and the real SDK installed there (instrument, the retry line, `collect`, the `streamscope`
command, and `streamscope demo` with anthropic); this reads their report: every one passed, none was
skipped, none is missing. An environment that cannot be built fails its test.

Also here, in the main environment: a caller's exception never imports an SDK the program did not.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest

import environments

ROOT = Path(__file__).resolve().parents[2]
INSIDE = Path(__file__).resolve().parent / "inside"
BUILD_TIMEOUT = 240
RUN_TIMEOUT = 240
"""Each under pytest-timeout's 300 s, so a hang fails with its own message."""


def _pyproject() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def _requirement(group: str, name: str) -> str:
    """`name`'s requirement as pyproject.toml's extra `group` writes it."""
    (found,) = [r for r in _pyproject()["optional-dependencies"][group] if re.split(r"[<>=!~\[; ]", r)[0] == name]
    return found


EXTRA = {"anthropic": "demo", "openai": "cli", "anthropic-floor": "cli"}
"""The extra each environment installs streamscope with."""
SDK = {"anthropic": "anthropic", "openai": "openai", "anthropic-floor": "anthropic"}
"""The one SDK each environment has: `anthropic-floor` is a service that pinned the oldest
anthropic streamscope supports (the floor `instruments-any` declares), with nothing else of ours."""
CHECKS = {"anthropic": None, "openai": None, "anthropic-floor": ["check_installed.py", "check_helpers.py"]}
"""The inner files each environment runs (None: all); the floor's has no demo extra to run commands with."""


def floor_requirement(sdk: str) -> str:
    """`anthropic==0.75`: the oldest release `instruments-any` admits."""
    declared = _requirement("instruments-any", sdk)
    return declared.replace(">=", "==")


def install_args(env: str) -> list[str]:
    """What `pip install` gets, from the repository's root, for the environment `env`."""
    pytest_requirement = _requirement("test", "pytest")
    if env == "anthropic":
        return ["-e", f".[{EXTRA[env]}]", pytest_requirement]
    sdk = floor_requirement("anthropic") if env == "anthropic-floor" else _requirement("instruments-any", "openai")
    return ["-e", f".[{EXTRA[env]}]", sdk, _requirement("demo", "starlette"),
            _requirement("demo", "uvicorn"), pytest_requirement]


def _key(sdk: str) -> str:
    """What an environment is made from: the Python, what pip gets, and the part of `[project]` it installs
    (all but the extras it does not use), so another extra's change rebuilds nothing."""
    project = _pyproject()
    extras = project.get("optional-dependencies", {})
    used: set[str] = set()
    todo = [EXTRA[sdk]]
    while todo:
        name = todo.pop()
        if name not in used:
            used.add(name)
            todo += [e for r in extras.get(name, []) if r.startswith("streamscope[")
                     for e in r[len("streamscope["):r.index("]")].split(",")]
    project["optional-dependencies"] = {k: v for k, v in extras.items() if k in used}
    made = {"python": sys.version, "args": install_args(sdk), "project": project}
    return hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()


def clean_environ(**extra: str) -> dict[str, str]:
    """This process's environment without what would leak the main environment (or its settings) in."""
    return environments.clean_environ(**extra)


def _locked(home: Path) -> contextlib.AbstractContextManager[None]:
    return environments.locked(home, "one-sdk")


def environment(sdk: str) -> Path:
    """`.venv-<sdk>-only`, built if missing or made from something else (`_key`); its root."""
    home = ROOT / f".venv-{sdk}-only"
    args, key = install_args(sdk), _key(sdk)
    stamp = home / ".installed-one-sdk"
    with _locked(home):
        if (home / "bin" / "python").exists() and stamp.exists() and stamp.read_text() == key:
            return home
        shutil.rmtree(home, ignore_errors=True)
        env = clean_environ()
        environments.create(home, env, BUILD_TIMEOUT)
        installed = environments.install(home, list(args), env, BUILD_TIMEOUT, cwd=ROOT)
        assert installed.returncode == 0, f"cannot install {args} into {home}: {installed.stderr}"
        stamp.write_text(key)
    return home


def checks(env: str) -> list[Path]:
    """The inner test files `env` runs."""
    names = CHECKS[env]
    return sorted(INSIDE.glob("check_*.py")) if names is None else [INSIDE / name for name in names]


def expected_tests(env: str) -> set[str]:
    """Every test function `env` runs: each must be reported, so none can go missing unseen."""
    names = set()
    for path in checks(env):
        tree = ast.parse(path.read_text())
        names |= {f"{path.stem}.{node.name}" for node in tree.body
                  if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
    return names


@pytest.mark.parametrize("sdk", ["anthropic", "openai", "anthropic-floor"])
def test_with_one_sdk_only(sdk: str, tmp_path: Path) -> None:
    home = environment(sdk)
    report = tmp_path / "report.xml"
    done = subprocess.run(
        [str(home / "bin" / "python"), "-m", "pytest", "-c", str(INSIDE / "pytest.ini"), "--rootdir", str(INSIDE),
         f"--junitxml={report}", *map(str, checks(sdk))],
        capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=INSIDE,
        env=clean_environ(STREAMSCOPE_ONE_SDK=SDK[sdk], PYTHONPATH=str(INSIDE)),
    )
    output = f"inner pytest in {home.name}, exit {done.returncode}:\n{done.stdout[-12000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, output
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None, output
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["failures"] == counts["errors"] == counts["skipped"] == 0, (counts, output)
    ran = {f"{case.get('classname')}.{case.get('name').split('[')[0]}" for case in suite.iter("testcase")}
    assert ran == expected_tests(sdk), output
    if sdk == "anthropic-floor":
        version = subprocess.run([str(home / "bin" / "python"), "-c", "import anthropic; print(anthropic.__version__)"],
                                 capture_output=True, text=True, timeout=60, env=clean_environ())
        floor = floor_requirement("anthropic").split("==")[1]
        assert version.stdout.strip() == (floor if floor.count(".") == 2 else f"{floor}.0"), version


CALLERS_OWN = textwrap.dedent("""
    import sys
    from streamscope import AnthropicInstrumentor, stream_with_retry
    from streamscope.helpers.retry import retry_decision

    AnthropicInstrumentor().instrument()
    assert "openai" not in sys.modules
    print(retry_decision(ValueError("x")))

    class Mine(Exception):
        pass

    def open_stream():
        raise Mine("the caller's own")

    try:
        list(stream_with_retry(open_stream, sleep=lambda s: None))
    except Mine:
        print("Mine")
    print("openai" in sys.modules)
""")


def test_a_callers_exception_never_imports_an_sdk_the_program_did_not() -> None:
    """With both SDKs installed (here) but only anthropic used: asking about a caller's exception
    imported openai (half a second, and its memory) to say it was not one of openai's."""
    done = subprocess.run([sys.executable, "-c", CALLERS_OWN], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    internal = "Failure(code='internal_error', retryable=False, retry_after=None)"
    assert done.stdout.split("\n")[:3] == [internal, "Mine", "False"], done.stdout + done.stderr
