"""Time per output chunk: one stream's chunk gaps into the histogram at once, when the stream ends.

Why: the conventions' `gen_ai.client.*.time_per_output_chunk` takes a value per chunk after the
first, and one `Histogram.record()` costs far more than everything else streamscope does for an
event (opentelemetry-sdk 1.45: about 11 µs with the six convention attributes: the exemplar filter,
then per reader and view the attributes copied and hashed, a lock, a bucket search). So the
recorder keeps the gaps (a list, one append per event) and `record_gaps()` puts them
into the histogram once per stream, for a cost per gap of an addition and a bucket's binary
search, in one pass (`tally`, compiled: `_tally.c`; a sort step per gap had cost about 270
instructions, a second pass for the sum about 70). It
reads the record's own list where it is, never a copy (a copy of a long stream's list is a block
from the C allocator, and the blocks freed at each stream's end made the allocator slower for
every event of the next stream: about 200 instructions per event in `make bench`); only where
`_tally` was not built does it sort a copy.

How, on the OpenTelemetry SDK's own instrument (`merge`): the first gap is recorded as usual, so
the SDK finds or makes each reader's aggregation for the attributes by its own rules (views,
attribute filters, the cardinality limit) and its exemplar filter sees the stream's span: one
exemplar per stream. The other gaps go into those same aggregations under each aggregation's own
lock (all of them held at once, so a collection sees all of the stream or none of it), with the
arithmetic of its `aggregate()`: the count in each bucket (a gap `v` counts in the first bucket
whose bound is `>= v`, on the aggregation's own boundaries, so a View with other buckets is
honoured), the sum added gap by gap in stream order (`fold`: so it is, bit for bit, the sum
per-chunk records give), min and max. Nothing else is changed; what the readers export cannot
tell the difference (tests/integration/test_chunk_histogram.py compares both, OTLP and the
Prometheus page, single and multiprocess).

That reaches into the SDK's internals, so it is taken only where they are the known form
(`Merger`): the aggregation classes and fields, and the key each view keeps aggregations under
(a frozenset of the attributes up to 1.4x, `_hash_attributes` since), checked once by recording
the same gaps both ways on a private provider and comparing what its readers collect. Any other
SDK, an aggregation of another kind (a View's exponential histogram), attributes that overflowed
the cardinality limit or anything unexpected: every gap is recorded per chunk, as before.
"""

from __future__ import annotations

import contextlib
import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import reduce
from itertools import islice
from operator import add
from types import ModuleType
from typing import Any

from streamscope.core import guard as internal

_tally: ModuleType | None
try:
    from . import _tally  # built from _tally.c where a C compiler was
except ImportError:
    _tally = None

Gaps = Sequence[float]
Attributes = Mapping[str, Any]

_PLAIN_SUM = sum((1e16, 1.0, 1.0)) == 1e16
"""Whether this Python's `sum()` adds floats one by one as `+=` does (3.11): from 3.12 it
compensates (1e16 + 1.0 + 1.0 is 1.0000000000000002e16 there, 1e16 added in order)."""


def fold(start: float, values: Iterable[float]) -> float:
    """`start` plus each value in order, rounded at each step: what one `+=` per value gives
    (`sum()` where it adds that way, in C; else `reduce`)."""
    return sum(values, start) if _PLAIN_SUM else reduce(add, values, start)


def bucket_counts(ordered: Sequence[float], boundaries: Sequence[float]) -> list[int]:
    """The count per bucket of sorted values: a value `v` counts in the first bucket whose bound
    is `>= v` (the SDK's `bisect_left(boundaries, v)`, prometheus-client's `v <= bound`)."""
    counts, below = [], 0
    for bound in boundaries:
        upto = bisect_right(ordered, bound)
        counts.append(upto - below)
        below = upto
    counts.append(len(ordered) - below)
    return counts


Tally = tuple[list[int], float, float, float]
"""`tally`'s answer: the count per bucket, the least and the greatest gap, the sum."""


