"""The browser client, served by the service itself: `client.js` (an ES module, no build step) and
its TypeScript declarations `client.d.ts`, at a path the service chooses.

`client_routes()` gives the two Starlette routes; a page imports the module from there
(`import {relayStream} from "/streamscope/client.js"`). The files are the package's own, read once;
each answer carries an `ETag` (a page revalidates it, and gets the client of the installed
version), and the module's answer names its declarations in `X-TypeScript-Types`.

A page on another origin than the relay needs the relay's CORS to allow the client's request
headers (`ALLOW_HEADERS`) and expose the relay's answer headers (`EXPOSE_HEADERS`): without them
the browser hides the request id, `Retry-After` and the reasons of a 204 from the client.
"""

from __future__ import annotations

import hashlib
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

CLIENT_PATH = "/streamscope/client.js"
ALLOW_HEADERS = ("Idempotency-Key", "Last-Event-ID", "Streamscope-Cancel")
"""The request headers the client sends beside the page's own."""
EXPOSE_HEADERS = ("X-Request-Id", "Retry-After", "Streamscope-Resume", "Streamscope-Cancel")
"""The answer headers the client reads."""


class _File:
    def __init__(self, name: str, media_type: str, headers: dict[str, str] | None = None) -> None:
        self.body = resources.files("streamscope.serve").joinpath(name).read_bytes()
        self.media_type = media_type
        self.etag = '"' + hashlib.sha256(self.body).hexdigest()[:20] + '"'
        self.headers = {"ETag": self.etag, "Cache-Control": "no-cache", **(headers or {})}

    async def answer(self, request: Request) -> Response:
        if self.etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=self.headers)
        return Response(self.body, media_type=self.media_type, headers=self.headers)


def client_routes(path: str = CLIENT_PATH) -> list[Route]:
    """The routes that serve the browser client at `path` (ending `.js`) and its TypeScript
    declarations beside it (`.d.ts`): `Starlette(routes=[..., *client_routes()])`."""
    if not isinstance(path, str):
        raise TypeError(f"client_routes(path=...) takes a URL path (a str), such as {CLIENT_PATH!r}, "
                        f"not {type(path).__name__}")
    if not path.startswith("/") or not path.endswith(".js"):
        raise ValueError(f"client_routes(path=...) takes a URL path that starts with / and ends with .js, "
                         f"such as {CLIENT_PATH!r}, not {path!r}")
    types = path[: -len(".js")] + ".d.ts"
    module = _File("client.js", "text/javascript", {"X-TypeScript-Types": types})
    declarations = _File("client.d.ts", "application/typescript")
    return [Route(path, module.answer, methods=["GET", "HEAD"]),
            Route(types, declarations.answer, methods=["GET", "HEAD"])]
