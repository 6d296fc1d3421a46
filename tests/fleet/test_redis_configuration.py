# ruff: noqa: F811 - the fixtures `sim` and `on` come from test_relay
"""A Redis that answers but refuses the service's settings is not an outage: a wrong password, no
password where one is required, an ACL user without the commands, a database Redis does not have,
a TLS certificate the client does not trust. Each is an ERROR line naming the fix, said again at a
bounded rate while it lasts, and counted as `streamscope.store.problem="configuration"`; the
streams themselves go on, without resume. Real redis-server processes, a real relay.
"""

from __future__ import annotations

import logging
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis as redis_py
from served import serving
from test_relay import get, on, sim  # noqa: F401 - fixtures
from test_resume_redis import worker_app

from redis_server import RedisServer, free_port
from streamscope.fleet import link
from streamscope.serve import RedisBuffer
from streamscope.simulator import Simulator

PASSWORD = "right-password"


@pytest.fixture(scope="module")
def locked() -> Iterator[RedisServer]:
    """A Redis with a password, and an ACL user that may only read other keys."""
    with RedisServer(args=("--requirepass", PASSWORD)) as server:
        admin = redis_py.Redis(port=server.port, password=PASSWORD)
        admin.acl_setuser("limited", enabled=True, passwords=["+limited-password"], keys=["other:*"],
                          commands=["+get"])
        admin.close()
        yield server