def tally(gaps: list[float], boundaries: Sequence[float], start: int = 0, total: float = 0.0) -> Tally:
    """Of `gaps[start:]`: the count per bucket (`bucket_counts`' rule), the least and the greatest
    (NaN if one is not a number), and `total` plus each gap in order (`fold`). Compiled, one pass:
    a binary search over the bounds and an addition per gap, no sort (`_tally.c`); where it was not
    built, a sorted copy and `fold`."""
    if _tally is not None:
        counted: Tally = _tally.tally(gaps, boundaries, start, total)
        return counted
    total = fold(total, islice(gaps, start, None))
    ordered = sorted(islice(gaps, start, None))
    if any(math.isnan(gap) for gap in ordered):
        return bucket_counts(ordered, boundaries), math.nan, math.nan, total
    return bucket_counts(ordered, boundaries), ordered[0], ordered[-1], total


def per_chunk(instrument: Any, gaps: Gaps, attributes: Attributes) -> None:
    """One `record()` per gap: what the conventions describe, and the fallback."""
    record = instrument.record
    for gap in gaps:
        record(gap, attributes)


class Merger:
    """The installed opentelemetry-sdk's histogram aggregation, if it is a form `merge` knows."""

    def __init__(self) -> None:
        self.usable = False
        try:
            from opentelemetry.sdk.metrics._internal import _view_instrument_match as matching
            from opentelemetry.sdk.metrics._internal.aggregation import (
                _DropAggregation,
                _ExplicitBucketHistogramAggregation,
            )
            from opentelemetry.sdk.metrics._internal.instrument import _Histogram
        except ImportError:
            return
        self.histogram_class: Any = _Histogram
        self.bucketed: Any = _ExplicitBucketHistogramAggregation
        self.dropped: Any = _DropAggregation
        hashed = getattr(matching, "_hash_attributes", None)
        self.key: Callable[[dict[str, Any]], Any] = hashed if hashed is not None else _frozen
        try:
            self.usable = _probe(self)
        except Exception:  # an SDK this does not know: record per chunk
            self.usable = False

    def merge(self, instrument: Any, gaps: list[float], attributes: Attributes) -> bool:
        """Record `gaps` (in stream order) on the SDK histogram `instrument` as per-chunk records
        would; False (and nothing recorded) when the instrument is not of the known form."""
        if not self.usable or type(instrument) is not self.histogram_class or not gaps:
            return False
        instrument.record(gaps[0], attributes)  # makes the aggregations; the stream's exemplar
        if len(gaps) == 1:
            return True
        with contextlib.ExitStack() as held:
            found = self._aggregations(instrument, attributes, held)
            if found is not None:  # one pass per aggregation: its buckets and its own running sum
                tallies = [tally(gaps, aggregation._boundaries, 1, aggregation._sum) for aggregation in found]
                if not all(low >= 0.0 and math.isfinite(total) for _, low, _, total in tallies):
                    raise ValueError("a chunk gap that is not a finite number >= 0")
                for aggregation, tallied in zip(found, tallies):
                    self._into(aggregation, tallied)
                return True
        # Not there (a delta reader collected between the first gap and here, and its view let the
        # aggregation go) or of another kind: the rest per chunk, once the views' locks are let go
        # (a record takes them itself).
        per_chunk(instrument, gaps[1:], attributes)
        return True

    def _aggregations(self, instrument: Any, attributes: Attributes, held: contextlib.ExitStack) -> list[Any] | None:
        """Every aggregation the first gap went to, each locked (and the views that discard theirs
        on collection, until the merge is done); None if one is of another kind or not there."""
        found = []
        for storage in instrument._measurement_consumer._reader_storages.values():
            matches = storage._instrument_view_instrument_matches.get(instrument)
            if matches is None:
                return None
            for match in matches:
                if getattr(match, "_reset_on_collect", False):
                    held.enter_context(match._lock)
                keys = match._view._attribute_keys
                kept = dict(attributes) if keys is None else {k: v for k, v in attributes.items() if k in keys}
                aggregation = match._attributes_aggregation.get(self.key(kept))
                if type(aggregation) is self.dropped:
                    continue
                if type(aggregation) is not self.bucketed:
                    return None
                found.append(aggregation)
        for aggregation in found:
            held.enter_context(aggregation._lock)
        return found

    @staticmethod
    def _into(aggregation: Any, tallied: Tally) -> None:
        """`aggregate()` for every value `tallied` counts at once (its fields; its lock held), the
        sum already added up in stream order, from the aggregation's own."""
        counts, low, high, total = tallied
        if aggregation._value is None:
            aggregation._value = aggregation._get_empty_bucket_counts()
        aggregation._sum = total
        if aggregation._record_min_max:
            aggregation._min = min(aggregation._min, low)
            aggregation._max = max(aggregation._max, high)
        value = aggregation._value
        for i, n in enumerate(counts):
            if n:
                value[i] += n


