"""The frameworks over the SDKs: streamscope observes (and budgets) the streamed calls they make.

Each framework gets an environment of its own, `.venv-frameworks/<name>` (git-ignored; built on
first use, kept, rebuilt when what it is made from changes): a venv with streamscope installed
from this checkout (`pip install -e .`), the SDK(s) the framework's paths use, as `instruments-any`
declares them, and the framework's newest release, read from the package index when the test runs
(`pip index versions`), so a release that ships today is tested today. Where that release does not
work beside the newest SDK, the framework says which SDK release it is tested on and why
(`Framework.sdk_roles`, `Framework.why`), and `test_the_pinned_sdk_is_still_needed` runs the healthy
case once more in an overlay with the newest SDK on top, failing once it works there; an SDK that
pip resolves to anything else fails the environment's test, so a new conflict is seen, not tested
around.

In each, `inside/run_framework.py` runs every case of the framework in one process: each path
(sync, async, another provider) × five scenarios against the real simulator, served here over
loopback (`framework_scenarios.py`: one scenario per case, so the requests the simulator saw are the case's
own): a healthy answer, a mid-stream stall (the idle budget must fire), thinking then the answer,
an in-band overloaded error, and an iterator the caller breaks out of after a few pieces and drops.
Each case here asserts on its report:

* one span per provider request the simulator saw, named `chat <model>`, and a `streamscope.requests`
  count per span, by class;
* the span's class and `error.type`; the idle budget fired on the stall, within its margin (not
  before the budget, well before the stall would have ended) and on no other case;
* what the caller received: the answer, or the partial answer and an exception whose chain holds
  streamscope's `StreamTimeout` (idle) and, where the framework calls the SDK, the SDK's own
  `APITimeoutError` (so the framework's timeout handling applies: retries, fallbacks, its own error
  mapping); the provider's error for the in-band one;
* that the span ended when the framework let go of the stream: by the time the caller's loop ended
  (or its `except` block ran); for the abandoned iterator, by the first moment nothing of the
  stream was alive (the SDK's stream objects and open HTTP responses), whether that is when the
  caller dropped it, after a garbage collection, once the answer was over (a framework that reads
  on in the background) or when the event loop closed. The class then says how much the framework
  read: `cancelled` when it let go part-way, `complete` when it read the whole answer;
* nothing logged at ERROR by streamscope, no internal error counted.

Nothing is skipped: an environment that cannot be built, a framework whose newest release does not
install, and a case whose driver fails all fail with their reason. The session ends with two
tables: the frameworks, the versions installed, the build and run times and the cases that passed;
and per path, what the caller got when the budget fired and when the abandoned stream's span ended
(docs/frameworks.md says the same in words).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from framework_scenarios import (
    HELLO,
    SCENARIOS_RUN,
    SLOW,
    STALL,
    THREE,
    expected,
    register,
    requests_expected,
    scenario_name,
)

import environments
from streamscope.simulator import Simulator
from streamscope.simulator.catalog import ANSWER
from summaries import summary

ROOT = Path(__file__).resolve().parents[2]
HOMES = ROOT / ".venv-frameworks"
INSIDE = Path(__file__).resolve().parent / "inside"
RUNNER = INSIDE / "run_framework.py"
HARNESS = "1"
"""Bumped when the way an environment is built changes, so every one is rebuilt."""

BUILD_TIMEOUT = 420
RUN_TIMEOUT = 300
BUILDERS = 1
"""Environments built at once (pip resolves and unpacks: on two cores, beside the rest of the suite, one)."""
RUNNERS = 2
"""Frameworks run at once: their cases mostly wait on the simulator's delays."""

BUDGETS = {"first_token": 5.0, "idle": 2.0, "deadline": 30.0}
"""At time scale 1. The healthy streams send content every 20-100 ms; the slowest first text is at
about 1 s (reasoning over Chat Completions), so `first_token` and `idle` are loose enough for a loaded
machine; the stall is 10 s, so `idle` fires well inside it; no case lasts near the deadline."""
FIRED_BY = STALL * 0.6
"""The idle budget must have fired by then (after the last content): well before the stall would end."""
LEAVE_AFTER = 3
"""The abandoning caller breaks out after this many pieces of the slow answer."""
ANSWER_OVER = 4.5
"""Seconds after the request by which the slow answer (30 words, 0.1 s apart) would be over."""

ANTHROPIC_MODEL = "claude-sonnet-4-5"
OPENAI_MODEL = "gpt-5-mini"
"""As `inside/drivers.py` asks for them: names the frameworks accept (some check the name)."""
SHAPE_SDK = {"text": "anthropic", "tool": "anthropic", "runner": "anthropic", "chat": "openai",
             "responses": "openai"}
RUNNER_FIRST_TURN = "Let me look."
"""The text of the tool runner's first turn (the `lookup` call), before the answer's."""
STAGES = ("end", "settled", "collected", "answer_over", "loop_closed")


