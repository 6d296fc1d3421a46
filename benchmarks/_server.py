"""The benchmark's endpoint, in its own process so its CPU is not the client's.

Serves `long` (N text deltas sent back to back, no delays) on 127.0.0.1; prints the base URL
and exits when stdin closes.
"""

from __future__ import annotations

import sys

from streamscope.simulator import Scenario, Simulator, TextSpec, message_stream


def long_stream(events: int) -> Scenario:
    return Scenario.single("long", message_stream(blocks=[TextSpec(["tok "] * events, interval=0.0)]))


def main() -> None:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    with Simulator([long_stream(events)]) as sim:
        print(sim.url("long"), flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
