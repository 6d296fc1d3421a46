"""Reading spans back from files: OTLP JSON (the OpenTelemetry file exporters' and the
Collector's `file` exporter's format, one export request per line or one per file) or JSON
lines of span attributes. Used by `streamscope classify` and `streamscope suggest`."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

SCOPE = "streamscope"


def _value(v: Mapping[str, Any]) -> Any:
    """An OTLP `AnyValue` in JSON: `{"stringValue": ...}`, `{"intValue": "3"}`, ..."""
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
    return None


def _otlp_spans(request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for resource in request.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            name = (scope.get("scope") or {}).get("name")
            for span in scope.get("spans", []):
                attrs = {a["key"]: _value(a.get("value", {})) for a in span.get("attributes", [])}
                if name == SCOPE or "streamscope.class" in attrs:
                    yield attrs


def _objects(text: str) -> Iterator[Any]:
    """One JSON document, or JSON lines."""
    stripped = text.strip()
    if not stripped:
        return
    try:
        yield json.loads(stripped)
        return
    except json.JSONDecodeError:
        pass
    for number, line in enumerate(stripped.splitlines(), 1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {number}: not JSON ({exc.msg})") from None


def read_span_attributes(path: str | Path) -> list[dict[str, Any]]:
    """The attribute mappings of streamscope's spans in `path`."""
    found: list[dict[str, Any]] = []
    for obj in _objects(Path(path).read_text()):
        items = obj if isinstance(obj, list) else [obj]
        for item in items:
            if not isinstance(item, Mapping):
                continue
            if "resourceSpans" in item:
                found.extend(_otlp_spans(item))
            elif isinstance(item.get("attributes"), Mapping):  # the console exporter's span JSON
                found.append(dict(item["attributes"]))
            else:
                found.append(dict(item))
    return found
