"""Coexistence: streamscope beside another LLM-tracing library (a "peer"), in either order, behaves
exactly as without it, and the peer exactly as without streamscope.

Each peer gets an overlay environment at the repository root, `.venv-peer-<name>` (git-ignored;
built on first use, kept, rebuilt when what it is made from changes): a venv whose `.pth` file
adds this environment's site-packages (streamscope, both SDKs, the OpenTelemetry SDK), with the
peer's requirements pip-installed on top (newer versions of shared packages shadow the base's
there; pip never removes the base's). One overlay per peer: peers patch the same methods and some
share module names. Its driver is `inside/peer_<name>.py` (NAME, REQUIREMENTS, SDKS, `enable()`,
`records()`, `reset()`); every `peer_*.py` there is a peer of the matrix.

`inside/run_peer.py` runs one configuration in a fresh process of the overlay's Python:
`neither`, `streamscope`, `peer`, `peer-first`, `streamscope-first` and `zero-code` (streamscope on
by the overlay's `opentelemetry-instrument` with no configurator and no other instrumentor, its
budgets from `STREAMSCOPE_CONFIG`; the peer on in code, then the global providers set: where the
peer claimed them first, streamscope records through the peer's, which is how Logfire meets it),
every case against the real simulator, and reports what the caller received, what streamscope
recorded and what the peer recorded. Here the reports are compared field by field:

* the caller's view: `peer` against `neither`; every mixed configuration against `streamscope`
  (budgets change what a caller receives on a stall, by design);
* streamscope's spans and counters in a mixed configuration against `streamscope`;
* the peer's records in a mixed configuration against `peer` (same count, names and statuses); where
  a streamscope budget ended the stream (by design), against what the peer records in `peer` mode
  when the same shape's stream fails mid-way (`cut_connection`).

A peer that cannot be installed, or that records nothing, fails (a peer that records nothing
proves nothing); nothing here is skipped, and a driver that declares `INSTALLS = False` fails its
build test with its reason (an exclusion tests nothing). An overlay whose pip did not install
opentelemetry-instrumentation there (it came from the base) gets the console script pip would have
written, `bin/opentelemetry-instrument` on the overlay's Python. The session ends with a table of the peers, the
versions installed and the configurations that passed.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import environments
from summaries import summary

ROOT = Path(__file__).resolve().parents[2]
INSIDE = Path(__file__).resolve().parent / "inside"
RUNNER = INSIDE / "run_peer.py"
HARNESS = "2"
"""Bumped when the way an overlay is built changes, so every overlay is rebuilt."""

BUILD_TIMEOUT = 240
RUN_TIMEOUT = 200
"""Each under pytest-timeout's 300 s, so a hang fails with its own message."""
WORKERS = 4
"""Configurations run at once (all peers together): they mostly wait on the simulator's delays."""
BUILDERS = 2
"""Overlays built at once."""

TIME_SCALE = 0.25
"""Every simulator delay × this: `pinging_stall` stalls 2.5 s, `slow_thinking` thinks ~0.55 s."""
BUDGETS = {"first_token": 4.0, "idle": 1.0, "deadline": 12.0}
"""Generous against the healthy streams at this scale (first text by ~0.6 s, gaps of tens of ms,
all over in ~0.8 s), and `idle` well below `pinging_stall`'s 2.5 s stall."""

CONFIGURATIONS = ("neither", "streamscope", "peer", "peer-first", "streamscope-first", "zero-code")
COMPARED = ("peer", "peer-first", "streamscope-first", "zero-code")
CALLER_BASELINE = {"peer": "neither", "peer-first": "streamscope", "streamscope-first": "streamscope",
                   "zero-code": "streamscope"}
MAX_SHOWN = 40
"""Differences listed in one failure (the rest counted)."""


