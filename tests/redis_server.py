"""A real Redis (Debian's `redis-server`) on a loopback port of its own, for the fleet tests.

`RedisServer()` starts one with no persistence; `stop()` kills it (an outage), `start()` brings it
back on the same port (Redis restarted: empty, as after a crash without persistence). Given
`certificates(...)` it listens on TLS alone; given a `user` (name, password) the default user is off
and only that ACL user may do anything. `RedisSentinel` does the same for a master, its replica and
their Sentinel.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def certificates(folder: str | Path) -> tuple[str, str]:
    """A self-signed certificate (its own authority) for `localhost` and 127.0.0.1, and its key:
    their paths in `folder`."""
    cert, key = Path(folder) / "redis-cert.pem", Path(folder) / "redis-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


def tls_options(tls: tuple[str, str]) -> list[str]:
    """redis-server's options for TLS with `certificates(...)`, replication (and a Sentinel's links) over TLS."""
    cert, key = tls
    return ["--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", cert, "--tls-auth-clients", "no",
            "--tls-replication", "yes"]


def answers(port: int, tls: tuple[str, str] | None) -> bool:
    """Whether a Redis (or Sentinel) on `port` answers PING (or asks for a login first)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw:
            s: socket.socket = raw
            if tls is not None:
                trusting = ssl.create_default_context(cafile=tls[0])
                s = trusting.wrap_socket(raw, server_hostname="localhost")
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


def cli_options(port: int, tls: tuple[str, str] | None, user: tuple[str, str] | None) -> list[str]:
    """redis-cli's options to reach what listens on `port` (over TLS, as `user`)."""
    out = ["redis-cli", "-p", str(port)]
    if tls is not None:
        out += ["--tls", "--cacert", tls[0]]
    if user is not None:
        out += ["--user", user[0], "--pass", user[1], "--no-auth-warning"]
    return out