def _frozen(attributes: dict[str, Any]) -> frozenset[tuple[str, Any]]:
    return frozenset(attributes.items())


PROBE_GAPS = (0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.013, 0.0, 0.004, 0.02, 0.02, 3.7, 0.0071, 0.25,
              0.5, 0.001, 100.0, 0.03)
"""Gaps around and on the bucket bounds, in no order, repeated, one past the last bound; ten 0.1s
first, whose sum added in order (0.9999999999999999) is not the exactly rounded one (1.0)."""

UNSORTED = (0.3, 0.05, 0.7, 0.01)
"""Gaps whose sum in this order (1.0599999999999998) is not their sum in sorted order (1.06)."""


def _probe(merger: Merger) -> bool:
    """Record the same gaps per chunk and merged on a private provider (a cumulative and a delta
    reader, a View that keeps one attribute): the points collected must be the same."""
    from opentelemetry.sdk.metrics import Histogram, MeterProvider
    from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
    from opentelemetry.sdk.metrics.view import View

    cumulative = InMemoryMetricReader()
    delta = InMemoryMetricReader(preferred_temporality={Histogram: AggregationTemporality.DELTA})
    views = [View(instrument_name="kept.*", attribute_keys={"a"}), View(instrument_name="*")]
    provider = MeterProvider(metric_readers=[cumulative, delta], views=views, shutdown_on_exit=False)
    try:
        meter = provider.get_meter("streamscope.probe")
        bounds = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12]
        pairs = [(meter.create_histogram(f"{prefix}.each", explicit_bucket_boundaries_advisory=bounds),
                  meter.create_histogram(f"{prefix}.merged", explicit_bucket_boundaries_advisory=bounds))
                 for prefix in ("all", "kept")]
        merger.usable = True
        streams: list[tuple[dict[str, Any], tuple[tuple[float, ...], ...]]] = [
            ({"a": "x", "b": 1}, (PROBE_GAPS, PROBE_GAPS[10:], PROBE_GAPS[:2])),
            ({"a": "y", "b": True}, (PROBE_GAPS, UNSORTED)),
            ({"a": "z", "b": 2.5}, (UNSORTED,)),
        ]
        for attributes, parts in streams:
            for each, merged in pairs:
                for part in parts:
                    per_chunk(each, part, attributes)
                    if not merger.merge(merged, list(part), attributes):
                        return False
        return all(_same(reader.get_metrics_data()) for reader in (cumulative, delta))
    finally:
        merger.usable = False
        provider.shutdown()


def _same(data: Any) -> bool:
    """Each `.each` histogram's points equal its `.merged` twin's (exemplars aside)."""
    points: dict[str, list[tuple[Any, ...]]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name] = sorted(
                    (sorted(p.attributes.items()), p.count, p.sum, tuple(p.bucket_counts), p.min, p.max)
                    for p in metric.data.data_points)
    twins = [name for name in points if name.endswith(".each")]
    return bool(twins) and all(points[name] == points.get(name[:-5] + ".merged") for name in twins)


_merger: Merger | None = None


def merger() -> Merger:
    """The process's one `Merger` (the probe runs once, when the first stream with gaps ends)."""
    global _merger
    if _merger is None:
        _merger = Merger()
    return _merger


def record_gaps(instrument: Any, gaps: Gaps, attributes: Attributes) -> None:
    """Record a stream's chunk gaps, in stream order, on `instrument` (the SDK's histogram,
    streamscope's multiprocess one, or the global proxy's), merged where the instrument allows
    it, else one record per gap. The gaps are read, never reordered."""
    if not gaps:
        return
    if type(gaps) is not list:
        gaps = list(gaps)
    real = getattr(instrument, "_real_instrument", None)  # the global meter's proxy, once a provider is set
    target = instrument if real is None else real
    many = getattr(target, "record_gaps", None)
    if many is not None:
        many(gaps, attributes)
        return
    try:
        if merger().merge(target, gaps, attributes):
            return
    except Exception:
        internal.internal_error("time per output chunk")
        return  # the first gap may be in: recording the rest per chunk could count it twice
    per_chunk(target, gaps, attributes)
