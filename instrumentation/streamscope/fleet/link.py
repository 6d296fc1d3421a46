"""One Redis, reached with a bounded wait, and its outages said once.

`Link` holds the clients a part of the fleet uses (sync for the breaker's sync thread, asyncio for
the relay), made from a URL or from a client the service already has, with socket timeouts so
that no store operation holds a request longer than `timeout`. `Outage` is what a part does when
Redis cannot be reached: one WARNING when an outage starts (per process and component), one INFO
when it ends, and `streamscope.store.errors` for each failed operation. A Redis that answers but
refuses the service's configuration (a wrong password, a user without the permissions, a database
that does not exist, a TLS certificate the client does not trust) is not an outage that passes by
itself: it is an ERROR naming the fix, said again every `CONFIGURATION_EVERY` seconds while it
lasts, and counted apart (`streamscope.store.problem` = `configuration`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import ssl
import threading
import time
import weakref
from typing import Any, ClassVar

from streamscope.core import fleet_signals
from streamscope.core.keywords import real_number

logger = logging.getLogger("streamscope")
DEFAULT_TIMEOUT = 0.5
"""Seconds any one store operation may take (connect, send or read) before it counts as failed."""
CONFIGURATION_EVERY = 60.0
"""Seconds between two ERROR lines for one configuration problem that lasts (per component and Redis)."""
MAX_CONNECTIONS = 10_000
"""Connections a client made here may open to one Redis (or cluster node). A worker following streams
for browsers that reconnected to it holds one per stream while it waits (`XREAD BLOCK`): redis-py's
default pool of 100 refuses the 101st, and the worker's own writes with it. Redis's `maxclients`
(10,000 by default) bounds the fleet's."""


def _redis() -> Any:
    try:
        import redis
    except ModuleNotFoundError:
        raise ModuleNotFoundError("streamscope's Redis buffer and store need redis-py, which is not installed: "
                                  "pip install 'streamscope[redis]'", name="redis") from None
    return redis


_PASSED_ON = ("username", "password", "client_name")
"""What a client the service gave passes on to the clients of the other kind made here, with TLS (`_TLS`)."""
_TLS = ("ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_check_hostname",
        "ssl_ca_path", "ssl_password", "ssl_min_version", "ssl_ciphers")
"""TLS settings passed on where the given client's connections are TLS ones (each only where set, and where
the client made takes it: the last four are unknown to some of redis-py's clients, see `_taken`)."""


def _passed_on(given: dict[str, Any], connection_class: Any, *more: str) -> dict[str, Any]:
    """The settings of a connection pool's (or cluster's) kwargs the clients made here must use too.
    redis-py keeps no `ssl` there (a cluster's sync client aside): it picks a TLS connection class, whose
    `ssl_*` settings a plain connection refuses, so TLS is read from the class and its settings go with it."""
    redis = _redis()
    out = {k: given[k] for k in (*_PASSED_ON, *more) if given.get(k) is not None}
    tls_classes = (redis.connection.SSLConnection, redis.asyncio.connection.SSLConnection)
    if given.get("ssl") or (isinstance(connection_class, type) and issubclass(connection_class, tls_classes)):
        out["ssl"] = True
        out.update((k, given[k]) for k in _TLS if given.get(k) is not None)
    return out


