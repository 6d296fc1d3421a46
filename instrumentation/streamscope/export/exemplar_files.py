"""Exemplars across worker processes: one small file per process, merged by the aggregate.

Each worker's histograms ask the SDK provider's exemplar filter (`exemplar_filter`,
`span_exemplar`) and keep the latest exemplar per bucket in the process's own file
(`process_file`); the master's collector reads every worker's (`read_exemplars`), dead ones'
included, and keeps the latest per bucket. The exemplars themselves and the single-process reader
are `exemplars`'.
"""

from __future__ import annotations

import glob
import json
import mmap
import os
import struct
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

from streamscope.core import guard as internal

from .exemplars import Exemplar, Key

SUFFIX = ".ex"
"""The exemplar files' extension: not `.db`, which prometheus-client's collector reads as its own."""

# The file: an 8-byte header (magic `SSX1`, then the bytes used, u32), then records, each 8-aligned:
#   u32 key length, u32 0, the key (UTF-8 JSON `[bucket sample name, [[label, value], ...], le]`)
#   padded to 8, then 48 bytes: trace id (2 × u64), span id (u64), value (f64), timestamp (f64),
#   CRC-32 of those 40 bytes (u32), u32 0.
# A bucket's record is appended the first time it gets an exemplar and overwritten in place after
# (so the file grows with the buckets that ever had one, never with the observations). A reader
# that catches a record half written sees its CRC wrong and skips it for this scrape.

_MAGIC = b"SSX1"
_HEADER = struct.Struct("<4sI")
_KEYLEN = struct.Struct("<II")
_PAYLOAD = struct.Struct("<QQQdd")
_CRC = struct.Struct("<II")
_RECORD = _PAYLOAD.size + _CRC.size  # 48
_INITIAL = 1 << 14


def _pad(n: int) -> int:
    return (n + 7) & ~7


def _payload(exemplar: Exemplar) -> bytes:
    body = _PAYLOAD.pack(exemplar.trace_id >> 64, exemplar.trace_id & (2**64 - 1), exemplar.span_id,
                         exemplar.value, exemplar.timestamp)
    return body + _CRC.pack(zlib.crc32(body), 0)


def encode_key(key: Key) -> bytes:
    name, series, le = key
    return json.dumps([name, [list(kv) for kv in series], repr(le)], separators=(",", ":")).encode()


def decode_key(raw: bytes) -> Key:
    name, series, le = json.loads(raw)
    return str(name), tuple((str(k), str(v)) for k, v in series), float(le)


class ExemplarFile:
    """This process's exemplar file in a multiprocess directory: one slot per bucket, the latest
    exemplar in it. A forked child opens a file of its own at its first write (the parent's is
    shared memory: writing there would overwrite the parent's slots)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._pid = -1
        self._mm: mmap.mmap | None = None
        self._fd = -1
        self._slots: dict[Key, int] = {}
        self._used = 0
        internal.renew_lock_after_fork(self)

    def _open(self) -> mmap.mmap:
        pid = os.getpid()
        if self._mm is not None and self._pid == pid:
            return self._mm
        # A new process (or the first write): the inherited map and descriptor are the parent's file's;
        # closed here (the parent's stay open), and a file of this process's own started.
        if self._mm is not None:
            self._mm.close()
            os.close(self._fd)
        self._mm, self._fd, self._slots = None, -1, {}
        path = os.path.join(self.directory, f"exemplars_{pid}{SUFFIX}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # held for the process's life, as prometheus-client's
        size = os.fstat(fd).st_size
        if size < _INITIAL:
            os.ftruncate(fd, _INITIAL)
            size = _INITIAL
        mm = mmap.mmap(fd, size)
        magic, used = _HEADER.unpack_from(mm, 0)
        if magic != _MAGIC:
            used = _HEADER.size
            _HEADER.pack_into(mm, 0, _MAGIC, used)
        else:  # a pid reused within one directory: its slots are ours
            for key, offset, _ in _records(bytes(mm[:used])):
                self._slots[key] = offset
        self._mm, self._fd, self._pid, self._used = mm, fd, pid, used
        return mm

    def write(self, key: Key, exemplar: Exemplar) -> None:
        with self._lock:
            mm = self._open()
            offset = self._slots.get(key)
            if offset is None:
                raw = encode_key(key)
                need = self._used + _KEYLEN.size + _pad(len(raw)) + _RECORD
                if need > len(mm):
                    mm = self._grow(need)
                start = self._used
                _KEYLEN.pack_into(mm, start, len(raw), 0)
                mm[start + _KEYLEN.size:start + _KEYLEN.size + len(raw)] = raw
                offset = start + _KEYLEN.size + _pad(len(raw))
                mm[offset:offset + _RECORD] = _payload(exemplar)
                self._used = need
                _HEADER.pack_into(mm, 0, _MAGIC, need)  # the record is whole before a reader can see it
                self._slots[key] = offset
            else:
                mm[offset:offset + _RECORD] = _payload(exemplar)

    def _grow(self, need: int) -> mmap.mmap:
        assert self._mm is not None
        size = len(self._mm)
        while size < need:
            size *= 2
        self._mm.close()
        os.ftruncate(self._fd, size)
        self._mm = mmap.mmap(self._fd, size)
        return self._mm


def _records(data: bytes) -> Iterator[tuple[Key, int, Exemplar | None]]:
    """(key, payload offset, exemplar or None when torn) for every record of a file's bytes."""
    position = _HEADER.size
    while position + _KEYLEN.size <= len(data):
        length, _ = _KEYLEN.unpack_from(data, position)
        start = position + _KEYLEN.size
        offset = start + _pad(length)
        if length == 0 or offset + _RECORD > len(data):
            return
        key = decode_key(data[start:start + length])
        body = data[offset:offset + _PAYLOAD.size]
        crc, _ = _CRC.unpack_from(data, offset + _PAYLOAD.size)
        exemplar = None
        if zlib.crc32(body) == crc:
            high, low, span_id, value, timestamp = _PAYLOAD.unpack(body)
            exemplar = Exemplar((high << 64) | low, span_id, value, timestamp)
        yield key, offset, exemplar
        position = offset + _RECORD


