"""The `streamscope` command: demo, lab, classify, suggest, check.

Each subcommand lives in `streamscope.commands.<name>` with `add_arguments(parser)` and
`run(args) -> int`, so a command is one small module and `cli.py` only dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS = {
    "demo": "the main job: a simulated Anthropic endpoint, a mixed workload through the real SDK, a triage table",
    "lab": "compare timeout policies (one total timeout, a read timeout, three budgets) on simulated streams",
    "classify": "label spans from an exported file (OTLP JSON, or JSON lines of span attributes)",
    "suggest": "propose per-model/per-route budgets from observed distributions (Prometheus or a span file)",
    "check": "can this deadline / thinking budget / decode rate / retries configuration finish in time?",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamscope", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"streamscope.commands.{name}")
        command = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