# -- the drivers -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Driver:
    """A peer's driver module, read without importing it (its imports exist in its overlay only)."""

    name: str
    path: Path
    requirements: tuple[str, ...] = ()
    sdks: tuple[str, ...] = ()
    installs: bool = True
    reason: str = ""
    """Why it is not tested, where the module says `INSTALLS = False` (with `REASON` or `WHY`)."""
    problem: str = ""
    """What is wrong with the module itself (it fails every test of the peer)."""

    @property
    def packages(self) -> list[str]:
        """The distributions its requirements name (pip options left out)."""
        return [re.split(r"[<>=!~\[; ]", r)[0] for r in self.requirements if not r.startswith("-")]


def read_driver(path: Path) -> Driver:
    name = path.stem.removeprefix("peer_")
    try:
        found = {target.id: ast.literal_eval(node.value) for node in ast.parse(path.read_text()).body
                 if isinstance(node, ast.Assign) for target in node.targets if isinstance(target, ast.Name)
                 and target.id in ("NAME", "REQUIREMENTS", "SDKS", "INSTALLS", "REASON", "WHY")}
        defined = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
    except (SyntaxError, ValueError) as exc:
        return Driver(name, path, problem=f"{path.name} cannot be read for its literals: {exc}")
    if found.get("INSTALLS", True) is False:  # a declared exclusion needs no more than its reason
        return Driver(name, path, installs=False, reason=str(found.get("REASON", found.get("WHY", ""))))
    missing = [k for k in ("NAME", "REQUIREMENTS", "SDKS") if k not in found]
    missing += [f"{f}()" for f in ("enable", "records", "reset") if f not in defined]
    if missing:
        return Driver(name, path, problem=f"{path.name} lacks {', '.join(missing)} (as literals / functions)")
    if found["NAME"] != name:
        return Driver(name, path, problem=f"{path.name} says NAME = {found['NAME']!r}, its file name says {name!r}")
    sdks = tuple(found["SDKS"])
    if not sdks or not set(sdks) <= {"anthropic", "openai"}:
        return Driver(name, path, problem=f"{path.name}: SDKS must name anthropic and/or openai, not {sdks!r}")
    return Driver(name, path, tuple(found["REQUIREMENTS"]), sdks)


DRIVERS = {d.name: d for d in map(read_driver, sorted(INSIDE.glob("peer_*.py")))}


# -- the overlays ------------------------------------------------------------------------------------


def clean_environ(**extra: str) -> dict[str, str]:
    """This process's environment without what would leak this environment (or its settings) in."""
    return environments.clean_environ((*environments.SETTINGS, "LOGFIRE_", "DD_", "SENTRY_", "TRACELOOP_",
                                       "OPENINFERENCE_"), PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)


def _locked(home: Path) -> contextlib.AbstractContextManager[None]:
    return environments.locked(home, "peers")


BASE = sysconfig.get_paths()["purelib"]
"""This environment's site-packages, which every overlay sees."""


def _key(driver: Driver) -> str:
    """What an overlay is made from: the Python, the base and what is in it, and the peer's requirements."""
    base = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions())
    made = {"harness": HARNESS, "python": sys.version, "executable": os.path.realpath(sys.executable),
            "base": BASE, "installed": base, "requirements": driver.requirements}
    return hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()


INSTRUMENT_SCRIPT = """#!{python}
import sys
from opentelemetry.instrumentation.auto_instrumentation import run
if __name__ == '__main__':
    sys.argv[0] = sys.argv[0].removesuffix('.exe')
    sys.exit(run())
"""
"""The console script pip writes for opentelemetry-instrumentation, for an overlay that got it from
the base (pip writes scripts only for what it installs there)."""


