"""Dashboards, rules and runbooks in ``dashboards/`` stay generated, valid and linked.

These tests need ``promtool`` (``make prometheus``). They fail, never skip, without it: a
dashboard whose PromQL was never parsed is not a dashboard that works.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from streamscope.classify import LABELS

ROOT = Path(__file__).resolve().parents[1]
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
    assert rows == ["What is failing now", "Where the time goes", "Are the budgets right", "Tokens"]
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
    } <= names


def test_alerts_read_existing_recordings() -> None:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    recorded = {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    for rule in alert_rules():
        used = set(re.findall(r"\b[a-z_]+:[a-z_]+:[a-z_0-9]+\b", rule["expr"]))
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
