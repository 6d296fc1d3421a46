"""The relay frames each event itself: the bytes are the ones sse-starlette's `ServerSentEvent` makes."""

from __future__ import annotations

import json

import pytest
from sse_starlette import ServerSentEvent

from streamscope.serve.stream_relay import _Relayed, text_events

CASES = [
    ("token", {"text": "Hello"}),
    ("token", {"text": "two\nlines\r\nand a \u2028 separator, é, 🙂"}),
    ("tool_input", {"partial_json": "{\"a\": [1, 2"}),
    ("evil\nname\r", {"text": "x"}),
    ("token", {}),
]


@pytest.mark.parametrize("request_id", ["abc123", "id with\nbreak\r\n"])
def test_each_event_is_what_sse_starlette_would_send(request_id: str) -> None:
    run = _Relayed(request_id, text_events)
    for n, (name, data) in enumerate(CASES, 1):
        made = run._event(name, data)
        expected = ServerSentEvent(data=json.dumps(data), event=name, id=f"{request_id}:{n}").encode()
        assert made == expected, (name, data)
    assert run.sent == len(CASES)


def test_a_name_that_is_not_text_skips_the_event() -> None:
    """A map's mistake is streamscope's to swallow (counted as an internal error), never the
    response's: sse-starlette used to meet the bad name only when it framed the event, and fail."""
    run = _Relayed("r", lambda event: [(5, {"text": "x"}), ("token", {"text": "y"})])
    assert run._mapped(object()) == []
    assert run.sent == 0


def test_a_map_that_yields_is_read_whole_before_any_event_is_numbered() -> None:
    """A generator map frames as a list map does; one that fails part-way sends none of its events,
    so the ids stay without a gap."""
    pairs = [("token", {"text": "a"}), ("done", {"forged": True}), ("tool_input", {"partial_json": "{"})]

    def yielding(event: object) -> object:
        yield from pairs

    def failing(event: object) -> object:
        yield ("token", {"text": "a"})
        raise RuntimeError("the map's bug")

    listed, generated = _Relayed("r", lambda event: list(pairs)), _Relayed("r", yielding)
    assert generated._mapped(object()) == listed._mapped(object()) and generated.sent == 2
    run = _Relayed("r", failing)
    assert run._mapped(object()) == [] and run.sent == 0


@pytest.mark.parametrize("request_id", ["abc123", "id with\nbreak\r\n"])
def test_the_terminal_events_and_the_keep_alive_are_what_sse_starlette_would_send(request_id: str) -> None:
    from streamscope.serve.wire import KEEP_ALIVE, Terminal, error_event, terminal

    data = {"request_id": request_id, "chunks": 3, "finish_reason": "end_turn", "class": "complete"}
    done = terminal(request_id, 4, "done", data)
    assert type(done) is Terminal
    assert done == ServerSentEvent(event="done", id=f"{request_id}:4", data=json.dumps(data)).encode()
    error = error_event(request_id, 2, "upstream_timeout", True)
    assert type(error) is Terminal
    assert error == ServerSentEvent(event="error", id=f"{request_id}:2", data=json.dumps(
        {"code": "upstream_timeout", "request_id": request_id, "partial": True})).encode()
    assert KEEP_ALIVE == ServerSentEvent(comment="keep-alive").encode()