@contextmanager
def tls_redis(folder: Any) -> Iterator[tuple[int, str]]:
    """A Redis on a TLS port with a self-signed certificate (for `localhost`): its port and the
    certificate's path."""
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost"], check=True, capture_output=True)
    port = free_port()
    binary = shutil.which("redis-server")
    assert binary is not None
    proc = subprocess.Popen([binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                             "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no", "--loglevel", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        trusting = ssl.create_default_context(cafile=str(cert))
        trusting.check_hostname = False
        deadline = time.monotonic() + 20
        while True:  # up: it answers PING over TLS
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw, \
                        trusting.wrap_socket(raw) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                assert time.monotonic() < deadline, "redis-server with TLS did not start"
                time.sleep(0.1)
        yield port, str(cert)
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A Redis on a TLS port with a self-signed certificate; its port."""
    with tls_redis(tmp_path_factory.mktemp("tls")) as (port, _):
        yield port


@pytest.fixture(autouse=True)
def _fresh_outages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each case its own outage state (one per component and Redis in a process)."""
    monkeypatch.setattr(link.Outage, "_known", {})


def problems(state: Any) -> dict[tuple[str, str], int]:
    """The buffer's store errors (a breaker store another test left running in this process may
    count its own into the same meter)."""
    return {(p.attributes["streamscope.store.operation"], p.attributes["streamscope.store.problem"]): p.value
            for p in state.points("streamscope.store.errors")
            if not str(p.attributes["streamscope.store.operation"]).startswith("breaker.")}


def said(caplog: pytest.LogCaptureFixture, port: int) -> list[logging.LogRecord]:
    """The lines about the Redis at `port` (not another test's, still running in this process)."""
    return [r for r in caplog.records if "Redis at" in r.getMessage() and f":{port}" in r.getMessage()]


def url_of(case: str, locked: RedisServer, tls: int) -> str:
    return {
        "wrong password": f"redis://:wrong-password@127.0.0.1:{locked.port}/0",
        "no password": f"redis://127.0.0.1:{locked.port}/0",
        "no permission": f"redis://limited:limited-password@127.0.0.1:{locked.port}/0",
        "no such database": f"redis://:{PASSWORD}@127.0.0.1:{locked.port}/99",
        "untrusted certificate": f"rediss://127.0.0.1:{tls}/0",
    }[case]


FIXES = {
    "wrong password": "authentication failed: give the user and password Redis expects",
    "no password": "authentication failed: give the user and password Redis expects",
    "no permission": "the Redis user lacks a permission streamscope needs",
    "no such database": "the database number in the URL does not exist on this Redis",
    "untrusted certificate": "the TLS handshake failed",
}


@pytest.mark.parametrize("case", list(FIXES))
def test_a_refused_setting_is_an_error_naming_the_fix(case: str, locked: RedisServer, tls: int, sim: Simulator,
                                                      on: Any, caplog: pytest.LogCaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = RedisBuffer(url_of(case, locked, tls), timeout=1.0)
    with serving(worker_app(sim, buffer)) as url:
        state = on()
        with caplog.at_level(logging.WARNING, logger="streamscope"):
            for _ in range(2):
                whole = get(url, "/relay/anthropic/create/complete")
                assert whole.status == 200 and whole.terminal.event == "done", "the stream goes on, without resume"
            time.sleep(0.3)  # the buffer's writer task fails in the background
            port = tls if case == "untrusted certificate" else locked.port
            errors = said(caplog, port)
            assert [r.levelno for r in errors] == [logging.ERROR], [r.getMessage() for r in errors]
            line = errors[0].getMessage()
            assert FIXES[case] in line and "Relays stream without resume until this is fixed" in line, line
            assert "password" not in line.split(" refuses")[0], "never the password in the address"
            assert "\n" not in line and "Traceback" not in line
            found = problems(state)
            assert found and all(problem == "configuration" for _, problem in found), found
            # While it lasts: said again, at most once per CONFIGURATION_EVERY.
            monkeypatch.setattr(link, "CONFIGURATION_EVERY", 0.0)
            assert get(url, "/relay/anthropic/create/complete").terminal.event == "done"
            time.sleep(0.3)
            errors = said(caplog, port)
            assert len(errors) >= 2 and all(r.levelno == logging.ERROR for r in errors)


def test_an_outage_is_still_a_warning_apart_from_configuration(sim: Simulator, on: Any,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    with RedisServer() as down:
        buffer = RedisBuffer(down.url, timeout=0.3)
        with serving(worker_app(sim, buffer)) as url:
            state = on()
            down.stop()
            with caplog.at_level(logging.WARNING, logger="streamscope"):
                assert get(url, "/relay/anthropic/create/complete").terminal.event == "done"
                time.sleep(0.3)
            lines = said(caplog, down.port)
            assert [r.levelno for r in lines] == [logging.WARNING] and "cannot be reached" in lines[0].getMessage()
            found = problems(state)
            assert found and all(problem == "unreachable" for _, problem in found), found


def test_the_fix_is_read_from_redis_py_s_own_errors() -> None:
    """What each refusal raises in redis-py, and what is an outage (None)."""
    errors = redis_py.exceptions
    assert "authentication failed" in (link.configuration_fix(errors.AuthenticationError("x")) or "")
    assert "permission" in (link.configuration_fix(errors.NoPermissionError("x")) or "")
    assert "database number" in (link.configuration_fix(errors.ResponseError("DB index is out of range")) or "")
    assert link.configuration_fix(errors.ConnectionError("Error 111 connecting. Connection refused.")) is None
    assert link.configuration_fix(errors.TimeoutError("Timeout reading from socket")) is None
    full = "max_connections"  # a pool the service gave, too small for the streams a worker follows
    assert full in (link.configuration_fix(errors.ConnectionError("Too many connections")) or "")
    if hasattr(errors, "MaxConnectionsError"):
        assert full in (link.configuration_fix(errors.MaxConnectionsError("Too many connections")) or "")


def test_over_tls_as_an_acl_user_a_stream_resumes_on_another_worker(sim: Simulator, on: Any,
                                                                     tmp_path: Any) -> None:
    """The settings right: TLS (`rediss://`, the certificate's authority given), an ACL user allowed
    only streamscope's keys. One worker reaches it by URL, the other with the client the service
    built; a stream cut on one is resumed on the other, and no store error is counted."""
    state = on()
    with tls_redis(tmp_path) as (port, cert):
        admin = redis_py.Redis(host="localhost", port=port, ssl=True, ssl_ca_certs=cert)
        admin.acl_setuser("relay", enabled=True, passwords=["+relay-password"], keys=["streamscope:*"],
                          commands=["+@all"])
        admin.close()
        by_url = RedisBuffer(f"rediss://relay:relay-password@localhost:{port}/0?ssl_ca_certs={cert}")
        by_client = RedisBuffer(redis_py.asyncio.Redis(host="localhost", port=port, ssl=True, ssl_ca_certs=cert,
                                                       username="relay", password="relay-password"))
        with serving(worker_app(sim, by_url)) as url_a, serving(worker_app(sim, by_client)) as url_b:
            for first_at, then_at in ((url_a, url_b), (url_b, url_a)):
                first = get(first_at, "/relay/anthropic/create/slow_answer", stop_after=3)
                rid = first.headers["x-request-id"]
                time.sleep(0.5)
                again = get(then_at, "/relay/anthropic/create/slow_answer", {"Last-Event-ID": f"{rid}:3"})
                assert again.status == 200 and again.terminal.event == "done", again.body[:300]
                assert again.events[0].id == f"{rid}:4"
    assert problems(state) == {}
