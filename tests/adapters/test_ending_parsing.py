"""What both Stainless adapters read from the wire and from an exception that ended a stream, in
one place (`adapters/stainless/parsing.py`, `adapters/stainless/ending.py`): `retry-after`,
counts, and the end an exception gives the record, alike for anthropic and openai.

Real SDK exceptions over real `httpx2` responses: nothing of the SDK is mocked."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from streamscope import StreamTimeout
from streamscope.adapters import anthropic as anthropic_adapter
from streamscope.adapters import openai as openai_adapter
from streamscope.adapters.anthropic.ending import ending as anthropic_ending
from streamscope.adapters.openai.ending import ending as openai_ending
from streamscope.adapters.stainless.parsing import header_count, int_or_none, retry_after, str_or_none
from streamscope.core.failures import Failure

URL = "http://127.0.0.1/v1/messages"
IN_AN_HOUR = "<an hour from when the test runs>"  # written at run time: collection may be minutes before


def _at_run_time(raw: str) -> str:
    return format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True) if raw == IN_AN_HOUR else raw


def _response(status: int = 429, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(status, headers=headers or {}, request=httpx2.Request("POST", URL))


# -- retry-after ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after": "1.5"}, 1.5),  # not the RFC's form, but meant: kept, as the SDK keeps it
        ({"retry-after": " 3 "}, 3.0),
        ({"retry-after": IN_AN_HOUR}, pytest.approx(3600, abs=5)),  # an HTTP date: the seconds to it
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date past: retry now
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00"}, 0.0),  # no zone: GMT all the same
        ({"retry-after": "Wed, 32 Oct 2015 07:28:00 GMT"}, None),  # no such day
        ({"retry-after": "Wed, 21 Oct 99999999999 07:28:00 GMT"}, None),  # no such year
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 +9999"}, None),  # no such zone
        ({"retry-after-ms": "1500"}, 1.5),  # the SDKs' millisecond header, read first as they read it
        ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5),
        ({"retry-after-ms": "soon", "retry-after": "2"}, 2.0),
        ({"retry-after-ms": "-5", "retry-after": "2"}, 2.0),
        ({"retry-after-ms": "inf"}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": ""}, None),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "-0.5"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),  # would hold the retry line forever
        ({"retry-after": "1e400"}, None),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], expected: float | None) -> None:
    headers = {name: _at_run_time(value) for name, value in headers.items()}
    assert retry_after(_response(429, headers)) == expected


def test_retry_after_without_a_response() -> None:
    assert retry_after(None) is None
    assert retry_after(object()) is None  # no headers at all


@pytest.mark.parametrize(
    ("error", "helpers"),
    [
        (anthropic.APIStatusError, anthropic_adapter.HELPERS),
        (openai.APIStatusError, openai_adapter.HELPERS),
    ],
)
@pytest.mark.parametrize(("raw", "expected"), [("7", 7.0), ("junk", None), ("-3", None),
                                             (IN_AN_HOUR, pytest.approx(3600, abs=5))])
def test_both_adapters_read_retry_after_alike(error: Any, helpers: Any, raw: str, expected: float | None) -> None:
    exc = error("overloaded", response=_response(529, {"retry-after": _at_run_time(raw)}), body=None)
    assert helpers.failure(exc) == Failure("upstream_unavailable", True, expected)


# -- counts and names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (5, 5), (2**63 - 1, 2**63 - 1), (2**63, None), (-1, None), (True, None), (False, None),
     (1.0, None), ("5", None), (None, None), (math.nan, None)],
)
def test_int_or_none(value: Any, expected: int | None) -> None:
    assert int_or_none(value) == expected


def test_str_or_none() -> None:
    assert str_or_none("m") == "m"
    assert str_or_none("") == ""
    assert str_or_none(3) is None
    assert str_or_none(None) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", 0), ("2", 2), ("12", 12), (None, None), ("", None), ("-1", None), ("+1", None), (" 1", None),
     ("1.0", None), ("²", None), ("١", None), ("x", None)],
)
def test_header_count(value: str | None, expected: int | None) -> None:
    """`x-stainless-retry-count`: ASCII digits only (`str.isdigit` alone passes '²', which `int` rejects)."""
    assert header_count(value) == expected


# -- how an exception ends a stream -----------------------------------------------------------------


def _connection_error(sdk: Any, cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise sdk.APIConnectionError(request=httpx2.Request("POST", URL)) from inner
    except sdk.APIConnectionError as exc:
        return exc


@pytest.mark.parametrize(("sdk", "ending"), [(anthropic, anthropic_ending), (openai, openai_ending)])
def test_the_shared_endings(sdk: Any, ending: Any) -> None:
    assert ending(StreamTimeout("idle", partial=True)) == ("error", None, "idle")
    for cancel in (asyncio.CancelledError(), KeyboardInterrupt(), SystemExit(), GeneratorExit()):
        assert ending(cancel) == ("cancelled", None, None)
    assert ending(httpx2.ReadTimeout("read")) == ("error", None, "read_timeout")
    assert ending(_connection_error(sdk, httpx2.ReadTimeout("read"))) == ("error", None, "read_timeout")
    # An exception by its module-qualified class name, as OpenTelemetry writes it; a builtin bare.
    cut = ("error", "httpx2.RemoteProtocolError", None)
    assert ending(_connection_error(sdk, httpx2.RemoteProtocolError("cut"))) == cut
    assert ending(httpx2.RemoteProtocolError("cut")) == cut
    assert ending(ValueError("a bug")) == ("error", "ValueError", None)
    assert ending(sdk.APIStatusError("e", response=_response(503), body=None)) == ("error", "503", None)


def test_anthropic_names_an_api_error_by_its_type() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    in_band = anthropic.APIStatusError("e", response=_response(200), body=body)  # after the 200
    assert anthropic_ending(in_band) == ("error", "overloaded_error", None)
    assert anthropic_ending(anthropic.APIStatusError("e", response=_response(529), body=None)) == ("error", "529", None)


def test_openai_names_an_api_error_by_its_code_then_type() -> None:
    status = openai.APIStatusError("e", response=_response(429), body={"code": "rate_limit_exceeded"})
    assert openai_ending(status) == ("error", "rate_limit_exceeded", None)
    in_band = openai.APIError("e", httpx2.Request("POST", URL), body={"type": "server_error"})
    assert openai_ending(in_band) == ("error", "server_error", None)
    bare = openai.APIError("e", httpx2.Request("POST", URL), body=None)
    assert openai_ending(bare) == ("error", "openai.APIError", None)
