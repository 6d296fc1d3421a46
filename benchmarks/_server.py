"""The benchmarks' endpoint, in its own process so its CPU is not the client's.

`python _server.py N` serves `long` (N text deltas back to back), and its OpenAI forms `long_chat`
(Chat Completions, N content chunks, with usage) and `long_responses` (the Responses API, N
`response.output_text.delta` events); the load scenarios are always
there too: `healthy` (8 deltas 1 s apart, as a slow model writes), `pinging_stall` and
`silent_stall` (3 deltas, then 20 s of pings every 0.5 s / of nothing); `silent_start`
(nothing for 20 s) and `quick_stall` (3 deltas 50 ms apart, then nothing) for the precision runs.
Prints the base URL (append the scenario name) and exits when stdin closes.
"""

from __future__ import annotations

import sys

from streamscope.simulator import Ping, Scenario, Silence, Simulator, TextSpec, message_stream
from streamscope.simulator.openai_streams import chat_stream, responses_stream


def scenarios(events: int) -> list[Scenario]:
    return [
        Scenario.single("long", message_stream(blocks=[TextSpec(["tok "] * events, interval=0.0)])),
        Scenario.single("long_chat", chat_stream(text=TextSpec(["tok "] * events, interval=0.0))),
        Scenario.single("long_responses", responses_stream(text=TextSpec(["tok "] * events, interval=0.0))),
        Scenario.single("healthy", message_stream(blocks=[TextSpec(["tok "] * 8, interval=1.0)])),
        Scenario.single("pinging_stall", message_stream(
            blocks=[TextSpec(["tok "] * 3 + [Ping(0.5) for _ in range(40)], interval=1.0)])),
        Scenario.single("silent_stall", message_stream(
            blocks=[TextSpec([*["tok "] * 3, Silence(20.0)], interval=1.0)])),
        Scenario.single("silent_start", message_stream(first_event_delay=20.0, blocks=[TextSpec(["tok "])])),
        Scenario.single("quick_stall", message_stream(
            blocks=[TextSpec([*["tok "] * 3, Silence(20.0)], interval=0.05)])),
    ]


def main() -> None:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    with Simulator(scenarios(events)) as sim:
        print(sim.url(""), flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()


class endpoint:
    """`with endpoint(events) as base:` — this file's server in a child process; `base` is the
    base URL to which a scenario name is appended."""

    def __init__(self, events: int = 5000) -> None:
        import subprocess
        from pathlib import Path

        self._proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(events)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def __enter__(self) -> str:
        assert self._proc.stdout is not None
        return self._proc.stdout.readline().strip()

    def __exit__(self, *exc_info: object) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=30)
