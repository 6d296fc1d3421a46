"""`streamscope classify FILE` gives the labels the instrumentation wrote live, on OTLP JSON (the
official protobuf JSON encoding of an export request, as file exporters write it) and on JSON
lines of span attributes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from conftest import USER, Telemetry, client
from streamscope.core.classifier import classify
from streamscope.tools.cli import main
from streamscope.tools.spanfile import read_span_attributes

SCENARIOS = ["complete", "truncated", "refused", "inband_error", "cut_connection", "incomplete"]


@pytest.fixture
def live(sim, telemetry: Telemetry) -> Telemetry:
    for scenario in SCENARIOS:
        try:
            for _ in client(sim, scenario).messages.create(model="m", max_tokens=1024, messages=USER, stream=True):
                pass
        except Exception:
            pass
    return telemetry


def test_otlp_json_file(live: Telemetry, tmp_path: Path, capsys) -> None:
    spans = live.spans()
    path = tmp_path / "spans.otlp.jsonl"
    # One export request per line, as a file exporter appends them.
    path.write_text("".join(MessageToJson(encode_spans([s]), indent=None) + "\n" for s in spans))
    read = read_span_attributes(path)
    assert len(read) == len(SCENARIOS)
    live_labels = Counter(s.attributes["streamscope.class"] for s in spans)
    assert Counter(classify(a) for a in read) == live_labels
    assert Counter(a["streamscope.class"] for a in read) == live_labels  # attributes survive the encoding
    assert main(["classify", str(path)]) == 0
    out = capsys.readouterr().out
    assert "upstream_error" in out and "truncated" in out


def test_attribute_json_lines(live: Telemetry, tmp_path: Path) -> None:
    path = tmp_path / "attrs.jsonl"
    path.write_text("".join(json.dumps(dict(s.attributes)) + "\n" for s in live.spans()))
    assert [classify(a) for a in read_span_attributes(path)] == [s.attributes["streamscope.class"] for s in live.spans()]
    assert main(["classify", str(path)]) == 0


def test_a_disagreeing_label_fails(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"streamscope.class": "complete", "error.type": "overloaded_error"}) + "\n")
    assert main(["classify", str(path)]) == 1
