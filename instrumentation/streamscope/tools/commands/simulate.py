"""`streamscope simulate`: the simulated Anthropic and OpenAI endpoint on its own, until Ctrl-C.

Point a real SDK, or an app that uses one, at it through its base-URL variable. The plain base
URL plays a scenario drawn per request from a weighted mix (by default mostly successes and a few
of each error a service must handle before the stream), repeatable with `--seed`; `/s/<name>`
plays one scenario every time. One line per finished request shows what was played, so a run can
be compared with what the client saw. Ctrl-C or SIGTERM stops it with exit 0.

Imports beyond the standard library happen in `run`, so `streamscope --help` stays fast.
"""

from __future__ import annotations

import argparse
import errno
import math
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

from streamscope.tools.cli import number
from streamscope.tools.cli import port as tcp_port

from . import EXIT_OK, UsageError

if TYPE_CHECKING:
    from streamscope.simulator import RequestLog, Simulator
    from streamscope.simulator.mix import Route

DEFAULT_PORT = 8765
EXAMPLE = "e.g. --mix complete=0.9,http_429=0.1"
ROUTES: dict[Route, str] = {"messages": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=tcp_port, default=DEFAULT_PORT,
                        help="the TCP port to listen on (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    parser.add_argument("--mix", metavar="NAME=WEIGHT,...",
                        help="what the plain base URL plays: scenario names with relative weights (a bare NAME "
                             "weighs 1); Anthropic or OpenAI names, each API plays its counterpart "
                             "(http_529 is openai_http_503 on OpenAI) (default: complete 0.8, and http_429, "
                             "http_529, http_500, http_400 0.05 each)")
    parser.add_argument("--time-scale", type=number("time scale", strict=True, high=1000), default=1.0, metavar="S",
                        help="multiplies every delay of every script (0.1 plays a 10 s stall in 1 s)")
    parser.add_argument("--seed", type=int, default=0, help="the mix's random seed: the same requests in the same "
                                                            "order get the same scenarios")
    parser.add_argument("--list", action="store_true", help="print the scenario names, one line each, and exit")


def parse_mix(text: str) -> dict[str, float]:
    """`NAME=WEIGHT,...` as a mapping (names are checked by the simulator); UsageError says what to fix."""
    weights: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, equals, given = (part.strip() for part in item.partition("="))
        if not name:
            raise UsageError(f"argument --mix: {item!r} has no scenario name; write NAME=WEIGHT,..., {EXAMPLE}")
        try:
            weight = float(given) if equals else 1.0
        except ValueError:
            weight = math.nan
        if not math.isfinite(weight) or weight < 0:
            raise UsageError(f"argument --mix: the weight of {name!r} must be a finite number >= 0, got {given!r}; "
                             f"write NAME=WEIGHT,..., {EXAMPLE}")
        if name in weights:
            raise UsageError(f"argument --mix: {name!r} is given twice; give each scenario once")
        weights[name] = weight
    if not weights:
        raise UsageError(f"argument --mix: no scenario in {text!r}; write NAME=WEIGHT,..., {EXAMPLE}")
    return weights


def run(args: argparse.Namespace) -> int:
    from streamscope.simulator import Simulator

    if args.list:
        _list()
        return EXIT_OK
    weights = parse_mix(args.mix) if args.mix is not None else None  # None: the simulator's DEFAULT_MIX
    try:
        sim = Simulator(time_scale=args.time_scale, host=args.host, port=args.port, mix=weights, seed=args.seed)
    except ValueError as error:
        raise UsageError(f"argument --mix: {error}") from None
    with _stop_on_signals() as stopping:
        try:
            sim.start()
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise UsageError(f"port {args.port} of {args.host} is in use; choose another with --port N "
                                 "(0: any free port)") from None
            raise UsageError(f"cannot listen on {args.host}:{args.port}: {error.strerror or error}; "
                             "check --host and --port") from None
        seen = _Finished()
        try:
            _banner(sim, args)
            while not stopping.wait(0.2):
                seen.show(sim.requests)
        finally:
            sim.stop()  # streams still open are cut: their outcome is known once it returns
    seen.show(sim.requests)
    played = Counter(log.scenario for log in sim.requests)
    summary = ", ".join(f"{name} {count}" for name, count in played.most_common())
    _say(f"stopped after {sum(played.values())} request(s){': ' + summary if summary else ''}")
    return EXIT_OK


def _say(line: str) -> None:
    print(line, flush=True)  # flushed: a reader of a pipe sees each line as it happens


def _banner(sim: Simulator, args: argparse.Namespace) -> None:
    """The base URLs to export, first and one a line (a script can read them), then the mix per API."""
    _say(f"streamscope simulate: Anthropic Messages and OpenAI Chat Completions / Responses on {sim.url()} "
         f"(time scale {args.time_scale:g}, seed {args.seed}); Ctrl-C stops it")
    _say(f"ANTHROPIC_BASE_URL={sim.url()}")
    _say(f"OPENAI_BASE_URL={sim.openai_url()}")
    for route, path in ROUTES.items():
        shares = sim.mix.on(route) if sim.mix is not None else {}
        drawn = ", ".join(f"{name} {share * 100:.3g}%" for name, share in shares.items())
        _say(f"mix on {path}: {drawn or 'no scenario of the mix plays on this API (it answers 404)'}")
    _say(f"one scenario every time: ANTHROPIC_BASE_URL={sim.url('<name>')} or "
         f"OPENAI_BASE_URL={sim.openai_url('<name>')} (names: streamscope simulate --list)")


class _Finished:
    """Prints each request once, when it has ended, in the order they end."""

    def __init__(self) -> None:
        self._done = 0  # every request before this index is printed
        self._printed: set[int] = set()

    def show(self, requests: list[RequestLog]) -> None:
        for index in range(self._done, len(requests)):
            log = requests[index]
            if log.outcome is not None and index not in self._printed:
                self._printed.add(index)
                _say(f"{log.request_id} {log.scenario}: {log.outcome}")
        while self._done in self._printed:
            self._printed.discard(self._done)
            self._done += 1


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM (in the main thread), so both end the run cleanly with exit 0."""
    stopping = threading.Event()
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield stopping
        return

    def stop(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    previous: Mapping[int, Callable[[int, FrameType | None], object] | int | None] = {
        sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield stopping
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: not installed from Python, nothing to put back
                signal.signal(sig, handler)


def _list() -> None:
    from streamscope.simulator.catalog import DESCRIPTIONS
    from streamscope.simulator.openai_catalog import OPENAI_DESCRIPTIONS

    width = max(map(len, [*DESCRIPTIONS, *OPENAI_DESCRIPTIONS]))
    for heading, descriptions in (("Anthropic Messages (ANTHROPIC_BASE_URL)", DESCRIPTIONS),
                                  ("OpenAI Chat Completions and Responses (OPENAI_BASE_URL)", OPENAI_DESCRIPTIONS)):
        _say(f"{heading}:")
        for name, description in descriptions.items():
            _say(f"  {name:<{width}}  {description}")
