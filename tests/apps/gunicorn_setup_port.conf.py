"""gunicorn configuration where the app's own `setup(prometheus_port=...)` serves `/metrics`.

Under `--preload` that call runs once, in the master, which then serves every worker's sum.
Without it every worker calls it: the first to bind the port serves the sum and the others
log that the port is taken. Only `child_exit` is hooked.
"""

import streamscope.telemetry  # not `from ... import worker_exit`: gunicorn would read it as its own hook

errorlog = "-"
loglevel = "info"
graceful_timeout = 5
control_socket_disable = True  # gunicorn >= 25.1: several servers run at once in the tests


def child_exit(server, worker):
    streamscope.telemetry.worker_exit(worker.pid)
