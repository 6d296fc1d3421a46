"""The exception a fired budget becomes (`budgets.enforcement.timeout_error`), on one recorder.

On an SDK's call the adapter gives the recorder its SDK's flavour of `StreamTimeout` (also the
SDK's `APITimeoutError`; end to end in tests/integration/test_timeout_kinds.py); with no SDK
behind the call it stays a plain `StreamTimeout`.
"""

from __future__ import annotations

import pickle
import time
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.trace import NoOpTracer

import sdk_lines
from streamscope import StreamTimeout
from streamscope.adapters.anthropic import HELPERS as ANTHROPIC
from streamscope.adapters.openai import HELPERS as OPENAI
from streamscope.budgets.enforcement import timeout_error
from streamscope.core import guard
from streamscope.core.errors import stand_in_url
from streamscope.core.record import CallBudgets, RequestInfo
from streamscope.core.recorder import StreamRecorder
from streamscope.pipeline import Pipeline

REQUEST = RequestInfo(provider="anthropic", model="m", server_address="127.0.0.1", server_port=8765,
                      budgets=CallBudgets(first_token=1.0))


def fired(request: RequestInfo = REQUEST) -> StreamRecorder:
    rec = StreamRecorder(request, t0=time.monotonic() - 2.0)
    assert rec.fire("first_token", rec.t0 + 1.0)
    return rec


def test_without_an_sdk_it_is_a_plain_stream_timeout() -> None:
    exc = timeout_error(fired())
    assert type(exc) is StreamTimeout
    assert not isinstance(exc, (anthropic.APIError, openai.APIError))
    assert (exc.budget, exc.partial, exc.after, exc.code) == ("first_token", False, 1.0, "upstream_timeout")
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is StreamTimeout and (copy.budget, copy.partial, copy.after) == ("first_token", False, 1.0)


def test_a_pipeline_gives_the_recorder_its_sdks_class() -> None:
    pipeline = Pipeline(NoOpTracer())
    with_sdk = pipeline.open(REQUEST, helpers=ANTHROPIC)
    without = pipeline.open(REQUEST)
    assert with_sdk is not None and without is not None
    assert with_sdk.recorder.timeout_class is ANTHROPIC.timeout_class is ANTHROPIC.timeout_class  # made once
    assert without.recorder.timeout_class is None
    with_sdk.recorder.finish("closed")
    without.recorder.finish("closed")


@pytest.mark.parametrize(("helpers", "sdk"), [(ANTHROPIC, anthropic), (OPENAI, openai)], ids=["anthropic", "openai"])
def test_the_request_the_hooks_kept_is_the_sdks_request(helpers: Any, sdk: Any) -> None:
    rec = fired()
    rec.timeout_class = helpers.timeout_class
    sent = sdk_lines.transport(sdk.__name__).Request("POST", "http://127.0.0.1:8765/v1/messages")
    rec.http_request = sent
    exc = timeout_error(rec)
    assert isinstance(exc, StreamTimeout) and isinstance(exc, sdk.APITimeoutError)
    assert exc.request.url == sent.url
    assert rec.http_request is None, "the record ended: the request (and the prompt in it) is let go"


def test_a_stand_in_names_the_calls_server() -> None:
    rec = fired()
    rec.timeout_class = ANTHROPIC.timeout_class
    exc = timeout_error(rec)
    assert str(exc.request.url) == "//127.0.0.1:8765/"  # the port does not say the scheme
    assert stand_in_url(RequestInfo(provider="p", server_address="api.example.com", server_port=443)) == \
        "https://api.example.com/"
    assert stand_in_url(RequestInfo(provider="p", server_address="::1", server_port=80)) == "http://[::1]/"
    assert stand_in_url(None) == "https://streamscope.invalid/"


def test_an_sdk_class_that_will_not_build_leaves_a_plain_one() -> None:
    class Broken(StreamTimeout):
        @classmethod
        def fired(cls, *args: object, **kwargs: object) -> StreamTimeout:
            raise RuntimeError("the SDK changed")

    rec = fired()
    rec.timeout_class = Broken  # its `fired` raises, as an SDK's class that no longer builds would
    before = guard.count
    exc = timeout_error(rec)
    assert type(exc) is StreamTimeout and exc.budget == "first_token"
    assert guard.count == before + 1
    assert rec.finished
