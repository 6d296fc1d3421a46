"""`streamscope demo` (what `make demo` runs): the workload's classes come out as designed,
through the real SDK, and `/metrics` is served while it runs."""

from __future__ import annotations

import socket
import urllib.request
from collections import Counter

from streamscope import demo
from streamscope.classify import LABELS
from streamscope.cli import main
from streamscope.workload import KINDS, expected_mix, tour, workload


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_short_mixed_run_matches_its_design() -> None:
    requests = workload(45, seed=11)
    assert {r.kind for r in requests} == set(KINDS)  # every kind at least once
    port = free_port()
    scraped: list[str] = []

    def progress(_request) -> None:
        if not scraped:  # while the run is still going
            scraped.append(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())

    run = demo.run(requests, scale=0.1, concurrency=8, prometheus_port=port, progress=progress)
    try:
        assert not run.missing
        got = Counter(str(span.attributes["streamscope.class"]) for _, span in run.results)
        assert got == Counter(expected_mix(requests))
        assert [(r.kind, r.expect) for r, s in run.results if s.attributes["streamscope.class"] != r.expect] == []
        assert "streamscope_active_streams" in scraped[0]
        final = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'streamscope_requests_total{' in final and 'streamscope_class="stalled_mid_stream"' in final
    finally:
        run.telemetry.shutdown()


def test_the_tour_covers_every_class(capsys) -> None:
    assert {r.expect for r in tour()} == set(LABELS)
    assert main(["demo", "--tour", "--port", "0", "--time-scale", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "every request got the class its script was written for" in out
    for label in LABELS:
        assert label in out


def test_the_triage_table(capsys) -> None:
    assert main(["demo", "--requests", "30", "--port", "0", "--time-scale", "0.1", "--concurrency", "8"]) == 0
    out = capsys.readouterr().out
    for heading in ("requests per class and model", "budget firings", "phase percentiles", "Look at first"):
        assert heading in out