def build(driver: Driver) -> Path:
    """`.venv-peer-<name>`, built if missing or made from something else (`_key`); its root."""
    home = ROOT / f".venv-peer-{driver.name}"
    key, stamp = _key(driver), home / ".installed-peer"
    with _locked(home):
        if (home / "bin" / "python").exists() and stamp.exists() and stamp.read_text() == key:
            return home
        shutil.rmtree(home, ignore_errors=True)
        env = clean_environ()
        environments.create(home, env, BUILD_TIMEOUT)
        site = Path(sysconfig.get_paths(vars={"base": str(home), "platbase": str(home)})["purelib"])
        (site / "_streamscope_base.pth").write_text(f"import site; site.addsitedir({BASE!r})\n")
        installed = environments.install(home, ["--upgrade", *driver.requirements], env, BUILD_TIMEOUT, cwd=home)
        assert installed.returncode == 0, (f"cannot install {list(driver.requirements)} into {home.name}:\n"
                                           f"{_without_pip_noise(installed.stderr)[-4000:]}")
        script = home / "bin" / "opentelemetry-instrument"
        if not script.exists():
            script.write_text(INSTRUMENT_SCRIPT.format(python=home / "bin" / "python"))
            script.chmod(0o755)
        stamp.write_text(key)
    return home


def _without_pip_noise(text: str) -> str:
    noise = "is ignored: it is neither a file nor a directory"
    return "\n".join(line for line in text.splitlines() if noise not in line)


DESCRIBE = """
import importlib.metadata as m, json, sys, sysconfig
names, site = json.loads(sys.argv[1]), sysconfig.get_paths()["purelib"]
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print(json.dumps({
    "versions": {n: version(n) for n in names},
    "overlay": sorted(f"{d.metadata['Name']} {d.version}" for d in m.distributions(path=[site])),
    "instrumentors": sorted({e.name for e in m.entry_points(group="opentelemetry_instrumentor")}),
}))
"""
"""What the overlay's Python sees: the peer's versions, what the overlay itself holds, the
OpenTelemetry instrumentors its `opentelemetry-instrument` would load."""


def describe(home: Path, driver: Driver) -> dict[str, Any]:
    done = subprocess.run([str(home / "bin" / "python"), "-c", DESCRIBE, json.dumps(driver.packages)],
                          capture_output=True, text=True, timeout=60, env=clean_environ())
    assert done.returncode == 0, f"cannot describe {home.name}: {done.stderr}"
    described: dict[str, Any] = json.loads(done.stdout)
    return described


def streamscope_instrumentors() -> list[str]:
    """streamscope's own entry points (pyproject.toml): the only ones zero-code leaves on."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return sorted(project["entry-points"]["opentelemetry_instrumentor"])


# -- one configuration -------------------------------------------------------------------------------


def run_configuration(home: Path, driver: Driver, config: str, work: Path,
                      instrumentors: list[str]) -> dict[str, Any]:
    """One configuration in a fresh process of the overlay's Python; its report."""
    out, spec = work / f"{driver.name}-{config}.json", work / f"{driver.name}-{config}.spec.json"
    spec.write_text(json.dumps({"peer": driver.name, "sdks": list(driver.sdks), "config": config, "out": str(out),
                                "time_scale": TIME_SCALE, "budgets": BUDGETS}))
    python = str(home / "bin" / "python")
    command, env = [python, str(RUNNER), str(spec)], clean_environ()
    if config == "zero-code":
        budgets = work / "budgets.toml"
        budgets.write_text("[budgets.default]\n" + "".join(f"{k} = {v}\n" for k, v in BUDGETS.items()))
        others = [name for name in instrumentors if name not in streamscope_instrumentors()]
        command = [str(home / "bin" / "opentelemetry-instrument"), *command]
        # No configurator: the script sets the global providers itself (in-memory), before its first
        # call; and no instrumentor but streamscope's (the peer is on in code, as in the others).
        env.update(STREAMSCOPE_CONFIG=str(budgets), OTEL_PYTHON_CONFIGURATOR="none",
                   OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=",".join(others), OTEL_TRACES_EXPORTER="none",
                   OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env, cwd=work)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{driver.name} {config}: no report after {RUN_TIMEOUT} s") from None
    report: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    said = f"exit {done.returncode}; stderr:\n{done.stderr[-6000:]}"
    assert "fatal" not in report, f"{driver.name} {config} could not run:\n{report.get('fatal')}\n{said}"
    assert done.returncode == 0 and report.get("cases"), f"{driver.name} {config}: no report, {said}"
    return report


