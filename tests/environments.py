"""What the tests that build environments of their own share (tests/one_sdk, tests/peers)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
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
