"""One module per `streamscope` subcommand: `add_arguments(parser)` and `run(args) -> int`.

Exit codes shared by every command: 0 done, 1 a finding (the command worked and reports a
problem: a configuration that cannot finish, a self-check that failed, labels that disagree),
2 a usage error (bad arguments or input; one line on stderr says what to fix).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user: `cli.main` prints the message as one line and exits with 2."""