# -- the matrix: every selected peer, its overlay and its configurations, run together ---------------


@dataclass
class PeerRun:
    driver: Driver
    home: Path | None = None
    described: dict[str, Any] = field(default_factory=dict)
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    """Configuration (or "build") → why it has no report."""
    seconds: float = 0.0
    """From the start of its build to its last configuration's report (queueing behind other peers included)."""


class Matrix:
    """Builds the overlays and runs the configurations of every peer the session selected, all at
    once in the background (they mostly wait on delays); each test waits for its own peer's."""

    def __init__(self, peers: list[str], work: Path) -> None:
        self.work = work
        self.outcomes: dict[str, dict[str, bool]] = {p: {} for p in peers}
        self.runs: dict[str, PeerRun] = {}
        self._builders = ThreadPoolExecutor(BUILDERS, thread_name_prefix="peer-build")
        self._runners = ThreadPoolExecutor(WORKERS, thread_name_prefix="peer-run")
        self._futures: dict[str, Future[PeerRun]] = {}
        self.started = time.monotonic()
        for peer in peers:
            self._futures[peer] = Future()
            self._builders.submit(self._peer, DRIVERS[peer])

    def _peer(self, driver: Driver) -> None:
        run, started = PeerRun(driver), time.monotonic()
        future = self._futures[driver.name]
        try:
            if driver.problem or not driver.installs:
                future.set_result(run)
                return
            try:
                run.home = build(driver)
                run.described = describe(run.home, driver)
            except (AssertionError, subprocess.TimeoutExpired) as exc:
                run.failures["build"] = str(exc)
                future.set_result(run)
                return
            home, instrumentors = run.home, run.described["instrumentors"]
            pending = {config: self._runners.submit(run_configuration, home, driver, config, self.work, instrumentors)
                       for config in CONFIGURATIONS}
            for config, done in pending.items():
                try:
                    run.reports[config] = done.result()
                except AssertionError as exc:
                    run.failures[config] = str(exc)
            run.seconds = time.monotonic() - started
            future.set_result(run)
        except BaseException as exc:  # never leave a test waiting forever
            future.set_exception(exc)

    def peer(self, name: str) -> PeerRun:
        run = self._futures[name].result(timeout=BUILD_TIMEOUT + 2 * RUN_TIMEOUT)
        self.runs[name] = run
        return run

    def close(self) -> None:
        self._builders.shutdown(wait=True, cancel_futures=True)
        self._runners.shutdown(wait=True, cancel_futures=True)

    def summary(self) -> tuple[str, list[str]]:
        """The matrix at a glance, shown after the tests (conftest's `summary`)."""
        lines: list[str] = []
        write = lines.append
        write("| peer | version installed | SDKs | configurations passed | zero-code records through "
              "| ready after (s) | overlay also installs |")
        write("|---|---|---|---|---|---|---|")
        for name, outcomes in self.outcomes.items():
            run = self.runs.get(name)
            driver = DRIVERS[name]
            versions = ", ".join(f"{k} {v}" for k, v in (run.described.get("versions", {}) if run else {}).items())
            if driver.problem or not driver.installs or (run and "build" in run.failures):
                why = driver.reason if len(driver.reason) < 100 else driver.reason[:100] + " …"
                versions = "not installed" + (f" (INSTALLS = False: {why})" if not driver.installs else "")
            passed = [c for c in COMPARED if outcomes.get(c)]
            failed = [c for c in COMPARED if outcomes.get(c) is False]
            shown = ", ".join(passed) or "none"
            shown += f"; FAILED: {', '.join(failed)}" if failed else ""
            shown += "" if len(passed) + len(failed) == len(COMPARED) or not driver.installs else " (not all run)"
            shown = "excluded, untested (its build test fails)" if not driver.installs else shown
            own = {p.lower() for p in driver.packages}
            extra = [d for d in (run.described.get("overlay", []) if run else [])
                     if d.split(" ")[0].lower().replace("_", "-") not in own
                     and d.split(" ")[0].lower() not in ("pip", "setuptools")]
            globals_ = run.reports.get("zero-code", {}).get("globals", "") if run else ""
            seconds = f"{run.seconds:.0f}" if run and run.seconds else ""
            through = f"{globals_} providers" if globals_ else "-"
            write(f"| {name} | {versions or '?'} | {', '.join(driver.sdks)} | {shown} | {through} | {seconds} | "
                  f"{len(extra)}: {', '.join(extra[:12])}{' …' if len(extra) > 12 else ''} |")
        worst = {key: max((t.get("streamscope", {}).get(key, 0.0) for run in self.runs.values()
                           for report in run.reports.values() for t in report.get("timings", {}).values()),
                          default=0.0)
                 for key in ("streamscope.time_to_first_content", "streamscope.max_gap")}
        write(f"Margins (time scale {TIME_SCALE}): the slowest first content seen "
              f"{worst['streamscope.time_to_first_content']:.3f} s (first_token budget {BUDGETS['first_token']} s), "
              f"the longest gap between content events {worst['streamscope.max_gap']:.3f} s "
              f"(idle budget {BUDGETS['idle']} s).")
        return f"coexistence matrix ({time.monotonic() - self.started:.0f} s)", lines