def read_file(path: str) -> dict[Key, Exemplar]:
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _HEADER.size:
        return {}
    magic, used = _HEADER.unpack_from(data, 0)
    if magic != _MAGIC:
        return {}
    return {key: exemplar for key, _, exemplar in _records(data[:used]) if exemplar is not None}


def read_exemplars(directory: str) -> dict[Key, Exemplar]:
    """The latest exemplar per bucket over every process's file in `directory`."""
    latest: dict[Key, Exemplar] = {}
    for path in glob.glob(os.path.join(directory, f"exemplars_*{SUFFIX}")):
        try:
            found = read_file(path)
        except (OSError, ValueError):  # a file being created, or damaged: skipped for this scrape
            continue
        for key, exemplar in found.items():
            current = latest.get(key)
            if current is None or exemplar.timestamp > current.timestamp:
                latest[key] = exemplar
    return latest


# -- Which measurements become exemplars (the multiprocess instruments) ----------------------------


def exemplar_filter(sdk_provider: Any = None) -> Any:
    """The exemplar filter the SDK provider uses (its configuration, from `OTEL_METRICS_EXEMPLAR_FILTER`
    or its `exemplar_filter` argument); the SDK's default, trace-based, if it cannot be read."""
    found = getattr(getattr(sdk_provider, "_sdk_config", None), "exemplar_filter", None)
    if found is not None:
        return found
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, AlwaysOnExemplarFilter, TraceBasedExemplarFilter

    chosen = os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER", "trace_based").strip().lower()
    if chosen == "always_off":
        return AlwaysOffExemplarFilter()
    if chosen == "always_on":
        return AlwaysOnExemplarFilter()
    return TraceBasedExemplarFilter()


def span_exemplar(value: float, attributes: Any, context: Any, chosen: Any) -> Exemplar | None:
    """An exemplar of a measurement if the filter takes it and a span is current (in `context`,
    else the current context); None otherwise."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    ctx = context if context is not None else otel_context.get_current()
    now = time.time_ns()
    if not chosen.should_sample(value, now, attributes, ctx):
        return None
    span = trace.get_current_span(ctx).get_span_context()
    if not span.is_valid:
        return None
    return Exemplar(span.trace_id, span.span_id, float(value), now / 1e9)


_files: dict[str, ExemplarFile] = {}
_files_lock = threading.Lock()
internal.renew_lock_after_fork(sys.modules[__name__], "_files_lock")


def process_file(directory: str) -> ExemplarFile:
    """This process's one `ExemplarFile` for `directory` (two would write two files for one pid)."""
    with _files_lock:
        found = _files.get(directory)
        if found is None:
            found = _files[directory] = ExemplarFile(directory)
        return found
