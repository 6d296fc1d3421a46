"""The openai fast path's test alone, in instructions, over several process layouts.

`adapters/openai/events.py`'s `text_length` tells a plain text chunk from everything else and
counts its characters. It reads three pydantic models (chunk, choice, delta). Read as plain
attributes, each goes through the model class's `__getattr__` hook, which looks names up in
CPython 3.11's type attribute cache, and the `Choice` and `ChoiceDelta` entries collide there
in some process layouts. This counts, under valgrind's callgrind, the instructions per call of
`text_length` as installed, and of the same test with plain `__dict__` reads, on 10,000 chat
chunks the SDK parsed (its own `construct_type`), in `--layouts` layouts (layout k makes 40 * k
throwaway classes first, as instructions.py does).

It also times each (`--timed`, on by default) on chunks as a real `Stream` yields them, each
parsed from its bytes just before (as in production, where the SDK's parse has just run), and
on the same chunks parsed beforehand (as `micro.py` feeds them): every call bracketed by two
clock reads, the median, less the empty function's. Instructions and time do not rank these
alike: after the SDK's parse the CPU's caches hold the SDK's code, not this test's.

    python benchmarks/openai_fast_path.py [--layouts 4] [--no-timed] [--chunks 5000]

`--layouts 0` counts no instructions.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CALLS = 10_000
CHUNK = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "gpt-bench",
         "service_tier": "default", "system_fingerprint": "fp_bench", "usage": None, "obfuscation": "q3ZkT9xW",
         "choices": [{"index": 0, "delta": {"content": "tok "}, "logprobs": None, "finish_reason": None}]}


def plain_reads(event: Any, chunk_class: type) -> int:
    """`text_length`'s chat test with every model read as a plain `__dict__` attribute."""
    if type(event) is chunk_class:
        d = event.__dict__
        choices = d["choices"]
        if len(choices) == 1 and d["usage"] is None:
            choice = choices[0].__dict__
            delta = choice["delta"].__dict__
            content = delta["content"]
            if content and choice["finish_reason"] is None and delta["refusal"] is None and delta["tool_calls"] is None:
                return len(content)
    return -1


def attribute_reads(event: Any, chunk_class: type) -> int:
    """`text_length`'s chat test with every field read as a plain attribute."""
    if type(event) is chunk_class:
        choices = event.choices
        if len(choices) == 1 and event.usage is None:
            choice = choices[0]
            delta = choice.delta
            content = delta.content
            if content and choice.finish_reason is None and delta.refusal is None and delta.tool_calls is None:
                return len(content)
    return -1


def functions() -> dict[str, Any]:
    """The functions compared: an empty one (the call itself), then the tests."""
    from openai.types.chat import ChatCompletionChunk

    from streamscope.adapters.openai import events

    events.load()

    def empty(event: Any) -> int:
        return -1

    return {"empty": empty, "installed": events.text_length,
            "plain reads": lambda event: plain_reads(event, ChatCompletionChunk),
            "attributes": lambda event: attribute_reads(event, ChatCompletionChunk)}


def timed(count: int = 5000, rounds: int = 7) -> dict[str, tuple[float, float]]:
    """ns per call of each test, less the empty function's: (as the SDK yields each chunk,
    parsed beforehand), medians over `rounds`."""
    import json

    import openai
    from openai._base_client import httpx2
    from openai.types.chat import ChatCompletionChunk

    def chunk(i: int) -> dict[str, Any]:
        return {**CHUNK, "choices": [{**CHUNK["choices"][0], "delta": {"content": f"tok{i % 97} "}}]}

    body = b"".join(b"data: " + json.dumps(chunk(i)).encode() + b"\n\n" for i in range(count)) + b"data: [DONE]\n\n"
    client = openai.OpenAI(api_key="bench", base_url="http://127.0.0.1:9/v1")
    clock = time.perf_counter_ns

    def live() -> Any:
        response = httpx2.Response(200, content=body, request=httpx2.Request("POST", "http://127.0.0.1:9/v1/x"))
        return openai.Stream(cast_to=ChatCompletionChunk, response=response, client=client)

    parsed = list(live())
    runs = functions()

    def median_ns(events: Any, run: Any) -> float:
        spans = []
        for event in events:
            start = clock()
            run(event)
            spans.append(clock() - start)
        return statistics.median(spans)

    out: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            out[name][0].append(median_ns(live(), run))
            out[name][1].append(median_ns(parsed, run))
    base = [statistics.median(v) for v in out["empty"]]
    return {name: (statistics.median(a) - base[0], statistics.median(b) - base[1])
            for name, (a, b) in out.items() if name != "empty"}


