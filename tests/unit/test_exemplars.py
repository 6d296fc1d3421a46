"""Exemplars from the OpenTelemetry SDK to the Prometheus page (export/exemplars.py): the conversion,
the bucket, the one-process reader's OpenMetrics output, and the multiprocess exemplar file."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics._internal.exemplar import Exemplar as SdkExemplar
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest as generate_text
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from streamscope.export import exemplar_files as files
from streamscope.export import exemplars as ex

BOUNDS = (0.1, 0.5, 1.0, 2.5)


def test_an_sdk_exemplar_becomes_hex_trace_and_span_ids_within_prometheus_limits() -> None:
    converted = ex.convert(SdkExemplar({}, 0.7, 1_700_000_000_500_000_000, span_id=0xAB, trace_id=0x1F))
    assert converted == ex.Exemplar(0x1F, 0xAB, 0.7, 1_700_000_000.5)
    labels = converted.prometheus().labels
    assert labels == {"trace_id": "0" * 30 + "1f", "span_id": "0" * 14 + "ab"}  # zero-padded, as spans show them
    assert sum(len(k) + len(v) for k, v in labels.items()) <= 128  # OpenMetrics' limit on exemplar labels
    assert ex.convert(SdkExemplar({}, 0.7, 1, span_id=None, trace_id=None)) is None  # always_on outside a span


@pytest.mark.parametrize(("value", "le"), [(0.05, 0.1), (0.1, 0.1), (0.11, 0.5), (2.5, 2.5), (3.0, math.inf)])
def test_the_bucket_is_the_one_prometheus_counts_the_value_in(value: float, le: float) -> None:
    assert ex.bucket_bound(value, BOUNDS) == le


def _page(registry: CollectorRegistry) -> dict[tuple[str, str], tuple[float, dict[str, str] | None]]:
    """{(sample name, le): (value, exemplar labels)} of the OpenMetrics page."""
    text = generate_openmetrics(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_bucket"):
                out[(s.name, s.labels["le"])] = (s.value, s.exemplar.labels if s.exemplar else None)
    return out


def test_one_process_buckets_carry_the_span_they_were_recorded_in() -> None:
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[ex.exemplar_reader(registry)], shutdown_on_exit=False)
    tracer = TracerProvider().get_tracer("t")
    histogram = provider.get_meter("streamscope", "1").create_histogram(
        "streamscope.time_to_first_content", unit="s", explicit_bucket_boundaries_advisory=BOUNDS)
    try:
        histogram.record(0.05, {"gen_ai.request.model": "m"})  # no span: counted, no exemplar
        with tracer.start_as_current_span("slow") as span:
            histogram.record(2.0, {"gen_ai.request.model": "m"})
        ids = {"trace_id": f"{span.get_span_context().trace_id:032x}",
               "span_id": f"{span.get_span_context().span_id:016x}"}
        name = "streamscope_time_to_first_content_seconds_bucket"
        for _scrape in range(2):  # the SDK hands an exemplar over once; the page keeps showing it
            page = _page(registry)
            assert page[(name, "2.5")] == (2.0, ids)
            assert page[(name, "0.1")] == (1.0, None)
            assert page[(name, "+Inf")] == (2.0, None)
        assert b"trace_id" not in generate_text(registry)  # the classic text format has no exemplars
    finally:
        provider.shutdown()


def test_the_exemplar_filter_off_means_no_exemplars() -> None:
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[ex.exemplar_reader(registry)], exemplar_filter=AlwaysOffExemplarFilter(),
                             shutdown_on_exit=False)
    try:
        with TracerProvider().get_tracer("t").start_as_current_span("s"):
            provider.get_meter("streamscope").create_histogram("h", unit="s").record(1.0)
        assert b"trace_id" not in generate_openmetrics(registry)
        assert isinstance(files.exemplar_filter(provider), AlwaysOffExemplarFilter)
    finally:
        provider.shutdown()


KEY = ("h_seconds_bucket", (("model", "m"), ("otel_scope_name", "streamscope")), 2.5)


def test_the_exemplar_file_keeps_one_slot_per_bucket_and_the_latest_wins(tmp_path: Path) -> None:
    file = files.ExemplarFile(str(tmp_path))
    file.write(KEY, ex.Exemplar(1, 2, 2.0, 100.0))
    path = tmp_path / f"exemplars_{os.getpid()}{files.SUFFIX}"
    size = path.stat().st_size
    file.write(KEY, ex.Exemplar(2**128 - 1, 2**64 - 1, 2.4, 101.0))  # overwritten in place
    assert files.read_exemplars(str(tmp_path)) == {KEY: ex.Exemplar(2**128 - 1, 2**64 - 1, 2.4, 101.0)}
    for i in range(400):  # past the first 16 KiB: the file grows, every slot stays readable
        file.write(("h_seconds_bucket", (("model", f"m{i}"),), 1.0), ex.Exemplar(i + 1, i + 1, 0.5, 100.0 + i))
    found = files.read_exemplars(str(tmp_path))
    assert len(found) == 401 and found[KEY].trace_id == 2**128 - 1
    assert path.stat().st_size > size
    # Another process's file with an older exemplar for the same bucket: the latest wins.
    other = tmp_path / f"exemplars_1{files.SUFFIX}"
    other.write_bytes(path.read_bytes())
    reopened = files.ExemplarFile(str(tmp_path))  # this pid's file again: its slots are found, not appended
    reopened.write(KEY, ex.Exemplar(9, 9, 2.1, 50.0))
    assert files.read_file(str(path))[KEY] == ex.Exemplar(9, 9, 2.1, 50.0) and len(files.read_file(str(path))) == 401
    assert files.read_exemplars(str(tmp_path))[KEY] == ex.Exemplar(2**128 - 1, 2**64 - 1, 2.4, 101.0)


def test_a_record_caught_half_written_is_skipped(tmp_path: Path) -> None:
    file = files.ExemplarFile(str(tmp_path))
    file.write(KEY, ex.Exemplar(1, 2, 2.0, 100.0))
    other = ("h_seconds_bucket", (), 0.5)
    file.write(other, ex.Exemplar(3, 4, 0.3, 100.0))
    path = tmp_path / f"exemplars_{os.getpid()}{files.SUFFIX}"
    data = bytearray(path.read_bytes())
    first_payload = 8 + 8 + ((len(files.encode_key(KEY)) + 7) & ~7)
    data[first_payload] ^= 0xFF  # the trace id changed, the checksum not yet
    path.write_bytes(bytes(data))
    assert files.read_exemplars(str(tmp_path)) == {other: ex.Exemplar(3, 4, 0.3, 100.0)}


def test_a_forked_child_writes_a_file_of_its_own(tmp_path: Path) -> None:
    file = files.ExemplarFile(str(tmp_path))
    file.write(KEY, ex.Exemplar(1, 1, 2.0, 100.0))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            file.write(KEY, ex.Exemplar(2, 2, 2.2, 200.0))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    parent = files.read_file(str(tmp_path / f"exemplars_{os.getpid()}{files.SUFFIX}"))
    child = files.read_file(str(tmp_path / f"exemplars_{pid}{files.SUFFIX}"))
    assert parent[KEY].trace_id == 1 and child[KEY].trace_id == 2
    assert files.read_exemplars(str(tmp_path))[KEY].trace_id == 2  # the later one


def test_the_aggregate_puts_the_files_exemplars_on_its_buckets() -> None:
    from prometheus_client.samples import Sample

    series = {"model": "m", "otel_scope_name": "streamscope", "route": ""}  # an empty label: absent
    samples = [Sample("h_seconds_bucket", {**series, "le": "2.5"}, 3),
               Sample("h_seconds_bucket", {**series, "le": "+Inf"}, 3),
               Sample("h_seconds_count", series, 3)]
    out = ex.attach_samples(samples, {KEY: ex.Exemplar(0xABC, 0xDEF, 2.0, 100.0)})
    assert out[0].exemplar is not None and out[0].exemplar.labels["trace_id"].endswith("abc")
    assert out[1].exemplar is None and out[2].exemplar is None
