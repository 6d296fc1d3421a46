"""Install is all or nothing, and other libraries' wrappers are never taken for the SDK's code.

* An SDK whose private names changed (a real copy of the installed package, one method renamed):
  `instrument()` logs one line, applies nothing, leaves every class exactly as it was, stays
  uninstrumented (a later `instrument()` tries again) and the SDK works as without streamscope.
* Another library's wrapt wrappers on the SDK's stream and client methods, installed before
  and after streamscope: the layer check does not skip them (wrapt forwards `__code__`), both
  see every event, and uninstalling streamscope leaves theirs in place (and ours, under one
  installed after it, passing through).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anthropic
import pytest
import wrapt

from conftest import USER, client
from streamscope import AnthropicInstrumentor

ROOT = Path(__file__).resolve().parents[2]
RENAMES = {
    # (file, old, new): a private name the adapter hooks, renamed everywhere in that file.
    "an early hook (_sleep_for_retry)": ("_base_client.py", "_sleep_for_retry", "_sleep_before_retry"),
    "a late hook (Stream._iter_events)": ("_streaming.py", "_iter_events", "_events_of"),
}
CHILD = textwrap.dedent("""
    import json, logging, sys
    import anthropic
    from anthropic import _base_client, _streaming
    from streamscope import AnthropicInstrumentor

    def state():
        classes = [_base_client.SyncAPIClient, _base_client.AsyncAPIClient, _base_client.BaseClient,
                   _streaming.Stream, _streaming.AsyncStream]
        return {f"{c.__name__}.{k}": id(v) for c in classes for k, v in c.__dict__.items()}

    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.name, record.levelname, record.getMessage(), record.exc_info is not None))
    logging.getLogger().addHandler(Keep())
    before = state()
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument()
    after = state()
    client = anthropic.Anthropic(base_url=sys.argv[1], api_key="k", max_retries=0)
    text = "".join(e.delta.text for e in client.messages.create(model="m", max_tokens=64, stream=True,
                   messages=[{"role": "user", "content": "hi"}]) if e.type == "content_block_delta")
    instrumented = instrumentor.is_instrumented_by_opentelemetry
    used = state()  # the SDK's own first use may add to its classes
    instrumentor.uninstrument()
    print(json.dumps({"unchanged": before == after, "same_after_uninstrument": state() == used,
                      "instrumented": instrumented, "text": text, "records": records}))
""")


def changed_sdk(tmp: Path, file: str, old: str, new: str) -> Path:
    """A copy of the installed anthropic package with `old` renamed to `new` in `file`."""
    target = tmp / "anthropic"
    shutil.copytree(Path(anthropic.__file__).parent, target, ignore=shutil.ignore_patterns("__pycache__"))
    path = target / file
    source = path.read_text()
    assert old in source
    path.write_text(source.replace(old, new))
    return tmp


@pytest.mark.parametrize("change", list(RENAMES))
def test_an_sdk_that_changed_is_left_exactly_as_it_was(sim, tmp_path: Path, change: str) -> None:
    file, old, new = RENAMES[change]
    sdk = changed_sdk(tmp_path, file, old, new)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(sdk), str(ROOT / "instrumentation"),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", CHILD, sim.url("complete")], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["unchanged"] and got["same_after_uninstrument"], ("a hook stayed on the SDK", got)
    assert got["instrumented"] is False  # a later instrument() tries again
    with client(sim, "complete") as c:  # what the SDK alone gives
        expected = "".join(e.delta.text for e in c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
                           if e.type == "content_block_delta")
    assert got["text"] == expected != ""
    ours = [r for r in got["records"] if r[0] == "streamscope"]
    assert len(ours) == 1, got["records"]
    _name, level, message, traceback = ours[0]
    assert level == "ERROR" and not traceback
    assert message.startswith(f"streamscope: cannot instrument anthropic {anthropic.__version__}, which differs "
                              "from what streamscope knows (")
    assert "the SDK is left as it was and streamscope is off for it" in message
    assert "Traceback" not in done.stderr


class Counting:
    """Another library's wrapt wrapper: counts what passes through it."""

    def __init__(self) -> None:
        self.calls = 0
        self.items = 0

    def __call__(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.calls += 1
        result = wrapped(*args, **kwargs)
        if isinstance(result, (list, tuple)) or not hasattr(result, "__next__"):
            return result

        def counted() -> Any:
            for item in result:
                self.items += 1
                yield item

        return counted()


def _stream_once(sim, instrument_spans=None) -> list[str]:
    with client(sim, "complete") as c:
        return [e.type for e in c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)]


def test_another_librarys_wrappers_stay_and_see_every_event(sim, instrument) -> None:
    from anthropic._base_client import SyncAPIClient
    from anthropic._streaming import Stream

    original_iter, original_request = Stream.__dict__["__iter__"], SyncAPIClient.__dict__["request"]
    before, after = Counting(), Counting()
    wrapt.wrap_function_wrapper(Stream, "__iter__", before)  # installed before streamscope
    try:
        telemetry = instrument()
        layers = AnthropicInstrumentor()._adapter.layers
        assert layers.iter is False, "another library's wrapper on Stream.__iter__ was taken for the SDK's code"
        wrapt.wrap_function_wrapper(SyncAPIClient, "request", after)  # installed after streamscope
        events = _stream_once(sim)
        assert before.items == len(events) > 0 and after.calls == 1
        assert len(telemetry.spans()) == 1 and telemetry.attrs()["streamscope.class"] == "complete"

        AnthropicInstrumentor().uninstrument()
        assert isinstance(Stream.__dict__["__iter__"], wrapt.FunctionWrapper)  # theirs, still there
        assert Stream.__dict__["__iter__"].__wrapped__ is original_iter
        theirs = SyncAPIClient.__dict__["request"]
        assert isinstance(theirs, wrapt.FunctionWrapper)  # theirs, still there; ours under it passes through
        again = _stream_once(sim)
        assert again == events and before.items == 2 * len(events) and after.calls == 2
        assert len(telemetry.spans()) == 1  # streamscope is off: no new span
    finally:
        Stream.__iter__ = original_iter  # type: ignore[method-assign]
        SyncAPIClient.request = original_request  # type: ignore[method-assign]


def test_the_layer_check_refuses_anything_but_a_plain_function() -> None:
    from anthropic._streaming import Stream

    from streamscope.adapters.stainless.layers import KNOWN, same_code

    plain = Stream.__dict__["__iter__"]
    assert same_code(plain, KNOWN["Stream", "__iter__"])
    proxy = wrapt.FunctionWrapper(plain, lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
    assert proxy.__code__ is plain.__code__  # what fooled the check before: wrapt forwards it
    assert not same_code(proxy, KNOWN["Stream", "__iter__"])
    assert not same_code(staticmethod(plain), KNOWN["Stream", "__iter__"])
