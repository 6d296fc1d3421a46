"""Dashboards, rules and runbooks in ``dashboards/`` stay generated, valid and linked.

These tests need ``promtool`` (``make prometheus``). They fail, never skip, without it: a
dashboard whose PromQL was never parsed is not a dashboard that works.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from streamscope.core.classifier import LABELS

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
GENERATOR = DASHBOARDS / "generate.py"
RULES = DASHBOARDS / "rules.yml"
RULES_TEST = DASHBOARDS / "rules_test.yml"
RUNBOOKS = DASHBOARDS / "runbooks.md"

CLASSES = set(LABELS)  # every class the classifier gives, `paused` included


def load_script(stem: str) -> ModuleType:
    """Import ``dashboards/<stem>.py`` by path (dashboards/ holds scripts, not a package).

    Registered as ``streamscope_dashboards_<stem>``, the name ``dashboards/render.py`` loads its
    siblings under, so every caller shares one module object.
    """
    name = f"streamscope_dashboards_{stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DASHBOARDS / f"{stem}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def load_generator() -> ModuleType:
    """Import dashboards/generate.py by path (it is a script, not a package)."""
    return load_script("generate")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: run `make prometheus` (scripts/ensure-prometheus)")
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120)


def dashboards() -> list[dict[str, Any]]:
    files = sorted(DASHBOARDS.glob("*.json"))
    assert files, "no dashboards/*.json: run `make dashboards`"
    return [json.loads(f.read_text(encoding="utf-8")) for f in files]


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every non-row panel, including those nested in collapsed rows."""
    out: list[dict[str, Any]] = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            out += panel.get("panels") or []
        else:
            out.append(panel)
    return out


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def github_anchors(markdown: str) -> set[str]:
    """Heading anchors as GitHub renders them: lower case, punctuation dropped, spaces to dashes."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            text = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_generated_files_are_not_stale() -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"generated files are stale:\n{result.stderr}"


def test_generation_is_deterministic() -> None:
    gen = load_generator()
    assert gen.rendered_files() == gen.rendered_files()


def test_variables() -> None:
    for board in dashboards():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        source = variables["datasource"]
        assert source["type"] == "datasource" and source["query"] == "prometheus"
        labels = {
            "provider": "gen_ai_provider_name",
            "model": "gen_ai_request_model",
            "route": "streamscope_route",
        }
        for name, label in labels.items():
            var = variables[name]
            assert var["type"] == "query"
            assert var["datasource"]["uid"] == "${datasource}"
            assert var["query"].startswith("label_values(streamscope_requests_total")
            assert var["query"].endswith(f", {label})")
            assert var["multi"] and var["includeAll"] and var["allValue"] == ".*"
        assert len({v["id"] for v in variables.values()}) == len(variables), "variable ids collide"


def test_every_panel_has_description_and_datasource() -> None:
    for board in dashboards():
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), "panel ids must be unique"
        for panel in panels(board):
            title = panel["title"]
            assert len(panel.get("description", "").strip()) > 80, f"{title}: no real description"
            assert panel["datasource"]["uid"] == "${datasource}", title
            assert panel["targets"], f"{title}: no query"
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", title
                assert target["expr"].strip(), title
                assert target["refId"], title


def test_triage_dashboard_layout() -> None:
    board = next(b for b in dashboards() if b["uid"] == "streamscope-triage")
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["What is failing now", "Where the time goes", "Are the budgets right", "Tokens",
                    "Serving to browsers", "Resume and the fleet", "Spend and waste"]
    # Expanded rows own the panels that follow them; panels inside an expanded row are dropped.
    assert all(not p.get("collapsed") and not p.get("panels") for p in board["panels"] if p["type"] == "row")
    text = " ".join(p["description"] for p in panels(board))
    missing = {c for c in CLASSES if f"`{c}`" not in text}
    assert not missing, f"classes the dashboard never explains: {missing}"


def test_dashboard_expressions_parse(tmp_path: Path) -> None:
    gen = load_generator()
    queries = gen.panel_expressions()
    assert len(queries) >= 20
    for q in queries:
        assert "$" not in q.expr, f"unsubstituted variable in {q.panel}: {q.expr}"
    rules = {
        "groups": [{
            "name": "dashboard_expressions",
            "rules": [
                {"record": f"dashboard:check_{i:03d}:expr", "expr": q.expr}
                for i, q in enumerate(queries)
            ],
        }]
    }
    path = tmp_path / "dashboard_expressions.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_substitution_overrides() -> None:
    gen = load_generator()
    expr = 'rate(x{gen_ai_request_model=~"$model"}[$__rate_interval]) ${route}'
    assert gen.substitute(expr) == 'rate(x{gen_ai_request_model=~".*"}[5m]) .*'
    assert gen.substitute(expr, {"__rate_interval": "1m", "model": "a"}) == (
        'rate(x{gen_ai_request_model=~"a"}[1m]) .*'
    )


def test_rules_file_is_valid() -> None:
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rules_unit_tests_pass() -> None:
    result = run_promtool("test", "rules", str(RULES_TEST))
    assert result.returncode == 0, result.stdout + result.stderr


def test_alerts_are_annotated_and_linked_to_runbooks() -> None:
    gen = load_generator()
    anchors = github_anchors(RUNBOOKS.read_text(encoding="utf-8"))
    rules = alert_rules()
    assert len(rules) >= 6
    for rule in rules:
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        notes = rule["annotations"]
        assert notes["summary"].strip() and notes["description"].strip(), name
        url, _, anchor = notes["runbook_url"].partition("#")
        assert url == gen.RUNBOOK_URL, name
        assert anchor in anchors, f"{name}: runbooks.md has no section #{anchor}"


def test_required_alerts_exist() -> None:
    names = {r["alert"] for r in alert_rules()}
    assert {
        "StreamscopePartialFailuresRising",
        "StreamscopeFirstTokenFiringsRising",
        "StreamscopeMidStreamStalls",
        "StreamscopeBudgetExhaustedShareHigh",
        "StreamscopeSilentlyUnverifiedShareHigh",
        "StreamscopeDeadlineInThinkingShareHigh",
        "StreamscopeRateLimitingRising",
        "StreamscopeRetriesPerRequestRising",
        "StreamscopeDoomedRequestDwell",
        "StreamscopeWastedSpendHigh",
    } <= names
    # Left out with no pool size configured (the default): test_pool_alert_only_with_a_pool_size.
    assert "StreamscopeInFlightNearPoolSize" not in names


def test_alerts_read_existing_recordings() -> None:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    recorded = {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    for rule in alert_rules():
        used = set(re.findall(r"\b[a-z_]+:[a-zA-Z_]+:[a-z_0-9]+\b", rule["expr"]))  # streamscope_cost_USD
        assert used <= recorded, f"{rule['alert']} reads unknown series {used - recorded}"


def test_every_alert_is_tested_firing_and_quiet() -> None:
    doc = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in alert_rules()}
    assert names <= fired, f"alerts never shown to fire: {names - fired}"
    assert names <= quiet, f"alerts never shown to stay quiet: {names - quiet}"


def test_runbooks_explain_every_class() -> None:
    text = RUNBOOKS.read_text(encoding="utf-8")
    missing = {c for c in CLASSES if f"`{c}`" not in text}
    assert not missing, f"runbooks never mention {missing}"


# -- The mixin: names from the exporter, the provider variable, overrides from a config file ----


def load_mixin() -> ModuleType:
    """The mixin package (dashboards/mixin/) as generate.py loads it."""
    return load_generator().mixin


_SELECTOR = re.compile(r'"(?:[^"\\]|\\.)*"|([a-zA-Z_:][\w:]*)(\{[^}]*\})?')


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric, its matchers) for every streamscope or gen_ai series an expression selects; label
    names in ``by (...)`` and inside braces are skipped."""
    names = load_mixin().names.queried_samples()
    return [(m[1], (m[2] or "{}")[1:-1]) for m in _SELECTOR.finditer(expr) if m[1] in names]


