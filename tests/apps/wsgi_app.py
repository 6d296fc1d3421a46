"""A minimal WSGI app (no framework) for gunicorn's sync and gthread workers.

Loaded with `--preload`, the module runs in the master before the fork: telemetry, the
instrumentor with budgets, and a warm-up stream happen there and every worker inherits them.

* `GET /pid`: `{"pid": ...}` (readiness).
* `GET /stream/<scenario>`: streams the simulator's scenario with the sync client and answers
  what happened (see `streaming.Outcome.report`).
"""

from __future__ import annotations

import json
import os

from streaming import instrument, stream_sync, warm_up

telemetry = instrument()
warm_up()


def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/pid":
        body, status = {"pid": os.getpid()}, "200 OK"
    elif path.startswith("/stream/"):
        body, status = stream_sync(path.removeprefix("/stream/")), "200 OK"
    else:
        body, status = {"error": "not found"}, "404 Not Found"
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]
