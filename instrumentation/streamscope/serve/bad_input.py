"""A service's own bad input, answered in the relay's error shape: one line, a code, no traceback."""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse


async def bad_request(request: Request, exc: Exception) -> JSONResponse:
    """An exception handler for a framework's validation error (FastAPI's `RequestValidationError`):
    HTTP 400, `{"code": "bad_request", "detail": "<where>: <what>", "request_id"}`. The detail names
    the first field in error and what is wrong with it, never the value sent."""
    errors = getattr(exc, "errors", None)
    found: list[Any] = list(errors()) if callable(errors) else []
    first = found[0] if found and isinstance(found[0], dict) else {}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "request"
    detail = f"{where}: {first.get('msg', 'not valid')}"
    if len(found) > 1:
        detail += f" (and {len(found) - 1} more)"
    rid = request.headers.get("x-request-id") or uuid.uuid4().hex
    return JSONResponse({"code": "bad_request", "detail": detail, "request_id": rid}, 400,
                        headers={"X-Request-Id": rid})
