"""`streamscope classify FILE` gives the labels the instrumentation wrote live, on OTLP JSON (the
official protobuf JSON encoding of an export request, as file exporters write it) and on JSON
lines of span attributes."""

from __future__ import annotations

import json
import re
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
    live_labels = [s.attributes["streamscope.class"] for s in live.spans()]
    assert [classify(a) for a in read_span_attributes(path)] == live_labels
    assert main(["classify", str(path)]) == 0


def test_a_disagreeing_label_fails(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"streamscope.class": "complete", "error.type": "overloaded_error"}) + "\n")
    assert main(["classify", str(path)]) == 1


def test_spans_without_the_attributes_a_class_needs_say_so_in_one_line(live: Telemetry, tmp_path: Path,
                                                                         capsys) -> None:
    """A file of spans that lost what a class needs (a crash cut them, an export dropped
    attributes): counted as upstream_error, never verified, and one line says so."""
    spans = [dict(s.attributes) for s in live.spans()]
    cut = [{k: v for k, v in a.items() if k not in ("gen_ai.response.finish_reasons", "error.type",
                                                     "streamscope.class", "streamscope.verified")} for a in spans]
    path = tmp_path / "spans[1].jsonl"  # brackets: no markup in a file name
    path.write_text("".join(json.dumps(a) + "\n" for a in spans + cut))
    assert [classify(a) for a in cut] == ["upstream_error"] * len(cut)
    assert main(["classify", str(path)]) == 0  # no live label disagrees: the cut spans carry none
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "lack" in line]
    assert lines == [f"{path}: {len(cut)} of {2 * len(cut)} span(s) lack the attributes a class needs "
                     "(gen_ai.response.finish_reasons); they are counted as upstream_error, not verified"]
    upstream = sum(1 for a in spans if a["streamscope.class"] == "upstream_error") + len(cut)
    assert re.search(rf"│ upstream_error +│ +{upstream} │", out), out


@pytest.mark.parametrize("junk", [
    {"streamscope.pings": 3},
    {"streamscope.class": "complete", "gen_ai.response.finish_reasons": "stop"},
    {"streamscope.text_chars": "400", "gen_ai.response.finish_reasons": ["whatever"]},
    {"streamscope.budget.fired": [1], "error.type": {"a": 1}, "gen_ai.response.finish_reasons": [None]},
    {"streamscope.class": ["complete"], "streamscope.partial": "yes", "gen_ai.response.finish_reasons": ["error"]},
])
def test_junk_spans_never_pass_as_verified_nor_raise(tmp_path: Path, capsys, junk: dict) -> None:
    path = tmp_path / "junk.jsonl"
    path.write_text(json.dumps(junk) + "\n")
    assert classify(junk) == "upstream_error"
    assert main(["classify", str(path)]) in (0, 1)  # 1 where a live label disagrees; never 70
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err
    assert "1 of 1 span(s) lack the attributes a class needs" in out
    assert "complete" not in out


def test_nesting_too_deep_is_a_usage_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["classify", str(path)]) == 2
    assert "nested too deeply" in capsys.readouterr().err
