"""Tables shown after the tests, wherever they were made: in this process or in a pytest-xdist worker.

`make test` runs the modules in xdist workers, whose terminal output nobody sees; a worker hands its
tables to the controller in `workeroutput` (conftest's `pytest_testnodedown`), which shows them.
"""

from __future__ import annotations

from typing import Any

import pytest

KEY = "streamscope_summaries"
SHOWN: list[tuple[str, list[str]]] = []
"""The tables the terminal summary shows, in the order they arrived."""


def summary(config: pytest.Config, title: str, lines: list[str]) -> None:
    """Show a table after the tests: in this process's report or, in an xdist worker, the controller's."""
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is None:
        SHOWN.append((title, lines))
    else:
        workeroutput.setdefault(KEY, []).append([title, lines])


def gathered(workeroutput: dict[str, Any]) -> None:
    """The tables a finished worker handed over."""
    SHOWN.extend((title, lines) for title, lines in workeroutput.get(KEY, []))