class RedisServer:
    def __init__(self, port: int | None = None, args: tuple[str, ...] = (), tls: tuple[str, str] | None = None,
                 user: tuple[str, str] | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("Debian's redis-server is not installed: run scripts/ensure-redis")
        self.binary = binary
        self.port = port or free_port()
        self.tls = tls
        """`certificates(...)`: TLS alone on `port` (no plain port)."""
        self.user = user
        """An ACL user (name, password) allowed everything; the default user off."""
        self.url = f"{'rediss' if tls else 'redis'}://127.0.0.1:{self.port}/0"
        self.args = args
        """More of redis-server's options (`--requirepass`, ...)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        listen = ["--port", "0", "--tls-port", str(self.port), *tls_options(self.tls)] if self.tls else [
            "--port", str(self.port)]
        users = ["--user", "default", "off", "--user", self.user[0], "on", f">{self.user[1]}", "~*", "&*",
                 "+@all"] if self.user else []
        self.proc = subprocess.Popen(
            [self.binary, *listen, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "yes", "--loglevel", "warning", *users, *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if answers(self.port, self.tls):  # up, with or without a password
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def cli(self, *args: str) -> str:
        """What redis-cli prints for `args` sent to this Redis (as its user, over TLS if it listens so)."""
        return subprocess.run([*cli_options(self.port, self.tls, self.user), *args], capture_output=True, text=True,
                              timeout=10).stdout

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
    spread by `redis-cli --cluster create`. `url` is one node's (a cluster client finds the rest).
    `tls` and `user` as for `RedisServer` (the cluster bus over TLS too)."""

    def __init__(self, workdir: str, masters: int = 3, tls: tuple[str, str] | None = None,
                 user: tuple[str, str] | None = None) -> None:
        more = ("--tls-cluster", "yes") if tls else ()
        login = ("--masteruser", user[0], "--masterauth", user[1]) if user else ()
        self.nodes = [RedisServer(args=("--cluster-enabled", "yes", "--cluster-config-file",
                                        f"{workdir}/nodes-{n}.conf", "--cluster-node-timeout", "2000",
                                        "--cluster-port", str(free_port()), "--dir", workdir, *more, *login),
                                  tls=tls, user=user)
                      for n in range(masters)]  # the bus port apart: the port + 10000 may be past 65535
        try:
            subprocess.run([*cli_options(self.nodes[0].port, tls, user), "--cluster", "create",
                            *(f"127.0.0.1:{node.port}" for node in self.nodes), "--cluster-replicas", "0",
                            "--cluster-yes"], check=True, capture_output=True, timeout=60)
            self.url = self.nodes[0].url
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if all("cluster_state:ok" in node.cli("cluster", "info") for node in self.nodes):
                    return
                time.sleep(0.1)
            raise RuntimeError("the Redis cluster did not come up")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sentinel_client(sentinel: tuple[str, int], *, asynchronous: bool = False, tls: str | None = None,
                    user: tuple[str, str] | None = None, sentinel_user: tuple[str, str] | None = None,
                    timeout: float = 1.0) -> Any:
    """The client a service builds for the master behind the Sentinel at `sentinel`:
    `Sentinel(...).master_for(...)`, sync or asyncio; over TLS trusting `tls` (a certificate's
    path), logged in to the master as `user` and to the Sentinel as `sentinel_user`."""
    from redis.asyncio.sentinel import Sentinel as AsyncSentinel
    from redis.sentinel import Sentinel

    secure: dict[str, Any] = {"ssl": True, "ssl_ca_certs": tls} if tls else {}
    own = {**secure, **({"username": sentinel_user[0], "password": sentinel_user[1]} if sentinel_user else {})}
    login = {"username": user[0], "password": user[1]} if user else {}
    kind = AsyncSentinel if asynchronous else Sentinel
    return kind([sentinel], sentinel_kwargs={"socket_timeout": timeout, **own}).master_for(
        RedisSentinel.name, socket_timeout=timeout, **secure, **login)


class RedisSentinel:
    """A master and a replica (Debian's `redis-server`) watched by one Sentinel (the same binary,
    `--sentinel`), quorum 1, a master down after `down_after_ms`: killing the master promotes the
    replica within a few seconds. `sentinel` is the Sentinel's (host, port); `name` the master's.

    Secured if asked: `tls` (`certificates(...)`) on every link, the Sentinel's own included;
    `user` (name, password) the only ACL user of the master and the replica (the replica and the
    Sentinel log in as it: `masteruser`, `sentinel auth-user`); `sentinel_user` the only one of the
    Sentinel itself."""

    name = "streamscope"

    def __init__(self, workdir: str, down_after_ms: int = 1000, tls: tuple[str, str] | None = None,
                 user: tuple[str, str] | None = None, sentinel_user: tuple[str, str] | None = None) -> None:
        self.tls, self.user, self.sentinel_user = tls, user, sentinel_user
        for node in ("master", "replica"):  # each its own directory: a replica writes the copy it is sent
            Path(workdir, node).mkdir(exist_ok=True)
        self.master = RedisServer(args=("--dir", f"{workdir}/master"), tls=tls, user=user)
        self.replica: RedisServer | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            login = ("--masteruser", user[0], "--masterauth", user[1]) if user else ()
            self.replica = RedisServer(args=("--replicaof", "127.0.0.1", str(self.master.port), *login, "--dir",
                                             f"{workdir}/replica"), tls=tls, user=user)
            port = free_port()
            lines = [f"port {port}"] if tls is None else ["port 0", f"tls-port {port}", *(
                " ".join(pair).removeprefix("--") for pair in zip(*[iter(tls_options(tls))] * 2, strict=True))]
            lines += [f"bind 127.0.0.1\ndir {workdir}", f"sentinel monitor {self.name} 127.0.0.1 {self.master.port} 1",
                      f"sentinel down-after-milliseconds {self.name} {down_after_ms}",
                      f"sentinel failover-timeout {self.name} 5000"]
            if user:
                lines += [f"sentinel auth-user {self.name} {user[0]}", f"sentinel auth-pass {self.name} {user[1]}"]
            if sentinel_user:
                lines += ["user default off", f"user {sentinel_user[0]} on >{sentinel_user[1]} +@all"]
            conf = f"{workdir}/sentinel.conf"
            Path(conf).write_text("\n".join(lines) + "\n")
            self.proc = subprocess.Popen([self.master.binary, conf, "--sentinel", "--loglevel", "warning"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.sentinel = ("127.0.0.1", port)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # up, and the replica has synced
                try:
                    info = self.replica.cli("info", "replication")
                    seen = self.ask("sentinel", "replicas", self.name)
                    if "master_link_status:up" in info and str(self.replica.port) in seen:
                        return
                except (OSError, subprocess.TimeoutExpired):
                    pass
                time.sleep(0.1)
            raise RuntimeError("the Sentinel did not come up")
        except BaseException:
            self.stop()
            raise

    def ask(self, *args: str) -> str:
        """What redis-cli prints for `args` sent to the Sentinel."""
        return subprocess.run([*cli_options(self.sentinel[1], self.tls, self.sentinel_user), *args],
                              capture_output=True, text=True, timeout=10).stdout

    def client(self, *, asynchronous: bool = False, timeout: float = 1.0) -> Any:
        """The client a service builds for this master (`sentinel_client`, with this one's settings)."""
        return sentinel_client(self.sentinel, asynchronous=asynchronous, tls=self.tls[0] if self.tls else None,
                               user=self.user, sentinel_user=self.sentinel_user, timeout=timeout)

    def master_port(self) -> int | None:
        """The port Sentinel names as the master now."""
        out = self.ask("sentinel", "get-master-addr-by-name", self.name).split()
        return int(out[1]) if len(out) == 2 else None

    def stop(self) -> None:
        """Stop all three (the Sentinel first: no failover on the way)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
        self.master.stop()
        if self.replica is not None:
            self.replica.stop()

    def __enter__(self) -> RedisSentinel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
