"""The oldest redis-py the `redis` extra allows runs the fleet's tests too.

The main environment has the newest release (`make test` installs the extras upgraded); this
installs the floor named in pyproject.toml (`redis>=X`: the first release at X) into a directory
of its own, put first on the path of a child pytest that runs the resume (one Redis, a cluster,
Sentinel) and fleet-breaker tests (one Redis, a cluster, Sentinel), and those of the clients made
from the ones a service gives (over TLS, as ACL users), against real Redis (a child with the same
path says which version it imports); every test must pass, none skipped.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from xml.etree import ElementTree

import pytest

import environments

ROOT = Path(__file__).resolve().parents[2]
FILES = ["tests/fleet/test_resume_redis.py", "tests/fleet/test_resume_cluster.py",
         "tests/fleet/test_resume_sentinel.py", "tests/fleet/test_fleet_breaker.py",
         "tests/fleet/test_store_sentinel.py", "tests/fleet/test_given_clients.py"]


def floor() -> str:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    [pin] = [p for p in extras["redis"] if p.startswith("redis")]
    found = re.fullmatch(r"redis>=([0-9.]+)", pin.replace(" ", ""))
    assert found, f"the redis extra pins {pin!r}: a floor (>=) and no upper bound"
    version = found.group(1)
    return version if version.count(".") >= 2 else version + ".0"


@pytest.mark.timeout(1200)
def test_the_fleet_on_the_oldest_redis_py(tmp_path: Path) -> None:
    version = floor()
    overlay = tmp_path / "redis-floor"
    got = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(overlay),
                          f"redis=={version}"], capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stdout + got.stderr
    check = subprocess.run([sys.executable, "-c", "import redis; print(redis.__version__)"], capture_output=True,
                           text=True, env=environments.clean_environ(PYTHONPATH=str(overlay)), cwd=ROOT)
    assert check.stdout.strip() == version, check.stdout + check.stderr
    report = tmp_path / "report.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           f"--junitxml={report}", *FILES], capture_output=True, text=True, timeout=1100, cwd=ROOT,
                          env=environments.clean_environ(PYTHONPATH=str(overlay)))
    output = f"redis-py {version}, exit {done.returncode}:\n{done.stdout[-8000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, output
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None, output
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["failures"] == counts["errors"] == counts["skipped"] == 0 and counts["tests"] >= 15, (counts, output)
    assert os.path.isdir(overlay / "redis")
