"""One module per `streamscope` subcommand: `add_arguments(parser)` and `run(args) -> int`.

Exit codes shared by every command: 0 done, 1 a finding (the command worked and reports a
problem: a configuration that cannot finish, a self-check that failed, labels that disagree),
2 a usage error (bad arguments or input; one line on stderr says what to fix).

What several commands share sits here: the options that name where observations come from and
reading a Prometheus server's with every input checked first (`suggest`, `validate`), and JSON
without infinities (`lab`, `validate`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argparse import _ActionsContainer

    from streamscope.tools.suggest import Observations

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user: `cli.main` prints the message as one line and exits with 2."""


def json_safe(value: Any) -> Any:
    """JSON has no infinity or NaN: null instead, in nested dicts, lists and tuples too."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


_SOURCE_METAVARS = {"prometheus": "URL", "spans": "FILE"}


def add_observation_options(source: _ActionsContainer, window_to: _ActionsContainer, *, window: str,
                            **sources: str) -> None:
    """`--prometheus URL` and `--spans FILE`, each with its help text, in `source` (a mutually
    exclusive group) in the order the texts are given, and `--window DURATION` (default 1h) in
    `window_to`: the options `prometheus_observations` and `read_spans` read, as each command
    words them."""
    for name, text in sources.items():
        source.add_argument(f"--{name}", metavar=_SOURCE_METAVARS[name], help=text)
    window_to.add_argument("--window", default="1h", metavar="DURATION", help=window)


def prometheus_observations(text: str, window: str) -> tuple[Observations, str]:
    """What a Prometheus server (`--prometheus`, over `--window`) observed, and the server's URL;
    every input checked before any query is sent, each problem one `UsageError`."""
    from streamscope.tools.promql import DURATION, PrometheusError, from_prometheus, server_url

    try:
        url = server_url(text)
    except ValueError as error:
        raise UsageError(f"argument --prometheus: {error}") from None
    if not DURATION.fullmatch(window):
        raise UsageError(f"argument --window: expected a Prometheus duration such as 30m, 1h or 1h30m, got {window!r}")
    try:
        return from_prometheus(url, window), url
    except PrometheusError as error:
        raise UsageError(str(error)) from None