def _selected_peers(session: pytest.Session) -> list[str]:
    peers = [item.callspec.params["peer"] for item in session.items
             if getattr(item, "callspec", None) is not None and item.module is not None
             and item.module.__name__ == __name__ and "peer" in item.callspec.params]
    return list(dict.fromkeys(peers))


@pytest.fixture(scope="session")
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    made = Matrix(_selected_peers(request.session), tmp_path_factory.mktemp("peers"))
    yield made
    made.close()
    summary(request.config, *made.summary())


def _usable(run: PeerRun, *configs: str) -> None:
    """Fail unless the peer was built and the configurations named ran."""
    driver = run.driver
    assert not driver.problem, driver.problem
    reason = driver.reason.rstrip(".") or "none given"
    assert driver.installs, (f"{driver.path.name} declares INSTALLS = False, so nothing of it is tested (and no "
                             f"coexistence test is made for it). Its reason: {reason}. An exclusion proves "
                             f"nothing: this fails until the peer is tested or its module leaves the matrix.")
    assert "build" not in run.failures, run.failures["build"]
    missing = {c: run.failures[c] for c in configs if c in run.failures}
    assert not missing, "\n\n".join(f"[{c}] {why}" for c, why in missing.items())


# -- comparing ---------------------------------------------------------------------------------------


