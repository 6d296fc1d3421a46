"""Values from the wire, as every Stainless SDK's adapter reads them: counts, names, retry delays.

A field or header the provider (or a proxy in between) sent malformed is not a streamscope
failure and never an exception: it reads as None, as if it had not been sent.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import time
from typing import Any

INT64 = 2**63


def int_or_none(value: Any) -> int | None:
    """A count from the wire: a non-negative int64 (an exporter cannot encode more), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < INT64:
        return value
    return None


def str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def float_or_none(value: Any) -> float | None:
    """A request's real number (`temperature`, `top_p`, a penalty): a finite int or float, as a
    float (the conventions' type: an exporter writes `1` and `1.0` differently), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def seed_or_none(value: Any) -> int | None:
    """A request's seed: any int64 (a seed may be negative), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and -INT64 <= value < INT64:
        return value
    return None


def strings_or_none(value: Any) -> tuple[str, ...] | None:
    """A request's string or list of strings (`stop`: either) as a string array (a tuple: the
    request's record is immutable); None when absent, empty, or anything else (a list with a
    non-string in it included)."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def server(client: Any) -> tuple[str | None, int | None]:
    """`server.address` and `server.port` of the client's base URL (the scheme's port where the URL
    names none)."""
    base_url = getattr(client, "base_url", None)
    port = getattr(base_url, "port", None)
    if port is None and base_url is not None:
        port = 443 if getattr(base_url, "scheme", "https") == "https" else 80
    return str_or_none(getattr(base_url, "host", None)), int_or_none(port)


def header_count(value: str | None) -> int | None:
    """A count in a header (`x-stainless-retry-count`): ASCII digits only, else None (`str.isdigit`
    alone admits digits `int()` rejects, such as '²')."""
    if value and value.isascii() and value.isdigit():
        return int(value)
    return None


def retry_after(response: Any) -> float | None:
    """The seconds the provider asked to wait, read as the SDKs read them: `retry-after-ms`
    (milliseconds) first, then `retry-after` as seconds, then as an HTTP date (the seconds from
    now to it; 0 for a date past). None when absent or malformed, or not a finite number >= 0."""
    headers = getattr(response, "headers", None) if response is not None else None
    if headers is None:
        return None
    millis = _seconds(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    raw = headers.get("retry-after")
    if not raw:
        return None
    seconds = _seconds(raw)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(raw)
        if when.tzinfo is None:  # RFC 9110's IMF-fixdate is GMT; a date without a zone is read as UTC
            when = when.replace(tzinfo=datetime.UTC)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None


def _seconds(raw: str | None) -> float | None:
    """A finite, non-negative number of a header's value, else None."""
    if not raw:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None
