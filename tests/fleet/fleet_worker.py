"""One worker of a fleet, in a process of its own: the relay with `RedisBuffer` behind uvicorn.

    python fleet_worker.py <redis url> <simulator base url>

Prints its base URL, then serves `GET /relay/anthropic/create/<scenario>` until killed.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import anthropic
import uvicorn
from opentelemetry.sdk.trace import TracerProvider
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from streamscope import AnthropicInstrumentor
from streamscope.serve import RedisBuffer, relay

USER = [{"role": "user", "content": "How do streams fail?"}]


def main() -> None:
    redis_url, sim_base = sys.argv[1], sys.argv[2]
    AnthropicInstrumentor().instrument(tracer_provider=TracerProvider())
    buffer = RedisBuffer(redis_url, grace=30.0, ttl=30.0)

    async def relayed(request: Request) -> Response:
        client = anthropic.AsyncAnthropic(base_url=sim_base + request.path_params["scenario"], api_key="k")
        params: dict[str, Any] = {"model": "claude-sim-1", "max_tokens": 1024, "messages": USER}
        return await relay(request, lambda: client.messages.create(**params, stream=True), resume=buffer)

    app = Starlette(routes=[Route("/relay/anthropic/create/{scenario}", relayed)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # listening before the URL is out: a connection waits for uvicorn, never refused
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, http="h11", loop="asyncio", lifespan="off", log_config=None, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