def differences(expected: Any, got: Any, where: str) -> list[str]:
    """Field by field: one line per differing leaf (lists of plain values compared whole)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        found: list[str] = []
        for key in sorted(set(expected) | set(got)):
            if key not in got:
                found.append(f"{where}.{key}: missing (expected {_short(expected[key])})")
            elif key not in expected:
                found.append(f"{where}.{key}: unexpected {_short(got[key])}")
            else:
                found += differences(expected[key], got[key], f"{where}.{key}")
        return found
    if isinstance(expected, list) and isinstance(got, list) and any(isinstance(x, dict) for x in expected + got):
        if len(expected) != len(got):
            return [f"{where}: {len(expected)} expected, {len(got)} found: expected {_short(expected)}, "
                    f"found {_short(got)}"]
        return [line for i, (e, g) in enumerate(zip(expected, got)) for line in differences(e, g, f"{where}[{i}]")]
    return [] if expected == got else [f"{where}: expected {_short(expected)}, found {_short(got)}"]


def _short(value: Any, limit: int = 600) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + " …"


def compare(run: PeerRun, config: str) -> list[str]:
    """Every difference of `config` from its baselines, each line naming the case and the field."""
    reports, found = run.reports, []
    caller_base = reports[CALLER_BASELINE[config]]
    if config != "peer":
        found += differences(reports["streamscope"]["streamscope_on"], reports[config]["streamscope_on"],
                             "streamscope turned on")
    for case in sorted(set(caller_base["cases"]) | set(reports[config]["cases"])):
        entry, base = reports[config]["cases"].get(case), caller_base["cases"].get(case)
        if entry is None or base is None:
            found.append(f"{case}: {'missing' if entry is None else 'not in the baseline'}")
            continue
        found += differences(base["caller"], entry["caller"], f"{case} caller [vs {CALLER_BASELINE[config]}]")
        if config != "peer":
            ours = reports["streamscope"]["cases"][case]["streamscope"]
            found += differences(ours, entry["streamscope"], f"{case} streamscope [vs streamscope]")
            reference = _peer_reference(case, ours)
            reference = reference if reference in reports["peer"]["cases"] else case
            note = "" if reference == case else f" {reference}, as a budget ended this one"
            found += differences(reports["peer"]["cases"][reference]["peer"], entry["peer"],
                                 f"{case} peer [vs peer{note}]")
    return found


def _peer_reference(case: str, ours: dict[str, Any]) -> str:
    """The `peer`-mode case the peer's records in `case` are compared with: `case` itself, except where a
    streamscope budget ended it (by design, streamscope only). There the caller got an exception mid-stream,
    and so did the peer where it wraps the stream, while without streamscope the stream ran on: the peer
    must then record what it records for the same shape's `cut_connection` (a stream failing after three
    words, as the stall is ended after three words), no more, no less, no other status."""
    if not any("streamscope.budget.fired" in span["attributes"] for span in ours["spans"]):
        return case
    shape = case.split("/")[0]
    return f"{shape}/cut_connection"


# -- the tests ---------------------------------------------------------------------------------------

_SHAPES = {"anthropic": ("create", "stream"), "openai": ("chat", "responses")}
"""Which SDK a case's shape (`sync-create`, `async-chat`, …) drives."""



@pytest.mark.parametrize("peer", sorted(DRIVERS))
def test_overlay_builds_and_both_record(peer: str, matrix: Matrix) -> None:
    """The overlay builds, the peer is installed in it, its driver records something in `peer` mode
    for every SDK it claims, and streamscope records every case in `streamscope` mode."""
    run = matrix.peer(peer)
    _usable(run, "neither", "streamscope", "peer")
    versions = run.described["versions"]
    assert all(versions.values()), f"not installed in {run.home}: {[n for n, v in versions.items() if not v]}"
    assert run.home is not None and (run.home / "bin" / "opentelemetry-instrument").exists()
    recorded = run.reports["peer"]["cases"]
    for sdk in run.driver.sdks:
        mine = [c for c in recorded if c.split("/")[0].split("-")[1] in _SHAPES[sdk]]
        assert mine, f"no case runs the {sdk} SDK"
        assert any(recorded[c]["peer"]["records"] for c in mine), (
            f"{peer} recorded nothing for any {sdk} case in `peer` mode: a peer that records nothing proves nothing")
    ours = run.reports["streamscope"]
    assert ours["streamscope_on"] == {"anthropic": True, "openai": True}, ours["streamscope_on"]
    silent = [c for c, entry in ours["cases"].items() if not entry["streamscope"]["spans"]]
    assert not silent, f"streamscope recorded no span in `streamscope` mode for {silent}"
    # The budgets as meant: the stall ended by `idle` (streamscope's StreamTimeout), nothing else ended
    # by any budget; without streamscope the stall runs to its end.
    fired = {c: span["attributes"].get("streamscope.budget.fired") for c, entry in ours["cases"].items()
             for span in entry["streamscope"]["spans"] if "streamscope.budget.fired" in span["attributes"]}
    stalls = [c for c in ours["cases"] if c.endswith("/pinging_stall")]
    assert fired == dict.fromkeys(stalls, "idle"), f"budgets fired {fired}, expected idle on {stalls} only"
    for case in stalls:
        error = ours["cases"][case]["caller"]["error"] or {}
        assert error.get("type", "").endswith(".StreamTimeout") and error.get("budget") == "idle", (case, error)
        assert run.reports["neither"]["cases"][case]["caller"]["error"] is None, run.reports["neither"]["cases"][case]