def child(pad: int) -> None:
    """In the measured interpreter: each function over the chunks, counted between getppid()
    (counters zeroed) and getpgrp() (counters written out)."""
    classes = [type(f"_Pad{i}", (), {"x": i}) for i in range(pad)]
    for cls in classes:
        cls.x  # noqa: B018 - each takes a type version tag, as in instructions.py's layouts
    from openai._models import construct_type
    from openai.types.chat import ChatCompletionChunk

    runs = functions()
    chunks = [construct_type(type_=ChatCompletionChunk, value=CHUNK) for _ in range(200)]
    for name, run in runs.items():
        assert run(chunks[0]) == (-1 if name == "empty" else 4)
        for _ in range(CALLS // len(chunks)):  # warm up, then the counted pass
            for event in chunks:
                run(event)
        os.getppid()
        for _ in range(CALLS // len(chunks)):
            for event in chunks:
                run(event)
        os.getpgrp()


def measure(layout: int) -> dict[str, int]:
    """Instructions per call of each function, less the empty function's, in one layout."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        done = subprocess.run(["setarch", platform.machine(), "-R", "valgrind", "--tool=callgrind",
                               "--zero-before=getppid", "--dump-before=getpgrp", f"--callgrind-out-file={out}",
                               f"--log-file={Path(tmp) / 'valgrind.log'}", sys.executable, __file__,
                               "--child", str(layout * 40)],
                              capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        if done.returncode != 0:
            raise RuntimeError(f"layout {layout}: the child failed\n{done.stderr[-2000:]}")
        totals = []
        for part in (1, 2, 3, 4):
            match = re.search(r"^summary:\s+(\d+)", out.with_name(f"{out.name}.{part}").read_text(), flags=re.M)
            assert match, "no callgrind summary"
            totals.append(int(match.group(1)) / CALLS)
    return {"installed": round(totals[1] - totals[0]), "plain reads": round(totals[2] - totals[0]),
            "attributes": round(totals[3] - totals[0])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", type=int, default=4)
    parser.add_argument("--timed", action=argparse.BooleanOptionalAction, default=True,
                        help="also time each test on chunks as the SDK yields them (default: on)")
    parser.add_argument("--chunks", type=int, default=5000, help="chunks per timed stream")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.layouts < 0 or args.chunks < 1:
        parser.error(f"--layouts must be 0 or more and --chunks at least 1, not {args.layouts} and {args.chunks}")
    if args.child is not None:
        child(args.child)
        return 0
    if args.timed:
        print("openai chat fast-path test, ns per chunk beyond a call (median of each call, bracketed by clock reads):")
        print(f"  {'':12}{'as the SDK yields it':>22}{'parsed beforehand':>20}")
        for name, (live, parsed) in timed(args.chunks).items():
            print(f"  {name:12}{live:>22.0f}{parsed:>20.0f}")
    if args.layouts == 0:
        return 0
    if shutil.which("valgrind") is None or shutil.which("setarch") is None:
        print("valgrind (or setarch) is not installed: no instruction counts")
        return 0
    found = [measure(layout) for layout in range(args.layouts)]
    print(f"openai chat fast-path test, instructions per chunk (callgrind, {CALLS:,} calls), by process layout:")
    for name in found[0]:
        print(f"  {name:12}" + "".join(f"{f[name]:>8,}" for f in found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
