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


def call_each(sim) -> None:
    """One streamed call per scenario, each read to its end or its error (the span says which)."""
    for scenario in SCENARIOS:
        try:
            for _ in client(sim, scenario).messages.create(model="m", max_tokens=1024, messages=USER, stream=True):
                pass
        except Exception:
            pass


@pytest.fixture
def live(sim, telemetry: Telemetry) -> Telemetry:
    call_each(sim)
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


# -- spend by class -----------------------------------------------------------------------------------

COMPLETE = {"gen_ai.response.finish_reasons": ["stop"], "streamscope.stop_reason": "end_turn",
            "streamscope.time_to_first_text": 0.5, "streamscope.time_to_first_content": 0.5,
            "streamscope.text_chars": 400, "streamscope.class": "complete"}
STALLED = {"error.type": "timeout", "streamscope.budget.fired": "idle", "streamscope.time_to_first_content": 1.0,
           "streamscope.class": "stalled_mid_stream", "streamscope.partial": True}
DEADLINE = {"error.type": "timeout", "streamscope.budget.fired": "deadline", "streamscope.time_to_first_text": 9.0,
            "streamscope.class": "deadline_in_answer", "streamscope.partial": True}
OVERLOADED = {"error.type": "overloaded_error", "streamscope.class": "upstream_error"}


def priced(attrs: dict, usd: float | None, estimated: bool = False, input_tokens: int | None = 1000) -> dict:
    """`attrs` as streamscope writes them for a call of `usd` dollars (None: its model has no price)."""
    found = dict(attrs)
    if input_tokens is not None:
        found["gen_ai.usage.input_tokens"] = input_tokens
    if usd is not None:
        found |= {"streamscope.cost.usd": usd, "streamscope.cost.estimated": estimated}
    return found


#: Two answers ($0.0105 and $0.021), a stall ($0.0042, estimated), an answer cut by the deadline
#: ($0.0123, estimated), an overload before the stream (no usage: $0), an answer of a model with no
#: price (usage, no cost). By hand: spend 0.0105 + 0.021 + 0.0042 + 0.0123 + 0 = $0.048; wasted
#: (the stall, the deadline, the overload) 0.0042 + 0.0123 = $0.0165, 34.375 % of it.
SPENT = [priced(COMPLETE, 0.0105), priced(COMPLETE, 0.021), priced(STALLED, 0.0042, estimated=True),
         priced(DEADLINE, 0.0123, estimated=True), priced(OVERLOADED, 0.0, input_tokens=None),
         priced(COMPLETE, None)]
SPEND_LINE = ("spend: $0.0480 on 5 priced call(s), 2 of them estimated; wasted: $0.0165 (34.4% of spend) on "
              "deadline_in_answer, stalled_mid_stream, calls that bought no answer; unpriced: 1 call(s) with usage "
              "(gen_ai.usage.input_tokens) but no streamscope.cost.usd")


def rows(out: str) -> dict[str, list[str]]:
    """The class table's rows: class → its cells."""
    return {cells[0]: cells[1:] for line in out.replace("┃", "│").splitlines() if line.startswith("│")
            for cells in [[c.strip() for c in line.strip("│").split("│")]]}


def otlp_file(path: Path, spans: list[dict]) -> Path:
    """`spans` as real SDK spans of the scope streamscope, encoded as one OTLP JSON export request."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("streamscope")
    for attrs in spans:
        tracer.start_span("chat m", attributes=attrs).end()
    path.write_text(MessageToJson(encode_spans(exporter.get_finished_spans())))
    return path


@pytest.mark.parametrize("form", ["attributes", "otlp"])
def test_spend_by_class_and_the_wasted_share(tmp_path: Path, capsys, form: str) -> None:
    if form == "otlp":
        path = otlp_file(tmp_path / "spent.otlp.json", SPENT)
        assert '"doubleValue": 0.0' in path.read_text()  # the overload's $0 survives the encoding
    else:
        path = tmp_path / "spent.jsonl"
        path.write_text("".join(json.dumps(a) + "\n" for a in SPENT))
    assert main(["classify", str(path)]) == 0
    out = capsys.readouterr().out
    table = rows(out)
    assert table["class"] == ["requests", "share", "partial", "spend", "estimated"]
    assert table["complete"] == ["3", "50.0%", "0", "$0.0315", "0"]  # the unpriced answer has no figure
    assert table["stalled_mid_stream"] == ["1", "16.7%", "1", "$0.00420", "1"]
    assert table["deadline_in_answer"] == ["1", "16.7%", "1", "$0.0123", "1"]
    assert table["upstream_error"] == ["1", "16.7%", "0", "$0", "0"]  # no usage: not billed, not unknown
    assert SPEND_LINE in out.splitlines()


def test_spans_from_before_pricing_show_no_spend(tmp_path: Path, capsys) -> None:
    """A file written before streamscope priced calls: "-", never a made-up $0."""
    path = tmp_path / "old.jsonl"
    path.write_text("".join(json.dumps(priced(a, None)) + "\n" for a in (COMPLETE, STALLED, OVERLOADED)))
    assert main(["classify", str(path)]) == 0
    out = capsys.readouterr().out
    assert all(cells[3:] == ["-", "-"] for name, cells in rows(out).items() if name != "class")
    assert ("spend: - (none of the 3 span(s) carries streamscope.cost.usd: written by a streamscope that did not "
            "price calls, or of models with no known price); 3 call(s) with usage (gen_ai.usage.input_tokens) but no "
            "streamscope.cost.usd") in out.splitlines()
    assert "$0" not in out


@pytest.mark.parametrize("junk", ["0.01", -1.0, float("nan"), True, [0.01]])
def test_a_malformed_cost_is_no_figure(tmp_path: Path, capsys, junk: object) -> None:
    path = tmp_path / "junk.jsonl"
    path.write_text(json.dumps({**COMPLETE, "gen_ai.usage.input_tokens": 10, "streamscope.cost.usd": junk}) + "\n")
    assert main(["classify", str(path)]) == 0
    out, err = capsys.readouterr()
    assert rows(out)["complete"][3:] == ["-", "-"] and "Traceback" not in err
    assert "1 call(s) with usage" in out


def test_spend_of_live_spans_is_what_the_instrumentation_priced(sim, instrument, tmp_path: Path, capsys) -> None:
    """Real calls priced by `instrument(prices=...)`, exported as OTLP JSON: the file's total is the
    sum of the spans' own figures, the cut streams' among them marked estimated."""
    telemetry = instrument(prices={"m": {"input": 3.0, "output": 15.0}})
    call_each(sim)
    spans = telemetry.spans()
    costs = [s.attributes.get("streamscope.cost.usd") for s in spans]
    assert all(isinstance(c, float) for c in costs) and sum(costs) > 0
    path = tmp_path / "live.otlp.jsonl"
    path.write_text("".join(MessageToJson(encode_spans([s]), indent=None) + "\n" for s in spans))
    assert main(["classify", str(path)]) == 0
    out = capsys.readouterr().out
    from streamscope.tools.spend import usd

    estimated = sum(s.attributes.get("streamscope.cost.estimated") is True for s in spans)
    assert f"spend: {usd(sum(costs))} on {len(spans)} priced call(s), {estimated} of them estimated;" in out
    assert "unpriced: 0 call(s)" in out
