"""`streamscope check`: can this deadline, thinking budget, decode rate and retry count finish?

Seed 003's arithmetic (see docs/check.md); the numbers come from `streamscope.feasibility`.
Exit code 0 when a request that uses its whole thinking budget can finish, 1 when it cannot,
2 for invalid arguments. The defaults are a published example's numbers, a configuration that cannot finish.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from streamscope.feasibility import Feasibility, check


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its error message
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--deadline", type=_positive, default=30.0, metavar="S",
                        help="the caller's deadline for the whole call, retries included (default 30)")
    parser.add_argument("--reserve", type=_non_negative(float), default=3.0, metavar="S",
                        help="seconds each attempt keeps aside for network and queueing (default 3)")
    parser.add_argument("--decode-rate", type=_positive, default=75.0, metavar="TOK/S",
                        help="measured output tokens per second, thinking included (default 75)")
    parser.add_argument("--answer-tokens", type=_non_negative(int), default=500, metavar="N",
                        help="tokens the visible answer needs (default 500)")
    parser.add_argument("--thinking-budget", type=_non_negative(int), default=10_000, metavar="N",
                        help="the request's thinking budget_tokens; 0 = thinking off (default 10000)")
    parser.add_argument("--retries", type=_non_negative(int), default=0, metavar="N",
                        help="retries after the first attempt; all attempts share the deadline (default 0)")
    parser.add_argument("--time-to-first-token", type=_non_negative(float), default=0.0, metavar="S",
                        help="measured wait before generation starts, taken off each attempt "
                             "on top of the reserve (default 0)")
    parser.add_argument("--json", action="store_true", help="print the numbers and verdict as JSON")


def run(args: argparse.Namespace) -> int:
    result = check(
        deadline=args.deadline, decode_rate=args.decode_rate, thinking_budget=args.thinking_budget,
        answer_tokens=args.answer_tokens, reserve=args.reserve, retries=args.retries,
        time_to_first_token=args.time_to_first_token,
    )
    if args.json:
        print(json.dumps({**asdict(result), "verdict": result.verdict, "sentence": result.sentence()}, indent=2))
    else:
        render(result, Console())
    return 0 if result.fits else 1


def render(result: Feasibility, console: Console) -> None:
    r = result
    table = Table(title="Deadline, thinking budget and decode rate", box=box.SIMPLE_HEAD, show_header=False)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("from")
    table.add_row("deadline", f"{r.deadline:g} s", "shared by every attempt")
    table.add_row("attempts", f"{r.attempts}", f"1 + {r.retries} retr{'y' if r.retries == 1 else 'ies'}")
    table.add_row("allowance per attempt", f"{r.per_attempt:.1f} s", "deadline / attempts")
    table.add_row("reserve + time to first token", f"{r.reserve + r.time_to_first_token:.1f} s",
                  "taken off each attempt")
    table.add_row("generation per attempt", f"{r.generation:.1f} s", "allowance - reserve - TTFT")
    table.add_row("fits in that time", f"{r.whole_tokens:,} tokens", f"at {r.decode_rate:g} tokens/s")
    table.add_row("thinking budget", f"{r.thinking_budget:,} tokens",
                  f"{r.thinking_budget / r.decode_rate:.1f} s to generate")
    table.add_row("answer", f"{r.answer_tokens:,} tokens", f"{r.answer_tokens / r.decode_rate:.1f} s to generate")
    table.add_row("needed", f"{r.needed_tokens:,} tokens", f"{r.needed_seconds:.1f} s of generation")
    largest = "none" if r.largest_thinking is None else f"{r.largest_thinking:,} tokens"
    table.add_row("largest thinking budget", largest, "what fits, less the answer")
    console.print(table)
    colour = "green" if r.fits else "red"
    console.print(f"[{colour}]{r.sentence()}[/{colour}]", highlight=False)
