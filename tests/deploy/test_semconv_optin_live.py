"""The dashboards' GenAI queries against a real Prometheus with the conventions' opt-in on.

`test_dashboards_live.py` runs the demo workload without `OTEL_SEMCONV_STABILITY_OPT_IN` (today's
names: every panel query returns data there). Here a smaller run of the same demo has
`OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental` in its environment, so it emits
`gen_ai.client.inference.*` and the token counters instead; every panel query and rule that reads
a GenAI metric must still return data, and the scrape must hold the opt-in's names only.
Prometheus missing is a failure, not a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from test_dashboards import RULES, load_script, selectors

live = load_script("live")
generate = load_script("generate")

REQUESTS = 45  # every kind of the workload's first rounds; the opt-in's names need no more
SEED = 7
TIME_SCALE = 0.1
CONCURRENCY = 16
SHORT_RUN = {"__rate_interval": "1m", "__range": "10m"}
OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"


@dataclass(frozen=True)
class LiveRun:
    prom: Any
    demo: Any
    start: float
    end: float


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRun]:
    """The demo with the opt-in in its environment (the child inherits os.environ), scraped."""
    directory = tmp_path_factory.mktemp("prometheus-optin")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(OPT_IN, "gen_ai_latest_experimental")
        child_cm = live.DemoChild(REQUESTS, time_scale=TIME_SCALE, concurrency=CONCURRENCY, seed=SEED)
    assert OPT_IN not in os.environ or os.environ[OPT_IN] != "gen_ai_latest_experimental"
    with child_cm as child, live.PromServer(directory, child.port, rule_files=[RULES]) as prom:
        prom.wait_ready()
        end = live.settle(prom, child)
        yield LiveRun(prom, child, child.started, end)


def gen_ai_expressions() -> list[Any]:
    return [q for q in generate.panel_expressions(SHORT_RUN)
            if any(m.startswith("gen_ai_client_") for m, _ in selectors(q.expr))]


def test_only_the_opt_in_names_are_emitted(run: LiveRun) -> None:
    found = run.prom.query('count by (__name__) ({__name__=~"gen_ai_client_.+"})', at=run.end)
    names = {s["metric"]["__name__"] for s in found}
    assert "gen_ai_client_inference_duration_seconds_count" in names
    assert "gen_ai_client_inference_time_per_output_chunk_seconds_count" in names
    assert "gen_ai_client_inference_usage_input_tokens_total" in names
    assert not {n for n in names if n.startswith(("gen_ai_client_operation_", "gen_ai_client_token_"))}, names


def test_every_gen_ai_panel_query_returns_data(run: LiveRun) -> None:
    """As Grafana asks (a range query over the run and an instant query at its end)."""
    expressions = gen_ai_expressions()
    panels = {q.panel for q in expressions}
    assert {"Time to first chunk", "Time per output chunk", "Total duration", "Token throughput by type",
            "Mean tokens per request", "Reasoning share of output tokens", "Error types"} <= panels, panels
    failed, empty = [], []
    for q in expressions:
        try:
            ranged = run.prom.query_range(q.expr, run.start, run.end, 1)
            instant = run.prom.query(q.expr, at=run.end)
        except live.PrometheusError as exc:
            failed.append(f"{q.panel} {q.ref_id}: {exc}")
            continue
        if not ranged or not instant:
            empty.append(f"{q.panel} {q.ref_id}: {len(ranged)} range / {len(instant)} instant\n{q.expr}")
    assert not failed, "\n".join(failed)
    assert not empty, "\n".join(empty)


def test_gen_ai_rules_evaluate_with_data(run: LiveRun) -> None:
    groups = run.prom.rules()
    unhealthy = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"]
                 if r["health"] != "ok" or r.get("lastError")]
    assert not unhealthy, unhealthy
    in_file = [r for g in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"] for r in g["rules"]]
    reading = [r["record"] for r in in_file if "record" in r and "gen_ai_client_" in r["expr"]]
    assert reading
    assert [name for name in reading if not run.prom.query(name)] == []