@pytest.mark.parametrize("config", COMPARED)
@pytest.mark.parametrize("peer", sorted(name for name, driver in DRIVERS.items() if driver.installs))
def test_coexists(peer: str, config: str, matrix: Matrix) -> None:
    """`config` against its baselines: the caller's view, streamscope's spans and counters, the peer's records."""
    run = matrix.peer(peer)
    matrix.outcomes[peer][config] = False
    _usable(run, "neither", "streamscope", "peer", config)
    found = compare(run, config)
    matrix.outcomes[peer][config] = not found
    shown = "\n".join(found[:MAX_SHOWN]) + (f"\n… and {len(found) - MAX_SHOWN} more" if len(found) > MAX_SHOWN else "")
    assert not found, f"{peer} {config}: {len(found)} difference(s) from the baselines:\n{shown}"


ONE_CLIENT = """
import json, logging
import anthropic, logfire
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import streamscope
from streamscope.simulator import Simulator

said = []
handler = logging.Handler()
handler.emit = lambda record: said.append(record.getMessage())
logging.getLogger("streamscope").addHandler(handler)
logfire.configure(send_to_logfire=False, console=False)
spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
with Simulator() as sim:
    taken = anthropic.Anthropic(base_url=sim.url("complete"), api_key="k", max_retries=0)
    logfire.instrument_anthropic(taken)  # one client instance, before streamscope
    streamscope.AnthropicInstrumentor().instrument(tracer_provider=provider,
                                                   meter_provider=MeterProvider(metric_readers=[reader]))
    texts = []
    for _ in range(2):
        with taken.messages.stream(model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as s:
            texts.append(s.get_final_text())
data = reader.get_metrics_data()
counted = [(dict(p.attributes), p.value) for rm in data.resource_metrics for sm in rm.scope_metrics
           for m in sm.metrics if m.name == "streamscope.unobserved_calls" for p in m.data.data_points]
ours = [s for s in spans.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]
print(json.dumps({"texts": texts, "spans": len(ours), "classes": [s.attributes["streamscope.class"] for s in ours],
                  "counted": counted, "said": [m for m in said if "request method" in m]}))
"""


@pytest.mark.parametrize("peer", ["logfire"])  # the matrix builds the peers its tests name
def test_logfire_on_one_client_before_streamscope_is_still_observed(peer: str, matrix: Matrix,
                                                                    tmp_path: Path) -> None:
    """Never blind, with the real Logfire: `logfire.instrument_anthropic(client)` before streamscope
    puts Logfire's `request` on that instance, which calls the SDK without streamscope's request
    hook. The SDK still sends through the HTTP client's `send`, where streamscope records the call:
    the caller gets its answers, each call its span, nothing is counted as unobserved."""
    run = matrix.peer(peer)
    assert run.home is not None, run.failures
    script = tmp_path / "one_client.py"
    script.write_text(ONE_CLIENT)
    done = subprocess.run([str(run.home / "bin" / "python"), str(script)], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, env=clean_environ(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(got["texts"]) == 2 and got["texts"][0] and got["texts"][0] == got["texts"][1], got
    assert got["spans"] == 2 and got["classes"] == ["complete", "complete"], got
    assert got["counted"] == [] and got["said"] == [], got
