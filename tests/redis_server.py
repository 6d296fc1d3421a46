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


class RedisSentinel:
    """A master and a replica (Debian's `redis-server`) watched by one Sentinel (the same binary,
    `--sentinel`), quorum 1, a master down after `down_after_ms`: killing the master promotes the
    replica within a few seconds. `sentinel` is the Sentinel's (host, port); `name` the master's."""

    name = "streamscope"

    def __init__(self, workdir: str, down_after_ms: int = 1000) -> None:
        self.master = RedisServer()
        self.replica = RedisServer(args=("--replicaof", "127.0.0.1", str(self.master.port)))
        port = free_port()
        conf = f"{workdir}/sentinel.conf"
        with open(conf, "w") as f:
            f.write(f"port {port}\nbind 127.0.0.1\ndir {workdir}\n"
                    f"sentinel monitor {self.name} 127.0.0.1 {self.master.port} 1\n"
                    f"sentinel down-after-milliseconds {self.name} {down_after_ms}\n"
                    f"sentinel failover-timeout {self.name} 5000\n")
        self.proc = subprocess.Popen([self.master.binary, conf, "--sentinel", "--loglevel", "warning"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.sentinel = ("127.0.0.1", port)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # up, and the replica has synced
            try:
                info = subprocess.run(["redis-cli", "-p", str(self.replica.port), "info", "replication"],
                                      capture_output=True, text=True, timeout=5).stdout
                seen = subprocess.run(["redis-cli", "-p", str(port), "sentinel", "replicas", self.name],
                                      capture_output=True, text=True, timeout=5).stdout
                if "master_link_status:up" in info and str(self.replica.port) in seen:
                    return
            except (OSError, subprocess.TimeoutExpired):
                pass
            time.sleep(0.1)
        raise RuntimeError("the Sentinel did not come up")

    def master_port(self) -> int | None:
        """The port Sentinel names as the master now."""
        out = subprocess.run(["redis-cli", "-p", str(self.sentinel[1]), "sentinel", "get-master-addr-by-name",
                              self.name], capture_output=True, text=True, timeout=5).stdout.split()
        return int(out[1]) if len(out) == 2 else None

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.master.stop()
        self.replica.stop()

    def __enter__(self) -> RedisSentinel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
