"""Reading spans back from files, for `streamscope classify` and `streamscope suggest`.

Three formats, told apart per JSON value, so one file may even mix them:

* OTLP JSON: export requests (`{"resourceSpans": [...]}`), one per file or one per line, as
  OpenTelemetry's OTLP file exporter and the Collector's `file` exporter write them;
* JSON lines of span attributes: one object per line, the attributes themselves;
* the console exporter's output: opentelemetry-sdk's `ConsoleSpanExporter` prints one
  pretty-printed JSON object per span (`name`, `context`, ..., `attributes`), one after another.

The file is read as a sequence of JSON values separated by whitespace (a JSON array is read
element by element), which covers all three. A *span* is an OTLP span, a console-exporter span
object or an attributes line. It is one of streamscope's streamed calls when its attributes
include a `streamscope.` key (streamscope writes `streamscope.class` on every span it ends) or,
in OTLP, when its instrumentation scope is `streamscope`. Other spans (other instrumentations'
HTTP, database or non-streamed GenAI spans) are skipped and counted.

Attributes are read as they are: a malformed OTLP value becomes None, never a guess, so a span
that lost what its class needs says so (`streamscope.core.classifier.missing`) instead of
passing as `complete`.

What a call cost is its `streamscope.cost.usd` (`span_cost`): absent from a call whose model has
no known price (it has usage, `gen_ai.usage.input_tokens`: `unpriced`), and from every span a
streamscope that did not price calls wrote; a malformed figure is no figure either.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamscope.core import attributes as A

SCOPE = "streamscope"
FORMATS = ("OTLP JSON (export requests, one per file or per line), JSON lines of span attributes, "
           "or the console exporter's output (ConsoleSpanExporter's JSON spans)")
"""What the error messages (and `classify --help`) say the readers accept."""


class SpanFileError(ValueError):
    """A file with no span to read: missing, unreadable, not JSON, or no streamscope span in it.
    The message names the file and the formats, one line."""


@dataclass
class SpanFile:
    spans: list[dict[str, Any]] = field(default_factory=list)
    """The attributes of streamscope's spans, in file order."""
    skipped: int = 0
    """Spans that are not streamscope's (other instrumentations')."""


def _value(v: Any) -> Any:
    """An OTLP `AnyValue` in JSON: `{"stringValue": ...}`, `{"intValue": "3"}`, ... (None if malformed)."""
    if not isinstance(v, Mapping):
        return None
    try:
        if "stringValue" in v:
            return v["stringValue"]
        if "boolValue" in v:
            return bool(v["boolValue"])
        if "intValue" in v:
            return int(v["intValue"])
        if "doubleValue" in v:
            return float(v["doubleValue"])
        if "arrayValue" in v:
            return tuple(_value(x) for x in v["arrayValue"].get("values", []))
    except (ValueError, TypeError, AttributeError):
        pass
    return None


def _maps(obj: Any, key: str) -> list[Mapping[str, Any]]:
    """`obj[key]`'s objects, if `obj[key]` is a list: malformed OTLP yields nothing instead of failing."""
    items = obj.get(key) if isinstance(obj, Mapping) else None
    return [x for x in items if isinstance(x, Mapping)] if isinstance(items, list) else []


def _otlp_attributes(span: Mapping[str, Any]) -> dict[str, Any]:
    return {str(a["key"]): _value(a.get("value")) for a in _maps(span, "attributes") if "key" in a}


def _ours(attrs: Mapping[str, Any]) -> bool:
    return any(isinstance(key, str) and key.startswith("streamscope.") for key in attrs)


def _spans(item: Any) -> Iterator[tuple[dict[str, Any], bool]]:
    """(attributes, is streamscope's) for every span in one JSON value."""
    if isinstance(item, list):
        for element in item:
            yield from _spans(element)
    elif isinstance(item, Mapping) and isinstance(item.get("resourceSpans"), list):
        for resource in _maps(item, "resourceSpans"):
            for scope in _maps(resource, "scopeSpans"):
                info = scope.get("scope")
                name = info.get("name") if isinstance(info, Mapping) else None
                for span in _maps(scope, "spans"):
                    attrs = _otlp_attributes(span)
                    yield attrs, name == SCOPE or _ours(attrs)
    elif isinstance(item, Mapping) and isinstance(item.get("attributes"), Mapping):  # a console-exporter span
        attrs = dict(item["attributes"])
        yield attrs, _ours(attrs)
    elif isinstance(item, Mapping) and isinstance(item.get("attributes"), list):  # one OTLP span on its own
        attrs = _otlp_attributes(item)
        yield attrs, _ours(attrs)
    elif isinstance(item, Mapping):  # a line of attributes
        attrs = dict(item)
        yield attrs, _ours(attrs)


def _values(text: str, path: str) -> Iterator[Any]:
    """Every JSON value in `text`, whatever whitespace separates them."""
    decoder = json.JSONDecoder()
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            start = text.count("\n", 0, position) + 1  # where the broken value starts, not where it broke
            raise SpanFileError(f"{path}: not JSON at line {start} ({error.msg}, line {error.lineno} column "
                                f"{error.colno}); expected {FORMATS}") from None
        yield value


def _text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        problem = "no such file"
    except IsADirectoryError:
        problem = "it is a directory, not a span file"
    except PermissionError:
        problem = "permission denied"
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except OSError as error:
        problem = error.strerror or str(error)
    raise SpanFileError(f"cannot read {path}: {problem}; give a span file: {FORMATS}")


def read_spans(path: str | Path) -> SpanFile:
    """streamscope's spans in `path`, and how many other spans were skipped.

    Raises SpanFileError when there is nothing to classify: that is the caller's input to fix."""
    name = str(path)
    text = _text(name)
    if not text.strip():
        raise SpanFileError(f"{name} is empty; give a span file: {FORMATS}")
    found = SpanFile()
    try:
        for value in _values(text, name):
            for attrs, ours in _spans(value):
                if ours:
                    found.spans.append(attrs)
                else:
                    found.skipped += 1
    except RecursionError:
        raise SpanFileError(f"{name}: JSON nested too deeply to be spans; expected {FORMATS}") from None
    if not found.spans:
        seen = (f"{found.skipped} span record(s), none with a streamscope.* attribute" if found.skipped
                else "JSON, but no span or attribute object")
        raise SpanFileError(f"{name}: no streamscope span in it ({seen}); expected {FORMATS}")
    return found


def read_span_attributes(path: str | Path) -> list[dict[str, Any]]:
    """The attribute mappings of streamscope's spans in `path` (see `read_spans`)."""
    return read_spans(path).spans


def span_cost(attrs: Mapping[str, Any]) -> float | None:
    """The call's `streamscope.cost.usd` in US dollars; None when absent or not a finite figure >= 0."""
    value = attrs.get(A.COST_USD)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def cost_estimated(attrs: Mapping[str, Any]) -> bool:
    """Whether the call's cost is an estimate (`streamscope.cost.estimated`: cut before its final usage)."""
    return span_cost(attrs) is not None and attrs.get(A.COST_ESTIMATED) is True


def unpriced(attrs: Mapping[str, Any]) -> bool:
    """A call with usage (`gen_ai.usage.input_tokens`) but no cost: its model has no known price, or
    a streamscope that did not price calls wrote the span."""
    return attrs.get(A.INPUT_TOKENS) is not None and span_cost(attrs) is None