def scrape_of_every_instrument(latest: bool = False) -> str:
    """/metrics as OpenTelemetry's Prometheus exporter writes it after one stream that moves every
    instrument of a real MetricsWriter (a thinking request with a route, budgets, a server tool
    run and a deadline that fires), plus one internal error, and what the retry helpers and the
    relay count of it (a real OutcomeWriter: attempts, a retry, a relayed stream), each call priced
    as the pipeline prices it (one more call with no known price). ``latest``: the
    GenAI names of the conventions' opt-in (``gen_ai_latest_experimental``)."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry, generate_latest

    from streamscope.budgets.feasibility import record_unreachable
    from streamscope.budgets.table import CallBudgets
    from streamscope.core.record import RequestInfo, StreamRecord
    from streamscope.export.fleet_metrics import FleetMetrics, watch_size
    from streamscope.export.metrics import MetricsWriter
    from streamscope.export.outcomes import OutcomeWriter
    from streamscope.pipeline import finished_attributes
    from streamscope.pricing.cost import CallCost

    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)], shutdown_on_exit=False)
    class Buffer:  # stands for a resume buffer holding 2 KiB
        def size(self) -> int:
            return 2048

    buffer = Buffer()
    try:
        writer = MetricsWriter(provider.get_meter("streamscope"), latest=latest)
        request = RequestInfo(provider="anthropic", model="claude-sim-1", max_tokens=8192, thinking_budget=4096,
                              attributes=(("anthropic.thinking.type", "enabled"),),
                              route="checkout", server_address="api.example", server_port=443,
                              budgets=CallBudgets(first_token=5.0, idle=5.0, deadline=20.0))
        record = StreamRecord(
            request=request, start_ns=0, duration=20.0, end="error", error_type="timeout",
            budget_fired="deadline", budget_fired_at=20.0, time_to_headers=0.1, time_to_first_chunk=0.2,
            time_to_first_content=1.0, first_delta=1.0, last_delta=19.0, thinking_start=1.0,
            thinking_end=19.0, max_gap=2.0, server_tool_runs=(("web_search", 3.0, 3.5),),
            response_model="claude-sim-1", usage_final=True, input_tokens=10, output_tokens=360,
            reasoning_tokens=350, cache_read_tokens=4, cache_write_tokens=2, chunk_gaps=(0.05, 0.5),
        )
        ok = dataclasses.replace(record, end="done", error_type=None, budget_fired=None, budget_fired_at=None,
                                 completed=True, finish_reason="stop")
        # a successful call too: the per-operation token histograms
        writer.finished(ok, finished_attributes(ok), cost=CallCost(0.0123))
        writer.finished(ok, finished_attributes(ok), cost=CallCost(None))  # a model with no known price
        writer.opened(request)
        writer.finished(record, finished_attributes(record), record_unreachable(record),  # as the pipeline does
                        CallCost(0.0047, estimated=True))
        writer.internal_errors.add(1)
        writer.unobserved("anthropic", "logfire")
        outcomes = OutcomeWriter(writer.meter, writer)  # as the pipeline makes it
        outcomes.retried(request, "upstream_unavailable")
        outcomes.attempted(request, 2)
        outcomes.relayed(request, "error", "upstream_timeout", True, 200)
        outcomes.continued(request, 1, "done")
        writer.breaker_moved(request, "open")  # as the pipeline reports a breaker's move
        fleet = FleetMetrics(writer.meter)  # the fleet's instruments, as the instrumentor makes them
        fleet.resumed("owner_lost")
        fleet.replayed(3)
        fleet.store_error("buffer.append", "configuration")
        watch_size(buffer, "redis")
        return generate_latest(registry).decode()
    finally:
        provider.shutdown()


def test_names_are_what_the_exporter_writes() -> None:
    """The mixin's names are derived from MetricsWriter's instruments; here they meet a real
    scrape: every sample name, the exposition type, and every label the dashboards query."""
    from prometheus_client.parser import text_string_to_metric_families

    names = load_mixin().names
    families = {f.name: f for f in text_string_to_metric_families(scrape_of_every_instrument())}
    families.update({f.name: f for f in text_string_to_metric_families(scrape_of_every_instrument(latest=True))})
    ours = ("streamscope_", "gen_ai_")
    samples = {s.name for f in families.values() for s in f.samples if s.name.startswith(ours)}
    assert names.queried_samples() == samples
    kinds = {"counter": "counter", "updowncounter": "gauge", "gauge": "gauge", "histogram": "histogram"}
    for instrument in names.INSTRUMENTS:
        assert families[instrument.family].type == kinds[instrument.kind], instrument
    labels = {k for f in families.values() for s in f.samples for k in s.labels}
    queried = {names.PROVIDER, names.MODEL, names.ROUTE, names.CLASS, names.PARTIAL, names.BUDGET,
               names.TOKEN, names.MODALITY, names.ERROR_TYPE, names.LE, names.FAILURE_CODE, names.RELAY_OUTCOME,
               names.HTTP_STATUS_CODE, names.RESUME_OUTCOME_LABEL, names.BUFFER_BACKEND_LABEL,
               names.STORE_OPERATION_LABEL, names.STORE_PROBLEM_LABEL}
    assert queried <= labels, queried - labels
    assert names.PROVIDER == "gen_ai_provider_name"
    assert (names.RELAY_STREAMS, names.RETRIES, names.ATTEMPTS) == (
        "streamscope_relay_streams_total", "streamscope_retries_total", "streamscope_attempts")
    assert (names.FAILURE_CODE, names.RELAY_OUTCOME, names.HTTP_STATUS_CODE) == (
        "streamscope_failure_code", "streamscope_relay_outcome", "http_response_status_code")
    assert (names.RESUMES, names.REPLAYED_EVENTS, names.BUFFER_SIZE, names.STORE_ERRORS) == (
        "streamscope_relay_resumes_total", "streamscope_relay_replayed_events_total",
        "streamscope_relay_buffer_size_bytes", "streamscope_store_errors_total")
    assert (names.RESUME_OUTCOME_LABEL, names.BUFFER_BACKEND_LABEL, names.STORE_OPERATION_LABEL,
            names.STORE_PROBLEM_LABEL) == ("streamscope_resume_outcome", "streamscope_buffer_backend",
                                           "streamscope_store_operation", "streamscope_store_problem")
    assert (names.COST, names.UNPRICED, names.COST_FAMILY) == (
        "streamscope_cost_USD_total", "streamscope_cost_unpriced_total", "streamscope_cost_USD")
    # The cost counter carries what the spend panels and the wasted-spend rules group and filter by.
    cost_labels = {k for s in families[names.COST_FAMILY].samples for k in s.labels}
    assert {names.PROVIDER, names.MODEL, names.ROUTE, names.CLASS} <= cost_labels, cost_labels
    unpriced_labels = {k for s in families["streamscope_cost_unpriced"].samples for k in s.labels}
    assert {names.PROVIDER, names.MODEL, names.ROUTE} <= unpriced_labels, unpriced_labels


def test_provider_variable_filters_every_panel_query() -> None:
    """`provider` sits beside model and route (multi, All), and every series every panel selects
    carries the provider, model and route filters."""
    filters = ('gen_ai_provider_name=~"$provider"', 'gen_ai_request_model=~"$model"',
               'streamscope_route=~"$route"')
    for board in dashboards():
        names = [v["name"] for v in board["templating"]["list"]]
        assert names == ["datasource", "provider", "model", "route", "trace_datasource"]
        provider = board["templating"]["list"][1]
        assert provider["multi"] and provider["includeAll"] and provider["allValue"] == ".*"
        for panel in panels(board):
            for target in panel["targets"]:
                found = selectors(target["expr"])
                assert found, f"{panel['title']}: no series selected in {target['expr']}"
                for metric, matchers in found:
                    missing = [f for f in filters if f not in matchers.split(",")]
                    assert not missing, f"{panel['title']}: {metric} lacks {missing}"


def test_every_description_belongs_to_a_panel() -> None:
    titles = {p["title"] for b in dashboards() for p in panels(b)}
    assert set(load_mixin().descriptions.PANELS) == titles


OVERRIDES = """
selector = 'job="llm-api"'
partial_ratio_max = 0.1
short_window = "10m"
dashboard_tags = ["llm", "oncall"]
partial_failures_for = "10m"
"""


def generate_into(directory: Path, config_text: str,
                  suffix: str = ".toml") -> tuple[dict[str, Any], dict[str, Any]]:
    """Run generate.py with a config file into ``directory``; return (rules, dashboard)."""
    config = directory / f"overrides{suffix}"
    config.write_text(config_text, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--config", str(config), "--output-dir", str(directory)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rules = yaml.safe_load((directory / "rules.yml").read_text(encoding="utf-8"))
    board = json.loads((directory / "streamscope-triage.json").read_text(encoding="utf-8"))
    return rules, board


def test_config_file_overrides_thresholds_selector_and_windows(tmp_path: Path) -> None:
    rules, board = generate_into(tmp_path, OVERRIDES)
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    partial = alerts["StreamscopePartialFailuresRising"]
    assert "ratio_rate30m > 0.1\n" in partial["expr"] and "ratio_rate10m > 0.1\n" in partial["expr"]
    assert "0.05\n" not in partial["expr"]
    assert "above 10% over 30m and 10m" in partial["annotations"]["description"]
    assert "> 0.02" in alerts["StreamscopeMidStreamStalls"]["expr"]  # untouched keys keep their defaults
    assert partial["for"] == "10m" and alerts["StreamscopeMidStreamStalls"]["for"] == "5m"
    records = [r for g in rules["groups"] for r in g["rules"] if "record" in r]
    recorded = {r["record"] for r in records}
    assert {"model:streamscope_requests:rate10m", "model:streamscope_requests:rate30m"} <= recorded
    for rule in [*records, alerts["StreamscopeInstrumentationErrors"]]:
        found = selectors(rule["expr"])
        assert found and all('job="llm-api"' in m.split(",") for _, m in found), rule
    assert board["tags"] == ["llm", "oncall"]
    for panel in panels(board):
        for target in panel["targets"]:
            assert all(m.split(",")[0] == 'job="llm-api"' for _, m in selectors(target["expr"])), panel["title"]
    for var in board["templating"]["list"][1:]:
        if var["type"] == "query":  # not the trace datasource
            assert var["query"].startswith('label_values(streamscope_requests_total{job="llm-api"'), var["query"]
    result = run_promtool("check", "rules", str(tmp_path / "rules.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    # YAML says the same as TOML.
    yaml_dir = tmp_path / "yaml"
    yaml_dir.mkdir()
    as_yaml = yaml.safe_dump(tomllib.loads(OVERRIDES))
    assert generate_into(yaml_dir, as_yaml, ".yaml") == (rules, board)


def test_overrides_change_what_fires(tmp_path: Path) -> None:
    """In Prometheus's rule engine (promtool test rules): 8% partial failures on job llm-api and
    100% on another job. With the selector alone only llm-api's model fires (the other job is
    not counted); with the threshold raised to 10% nothing fires."""
    mixin = load_mixin()
    series = {
        ("llm-api", "claude-a", "complete", "false"): "0+552x60",
        ("llm-api", "claude-a", "stalled_mid_stream", "true"): "0+48x60",
        ("other", "claude-b", "upstream_error", "true"): "0+600x60",
    }
    inputs = [{
        "series": f'streamscope_requests_total{{job="{job}",gen_ai_provider_name="anthropic",'
                  f'gen_ai_request_model="{model}",streamscope_class="{klass}",streamscope_partial="{partial}"}}',
        "values": values,
    } for (job, model, klass, partial), values in series.items()]
    for name, extra, fires in (("selector", "", True), ("threshold", "partial_ratio_max = 0.1\n", False)):
        directory = tmp_path / name
        directory.mkdir()
        rules, _ = generate_into(directory, "selector = 'job=\"llm-api\"'\n" + extra)
        rule = next(r for g in rules["groups"] for r in g["rules"]
                    if r.get("alert") == "StreamscopePartialFailuresRising")
        expected = []
        if fires:
            notes = dict(rule["annotations"])
            notes["description"] = notes["description"].replace(
                "{{ $value | humanizePercentage }}", "8%").replace(mixin.alerts.WHERE, "claude-a")
            expected = [{"exp_labels": {"severity": "critical", "gen_ai_provider_name": "anthropic",
                                        "gen_ai_request_model": "claude-a"}, "exp_annotations": notes}]
        test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
            "interval": "1m", "input_series": inputs,
            "alert_rule_test": [{"eval_time": "60m", "alertname": rule["alert"], "exp_alerts": expected}],
        }]}
        (directory / "rules_test.yml").write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
        result = run_promtool("test", "rules", str(directory / "rules_test.yml"))
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"


@pytest.mark.parametrize(("text", "message"), [
    ("partial_ratio = 0.1\n", "unknown key(s) partial_ratio"),
    ("selector = 'job=llm-api'\n", "selector"),
    ("partial_ratio_max = 5\n", "partial_ratio_max is a share"),
    ('short_window = "1h"\n', "shorter than long_window"),
    ('long_window = "half an hour"\n', "long_window: not a Prometheus duration"),
    ('dashboard_tags = "llm"\n', "dashboard_tags: expected"),
    ('partial_failures_for = "soon"\n', "partial_failures_for: not a Prometheus duration"),
    ("doomed_dwell_for = 300\n", "doomed_dwell_for: expected str"),
    ("rate_limited_share_max = 5\n", "rate_limited_share_max is a share"),
    ("attempts_per_request_max = 0.5\n", "attempts_per_request_max is a mean number of attempts"),
    ("doomed_dwell_seconds_max = 0\n", "doomed_dwell_seconds_max must be > 0"),
    ("pool_size = 12.5\n", "pool_size: expected a whole number"),
    ("pool_size = -1\n", "pool_size must be a whole number"),
    ("pool_headroom_share = 1.5\n", "pool_headroom_share is a share"),
])
def test_bad_config_is_refused_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--config", str(config), "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not list(tmp_path.glob("*.json")), "nothing is written from a bad config"


def test_printed_defaults_are_a_config_that_changes_nothing(tmp_path: Path) -> None:
    """--print-config lists every key, and uncommented it generates the committed files."""
    mixin = load_mixin()
    printed = subprocess.run([sys.executable, str(GENERATOR), "--print-config"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    keys = [f.name for f in dataclasses.fields(mixin.Config)]
    assert all(f"# {k} = " in printed for k in keys)
    uncommented = "\n".join(line[2:] for line in printed.splitlines() if re.match(r"# \w+ = ", line))
    assert tomllib.loads(uncommented) and generate_into(tmp_path, uncommented)
    for name in ("rules.yml", "streamscope-triage.json"):
        assert (tmp_path / name).read_text() == (DASHBOARDS / name).read_text(), name


def test_readme_documents_every_config_key() -> None:
    readme = (DASHBOARDS / "README.md").read_text(encoding="utf-8")
    missing = [f.name for f in dataclasses.fields(load_mixin().Config) if f"`{f.name}`" not in readme]
    assert not missing, f"dashboards/README.md does not document {missing}"


def test_every_alert_for_is_configurable() -> None:
    """Each alert's `for:` is a Config field (`<...>_for`), and the default rules use them."""
    mixin = load_mixin()
    cfg = mixin.Config(pool_size=10)
    fors = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name.endswith("_for")}
    alerts = mixin.alerts.alerts(cfg)
    assert len(fors) == len(alerts)
    changed = mixin.Config(pool_size=10, **dict.fromkeys(fors, "42m"))
    assert {a.for_ for a in mixin.alerts.alerts(changed)} == {"42m"}


