"""The multiprocess directory (`PROMETHEUS_MULTIPROC_DIR`): which one is asked for, what is wrong with
it in one line, and switching prometheus-client to per-process files there.

Every worker process writes its values to mmap files in that directory and whoever serves
`/metrics` sums them (prometheus_multiprocess.py); a mistake here (a directory that does not
exist, is not a directory, or is not writable by the workers' user) is one log line saying how to
fix it, never a traceback.
"""

from __future__ import annotations

import os

from streamscope.core import guard as internal

ENV = "PROMETHEUS_MULTIPROC_DIR"


def requested(explicit: str | os.PathLike[str] | None = None) -> str | None:
    """The directory asked for: `PROMETHEUS_MULTIPROC_DIR` (every process must agree, and
    prometheus-client reads the variable), else `explicit`; None when neither is set."""
    env = os.environ.get(ENV) or os.environ.get(ENV.lower())
    if env:
        if explicit is not None and os.path.abspath(os.fspath(explicit)) != os.path.abspath(env):
            internal.logger.warning("streamscope: %s=%s is set, so metrics go there, not to %s", ENV, env,
                                    os.fspath(explicit))
        return env
    return os.fspath(explicit) if explicit is not None else None


def problem(path: str, *, write: bool) -> str | None:
    """What is wrong with `path` as the multiprocess directory, and how to fix it; None if usable."""
    fix = f"create it before the server starts (e.g. `mkdir -p {path}`), writable by every worker"
    if not os.path.exists(path):
        return f"{ENV}={path} does not exist: {fix}"
    if not os.path.isdir(path):
        return f"{ENV}={path} is not a directory: point it at an empty directory ({fix})"
    mode = os.R_OK | os.X_OK | (os.W_OK if write else 0)
    if not os.access(path, mode):
        needs = "writable" if write else "readable"
        uid = getattr(os, "getuid", lambda: "?")()
        return f"{ENV}={path} is not {needs} by this process (uid {uid}): make it {needs} by the user the " \
               f"workers run as"
    return None


def usable(path: str, *, write: bool) -> bool:
    """Whether `path` can be used; if not, one log line says what is wrong and how to fix it."""
    wrong = problem(path, write=write)
    if wrong is not None:
        consequence = "no Prometheus metrics from this process" if write else "no /metrics served"
        internal.logger.warning("streamscope: %s; %s until then", wrong, consequence)
        return False
    return True


def use_directory(path: str) -> None:
    """Make prometheus-client write per-process files in `path` (the variable must be set before a
    value is first written; children inherit it). One value class per process: two would open
    the same files twice and overwrite each other."""
    from prometheus_client import values

    os.environ[ENV] = path
    if not getattr(values.ValueClass, "_multiprocess", False):
        values.ValueClass = values.MultiProcessValue()