def _taken(cls: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` less the TLS settings the client class `cls` does not take (redis-py 5.0's asyncio
    client has no `ssl_password`, 8's asyncio cluster client no `ssl_ca_path`): dropped, TLS still fails
    as a configuration error naming the fix, never as a TypeError."""
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params or not k.startswith("ssl_")}


def check_timeout(owner: str, timeout: object) -> float:
    seconds = real_number(f"{owner}(timeout=...)", timeout, "seconds (a number)")
    if not 0 < seconds <= 30:
        raise ValueError(f"{owner}(timeout=...) takes seconds, more than 0 and at most 30, not {timeout!r}")
    return seconds


class Link:
    """The clients to one Redis: `url_or_client` a `redis://` URL, or a `redis.Redis` /
    `redis.asyncio.Redis` the service made (its connection settings are reused for the other kind,
    with this link's timeouts where it set none), a Sentinel's `master_for(...)` client (the other
    kind asks the same Sentinels for the master, with their own user, password and TLS settings), or a
    `RedisCluster` (sync or asyncio: the other kind is made from its nodes); user, password, database
    and TLS (read from the connection class: redis-py keeps no `ssl` flag) with its settings passed on."""

    def __init__(self, owner: str, url_or_client: object, timeout: float) -> None:
        redis = _redis()
        self.timeout = timeout
        self._nodes: list[tuple[str, int]] | None = None
        """A Redis Cluster's nodes (None: one Redis): the clients made here are cluster clients."""
        self._sentinel: tuple[str, list[tuple[str, int]]] | None = None
        """A Sentinel's master (its name, the Sentinels): the clients made here ask them for it."""
        self._sentinel_kwargs: dict[str, Any] = {}
        """The Sentinels' own settings (user, password, TLS), passed on to the Sentinels asked here."""
        self._url: str | None = None
        self._kwargs: dict[str, Any] = {}
        self._sync: Any = None
        self._given_async: Any = None
        if isinstance(url_or_client, (redis.RedisCluster, redis.asyncio.RedisCluster)):
            manager = url_or_client.nodes_manager
            self._nodes = [(node.host, int(node.port)) for node in
                           (url_or_client.get_nodes() or list(manager.startup_nodes.values()))]
            given = manager.connection_kwargs
            self._kwargs = _passed_on(given, given.get("connection_class"))
            self._sync = url_or_client if isinstance(url_or_client, redis.RedisCluster) else None
            self._given_async = url_or_client if isinstance(url_or_client, redis.asyncio.RedisCluster) else None
        elif isinstance(url_or_client, str):
            if not url_or_client.startswith(("redis://", "rediss://", "unix://")):
                raise ValueError(f"{owner}() takes a redis:// (or rediss://, unix://) URL or a redis client, "
                                 f"not {url_or_client!r}")
            try:  # read now, not at the first stream: a bad setting is the service's mistake, not an outage
                redis.connection.parse_url(url_or_client)
            except ValueError as exc:
                raise ValueError(f"{owner}() cannot use {url_or_client.split('@')[-1]!r}: {exc}") from None
            self._url = url_or_client
        elif isinstance(url_or_client, (redis.Redis, redis.asyncio.Redis)) and hasattr(
                url_or_client.connection_pool, "sentinel_manager"):  # a Sentinel's `master_for(...)`
            pool = url_or_client.connection_pool
            own = [s.connection_pool for s in pool.sentinel_manager.sentinels]
            self._sentinel = (str(pool.service_name), [(o.connection_kwargs.get("host", "localhost"),
                                                        int(o.connection_kwargs.get("port", 26379))) for o in own])
            self._kwargs = _passed_on(pool.connection_kwargs, pool.connection_class, "db")
            self._sentinel_kwargs = _passed_on(own[0].connection_kwargs, own[0].connection_class) if own else {}
            self._sync = url_or_client if isinstance(url_or_client, redis.Redis) else None
            self._given_async = url_or_client if isinstance(url_or_client, redis.asyncio.Redis) else None
        elif isinstance(url_or_client, (redis.Redis, redis.asyncio.Redis)):
            pool = url_or_client.connection_pool
            given = pool.connection_kwargs
            place = {"unix_socket_path": given["path"]} if given.get("path") else {
                "host": given.get("host", "localhost"), "port": int(given.get("port", 6379))}
            self._kwargs = {**place, **_passed_on(given, pool.connection_class, "db")}
            for key in ("socket_timeout", "socket_connect_timeout"):  # this link's where the client set none
                self._kwargs[key] = timeout if given.get(key) is None else given[key]
            self._sync = url_or_client if isinstance(url_or_client, redis.Redis) else None
            self._given_async = url_or_client if isinstance(url_or_client, redis.asyncio.Redis) else None
        else:
            raise TypeError(f"{owner}() takes a redis:// URL or a redis.Redis / redis.asyncio.Redis or RedisCluster "
                            f"client, not {type(url_or_client).__name__}")
        self._given_sync = self._sync
        self._by_loop: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _options(self) -> dict[str, Any]:
        return {"socket_timeout": self.timeout, "socket_connect_timeout": self.timeout,
                "retry_on_timeout": False, "health_check_interval": 0, "max_connections": MAX_CONNECTIONS}

    def _asking(self) -> dict[str, Any]:
        """The settings of the Sentinels' own clients: theirs (user, password, TLS), this link's timeouts."""
        return {"socket_timeout": self.timeout, "socket_connect_timeout": self.timeout, **self._sentinel_kwargs}

    def sync(self) -> Any:
        """The sync client (made on first use; a forked child makes its own)."""
        with self._lock:
            if self._sync is None or self._pid != os.getpid():
                redis = _redis()
                self._pid = os.getpid()
                if self._sentinel is not None:
                    name, sentinels = self._sentinel
                    self._sync = redis.sentinel.Sentinel(sentinels, sentinel_kwargs=_taken(
                        redis.Redis, self._asking())).master_for(name, socket_timeout=self.timeout,
                                                                 socket_connect_timeout=self.timeout,
                                                                 **_taken(redis.Redis, self._kwargs))
                elif self._nodes is not None:
                    nodes = [redis.cluster.ClusterNode(h, p) for h, p in self._nodes]
                    self._sync = redis.RedisCluster(startup_nodes=nodes, socket_timeout=self.timeout,
                                                    socket_connect_timeout=self.timeout,
                                                    **_taken(redis.RedisCluster, self._kwargs))
                elif self._url is not None:
                    self._sync = redis.Redis.from_url(self._url, **self._options())
                else:
                    self._sync = redis.Redis(health_check_interval=0, **_taken(redis.Redis, self._kwargs))
            return self._sync

    def asyncio(self) -> Any:
        """The asyncio client of the running loop (its connections belong to that loop: one client
        per loop, made on first use; a forked child makes its own). A client the service gave is
        used as given."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._given_async is not None:
                return self._given_async
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._sync = None if self._url is not None or self._given_sync is None else self._given_sync
                self._by_loop = weakref.WeakKeyDictionary()
            client = self._by_loop.get(loop)
            if client is None:
                redis = _redis()
                if self._sentinel is not None:
                    name, sentinels = self._sentinel
                    client = redis.asyncio.sentinel.Sentinel(sentinels, sentinel_kwargs=_taken(
                        redis.asyncio.Redis, self._asking())).master_for(name, socket_timeout=self.timeout,
                                                                         socket_connect_timeout=self.timeout,
                                                                         max_connections=MAX_CONNECTIONS,
                                                                         **_taken(redis.asyncio.Redis, self._kwargs))
                elif self._nodes is not None:
                    nodes = [redis.asyncio.cluster.ClusterNode(h, p) for h, p in self._nodes]
                    client = redis.asyncio.RedisCluster(startup_nodes=nodes, socket_timeout=self.timeout,
                                                        socket_connect_timeout=self.timeout,
                                                        max_connections=MAX_CONNECTIONS,
                                                        **_taken(redis.asyncio.RedisCluster, self._kwargs))
                elif self._url is not None:
                    client = redis.asyncio.Redis.from_url(self._url, **self._options())
                else:
                    client = redis.asyncio.Redis(health_check_interval=0, max_connections=MAX_CONNECTIONS,
                                                 **_taken(redis.asyncio.Redis, self._kwargs))
                self._by_loop[loop] = client
            return client

    @property
    def cluster(self) -> bool:
        """Whether the clients are a Redis Cluster's."""
        return self._nodes is not None

    def where(self) -> str:
        if self._sentinel is not None:
            return f"the master {self._sentinel[0]!r} of Sentinel " + ", ".join(
                f"{h}:{p}" for h, p in self._sentinel[1][:3])
        if self._nodes is not None:
            return "the cluster of " + ", ".join(f"{h}:{p}" for h, p in self._nodes[:3])
        if self._url is not None:
            return self._url.split("@")[-1]  # never the password
        kwargs = self._kwargs
        return str(kwargs.get("unix_socket_path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}")


def configuration_fix(exc: BaseException) -> str | None:
    """What to change where Redis refused the service's settings (None: an outage, which passes by
    itself). redis-py raises these on connecting (AUTH, SELECT, the TLS handshake) or on a command."""
    errors = _redis().exceptions
    text = str(exc)
    if isinstance(exc, errors.AuthenticationError) or text.startswith(("WRONGPASS", "NOAUTH")):
        return ("authentication failed: give the user and password Redis expects, in the URL "
                "(redis://user:password@host:6379/0) or on the client you pass")
    if isinstance(exc, getattr(errors, "NoPermissionError", ())) or text.startswith("NOPERM"):
        return ("the Redis user lacks a permission streamscope needs: allow it the stream, hash, sorted-set, key "
                "and script commands on the keys streamscope:*")
    if isinstance(exc, getattr(errors, "MaxConnectionsError", ())) or text == "Too many connections":
        return ("the client's connection pool is full: each stream this worker follows for a reconnected "
                "browser holds one connection while it waits; give a client whose pool allows more "
                "(max_connections=...)")
    if "DB index is out of range" in text or text == "Invalid Database":
        return "the database number in the URL does not exist on this Redis: use one below its 'databases' setting"
    if any(isinstance(e, ssl.SSLError) for e in (exc, exc.__cause__, exc.__context__)) or "[SSL" in text:
        return ("the TLS handshake failed: give the client the authority that signed Redis's certificate (a "
                "redis.Redis made with ssl_ca_certs=...), and use rediss:// only for Redis's TLS port")
    return None


class Outage:
    """One component's view of the store: `failed` on each failed operation (counted; the first of
    an outage logs one WARNING), `ok` on each success (the first after an outage logs one INFO).
    One per process, component and Redis (`Outage.of`): two buffers on one Redis say an outage once."""

    _known: ClassVar[dict[tuple[str, str], Outage]] = {}
    _known_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def of(cls, component: str, where: str, fallback: str) -> Outage:
        with cls._known_lock:
            found = cls._known.get((component, where))
            if found is None:
                found = cls._known[(component, where)] = cls(component, where, fallback)
            return found

    def __init__(self, component: str, where: str, fallback: str) -> None:
        self.component = component
        self.where = where
        self.fallback = fallback
        self.down = False
        self._fix_said = -CONFIGURATION_EVERY
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self.down = False  # a worker says its own outages
        self._fix_said = -CONFIGURATION_EVERY

    def failed(self, operation: str, exc: BaseException) -> None:
        try:
            fix = configuration_fix(exc)
            problem = "unreachable" if fix is None else "configuration"
            fleet_signals.store_error(f"{self.component}.{operation}", problem)
            with self._lock:
                first, self.down = not self.down, True
                now = time.monotonic()
                say_fix = fix is not None and now - self._fix_said >= CONFIGURATION_EVERY
                if say_fix:
                    self._fix_said = now
            if say_fix:
                logger.error("streamscope: Redis at %s refuses this service's settings (%s in %s.%s): %s. %s until "
                             "this is fixed (said again every %d s while it lasts)", self.where, type(exc).__name__,
                             self.component, operation, fix, self.fallback[:1].upper() + self.fallback[1:],
                             CONFIGURATION_EVERY)
            elif first and fix is None:
                logger.warning("streamscope: Redis at %s cannot be reached (%s in %s.%s): %s until it can; "
                               "retried by itself", self.where, type(exc).__name__, self.component, operation,
                               self.fallback)
        except Exception:  # pragma: no cover - never raises
            pass

    def ok(self) -> None:
        if not self.down:
            return
        with self._lock:
            was, self.down = self.down, False
        if was:
            logger.info("streamscope: Redis at %s is reachable again: the %s uses it again", self.where,
                        self.component)