def test_pool_alert_only_with_a_pool_size(tmp_path: Path) -> None:
    """StreamscopeInFlightNearPoolSize: absent by default (and with `pool_size = 0`, TOML's "none");
    with a pool of 10 and the default 0.8 headroom, in Prometheus's rule engine it fires for the job
    holding 9 streams for 5 minutes, not for one holding 8 (at the limit) nor before 5 minutes."""
    rules, _ = generate_into(tmp_path, "pool_size = 0\n")
    assert "StreamscopeInFlightNearPoolSize" not in {r.get("alert") for g in rules["groups"] for r in g["rules"]}
    directory = tmp_path / "pool"
    directory.mkdir()
    rules, board = generate_into(directory, 'pool_size = 10\nin_flight_near_pool_for = "5m"\n')
    rule = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "StreamscopeInFlightNearPoolSize")
    assert rule["expr"] == "sum by (job) (streamscope_active_streams) > 8" and rule["for"] == "5m"
    active = next(p for p in panels(board) if p["title"] == "Active streams")
    assert [s.get("value") for s in active["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 8]
    inputs = [
        {"series": 'streamscope_active_streams{job="busy",instance="a:9464"}', "values": "5+0x30"},
        {"series": 'streamscope_active_streams{job="busy",instance="b:9464"}', "values": "4+0x30"},
        {"series": 'streamscope_active_streams{job="calm",instance="c:9464"}', "values": "8+0x30"},
    ]
    notes = dict(rule["annotations"])
    notes["description"] = notes["description"].replace("{{ $value | humanize }}", "9").replace(
        "{{ $labels.job }}", "busy")
    assert "above 80% of its pool size of 10 (8)" in notes["description"]
    expected = [{"exp_labels": {"severity": "warning", "job": "busy"}, "exp_annotations": notes}]
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": inputs,
        "alert_rule_test": [
            {"eval_time": "3m", "alertname": rule["alert"], "exp_alerts": []},
            {"eval_time": "10m", "alertname": rule["alert"], "exp_alerts": expected},
        ],
    }]}
    (directory / "rules_test.yml").write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    result = run_promtool("test", "rules", str(directory / "rules_test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr



def test_gen_ai_queries_read_either_naming() -> None:
    """Every panel query and rule that selects a GenAI metric under today's names selects the
    opt-in's (``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``) too, and the other way
    round: whichever set a process emits, the query answers (the live test runs both)."""
    names = load_mixin().names
    current = {s for i in names.CURRENT_INSTRUMENTS if i.name.startswith("gen_ai.") for s in i.samples()}
    latest = {s for i in names.LATEST_INSTRUMENTS for s in i.samples()}
    assert current and latest and not current & latest
    pairs = {f"{a}{suffix}": f"{b}{suffix}" for a, b in (names.DURATION, names.TIME_TO_FIRST_CHUNK,
                                                         names.TIME_PER_CHUNK)
             for suffix in ("_bucket", "_sum", "_count")}
    pairs |= {f"{names.TOKENS}_sum": f"{names.OPERATION_OUTPUT_TOKENS}_sum"}
    exprs = [t["expr"] for board in dashboards() for p in panels(board) for t in p["targets"]]
    exprs += [r["expr"] for g in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"] for r in g["rules"]]
    seen = 0
    for expr in exprs:
        used = {m for m, _ in selectors(expr)}
        if used & current:
            seen += 1
            assert used & latest, expr
        if used & latest:
            assert used & current, expr
        for a, b in pairs.items():
            if a in used and a.startswith("gen_ai_client_operation"):
                assert b in used, (a, expr)
    assert seen >= 8
    # The token panels label the opt-in's per-direction series with today's direction label.
    token_exprs = [e for e in exprs if names.INPUT_TOKENS in e]
    assert token_exprs and all(f'"{names.TOKEN}", "input"' in e for e in token_exprs)


def test_latency_panels_ask_for_exemplars_and_name_the_trace_datasource() -> None:
    latency = {"Time to headers", "Time to first chunk", "Time to first content", "Thinking duration",
               "Server tool time", "Largest gap between content events", "Time per output chunk",
               "Total duration"}
    for board in dashboards():
        by_title = {p["title"]: p for p in panels(board)}
        assert latency <= set(by_title)
        for title, panel in by_title.items():
            exemplar = [bool(t.get("exemplar")) for t in panel["targets"]]
            assert all(exemplar) if title in latency else not any(exemplar), title
        chunk = by_title["Time per output chunk"]
        assert "gen_ai_client_inference_time_per_output_chunk_seconds_bucket" in chunk["targets"][0]["expr"]
        assert "gen_ai_client_operation_time_per_output_chunk_seconds_bucket" in chunk["targets"][0]["expr"]
        trace = {v["name"]: v for v in board["templating"]["list"]}["trace_datasource"]
        assert (trace["type"], trace["query"]) == ("datasource", "tempo")


# -- Resume and the fleet's Redis store ---------------------------------------------------------


FLEET_PANELS = ["Resumes by outcome", "Reconnects that could not resume", "Replayed events",
                "Resume buffer size by backend", "Store errors by operation", "Workers with the breaker open"]


def test_fleet_row_reads_the_fleet_instruments() -> None:
    """The last row draws the fleet's instruments under the exporter's names, per the labels they carry."""
    board = next(b for b in dashboards() if b["uid"] == "streamscope-triage")
    order = [p["title"] for p in board["panels"]]
    row = order.index("Resume and the fleet")
    assert order[row + 1:row + 1 + len(FLEET_PANELS)] == FLEET_PANELS
    by_title = {p["title"]: p for p in panels(board)}
    exprs = {title: [t["expr"] for t in by_title[title]["targets"]] for title in FLEET_PANELS}
    resumes = exprs["Resumes by outcome"][0]
    assert "sum by (streamscope_resume_outcome) (rate(streamscope_relay_resumes_total{" in resumes
    lost, nothing = exprs["Reconnects that could not resume"]
    assert 'streamscope_resume_outcome=~"expired|owner_lost"' in lost
    assert 'streamscope_resume_outcome=~"nothing_to_resume"' in nothing
    assert "streamscope_relay_replayed_events_total{" in exprs["Replayed events"][0]
    assert exprs["Resume buffer size by backend"][0].startswith(
        "sum by (streamscope_buffer_backend) (streamscope_relay_buffer_size_bytes{")
    assert "sum by (streamscope_store_operation, streamscope_store_problem) (rate(streamscope_store_errors_total{" in (
        exprs["Store errors by operation"][0])
    open_, half_open = exprs["Workers with the breaker open"]
    assert open_.endswith("== bool 2)") and half_open.endswith("== bool 1)")
    share = by_title["Reconnects that could not resume"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s.get("value") for s in share] == [None, 0.2]  # the alert's threshold, dashed


def test_fleet_alert_thresholds_and_windows_are_overridable(tmp_path: Path) -> None:
    rules, board = generate_into(tmp_path, 'resume_failure_share_max = 0.5\nmin_resume_rate = 0.1\n'
                                           'resume_window = "15m"\nstore_error_window = "5m"\n'
                                           'resume_failing_for = "7m"\nredis_unreachable_for = "9m"\n')
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    resume, redis = alerts["StreamscopeResumeFailing"], alerts["StreamscopeRedisUnreachable"]
    assert "\n> 0.5\nand on (job)\n" in resume["expr"] and resume["expr"].endswith("[15m])) > 0.1")
    assert "[10m]" not in resume["expr"] and resume["for"] == "7m"
    assert "(above 50%, with more than 0.1 reconnects/s)" in resume["annotations"]["description"]
    assert redis["expr"] == "sum by (job) (increase(streamscope_store_errors_total[5m])) > 0"
    assert redis["for"] == "9m" and "over the last 5m" in redis["annotations"]["description"]
    share = next(p for p in panels(board) if p["title"] == "Reconnects that could not resume")
    assert [s.get("value") for s in share["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 0.5]
    for bad, message in (('resume_window = "0m"\n', "resume_window must be longer than 0"),
                         ("min_resume_rate = -1\n", "min_resume_rate must be >= 0"),
                         ("resume_failure_share_max = 2\n", "resume_failure_share_max is a share")):
        config = tmp_path / "bad.toml"
        config.write_text(bad, encoding="utf-8")
        result = subprocess.run([sys.executable, str(GENERATOR), "--config", str(config), "--output-dir",
                                 str(tmp_path / "bad")], capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and message in result.stderr, result.stderr


# -- Spend and waste ------------------------------------------------------------------------------


SPEND_PANELS = ["Spend by model", "Spend over the selected range", "Unpriced calls", "Spend by class",
                "Wasted share of spend by route", "Cost per successful answer"]
WASTE = ("budget_exhausted", "deadline_in_thinking", "deadline_in_answer", "stalled_before_first_content",
         "stalled_mid_stream", "upstream_error", "cancelled")


def test_waste_classes_are_one_matcher_over_real_classes() -> None:
    """Spend that bought no answer: seven classes (retried attempts end in one of them); the five
    others are not waste. Every query and rule selects them through the one matcher."""
    names = load_mixin().names
    assert set(names.WASTE_CLASSES) == set(WASTE)
    assert CLASSES - set(WASTE) == {"complete", "truncated", "silently_unverified", "refused", "paused"}
    assert names.WASTED == 'streamscope_class=~"' + "|".join(names.WASTE_CLASSES) + '"'
    board = next(b for b in dashboards() if b["uid"] == "streamscope-triage")
    exprs = [t["expr"] for p in panels(board) for t in p["targets"]]
    exprs += [r["expr"] for g in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"] for r in g["rules"]]
    sets = [m for expr in exprs for m in re.findall(r'streamscope_class=~"[^"]*"', expr)]
    assert len(sets) >= 3 and set(sets) == {names.WASTED}, set(sets)  # the panel and both recorded windows


def test_spend_row_reads_the_cost_counters() -> None:
    """The last row: spend per hour by provider and model and by class, the spend over the range,
    calls without a price, the wasted share under the alert's dashed threshold, cost per answer."""
    names = load_mixin().names
    board = next(b for b in dashboards() if b["uid"] == "streamscope-triage")
    order = [p["title"] for p in board["panels"]]
    row = order.index("Spend and waste")
    assert order[row + 1:] == SPEND_PANELS
    by_title = {p["title"]: p for p in panels(board)}
    [spend] = [t["expr"] for t in by_title["Spend by model"]["targets"]]
    assert spend.startswith("sum by (gen_ai_provider_name, gen_ai_request_model) (rate(streamscope_cost_USD_total{")
    assert spend.endswith(" * 3600")
    [total] = [t["expr"] for t in by_title["Spend over the selected range"]["targets"]]
    assert total.startswith("sum(increase(streamscope_cost_USD_total{") and total.endswith("[$__range]))")
    assert by_title["Spend over the selected range"]["type"] == "stat"
    [by_class] = [t["expr"] for t in by_title["Spend by class"]["targets"]]
    assert by_class.startswith("sum by (streamscope_class) (rate(streamscope_cost_USD_total{")
    [unpriced] = [t["expr"] for t in by_title["Unpriced calls"]["targets"]]
    assert "rate(streamscope_cost_unpriced_total{" in unpriced
    assert "prices=" in by_title["Unpriced calls"]["description"]
    assert "[prices." in by_title["Unpriced calls"]["description"]
    [wasted] = [t["expr"] for t in by_title["Wasted share of spend by route"]["targets"]]
    assert names.WASTED in wasted and "or 0 * " in wasted
    [per_answer] = [t["expr"] for t in by_title["Cost per successful answer"]["targets"]]
    assert 'streamscope_requests_total{' in per_answer and 'streamscope_class="complete"' in per_answer
    for title in ("Spend by model", "Spend over the selected range", "Spend by class", "Cost per successful answer"):
        assert by_title[title]["fieldConfig"]["defaults"]["unit"] == "currencyUSD", title
    share = by_title["Wasted share of spend by route"]["fieldConfig"]["defaults"]
    assert [s.get("value") for s in share["thresholds"]["steps"]] == [None, 0.25]  # the alert's, dashed
    assert share["custom"]["thresholdsStyle"]["mode"] == "dashed"
    text = " ".join(by_title[t]["description"] for t in SPEND_PANELS)
    assert not re.search(r"contract|seed|finding", text, re.IGNORECASE), text


def test_wasted_spend_alert_thresholds_are_overridable(tmp_path: Path) -> None:
    rules, board = generate_into(tmp_path, 'wasted_spend_share_max = 0.4\nmin_spend_rate_usd_per_hour = 2\n'
                                           'wasted_spend_for = "1h"\nlong_window = "1h"\n')
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    wasted = alerts["StreamscopeWastedSpendHigh"]
    assert wasted["expr"] == (
        "model:streamscope_cost_USD_wasted:ratio_rate1h > 0.4\n"
        "and\n"
        "model:streamscope_cost_USD_wasted:ratio_rate5m > 0.4\n"
        "and on (gen_ai_provider_name, gen_ai_request_model, streamscope_route)\n"
        "model:streamscope_cost_USD:rate1h * 3600 > 2.0")
    assert wasted["for"] == "1h" and wasted["labels"] == {"severity": "warning"}
    assert "above 40% over 1h and 5m, with more than 2 USD/hour spent over 1h" in wasted["annotations"]["description"]
    share = next(p for p in panels(board) if p["title"] == "Wasted share of spend by route")
    assert [s.get("value") for s in share["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 0.4]
    for bad, message in (("min_spend_rate_usd_per_hour = -1\n", "min_spend_rate_usd_per_hour must be >= 0"),
                         ("wasted_spend_share_max = 25\n", "wasted_spend_share_max is a share"),
                         ('wasted_spend_for = "a while"\n', "wasted_spend_for: not a Prometheus duration")):
        config = tmp_path / "bad.toml"
        config.write_text(bad, encoding="utf-8")
        result = subprocess.run([sys.executable, str(GENERATOR), "--config", str(config), "--output-dir",
                                 str(tmp_path / "bad")], capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and message in result.stderr, result.stderr
