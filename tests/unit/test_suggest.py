"""`streamscope suggest` from a span file: percentiles with headroom, per model and route, as the
TOML the budget loader reads (the live Prometheus path is tested with the demo workload)."""

from __future__ import annotations

import json
import random
import tomllib
from pathlib import Path

from streamscope.budgets.table import BudgetTable
from streamscope.tools.cli import main
from streamscope.tools.suggest import Distribution, quantile


def test_quantile_is_numpys_linear() -> None:
    data = [float(x) for x in range(1, 101)]
    assert quantile(data, 0.5) == 50.5 and quantile(data, 0.99) == 99.01 and quantile(data, 0.999) == 99.901
    assert Distribution.of([]) is None


def test_suggest_from_a_span_file(tmp_path: Path, capsys) -> None:
    rng = random.Random(3)
    spans = []
    for _ in range(500):
        spans.append({"gen_ai.request.model": "claude-fast", "streamscope.route": "chat",
                      "streamscope.time_to_first_content": rng.uniform(0.2, 1.0),
                      "streamscope.max_gap": rng.uniform(0.05, 0.5)})
        spans.append({"gen_ai.request.model": "claude-thinker",
                      "streamscope.time_to_first_content": rng.uniform(5.0, 40.0),
                      "streamscope.max_gap": rng.uniform(0.05, 2.0)})
    spans.append({"gen_ai.request.model": "rare-model", "streamscope.time_to_first_content": 3.0})
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in spans))
    out = tmp_path / "budgets.toml"
    assert main(["suggest", "--spans", str(path), "--output", str(out)]) == 0
    text = out.read_text()
    config = tomllib.loads(text)["budgets"]
    thinker = config["models"]["claude-thinker"]
    assert 40 * 1.5 * 0.98 <= thinker["first_token"] <= 40 * 1.5 + 1  # p99.9 x 1.5, rounded up
    assert 2.0 * 2 * 0.95 <= thinker["idle"] <= 2.0 * 2 + 0.1
    assert config["models"]["claude-fast"]["first_token"] <= 1.6
    assert config["routes"]["chat"]["idle"] <= 1.1
    assert "deadline" not in config["default"]  # no total cap unless the caller has a deadline
    assert "rare-model" in text and "too few samples" in text  # evidence, not a number
    assert "p99.9" in text and "500 samples" in text
    table = BudgetTable.from_toml(out)  # what the loader reads
    assert table.resolve("claude-thinker", None).first_token == thinker["first_token"]
    assert main(["suggest", "--spans", str(path), "--deadline", "120"]) == 0
    assert tomllib.loads(capsys.readouterr().out)["budgets"]["default"]["deadline"] == 120


def test_suggest_proposes_a_connect_timeout_from_time_to_headers(tmp_path: Path) -> None:
    """p99 of time to headers × 1.3, per group, written as a comment the budget loader skips (it is
    the HTTP client's connect timeout, not one of the three budgets)."""
    spans = [{"gen_ai.request.model": "claude-fast", "streamscope.time_to_first_content": 0.5,
              "streamscope.max_gap": 0.1, "streamscope.time_to_headers": (i + 1) / 100} for i in range(100)]
    spans.append({"gen_ai.request.model": "old-exporter", "streamscope.time_to_first_content": 0.5})
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in spans))
    out = tmp_path / "budgets.toml"
    assert main(["suggest", "--spans", str(path), "--min-samples", "1", "--output", str(out)]) == 0
    text = out.read_text()
    section = text.split('[budgets.models."claude-fast"]')[1].split("\n\n")[0]
    # p99 of 0.01 … 1.00 is 0.9901; × 1.3 = 1.287, rounded up to 1.3.
    assert "# time to headers: 100 samples, p50 0.505 s, p99 0.990 s" in section
    assert "# connect = 1.3" in section
    old = text.split('[budgets.models."old-exporter"]')[1]
    assert "connect" not in old and "time to headers" not in old  # no data: nothing said
    assert "connect" not in tomllib.loads(text)["budgets"]["models"]["claude-fast"]
    BudgetTable.from_toml(out)  # the loader reads it as it is