@dataclass(frozen=True)
class Framework:
    name: str
    package: str | None
    """The distribution whose newest release is tested (None: the SDK alone)."""
    extras: str
    paths: dict[str, str]
    """Path (how the caller streams: sync, async, another provider) → the wire shape it speaks."""
    sdk_roles: dict[str, str] = field(default_factory=dict)
    """An SDK tested on another release than its newest: `last 0.x`, ... (as tests/matrix names them)."""
    why: str = ""
    """Why the SDK is not the newest, and what was found (the docs' table says the same)."""
    own_client: tuple[str, ...] = ()
    """Paths that do not call the SDK at all (the framework posts with its own HTTP client)."""

    @property
    def sdks(self) -> tuple[str, ...]:
        return tuple(sorted({SHAPE_SDK[shape] for shape in self.paths.values()}))


FRAMEWORKS = {f.name: f for f in [
    Framework("langchain-anthropic", "langchain-anthropic", "", {"sync": "text", "async": "text"}),
    Framework("langchain-openai", "langchain-openai", "", {"sync": "chat", "async": "chat", "sync-headers": "chat"}),
    Framework("pydantic-ai", "pydantic-ai-slim", "[anthropic,openai]",
              {"async": "text", "sync": "text", "async-openai": "chat"}),
    Framework("litellm", "litellm", "", {"sync": "text", "async": "text", "sync-openai": "chat",
                                         "async-openai": "chat", "router-sync": "text", "router-async": "text"},
              own_client=("sync", "async", "router-sync", "router-async")),
    Framework("openai-agents", "openai-agents", "", {"async": "responses"}),
    Framework("instructor", "instructor", "", {"sync": "tool", "async": "tool"},
              why="instructor's own `[anthropic]` extra pins anthropic==0.93.0; installed without it, beside the "
                  "newest anthropic"),
    Framework("llama-index-llms-anthropic", "llama-index-llms-anthropic", "", {"sync": "text", "async": "text"},
              sdk_roles={"anthropic": "last 0.x"},
              why="its newest release fails before sending on anthropic 2.x (`TypeError: Cannot instantiate "
                  "typing.Union`, building a MessageParam) and on 1.x (`Messages.create() got an unexpected keyword "
                  "argument 'temperature'`); it works on the last 0.x"),
    Framework("anthropic-tool-runner", None, "", {"sync": "runner", "async": "runner"}),
]}


# -- versions: read from the package index when the test runs ---------------------------------------------


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


