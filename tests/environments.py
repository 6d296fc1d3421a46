"""What the tests that build environments of their own share (tests/one_sdk, tests/peers, tests/matrix,
tests/frameworks): a clean environment for their children, one builder at a time per environment,
and the environments made alike.

An environment gets no pip of its own: `ensurepip` costs about three seconds of CPU per environment,
and a run builds some thirty. This environment's pip installs into it (`pip --python`), running under
the environment's own interpreter, so it sees what that interpreter sees. Nothing is byte-compiled
at install (`--no-compile`): a module is compiled when it is first imported, so the thousands a
package ships and no test imports are never compiled.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

LEAKS = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTEST_ADDOPTS")
SETTINGS = ("OTEL_", "STREAMSCOPE_", "PYTEST_")


def clean_environ(settings: tuple[str, ...] = SETTINGS, **extra: str) -> dict[str, str]:
    """This process's environment without what would leak the main environment in: its paths, and
    the variables starting with one of `settings` (configuration meant for this run only)."""
    kept = {k: v for k, v in os.environ.items() if k not in LEAKS and not k.startswith(settings)}
    return {**kept, **extra}


@contextlib.contextmanager
def locked(home: Path, kind: str) -> Iterator[None]:
    """One builder at a time per environment (two test runs of one checkout may start together)."""
    name = hashlib.sha256(str(home).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"streamscope-{kind}-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def create(home: Path, env: dict[str, str], timeout: float) -> None:
    """An empty virtualenv at `home` (no pip of its own: `install` puts packages in it)."""
    made = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], capture_output=True,
                          text=True, timeout=timeout, env=env)
    assert made.returncode == 0, f"cannot create {home}: {made.stderr}"


def install(home: Path, args: list[str], env: dict[str, str], timeout: float,
            cwd: Path | str | None = None) -> subprocess.CompletedProcess[str]:
    """`pip install --quiet --no-compile <args>` into the environment at `home`, by this environment's pip."""
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(home / "bin" / "python"), "install",
                           "--quiet", "--no-compile", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd)
