"""The helpers with one SDK installed: the retry line and `collect`, through the real SDK.

The defect these guard: an exception of no SDK (the caller's own) was offered to every adapter,
and the one whose SDK is not installed imported it, so the caller got `ModuleNotFoundError`
instead of their exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from one_sdk import Sdk, Spans
from streamscope import Backoff, astream_with_retry, collect, stream_with_retry
from streamscope.core.failures import Failure
from streamscope.helpers.retry import retry_decision


class Mine(Exception):
    """The caller's own exception, of no SDK."""


def test_an_exception_of_no_sdk_is_not_retryable_and_imports_nothing(telemetry: Spans) -> None:
    assert retry_decision(ValueError("x")) == Failure("internal_error", False)
    assert retry_decision(Mine("x")) == Failure("internal_error", False)


def test_the_callers_own_exception_in_open_stream_reaches_the_caller_as_is(
        telemetry: Spans, no_sleep: Callable[[float], None]) -> None:
    mine = Mine("the caller's own")

    def open_stream() -> None:
        raise mine

    line = stream_with_retry(open_stream, attempts=3, sleep=no_sleep)
    with pytest.raises(Mine) as caught:
        list(line)
    assert caught.value is mine and line.attempts == 1


def test_the_async_form_too(telemetry: Spans) -> None:
    mine = Mine("the caller's own, async")

    async def open_stream() -> None:
        raise mine

    async def run() -> int:
        line = astream_with_retry(open_stream, attempts=3)
        with pytest.raises(Mine) as caught:
            async for _ in line:
                pass
        assert caught.value is mine
        return line.attempts

    assert asyncio.run(run()) == 1


def test_a_retryable_provider_error_is_retried(sdk: Sdk, telemetry: Spans, no_sleep: Callable[[float], None]) -> None:
    scenario = sdk.fresh(sdk.error_then_ok)
    line = stream_with_retry(lambda: sdk.open(scenario), attempts=3, sleep=no_sleep)
    text = "".join(sdk.text_of(e) for e in line)
    assert text and line.attempts == 2
    assert [s.attributes["streamscope.class"] for s in telemetry.spans()] == ["upstream_error", "complete"]


def test_the_async_form_retries_too(sdk: Sdk, telemetry: Spans) -> None:
    scenario = sdk.fresh(sdk.error_then_ok)

    async def run() -> tuple[str, int]:
        client = sdk.aclient(scenario)
        line = astream_with_retry(lambda: sdk.create(client), attempts=3, backoff=Backoff(base=0.001, cap=0.001))
        parts = [sdk.text_of(e) async for e in line]
        await client.close()
        return "".join(parts), line.attempts

    text, attempts = asyncio.run(run())
    assert text and attempts == 2


def test_collect_gives_the_class_and_the_text(sdk: Sdk, telemetry: Spans) -> None:
    done = collect(sdk.open(sdk.complete))
    assert (done.status, done.reason, done.verified, done.error) == ("ok", "complete", True, None)
    assert done.text
    cut = collect(sdk.open(sdk.cut))
    assert (cut.status, cut.reason, cut.partial) == ("degraded", "upstream_error", True)
    assert cut.text
    # The SDK's connection error, or its transport's (httpx2's, of no adapter's package): retryable either way.
    assert cut.error is not None and retry_decision(cut.error) == Failure("upstream_unreachable", True)
    assert cut.code == "upstream_unreachable"
