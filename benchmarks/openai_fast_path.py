"""The openai fast path's test alone, in instructions, over several process layouts.

`adapters/openai/events.py`'s `text_length` tells a plain text chunk from everything else and
counts its characters. It reads three pydantic models (chunk, choice, delta). Read as plain
attributes, each goes through the model class's `__getattr__` hook, which looks names up in
CPython 3.11's type attribute cache, and the `Choice` and `ChoiceDelta` entries collide there
in some process layouts. This counts, under valgrind's callgrind, the instructions per call of
`text_length` as installed, and of the same test with plain `__dict__` reads, on 10,000 chat
chunks the SDK parsed (its own `construct_type`), in `--layouts` layouts (layout k makes 40 * k
throwaway classes first, as instructions.py does).

    python benchmarks/openai_fast_path.py [--layouts 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
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


def child(pad: int) -> None:
    """In the measured interpreter: each function over the chunks, counted between getppid()
    (counters zeroed) and getpgrp() (counters written out)."""
    classes = [type(f"_Pad{i}", (), {"x": i}) for i in range(pad)]
    for cls in classes:
        cls.x  # noqa: B018 - each takes a type version tag, as in instructions.py's layouts
    from openai._models import construct_type
    from openai.types.chat import ChatCompletionChunk

    from streamscope.adapters.openai import events

    events.load()
    chunks = [construct_type(type_=ChatCompletionChunk, value=CHUNK) for _ in range(200)]

    def empty(event: Any) -> int:
        return -1

    runs = {"empty": empty, "installed": events.text_length,
            "plain": lambda event: plain_reads(event, ChatCompletionChunk)}
    for run in runs.values():
        assert run is empty or run(chunks[0]) == 4
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
        for part in (1, 2, 3):
            match = re.search(r"^summary:\s+(\d+)", out.with_name(f"{out.name}.{part}").read_text(), flags=re.M)
            assert match, "no callgrind summary"
            totals.append(int(match.group(1)) / CALLS)
    return {"installed": round(totals[1] - totals[0]), "plain reads": round(totals[2] - totals[0])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", type=int, default=4)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.layouts < 1:
        parser.error(f"--layouts must be at least 1, not {args.layouts}")
    if args.child is not None:
        child(args.child)
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