@functools.cache
def releases(name: str) -> list[str]:
    """The releases on the package index, newest first (pre-releases aside)."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True,
                          timeout=120, env=environments.clean_environ(PIP_DISABLE_PIP_VERSION_CHECK="1"))
    assert done.returncode == 0, f"cannot read {name}'s releases from the package index: {done.stderr[-2000:]}"
    line = next(x for x in done.stdout.splitlines() if x.startswith("Available versions:"))
    found = [v.strip() for v in line.split(":", 1)[1].split(",")]
    return sorted((v for v in found if re.fullmatch(r"[0-9]+(\.[0-9]+)*", v)), key=_version, reverse=True)


def resolve(name: str, role: str = "newest") -> str:
    known = releases(name)
    if role == "newest":
        return known[0]
    match = re.fullmatch(r"last ([0-9]+)\.x", role)
    assert match, f"unknown release role {role!r}"
    return next(v for v in known if _version(v)[0] == int(match.group(1)))


def _pyproject() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def sdk_requirement(sdk: str, role: str) -> str:
    """`anthropic>=0.75` as `instruments-any` writes it (pip takes the newest that installs beside the
    framework), or the release the role names."""
    if role != "newest":
        return f"{sdk}=={resolve(sdk, role)}"
    (found,) = [r for r in _pyproject()["optional-dependencies"]["instruments-any"]
                if re.split(r"[<>=!~\[; ]", r)[0] == sdk]
    return found


@dataclass(frozen=True)
class Plan:
    """What one environment is made of, today."""

    framework: Framework
    versions: dict[str, str]
    """Distribution → the release it must have: the framework's newest, each SDK's (newest or by role)."""
    requirements: tuple[str, ...]

    @property
    def home(self) -> Path:
        return HOMES / self.framework.name

    def key(self) -> str:
        project = _pyproject()
        made = {"harness": HARNESS, "python": sys.version, "executable": os.path.realpath(sys.executable),
                "dependencies": project["dependencies"], "requirements": self.requirements,
                "versions": self.versions}
        return hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()


def plan(framework: Framework) -> Plan:
    versions: dict[str, str] = {}
    requirements = ["-e", str(ROOT)]
    for sdk in framework.sdks:
        role = framework.sdk_roles.get(sdk, "newest")
        versions[sdk] = resolve(sdk, role)
        requirements.append(sdk_requirement(sdk, role))
    if framework.package is not None:
        versions[framework.package] = resolve(framework.package)
        requirements.append(f"{framework.package}{framework.extras}=={versions[framework.package]}")
    return Plan(framework, versions, tuple(requirements))


def clean_environ(**extra: str) -> dict[str, str]:
    return environments.clean_environ((*environments.SETTINGS, "ANTHROPIC_", "OPENAI_", "LITELLM_", "LANGCHAIN_",
                                       "LANGSMITH_", "LOGFIRE_"), PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)


def build(made: Plan) -> tuple[Path, float | None]:
    """`.venv-frameworks/<name>`, built if missing or made from something else; its root and the seconds
    the build took (None: kept from an earlier run)."""
    home, key = made.home, made.key()
    stamp = home / ".installed-framework"
    with environments.locked(home, "frameworks"):
        if (home / "bin" / "python").exists() and stamp.exists() and stamp.read_text() == key:
            return home, None
        started = time.monotonic()
        shutil.rmtree(home, ignore_errors=True)
        env = clean_environ()
        environments.create(home, env, BUILD_TIMEOUT)
        installed = environments.install(home, list(made.requirements), env, BUILD_TIMEOUT, cwd=ROOT)
        noise = "is ignored: it is neither a file nor a directory"
        said = "\n".join(line for line in installed.stderr.splitlines() if noise not in line)
        assert installed.returncode == 0, (f"{made.framework.name}: cannot install {list(made.requirements)} into "
                                           f"{home}:\n{said[-4000:]}")
        stamp.write_text(key)
        return home, time.monotonic() - started


# -- the run -----------------------------------------------------------------------------------------------


def case_id(path: str, scenario: str) -> str:
    return f"{path}/{scenario}"


def leave_after(shape: str) -> int:
    """Pieces before the abandoning caller leaves: after a few of the slow answer (the runner's first
    turn has two pieces of its own)."""
    return LEAVE_AFTER + (2 if shape == "runner" else 0)


def spec(framework: Framework, sim: Simulator, out: Path, label: str,
         only: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """The child's instructions: every case (or `only` these (path, scenario)), on the scenarios
    registered under `label`."""
    cases = []
    for path, shape in framework.paths.items():
        for scenario in SCENARIOS_RUN:
            if only is not None and (path, scenario) not in only:
                continue
            name = scenario_name(label, path, scenario)
            url = sim.openai_url(name) if SHAPE_SDK[shape] == "openai" else sim.url(name)
            cases.append({"id": case_id(path, scenario), "path": path, "scenario": scenario, "url": url,
                          "thinking": scenario == "thinking",
                          "leave_after": leave_after(shape) if scenario == "abandon" else None,
                          "answer_over": ANSWER_OVER if scenario == "abandon" else None})
    packages = [*framework.sdks, *([framework.package] if framework.package else [])]
    return {"framework": framework.name, "cases": cases, "budgets": BUDGETS, "out": str(out),
            "packages": sorted({*packages, "anthropic", "openai"})}


@dataclass
class ChildRun:
    """One run of `run_framework.py`: its report and what the simulator saw of its requests."""

    report: dict[str, Any] = field(default_factory=dict)
    requests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Case id → what the simulator saw of each of its requests."""
    failure: str = ""
    seconds: float = 0.0


def run_child(framework: Framework, home: Path, sim: Simulator, work: Path, label: str,
              only: list[tuple[str, str]] | None = None) -> ChildRun:
    """The cases in a fresh process of `home`'s Python (instrumentors patch classes for good)."""
    child = ChildRun()
    out, spec_file = work / f"{label}.json", work / f"{label}.spec.json"
    made = spec(framework, sim, out, label, only)
    spec_file.write_text(json.dumps(made))
    started = time.monotonic()
    try:
        done = subprocess.run([str(home / "bin" / "python"), str(RUNNER), str(spec_file)], capture_output=True,
                              text=True, timeout=RUN_TIMEOUT, env=clean_environ(), cwd=work)
    except subprocess.TimeoutExpired:
        child.failure = f"{label}: no report after {RUN_TIMEOUT} s"
        return child
    child.seconds = time.monotonic() - started
    report = json.loads(out.read_text()) if out.exists() else {}
    said = f"exit {done.returncode}; stderr:\n{done.stderr[-6000:]}"
    if "fatal" in report or done.returncode != 0 or not report.get("cases"):
        child.failure = f"{label} could not run:\n{report.get('fatal', '')}\n{said}"
        return child
    child.report = report
    names = {scenario_name(label, e["path"], e["scenario"]): e["id"] for e in made["cases"]}
    for index, log in enumerate(sim.requests):
        if log.scenario in names and log.outcome is None:  # the child has exited: its connections are closed
            with contextlib.suppress(TimeoutError):
                sim.wait_for_outcome(index, timeout=5)
    for log in sim.requests:
        if log.scenario in names:
            child.requests.setdefault(names[log.scenario], []).append(
                {"outcome": log.outcome, "started": log.started, "ended": log.ended, "attempt": log.attempt,
                 "model": log.body.get("model")})
    (work / f"{label}.requests.json").write_text(json.dumps(child.requests, indent=1))
    return child


