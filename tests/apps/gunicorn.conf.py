"""gunicorn configuration with streamscope's hooks, as docs/deploy.md gives it.

The master serves the aggregate of every worker's metrics (`PROMETHEUS_MULTIPROC_DIR`) on
`METRICS_PORT`; a worker that exits is marked dead. The app calls `setup()` without a port.
Workers, worker class, `--preload` and `max_requests` come from the command line.
"""

import os

import streamscope.telemetry  # not `from ... import worker_exit`: gunicorn would read it as its own hook

errorlog = "-"
loglevel = "info"
graceful_timeout = 5
control_socket_disable = True  # gunicorn >= 25.1: several servers run at once in the tests


def when_ready(server):
    streamscope.telemetry.serve_metrics(int(os.environ["METRICS_PORT"]))


def child_exit(server, worker):
    streamscope.telemetry.worker_exit(worker.pid)
