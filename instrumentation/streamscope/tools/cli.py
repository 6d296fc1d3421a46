"""The `streamscope` command: demo, lab, classify, suggest, check.

Each subcommand lives in `streamscope.tools.commands.<name>` with `add_arguments(parser)` and
`run(args) -> int`, so a command is one small module and `cli.py` only dispatches. Command
modules import their heavy dependencies inside `run`: building the parser (and so `--help`)
stays fast. The argument types shared by the commands live here too, so that every numeric
option refuses text, infinities, NaN and absurd magnitudes with the same one-line message.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
import textwrap
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from streamscope._version import __version__
from streamscope.tools.commands import EXIT_USAGE, UsageError

COMMANDS = {
    "demo": "the main job: a simulated Anthropic endpoint, a mixed workload through the real SDK, a triage table",
    "lab": "compare timeout policies (one total timeout, a read timeout, three budgets) on simulated streams",
    "classify": "label spans from an exported file (OTLP JSON, JSON lines of span attributes, or the console "
                "exporter's output)",
    "suggest": "propose per-model/per-route budgets from observed distributions (Prometheus or a span file)",
    "check": "can this deadline / thinking budget / decode rate / retries configuration finish in time?",
    "simulate": "serve the simulated Anthropic and OpenAI endpoint on its own, with a mix of scenarios, until Ctrl-C",
    "validate": "do budgets chosen at today's load still hold at peak? run them on simulated streams at 1x, 3x, 5x",
}
EXIT_INTERNAL = 70
"""A bug in streamscope, not in the input (sysexits' EX_SOFTWARE)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C: 128 + SIGINT, as shells report it."""
EPILOG = f"""\
exit codes:
  0    done
  1    a finding: check's configuration cannot finish (or an attempt is
       shorter than the p99.9 time to first token, or the pool runs out),
       validate's budgets do not hold at a load multiplier, classify found
       live labels that classify() does not give, demo's self-check failed
  {EXIT_USAGE}    usage error: bad arguments or input (one line on stderr says why)
  {EXIT_INTERNAL}   internal error (STREAMSCOPE_DEBUG=1 prints the traceback)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""


EXTRAS = {"rich": "cli", "matplotlib": "lab", "starlette": "demo", "uvicorn": "demo", "anthropic": "demo",
          "prometheus_client": "telemetry", "opentelemetry": "telemetry"}
"""The extra that installs a module a command needs (the plain install is the instrumentation only)."""


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """One line naming the missing module and the extra that installs it, or None if it is not ours to say."""
    name = error.name or ""
    extra = EXTRAS.get(name.split(".")[0])
    if extra is None:
        return None
    return f"needs {name}, which is not installed: pip install 'streamscope[{extra}]'"


class Formatter(argparse.HelpFormatter):
    """Shows every option's default as `(default: X)` and keeps the epilog's line breaks.

    A help text that already mentions its default is left alone, so no default shows twice."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if not action.option_strings or "default" in text or default is None or default is False \
                or default == argparse.SUPPRESS:
            return text
        shown = ",".join(f"{v:g}" for v in default) if isinstance(default, tuple) else \
            f"{default:g}" if isinstance(default, float) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """Each line on its own; an indented line (an epilog entry) wraps under its text."""
        return "\n".join(textwrap.fill(line, width, initial_indent=indent,
                                        subsequent_indent=indent + " " * (7 if line.startswith(" ") else 0))
                          for line in text.splitlines())


class Parser(argparse.ArgumentParser):
    """argparse with its error as one line (`streamscope check: argument --deadline: ...`), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message}; see '{self.prog} --help'\n")


def _n(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:g}"


def number(what: str, *, low: float = 0, strict: bool = False, high: float = 1e6,
           kind: type[int] | type[float] = float) -> Callable[[str], Any]:
    """An argparse type: a finite `kind` from `low` (excluded if `strict`) to `high`; `what` names it.

    The upper bound keeps the arithmetic finite: 1e308 seconds times a decode rate is infinite."""
    bound = f"> {_n(low)}" if strict else f">= {_n(low)}"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {what} {bound}, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite {what} {bound}, got {text!r}")
        if value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"expected a {what} {bound}, got {text!r}")
        if value > high:
            raise argparse.ArgumentTypeError(f"expected a {what} {bound} and <= {_n(high)}, got {text!r}")
        return value

    parse.__name__ = what  # argparse's fallback messages name the type
    return parse


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 for any free one."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port 0-65535 (0: any free port), got {text!r}")
    return value


def write_plot(plot: Callable[[Any, str], None], result: Any, path: str) -> None:
    """`plot(result, path)`, a file it cannot write said in one line (`UsageError`)."""
    try:
        plot(result, path)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}; "
                         "give a file in an existing, writable directory") from None


def output_file(text: str) -> str:
    """An argparse type: a file that can be written, checked before the command does its work."""
    path = Path(text)
    parent = path.parent
    if path.is_dir():
        problem = "it is a directory"
    elif not parent.exists():
        problem = f"directory {str(parent)!r} does not exist"
    elif not parent.is_dir():
        problem = f"{str(parent)!r} is not a directory"
    elif not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        problem = "permission denied"
    else:
        return text
    raise argparse.ArgumentTypeError(f"cannot write {text!r}: {problem}; give a file in an existing, writable "
                                     "directory")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="streamscope", description=__doc__.splitlines()[0], epilog=EPILOG, formatter_class=Formatter)
    parser.add_argument("--version", action="version", version=f"streamscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"streamscope.tools.commands.{name}")
        command = sub.add_parser(name, help=help_text, description=help_text, formatter_class=Formatter)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its errors become one line on stderr and an exit code, never a traceback."""
    prefix = "streamscope:"
    try:
        args = build_parser().parse_args(argv)
        prefix = f"streamscope {args.command}:"
        return int(args._run(args) or 0)
    except UsageError as error:
        print(f"{prefix} {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{prefix} interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `streamscope ... | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ModuleNotFoundError as error:  # an extra not installed: say which
        hint = missing_extra(error)
        if hint is None:
            return _internal(prefix, error)
        print(f"{prefix} {hint}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:
        return _internal(prefix, error)


def _internal(prefix: str, error: BaseException) -> int:
    if os.environ.get("STREAMSCOPE_DEBUG"):
        traceback.print_exception(error)
    message = " ".join(str(error).split())
    print(f"{prefix} internal error: {type(error).__name__}: {message} "
          "(run with STREAMSCOPE_DEBUG=1 for the traceback)", file=sys.stderr)
    return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
