"""Each stream hook is written once, for `AsyncStream`; its twin for `Stream` is the same source,
not awaiting, compiled at import (`unasync`). Without its source files streamscope says so in one
line and leaves the SDK as it was."""

from __future__ import annotations

import compileall
import dis
import inspect
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import environments
import streamscope
from streamscope.adapters.stainless import layers, stream, streamed
from streamscope.adapters.stainless.unasync import sync_source

TWINS = [
    (stream.StreamHooks.aread, stream.StreamHooks.read),
    (stream.StreamHooks.aiter, stream.StreamHooks.iter),
    (stream.StreamHooks.aclose, stream.StreamHooks.close),
    (stream.StreamHooks.aiter_events, stream.StreamHooks.iter_events),
    (stream.StreamHooks.anext_hook, stream.StreamHooks.next_hook),
    (stream._acounted, stream._counted),
    (stream._aclose_quietly, stream._close_quietly),
    (layers.adecoded, layers.decoded),
    (streamed.astreamed, streamed.streamed),
]


def test_the_sync_form_is_the_async_source_not_awaiting() -> None:
    sample = """
async def aread(self, events):
    async for e in events:
        await self.stream.response.aclose()
        yield await e.__anext__()
    async for sse in self._decoder.aiter_bytes(body):
        yield sse
"""
    assert sync_source(sample, {"aread": "read"}) == """
def read(self, events):
    for e in events:
        self.stream.response.close()
        yield e.__next__()
    yield from self._decoder.iter_bytes(body)
"""
    with pytest.raises(ValueError, match="async"):
        sync_source("async def f():\n    return x.async_thing\n".replace("async_thing", "async"))
    with pytest.raises(ValueError, match="no "):
        sync_source("def f(): pass", phrases={"watch.loop": "None"})


@pytest.mark.parametrize(("async_form", "sync_form"), TWINS, ids=[a.__qualname__ for a, _ in TWINS])
def test_each_twin_is_compiled_from_the_one_source(async_form, sync_form) -> None:
    """Same file and first line (a traceback points at the one source), and nothing awaits in it."""
    assert sync_form.__code__.co_filename == async_form.__code__.co_filename
    assert sync_form.__code__.co_firstlineno == async_form.__code__.co_firstlineno
    assert not inspect.iscoroutinefunction(sync_form) and not inspect.isasyncgenfunction(sync_form)
    assert sync_form.__globals__ is async_form.__globals__, "a patch of the module reaches both"


def test_the_sync_form_calls_a_module_function_as_its_module_does() -> None:
    """`json.loads` per event: compiled with the module's imports in view, as the module itself is."""
    def loads(func: object) -> list[tuple[str, object]]:
        return [(i.opname, i.argval) for i in dis.get_instructions(func) if i.argval in ("json", "loads")]

    assert loads(streamed.streamed) == loads(streamed.astreamed)


WITHOUT_SOURCE = """
import json, sys
import anthropic
from streamscope import AnthropicInstrumentor
before = anthropic.Stream.__iter__
AnthropicInstrumentor().instrument()
untouched = anthropic.Stream.__iter__ is before
client = anthropic.Anthropic(base_url=sys.argv[1], api_key="k", max_retries=0)
events = client.messages.create(model="claude-sim-1", max_tokens=64, stream=True,
                                messages=[{"role": "user", "content": "hi"}])
text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
print(json.dumps({"untouched": untouched, "text": text, "module": __import__("streamscope").__file__}))
"""


def test_without_its_source_files_it_says_so_and_leaves_the_sdk_as_it_was(sim, tmp_path: Path) -> None:
    """An application bundled as bytecode only: streamscope imports, logs one error line naming the
    fix, and the SDK's stream reaches the caller untouched."""
    package = tmp_path / "streamscope"
    shutil.copytree(Path(streamscope.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    assert compileall.compile_dir(str(package), legacy=True, quiet=1)
    for source in package.rglob("*.py"):
        source.unlink()
    env = environments.clean_environ()
    env["PYTHONPATH"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", WITHOUT_SOURCE, sim.url("complete")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["module"].startswith(str(tmp_path)) and found["module"].endswith(".pyc")
    assert found["untouched"] and found["text"], found
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr
    assert len(lines) == 1 and "installed without its .py files" in lines[0], done.stderr
