"""`streamscope check`: can this deadline, thinking budget, decode rate and retry count finish?

The arithmetic is docs/check.md's; the numbers come from `streamscope.budgets.feasibility`, the
backoff set aside from the retry helpers' own `Backoff` (one rule for both). The p99.9 time to
first token is given (`--ttft-p999`) or measured from a span file or a Prometheus server, read as
`suggest` reads them (all traffic: every call that got content). Exit code 0 when a
request that uses its whole thinking budget can finish, each attempt outlasts the measured p99.9
time to first token and the pool holds in a slowdown (where those are given); 1 when one of them
fails; 2 for invalid arguments. The defaults are a published example's numbers, a configuration that cannot finish.
Every number is bounded (seconds and rates to 1,000,000, tokens to 1,000,000,000, retries to 1,000)
so that no input, however large, overflows the arithmetic or its table. What the plan costs is
priced at `--model`'s rates (by default a simulated model at Claude Sonnet 4.5's), with
`streamscope.pricing`: every attempt pays its input, a cut one the output it generated too.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from streamscope.budgets.feasibility import Feasibility, PoolHeadroom, check
from streamscope.tools.cli import number
from streamscope.tools.spend import PlanCost, Pricing, UnknownModel, usd

from . import EXIT_FINDING, EXIT_OK, UsageError, prometheus_observations

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
    parser.add_argument("--backoff-base", type=SECONDS, default=None, metavar="S",
                        help="the retry helpers' Backoff base: the first retry waits up to this, each next one "
                             "twice as long (default: 0.5, as Backoff())")
    parser.add_argument("--backoff-cap", type=SECONDS, default=None, metavar="S",
                        help="the longest one wait between attempts (default: 8, as Backoff())")
    measured = parser.add_mutually_exclusive_group()
    measured.add_argument("--ttft-p999", type=SECONDS, default=None, metavar="S",
                          help="the measured p99.9 time to first token: an attempt shorter than this is a finding")
    measured.add_argument("--spans", metavar="FILE",
                          help="measure that p99.9 from a span file (as `streamscope suggest` reads one): the "
                               "time to first content of every call that got content")
    measured.add_argument("--prometheus", metavar="URL",
                          help="measure it from a Prometheus server (streamscope_time_to_first_content_seconds "
                               "over --window)")
    parser.add_argument("--window", default=None, metavar="DURATION",
                        help="with --prometheus: the range to read, a Prometheus duration such as 30m, 1h or 7d "
                             "(1h when not given)")
    parser.add_argument("--pool-size", type=number("whole number of slots", low=1, high=1e9, kind=int),
                        default=None, metavar="N", help="workers or connections serving these requests")
    parser.add_argument("--rate", type=number("number of requests per second", strict=True), default=None,
                        metavar="RPS", help="arrival rate, with --pool-size")
    parser.add_argument("--latency", type=SECONDS, default=None, metavar="S",
                        help="how long a request holds its slot normally, with --pool-size")
    parser.add_argument("--slow-latency", type=SECONDS, default=None, metavar="S",
                        help="how long it holds it in a slowdown, with --pool-size (default: the deadline, "
                             "what a stalled request holds when only the deadline cuts it)")
    parser.add_argument("--input-tokens", type=TOKENS, default=4000, metavar="N",
                        help="input tokens of the request, billed again on every attempt")
    parser.add_argument("--model", metavar="MODEL",
                        help="price the tokens at this model's rates from the shipped price table (such as "
                             "claude-sonnet-4-5 or gpt-4.1); without it, a simulated model at Claude Sonnet 4.5's "
                             "rates ($3 input, $15 output per million tokens)")
    parser.add_argument("--json", action="store_true", help="print the numbers and verdict as JSON")


def run(args: argparse.Namespace) -> int:
    from streamscope.helpers.retry import Backoff

    defaults = Backoff()
    base = defaults.base if args.backoff_base is None else args.backoff_base
    cap = defaults.cap if args.backoff_cap is None else args.backoff_cap
    try:
        pricing = Pricing.of(args.model)
    except UnknownModel as error:
        raise UsageError(f"argument --model: {error}") from None
    pool = _pool(args)
    ttft_p999, measured = _ttft_p999(args)
    result = check(
        deadline=args.deadline, decode_rate=args.decode_rate, thinking_budget=args.thinking_budget,
        answer_tokens=args.answer_tokens, reserve=args.reserve, retries=args.retries,
        time_to_first_token=args.time_to_first_token, backoff=Backoff(base, cap).total(args.retries),
        ttft_p999=ttft_p999,
    )
    cost = PlanCost.of(pricing, args.input_tokens, result.attempts, result.fits, result.needed_tokens,
                       result.whole_tokens)
    if args.json:
        found: dict[str, object] = {**asdict(result), "verdict": result.verdict, "sentence": result.sentence(),
                                    "attempt_too_short": result.attempt_too_short,
                                    "attempt_warning": result.attempt_warning(), "ttft_p999_from": measured,
                                    "cost": cost.to_json()}
        if pool is not None:
            found["pool"] = {**asdict(pool), "normal_in_flight": pool.normal_in_flight,
                             "slow_in_flight": pool.slow_in_flight, "exhausted": pool.exhausted,
                             "sentence": pool.sentence()}
        print(json.dumps(found, indent=2))
    else:
        from rich.console import Console

        render(result, Console(), pool, measured, cost)
    ok = result.fits and not result.attempt_too_short and (pool is None or not pool.exhausted)
    return EXIT_OK if ok else EXIT_FINDING


def _ttft_p999(args: argparse.Namespace) -> tuple[float | None, str | None]:
    """The p99.9 time to first token: given (`--ttft-p999`), measured from `--spans` or
    `--prometheus`, or none; with where a measured one came from."""
    if args.window is not None and args.prometheus is None:
        raise UsageError("--window is the range to read from Prometheus: give --prometheus too")
    if args.ttft_p999 is not None:
        return args.ttft_p999, "given"
    if args.spans is not None:
        from streamscope.tools.spanfile import SpanFileError, read_spans
        from streamscope.tools.suggest import from_spans

        try:
            observations, where = from_spans(read_spans(args.spans).spans), args.spans
        except SpanFileError as error:
            raise UsageError(str(error)) from None
        missing = (f"{args.spans} has no span with streamscope.time_to_first_content; give spans of streamed "
                   "calls that got content")
    elif args.prometheus is not None:
        window = args.window or "1h"
        observations, url = prometheus_observations(args.prometheus, window)
        where = f"{url} over {window}"
        missing = (f"{url} has no streamscope_time_to_first_content_seconds samples over {window}; "
                   "try a longer --window")
    else:
        return None, None
    first = observations.default.first_content
    if first is None:
        raise UsageError(missing)
    return first.p999, f"{where}: {first.samples:,} times to first content"


def _pool(args: argparse.Namespace) -> PoolHeadroom | None:
    """The pool check, when --pool-size is given (with the rate and latency it needs)."""
    given = [name for name in ("rate", "latency", "slow_latency") if getattr(args, name) is not None]
    if args.pool_size is None:
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} is for the pool check: give --pool-size too")
        return None
    for name in ("rate", "latency"):
        if getattr(args, name) is None:
            raise UsageError(f"--pool-size needs --{name} too (the arrival rate and how long a request holds "
                             "its slot normally)")
    slow = args.deadline if args.slow_latency is None else args.slow_latency
    return PoolHeadroom(args.pool_size, args.rate, args.latency, slow)


def render(result: Feasibility, console: Console, pool: PoolHeadroom | None = None,
           measured: str | None = None, cost: PlanCost | None = None) -> None:
    from rich import box
    from rich.table import Table

    r = result
    table = Table(title="Deadline, thinking budget and decode rate", box=box.SIMPLE_HEAD, show_header=False)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("from")
    table.add_row("deadline", f"{r.deadline:g} s", "shared by every attempt")
    table.add_row("attempts", f"{r.attempts}", f"1 + {r.retries} retr{'y' if r.retries == 1 else 'ies'}")
    if r.retries:
        table.add_row("backoff set aside", f"{r.backoff:.1f} s", "the longest the waits between attempts add up to")
    table.add_row("allowance per attempt", f"{r.per_attempt:.1f} s",
                  "(deadline - backoff) / attempts" if r.retries else "deadline / attempts")
    if r.ttft_p999 is not None:
        table.add_row("p99.9 time to first token", f"{r.ttft_p999:.1f} s", "measured; each attempt must outlast it")
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
    if measured not in (None, "given"):
        console.print(f"The p99.9 time to first token is measured from {measured}.", highlight=False)
    colour = "green" if r.fits else "red"
    console.print(f"[{colour}]{r.sentence()}[/{colour}]", highlight=False)
    warning = r.attempt_warning()
    if warning is not None:
        console.print(f"[red]{warning}[/red]", highlight=False)
    if cost is not None:
        render_cost(cost, console)
    if pool is not None:
        table = Table(title="Pool headroom (Little's law: in flight = rate x latency)", box=box.SIMPLE_HEAD,
                      show_header=False)
        table.add_column("quantity")
        table.add_column("value", justify="right")
        table.add_row("pool", f"{pool.pool_size:,} slots")
        table.add_row("request rate", f"{pool.rate:g} /s")
        table.add_row("normal latency", f"{pool.latency:g} s → {pool.normal_in_flight:,.0f} in flight")
        table.add_row("slow latency", f"{pool.slow_latency:g} s → {pool.slow_in_flight:,.0f} in flight")
        console.print(table)
        colour = "red" if pool.exhausted else "green"
        console.print(f"[{colour}]{pool.sentence()}[/{colour}]", highlight=False)


def render_cost(cost: PlanCost, console: Console) -> None:
    """What a request that uses its whole thinking budget costs under the plan, and what it wastes."""
    from rich import box
    from rich.table import Table

    table = Table(title="Cost per request", box=box.SIMPLE_HEAD, show_header=False)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("from")
    table.add_row("input", f"{cost.input_tokens:,} tokens", "paid again by every attempt")
    table.add_row("attempt that finishes", usd(cost.finished), f"+ {cost.finished_output:,} output tokens")
    table.add_row("attempt cut at its allowance", usd(cost.cut), f"+ {cost.cut_output:,} output tokens, no answer")
    table.add_row("attempt cut before any output", usd(cost.input_only), "its input alone")
    if cost.fits:
        worst = f"{cost.attempts} attempts, the answer on the last" if cost.attempts > 1 else "1 attempt, the answer"
        table.add_row("worst case", usd(cost.worst), f"{worst}: {usd(cost.wasted)} wasted")
    else:
        cut = f"{cost.attempts} attempts, all cut" if cost.attempts > 1 else "1 attempt, cut"
        table.add_row("worst case", usd(cost.worst), f"{cut}: all of it wasted")
    console.print(table)
    console.print(f"Priced as {cost.pricing.note()}.", highlight=False)
    colour = "red" if not cost.fits else "yellow" if cost.attempts > 1 else "green"
    console.print(f"[{colour}]{cost.sentence()}[/{colour}]", highlight=False)
