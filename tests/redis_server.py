"""A real Redis (Debian's `redis-server`) on a loopback port of its own, for the fleet tests.

`RedisServer()` starts one with no persistence; `stop()` kills it (an outage), `start()` brings it
back on the same port (Redis restarted: empty, as after a crash without persistence).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, port: int | None = None, args: tuple[str, ...] = ()) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("Debian's redis-server is not installed: run scripts/ensure-redis")
        self.binary = binary
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.args = args
        """More of redis-server's options (`--requirepass`, ...)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "yes", "--loglevel", "warning", *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):  # up, with or without a password
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisCluster:
    """A real Redis Cluster of `masters` masters (Debian's `redis-server` in cluster mode, no
    replicas), each on a loopback port of its own, its node files in `workdir`; the slots are
    spread by `redis-cli --cluster create`. `url` is one node's (a cluster client finds the rest)."""

    def __init__(self, workdir: str, masters: int = 3) -> None:
        self.nodes = [RedisServer(args=("--cluster-enabled", "yes", "--cluster-config-file",
                                        f"{workdir}/nodes-{n}.conf", "--cluster-node-timeout", "2000",
                                        "--cluster-port", str(free_port()), "--dir", workdir))
                      for n in range(masters)]  # the bus port apart: the port + 10000 may be past 65535
        subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{node.port}" for node in self.nodes),
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True, timeout=60)
        self.url = self.nodes[0].url
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [subprocess.run(["redis-cli", "-p", str(node.port), "cluster", "info"], capture_output=True,
                                     text=True, timeout=10).stdout for node in self.nodes]
            if all("cluster_state:ok" in state for state in states):
                return
            time.sleep(0.1)
        raise RuntimeError("the Redis cluster did not come up")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
