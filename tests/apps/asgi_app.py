"""A minimal ASGI app (no framework) for gunicorn's uvicorn workers; the same routes as
`wsgi_app`, streaming with the async client. The warm-up stream (under `--preload`, in the
master) runs on its own event loop, closed before the fork."""

from __future__ import annotations

import asyncio
import json
import os

from streaming import instrument, stream_async, warm_up_async

telemetry = instrument()
if os.environ.get("APP_WARMUP") == "1":  # under uvicorn itself the module is imported inside its loop
    asyncio.run(warm_up_async())


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/pid":
        body, status = {"pid": os.getpid()}, 200
    elif path.startswith("/stream/"):
        body, status = await stream_async(path.removeprefix("/stream/")), 200
    else:
        body, status = {"error": "not found"}, 404
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
