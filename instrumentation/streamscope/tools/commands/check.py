"""`streamscope check`: can this deadline, thinking budget, decode rate and retry count finish?

The arithmetic is docs/check.md's; the numbers come from `streamscope.budgets.feasibility`.
Exit code 0 when a request that uses its whole thinking budget can finish, 1 when it cannot,
2 for invalid arguments. The defaults are a published example's numbers, a configuration that cannot finish.
Every number is bounded (seconds and rates to 1,000,000, tokens to 1,000,000,000, retries to 1,000)
so that no input, however large, overflows the arithmetic or its table.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from streamscope.budgets.feasibility import Feasibility, check
from streamscope.tools.cli import number

from . import EXIT_FINDING, EXIT_OK

if TYPE_CHECKING:
    from rich.console import Console

SECONDS = number("number of seconds")
TOKENS = number("whole number of tokens", high=1e9, kind=int)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--deadline", type=number("number of seconds", strict=True), default=30.0, metavar="S",
                        help="the caller's deadline for the whole call, retries included")
    parser.add_argument("--reserve", type=SECONDS, default=3.0, metavar="S",
                        help="seconds each attempt keeps aside for network and queueing")
    parser.add_argument("--decode-rate", type=number("number of tokens per second", low=0.001), default=75.0,
                        metavar="TOK/S", help="measured output tokens per second, thinking included")
    parser.add_argument("--answer-tokens", type=TOKENS, default=500, metavar="N",
                        help="tokens the visible answer needs")
    parser.add_argument("--thinking-budget", type=TOKENS, default=10_000, metavar="N",
                        help="the request's thinking budget_tokens; 0 = thinking off")
    parser.add_argument("--retries", type=number("whole number of retries", high=1000, kind=int), default=0,
                        metavar="N", help="retries after the first attempt; all attempts share the deadline")
    parser.add_argument("--time-to-first-token", type=SECONDS, default=0.0, metavar="S",
                        help="measured wait before generation starts, taken off each attempt on top of the reserve")
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
        from rich.console import Console

        render(result, Console())
    return EXIT_OK if result.fits else EXIT_FINDING


def render(result: Feasibility, console: Console) -> None:
    from rich import box
    from rich.table import Table

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