# -- a pinned SDK, still needed? ---------------------------------------------------------------------------


def probe_label(framework: Framework, sdk: str) -> str:
    return f"{framework.name}+{sdk}-newest"


def overlay(made: Plan, base: Path, sdk: str, version: str) -> Path:
    """`.venv-frameworks/<name>+<sdk>-<version>`: the framework's environment (through a `.pth` file) with
    that SDK release installed on top, shadowing the one the framework is tested on."""
    home = HOMES / f"{made.framework.name}+{sdk}-{version}"
    key = hashlib.sha256(f"{made.key()} {sdk}=={version}".encode()).hexdigest()
    stamp = home / ".installed-framework"
    with environments.locked(home, "frameworks"):
        if (home / "bin" / "python").exists() and stamp.exists() and stamp.read_text() == key:
            return home
        shutil.rmtree(home, ignore_errors=True)
        env = clean_environ()
        environments.create(home, env, BUILD_TIMEOUT)
        python = str(home / "bin" / "python")
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, timeout=60, env=env).stdout.strip()
        based = subprocess.run([str(base / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, timeout=60, env=env).stdout.strip()
        Path(site, "_framework_base.pth").write_text(f"import site; site.addsitedir({based!r})\n")
        # What the release needs that the base lacks, then the release itself in the overlay.
        for extra in ([], ["--no-deps", "--ignore-installed"]):
            installed = environments.install(home, [*extra, f"{sdk}=={version}"], env, BUILD_TIMEOUT, cwd=home)
            assert installed.returncode == 0, f"cannot install {sdk}=={version} into {home}: {installed.stderr[-3000:]}"
        stamp.write_text(key)
    return home


@dataclass
class FrameworkRun:
    framework: Framework
    plan: Plan | None = None
    home: Path | None = None
    built_in: float | None = None
    """Seconds the environment took to build (None: kept)."""
    child: ChildRun = field(default_factory=ChildRun)
    probes: dict[str, tuple[str, ChildRun]] = field(default_factory=dict)
    """A pinned SDK → (its newest release, the healthy case run on it)."""
    failure: str = ""
    """Why there is no report (the build)."""

    @property
    def report(self) -> dict[str, Any]:
        return self.child.report

    @property
    def requests(self) -> dict[str, list[dict[str, Any]]]:
        return self.child.requests


def _short(error: list[dict[str, Any]] | None) -> str:
    if not error:
        return "no exception"
    return " ← ".join(e["type"].rsplit(".", 1)[-1] + ("" if e["via"] == "raised" else f" ({e['via']})")
                      for e in error)


def first_stage(stages: dict[str, dict[str, Any]], test: Any) -> str | None:
    return next((s for s in STAGES if s in stages and test(stages[s])), None)


def abandon_facts(case: dict[str, Any], requests: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(when the span(s) ended, when the framework let go of the stream): stages of the report."""
    stages = case["stages"]
    done = first_stage(stages, lambda st: st["spans_ended"] == len(requests) and st["in_flight"] == 0)
    let_go = first_stage(stages, lambda st: st["sdk_streams"] == 0 and st["open_responses"] == 0)
    return done, let_go


class Matrix:
    """Builds the environments and runs the frameworks the session selected, in the background (they
    mostly wait on pip and on the simulator's delays); each test waits for its own framework's."""

    def __init__(self, names: list[str], work: Path) -> None:
        self.work = work
        self.started = time.monotonic()
        self.sim = Simulator([s for name in names for label in (name, *(probe_label(FRAMEWORKS[name], sdk)
                                                                        for sdk in FRAMEWORKS[name].sdk_roles))
                              for path, shape in FRAMEWORKS[name].paths.items() for s in register(label, path, shape)])
        self.sim.start()
        self.outcomes: dict[str, dict[str, bool]] = {name: {} for name in names}
        self.runs: dict[str, FrameworkRun] = {}
        self._builders = ThreadPoolExecutor(BUILDERS, thread_name_prefix="framework-build")
        self._runners = ThreadPoolExecutor(RUNNERS, thread_name_prefix="framework-run")
        self._futures: dict[str, Future[FrameworkRun]] = {name: Future() for name in names}
        for name in names:
            self._builders.submit(self._build, FRAMEWORKS[name])

    def _build(self, framework: Framework) -> None:
        run, future = FrameworkRun(framework), self._futures[framework.name]
        try:
            try:
                run.plan = plan(framework)
                run.home, run.built_in = build(run.plan)
            except (AssertionError, subprocess.TimeoutExpired, StopIteration) as exc:
                run.failure = f"{framework.name}: {type(exc).__name__}: {exc}"
                future.set_result(run)
                return
            self._runners.submit(self._run, run)
        except BaseException as exc:  # never leave a test waiting forever
            future.set_exception(exc)

    def _run(self, run: FrameworkRun) -> None:
        future = self._futures[run.framework.name]
        try:
            assert run.home is not None and run.plan is not None
            framework = run.framework
            run.child = run_child(framework, run.home, self.sim, self.work, framework.name)
            first = next(iter(framework.paths))
            for sdk in framework.sdk_roles:
                newest = resolve(sdk)
                try:
                    home = overlay(run.plan, run.home, sdk, newest)
                except (AssertionError, subprocess.TimeoutExpired) as exc:
                    run.probes[sdk] = (newest, ChildRun(failure=f"{type(exc).__name__}: {exc}"))
                    continue
                run.probes[sdk] = (newest, run_child(framework, home, self.sim, self.work,
                                                     probe_label(framework, sdk), [(first, "healthy")]))
            future.set_result(run)
        except BaseException as exc:
            future.set_exception(exc)

    def framework(self, name: str) -> FrameworkRun:
        run = self._futures[name].result(timeout=2 * BUILD_TIMEOUT + 2 * RUN_TIMEOUT)
        self.runs[name] = run
        return run

    def close(self) -> None:
        self._builders.shutdown(wait=True, cancel_futures=True)
        self._runners.shutdown(wait=True, cancel_futures=True)
        self.sim.stop()

    def summary(self) -> tuple[str, list[str]]:
        lines = ["| framework | versions | paths | environment | run | cases passed |", "|---|---|---|---|---|---|"]
        facts = ["", "| framework | path | a budget fired: what the caller got | abandoned: span ended / framework "
                 "let go / class |", "|---|---|---|---|"]
        for name, outcomes in self.outcomes.items():
            run = self.runs.get(name)
            framework = FRAMEWORKS[name]
            versions = ", ".join(f"{k} {v}" for k, v in (run.report.get("versions", {}) if run else {}).items() if v)
            built = ("-" if run is None or run.home is None else
                     "kept" if run.built_in is None else f"built in {run.built_in:.0f} s")
            failure = (run.failure or run.child.failure) if run else ""
            ran = f"{run.child.seconds:.0f} s" if run and run.child.seconds else (failure[:80] or "-")
            failed = sorted(c for c, ok in outcomes.items() if not ok)
            passed = sum(1 for ok in outcomes.values() if ok)
            shown = f"{passed}/{len(outcomes)}" + (f"; FAILED: {', '.join(failed)}" if failed else "")
            lines.append(f"| {name} | {versions or '?'} | {', '.join(framework.paths)} | {built} | {ran} | "
                         f"{shown} |")
            for path in framework.paths if run and run.report else ():
                stall = run.report["cases"].get(case_id(path, "stall"), {})
                left = run.report["cases"].get(case_id(path, "abandon"), {})
                done, let_go = abandon_facts(left, run.requests.get(case_id(path, "abandon"), [])) if left else (
                    None, None)
                klass = left["spans"][-1]["attributes"].get("streamscope.class") if left.get("spans") else "no span"
                facts.append(f"| {name} | {path} | {_short(stall.get('error'))} | {done or 'never'} / "
                             f"{let_go or 'holds it'} / {klass} |")
        stages = ("stages: end (the caller's loop ended), settled (0.5 s later), collected (gc), answer_over, "
                  "loop_closed")
        return f"frameworks matrix ({time.monotonic() - self.started:.0f} s)", [*lines, *facts, stages]


def _selected(session: pytest.Session) -> list[str]:
    names = [item.callspec.params["framework"] for item in session.items
             if getattr(item, "callspec", None) is not None and item.module is not None
             and item.module.__name__ == __name__ and "framework" in item.callspec.params]
    return list(dict.fromkeys(names))


@pytest.fixture(scope="module")
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    made = Matrix(_selected(request.session), tmp_path_factory.mktemp("frameworks"))
    yield made
    made.close()
    summary(request.config, *made.summary())


def _usable(run: FrameworkRun) -> dict[str, Any]:
    assert not run.failure, run.failure
    assert not run.child.failure, run.child.failure
    return run.report


# -- the tests ---------------------------------------------------------------------------------------------


LONG_WAIT = pytest.mark.timeout(2 * BUILD_TIMEOUT + 2 * RUN_TIMEOUT + 60)
"""The first test of a framework waits for its environment (and for those built before it)."""


@LONG_WAIT
@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_environment(framework: str, matrix: Matrix) -> None:
    """The environment builds with the framework's newest release and the SDK releases meant (the newest,
    or the one `sdk_roles` names with its reason), streamscope instruments the SDKs there, and every
    case ran."""
    run = matrix.framework(framework)
    report = _usable(run)
    assert run.plan is not None
    installed = report["versions"]
    for name, wanted in run.plan.versions.items():
        assert installed.get(name) == wanted, (
            f"{framework}: {name} {installed.get(name)} installed, {wanted} meant (read from the package index "
            f"today). The framework's newest release does not install beside that release: test the newest "
            f"combination that works, with its reason, in FRAMEWORKS and docs/frameworks.md")
    for sdk in run.framework.sdks:
        assert report["instrumented"][sdk], f"streamscope did not instrument {sdk} {installed.get(sdk)}"
    wanted_cases = {case_id(p, s) for p in run.framework.paths for s in SCENARIOS_RUN}
    assert set(report["cases"]) == wanted_cases, sorted(wanted_cases ^ set(report["cases"]))


PINNED = [name for name, f in FRAMEWORKS.items() if f.sdk_roles]


@LONG_WAIT
@pytest.mark.parametrize("framework", PINNED)
def test_the_pinned_sdk_is_still_needed(framework: str, matrix: Matrix) -> None:
    """A framework tested on an older SDK release than the newest (`sdk_roles`) still fails on the newest:
    its healthy case, on its first path, in an overlay of its environment with the newest SDK on top.
    Once it works there, this fails: test it on the newest (drop `sdk_roles`) and update
    docs/frameworks.md."""
    run = matrix.framework(framework)
    assert not run.failure, run.failure
    for sdk, (newest, child) in run.probes.items():
        assert not child.failure, f"{framework} on {sdk} {newest}: {child.failure}"
        (case,) = child.report["cases"].values()
        installed = child.report["versions"].get(sdk)
        assert installed == newest, f"the overlay has {sdk} {installed}, not {newest}"
        works = case["error"] is None and case["text"] == HELLO
        assert not works, (f"{framework} {child.report['versions']} now works on {sdk} {newest}: test it there "
                           f"(drop its sdk_roles and `why` in FRAMEWORKS) and update docs/frameworks.md")
        assert case["error"] is not None, f"{framework} on {sdk} {newest}: {case}"


def _chain(error: list[dict[str, Any]] | None) -> str:
    if not error:
        return "no exception"
    return " <- ".join(f"{e['type']}" + ("" if e["via"] == "raised" else f" ({e['via']})") for e in error)


def check_case(framework: Framework, path: str, scenario: str, case: dict[str, Any],
               requests: list[dict[str, Any]]) -> None:
    shape = framework.paths[path]
    want = expected(shape, scenario)
    model = OPENAI_MODEL if SHAPE_SDK[shape] == "openai" else ANTHROPIC_MODEL
    where = f"{framework.name} {path} {scenario}"
    error, spans, stages = case["error"], case["spans"], case["stages"]
    said = (f"\n  caller: text {case['text']!r}, {_chain(error)}\n  spans: "
            + json.dumps([{k: s[k] for k in ('name', 'attributes', 'duration')} for s in spans])
            + f"\n  stages: {json.dumps(stages)}\n  requests: {json.dumps(requests)}")
    assert not (error and error[0]["type"] == "harness"), f"{where}: the harness failed:\n{error[0]['message']}"

    # What the caller received.
    prefix = RUNNER_FIRST_TURN if shape == "runner" else ""
    if scenario in ("healthy", "thinking"):
        assert error is None, f"{where}: the caller got an exception instead of the answer{said}"
        assert case["text"] == prefix + (HELLO if scenario == "healthy" else ANSWER), f"{where}: wrong answer{said}"
    elif scenario == "abandon":
        assert error is None, f"{where}: the caller got an exception after leaving{said}"
        slow = "".join(SLOW)
        assert len(case["pieces"]) == leave_after(shape) and slow.startswith(case["text"][len(prefix):]), (
            f"{where}: the caller did not get {leave_after(shape)} pieces of the answer before leaving{said}")
    else:
        assert error is not None, f"{where}: the caller got no exception{said}"
        assert (prefix + THREE).startswith(case["text"]) and case["text"].startswith(prefix), (
            f"{where}: the caller got text the stream did not send before it failed{said}")

    # One span per provider request, each `chat <model>`.
    assert len(requests) >= requests_expected(shape), f"{where}: the simulator saw {len(requests)} request(s){said}"
    assert len(spans) == len(requests), (
        f"{where}: {len(spans)} streamscope span(s) for {len(requests)} provider request(s){said}")
    assert all(s["name"] == f"chat {model}" for s in spans), f"{where}: span names{said}"
    counted: dict[str, int] = {}
    for point in case["counters"]:
        if point["metric"] == "streamscope.requests":
            klass = point["attributes"]["streamscope.class"]
            counted[klass] = counted.get(klass, 0) + point["value"]
    by_class: dict[str, int] = {}
    for s in spans:
        klass = s["attributes"].get("streamscope.class")
        by_class[klass] = by_class.get(klass, 0) + 1
    assert counted == by_class, f"{where}: streamscope.requests counted {counted}, the spans say {by_class}{said}"
    internal = [p for p in case["counters"] if p["metric"] == "streamscope.internal_errors"]
    errors = [line for line in case["logs"] if line.startswith(("ERROR", "CRITICAL"))]
    assert not internal and not errors, f"{where}: streamscope failed inside: {internal} {errors}{said}"

    # The class of each span: the runner's first turn is a complete tool call; a framework's own retries
    # of the failing request fail alike; the last request is the scenario's.
    last = spans[-1]["attributes"]
    if shape == "runner":
        first = spans[0]["attributes"]
        assert first.get("streamscope.class") == "complete" and "error.type" not in first, (
            f"{where}: the runner's first turn (the tool call){said}")
    klass = want.klass
    if scenario == "abandon" and last.get("streamscope.content_events", 0) >= len(SLOW):
        klass = "complete"  # the framework read the whole answer after the caller left
    assert last.get("streamscope.class") == klass, f"{where}: class {last.get('streamscope.class')}, not {klass}{said}"
    if klass != "complete":
        assert last.get("error.type") == want.error_type, (
            f"{where}: error.type {last.get('error.type')!r}, not {want.error_type!r}{said}")
    scenario_spans = spans[1:] if shape == "runner" else spans
    assert all(s["attributes"].get("streamscope.class") == klass for s in scenario_spans), (
        f"{where}: the request's retries ended otherwise{said}")

    # The budgets: idle on the stall, within its margin; none anywhere else.
    fired = [s["attributes"].get("streamscope.budget.fired") for s in spans]
    if scenario == "stall":
        assert all(f == "idle" for f in fired[-len(scenario_spans):]), f"{where}: budgets fired {fired}{said}"
        for s in scenario_spans:
            assert s["attributes"].get("streamscope.budget.idle") == BUDGETS["idle"], f"{where}: idle budget{said}"
            assert BUDGETS["idle"] <= s["duration"] <= FIRED_BY, (
                f"{where}: the idle budget ({BUDGETS['idle']} s) fired {s['duration']} s after the request, outside "
                f"[{BUDGETS['idle']}, {FIRED_BY}] (the stall lasts {STALL} s){said}")
        assert any(e["stream_timeout"] and e["budget"] == "idle" for e in error), (
            f"{where}: streamscope's StreamTimeout (idle) is not in what the caller got: {_chain(error)}{said}")
    else:
        assert not any(fired), f"{where}: a budget fired: {fired}{said}"

    # The span ended when the framework let go of the stream.
    done, let_go = abandon_facts(case, requests)
    if scenario != "abandon":
        assert done == "end", (
            f"{where}: the span had not ended when the caller's loop ended (it ended at {done or 'no stage'}){said}")
    else:
        assert done is not None, (
            f"{where}: the span never ended after the caller left (the framework let go at "
            f"{let_go or 'no stage: it still holds the stream'}){said}")
        assert let_go is None or STAGES.index(done) <= STAGES.index(let_go), (
            f"{where}: the framework let go of the stream at {let_go}, the span ended only at {done}{said}")

    # What the caller gets for the stall, as the SDK's own timeout (the framework's handling applies).
    if scenario == "stall" and path not in framework.own_client:
        assert any(e["sdk_timeout"] for e in error), (
            f"{where}: nothing in what the caller got is the SDK's APITimeoutError: {_chain(error)}{said}")
    if scenario == "inband_error" and path not in framework.own_client:
        assert any(e["sdk_error"] for e in error), f"{where}: the provider's error is not in {_chain(error)}{said}"
        assert not any(e["timeout_error"] for e in error), f"{where}: a timeout in {_chain(error)}{said}"


CASES = [(name, path, scenario) for name, f in FRAMEWORKS.items() for path in f.paths for scenario in SCENARIOS_RUN]


@LONG_WAIT
@pytest.mark.parametrize(("framework", "path", "scenario"), CASES)
def test_case(framework: str, path: str, scenario: str, matrix: Matrix) -> None:
    run = matrix.framework(framework)
    matrix.outcomes[framework][case_id(path, scenario)] = False
    report = _usable(run)
    cid = case_id(path, scenario)
    assert cid in report["cases"], f"{framework}: no report of {cid}"
    check_case(run.framework, path, scenario, report["cases"][cid], run.requests.get(cid, []))
    matrix.outcomes[framework][cid] = True


# -- a framework's own policies, keyed on the SDK's errors, act on a budget's firing -----------------------

POLICY_SCRIPT = r'''
import asyncio, json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import streamscope

which, first, second = sys.argv[1:4]
spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
budgets = streamscope.Budgets(first_token=1.5, idle=5.0, deadline=30.0)
streamscope.AnthropicInstrumentor().instrument(tracer_provider=provider, budgets=budgets)
streamscope.OpenAIInstrumentor().instrument(tracer_provider=provider, budgets=budgets)


async def pydantic_ai_fallback():
    """`FallbackModel(A, B)`: A's first token never comes; B answers."""
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.models.fallback import FallbackModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    def model(url):
        return AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(base_url=url, api_key="k"))

    async with Agent(FallbackModel(model(first), model(second))).run_stream("How do streams fail?") as result:
        return "".join([t async for t in result.stream_text(delta=True)])


async def openai_agents_retry():
    """`ModelRetrySettings` with the network-error policy: the first attempt's first token never
    comes, the retry answers (the same endpoint plays both attempts)."""
    from agents import Agent, ModelRetrySettings, ModelSettings, OpenAIResponsesModel, Runner, retry_policies
    from agents import set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    settings = ModelSettings(retry=ModelRetrySettings(max_retries=2, policy=retry_policies.network_error()))
    agent = Agent(name="a", instructions="Answer.", model_settings=settings,
                  model=OpenAIResponsesModel("gpt-5-mini", AsyncOpenAI(base_url=first, api_key="k", max_retries=0)))
    result = Runner.run_streamed(agent, "How do streams fail?")
    text = []
    async for event in result.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            text.append(event.data.delta)
    return "".join(text)


text = asyncio.run({"pydantic-ai": pydantic_ai_fallback, "openai-agents": openai_agents_retry}[which]())
found = sorted(spans.get_finished_spans(), key=lambda s: s.start_time)
print(json.dumps({"text": text, "spans": [
    {"class": s.attributes.get("streamscope.class"), "fired": s.attributes.get("streamscope.budget.fired"),
     "attempt": s.attributes.get("streamscope.attempt"), "id": s.context.span_id,
     "links": [l.context.span_id for l in s.links]} for s in found if s.instrumentation_scope.name == "streamscope"]}))
'''


def _policy_run(matrix: Matrix, framework: str, first: str, second: str, tmp_path: Path) -> dict[str, Any]:
    run = matrix.framework(framework)
    assert run.home is not None and not run.failure, run.failure
    script = tmp_path / "policy.py"
    script.write_text(POLICY_SCRIPT)
    done = subprocess.run([str(run.home / "bin" / "python"), str(script), framework, first, second],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, env=clean_environ(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@LONG_WAIT
@pytest.mark.parametrize("framework", ["pydantic-ai"])  # the matrix builds the frameworks its tests name
def test_pydantic_ai_falls_back_on_a_first_token_budget(framework: str, matrix: Matrix, tmp_path: Path) -> None:
    """The `StreamTimeout` is the SDK's `APITimeoutError`, so `FallbackModel` takes it for the SDK's
    timeout and asks the next model: the caller gets model B's answer, one span per model tried."""
    from streamscope.simulator import SCENARIOS as ANTHROPIC
    from streamscope.simulator import Scenario

    names = [f"policy-fallback-{which}-{os.getpid()}" for which in ("a", "b")]
    for name, played in zip(names, ("silent_start", "complete")):
        matrix.sim.add(Scenario(name, list(ANTHROPIC[played].attempts)))
    got = _policy_run(matrix, framework, matrix.sim.url(names[0]), matrix.sim.url(names[1]), tmp_path)
    assert got["text"], got  # model B's answer
    assert [(s["class"], s["fired"]) for s in got["spans"]] == [
        ("stalled_before_first_content", "first_token"), ("complete", None)], got


@LONG_WAIT
@pytest.mark.parametrize("framework", ["openai-agents"])
def test_openai_agents_retries_a_first_token_budget_and_links_the_attempts(framework: str, matrix: Matrix,
                                                                           tmp_path: Path) -> None:
    """`ModelRetrySettings` (network errors) retries the request whose first token never came; the
    retry's span is attempt 2, linked to the first attempt's."""
    from streamscope.simulator import Scenario
    from streamscope.simulator.openai_catalog import OPENAI_SCENARIOS

    name = f"policy-retry-{os.getpid()}"
    matrix.sim.add(Scenario(name, [*OPENAI_SCENARIOS["responses_silent_start"].attempts,
                                   *OPENAI_SCENARIOS["responses_complete"].attempts]))
    got = _policy_run(matrix, framework, matrix.sim.openai_url(name), "", tmp_path)
    assert got["text"], got
    first, second = got["spans"]
    assert (first["class"], first["fired"], first["attempt"]) == ("stalled_before_first_content", "first_token", None)
    assert (second["class"], second["attempt"], second["links"]) == ("complete", 2, [first["id"]]), got
