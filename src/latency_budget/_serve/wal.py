"""The write-ahead log of ``serve``: what it acknowledged survives ``kill -9`` (and, with fsync, a reboot).

Each accepted request's protobuf bytes are appended to the current segment file before
the sender is answered. A record is framed as its length, a CRC-32, a sequence number
and a kind, so a record torn by a crash is found at start and ignored, with the rest of
its segment. Segments roll at ``segment_bytes``; all of them together are bounded by
``max_bytes``: past that a request is refused (the sender retries it), never dropped.

When a batch of forwarded spans has been sent (or dropped, and counted), a *settled*
record names its traces and the last request sequence each covered. A segment is deleted
once it and every older one hold nothing unsettled, oldest first, so a settled record
always outlives the requests it settles. At start the segments are read back: the spans
of traces not settled are replayed into the buffer, judged as if they had just arrived;
the others are skipped. The one window left is a batch the next hop took just before the
crash, whose settled record was not yet written: it is sent again (at least once).

fsync: ``always`` syncs each record before the answer (survives a reboot, one fsync a
request); ``interval`` (the default) syncs every ``fsync_interval_s`` (survives a process
crash; a reboot loses at most the interval); ``never`` leaves it to the kernel (survives a
process crash only).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from latency_budget._serve.stats import Counters, EventLog

__all__ = ["FSYNC_POLICIES", "FsyncPolicy", "Recovered", "Wal", "WalError", "WalOptions"]

FsyncPolicy = Literal["always", "interval", "never"]
FSYNC_POLICIES: tuple[FsyncPolicy, ...] = get_args(FsyncPolicy)

# length, CRC-32 of (length, seq, kind, payload), request sequence, kind
_HEADER = struct.Struct("<IIQB")
_PREFIX = struct.Struct("<IQB")
_SETTLED = struct.Struct(">16sQ")  # one settled trace: its id, the last request sequence covered
_REQUEST = 1
_SETTLE = 2
_MAX_RECORD = 1 << 30
_SUFFIX = ".wal"
_LOCK_NAME = "LOCK"


class WalError(Exception):
    """The write-ahead log cannot be used (its directory, its lock): the message names the flag."""


@dataclass(frozen=True, slots=True)
class WalOptions:
    """Where the log lives, how large it may grow and when it is synced."""

    directory: str
    max_bytes: int = 256 * 1024 * 1024
    fsync: FsyncPolicy = "interval"
    fsync_interval_s: float = 1.0
    segment_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Recovered:
    """One request read back at start: its sequence number and protobuf bytes."""

    seq: int
    body: bytes
    segment: _Segment


class _Segment:
    __slots__ = ("first_seq", "path", "refs", "size", "valid_end")

    def __init__(self, path: Path, first_seq: int, size: int = 0) -> None:
        self.path = path
        self.first_seq = first_seq
        self.size = size
        self.valid_end = size
        self.refs: dict[int, int] = {}  # trace id -> its last request sequence here, not yet settled


def frame(seq: int, kind: int, payload: bytes) -> bytes:
    """One record: header and payload."""
    crc = zlib.crc32(payload, zlib.crc32(_PREFIX.pack(len(payload), seq, kind)))
    return _HEADER.pack(len(payload), crc, seq, kind) + payload


def read_records(data: bytes) -> tuple[list[tuple[int, int, int, int]], int, bool]:
    """The records of one segment's bytes as (seq, kind, start, end) of their payloads; where the valid part ends; torn.

    Reading stops at the first record that is short or fails its CRC: after a crash only
    the tail can be torn, and nothing after a bad record can be trusted.
    """
    records: list[tuple[int, int, int, int]] = []
    offset, size, header = 0, len(data), _HEADER.size
    while offset < size:
        if offset + header > size:
            return records, offset, True
        length, crc, seq, kind = _HEADER.unpack_from(data, offset)
        start, end = offset + header, offset + header + length
        if length > _MAX_RECORD or end > size or kind not in (_REQUEST, _SETTLE):
            return records, offset, True
        if zlib.crc32(data[start:end], zlib.crc32(_PREFIX.pack(length, seq, kind))) != crc:
            return records, offset, True
        records.append((seq, kind, start, end))
        offset = end
    return records, offset, False


class Wal:
    """The log: :meth:`open` (reads what a previous run left), :meth:`recover`, then appends and settles.

    Thread-safe. ``append`` is called under the trace buffer's lock, so the order of
    sequence numbers is the order in which requests join their traces.
    """

    def __init__(self, options: WalOptions, counters: Counters, log: EventLog) -> None:
        self.options = options
        self._counters = counters
        self._log = log
        self._dir = Path(options.directory)
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._where: dict[int, list[_Segment]] = {}  # trace id -> segments with unsettled requests of it
        self._total = 0
        self._next_seq = 1
        self._fd = -1
        self._broken = False  # a failed write could not be undone: start a new segment
        self._dirty = False
        self.settled_before: dict[int, int] = {}  # from the previous run: trace id -> last sequence settled
        self.corrupt = 0
        self._lock_fd = -1
        self._recovering = True  # no segment is deleted before replay has tracked what it needs
        self._stop = threading.Event()
        self._syncer: threading.Thread | None = None

    # -- start -------------------------------------------------------------------------

    def open(self) -> None:
        """Take the directory (created if missing, locked against a second ``serve``) and read its segments."""
        flag = f"--wal-dir {self._dir}"
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self._dir / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise WalError(f"{flag}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise WalError(f"{flag}: in use by another latency-budget serve") from None
        try:
            self._scan()
            self._start_segment()
        except OSError as exc:
            raise WalError(f"{flag}: {exc.strerror or exc}") from None
        if self.options.fsync == "interval":
            self._syncer = threading.Thread(target=self._sync_loop, name="latency-budget-wal-sync", daemon=True)
            self._syncer.start()

    def _scan(self) -> None:
        last_seq = 0
        for path in sorted(self._dir.glob("*" + _SUFFIX)):
            stem = path.name[: -len(_SUFFIX)]
            if not stem.isdigit():
                continue
            data = path.read_bytes()
            records, valid_end, torn = read_records(data)
            if torn:
                self.corrupt += 1
            segment = _Segment(path, int(stem), len(data))
            segment.valid_end = valid_end
            self._segments.append(segment)
            self._total += len(data)
            last_seq = max(last_seq, segment.first_seq)  # a new segment's name sorts after every old one
            for seq, kind, start, end in records:
                last_seq = max(last_seq, seq)
                if kind == _SETTLE:
                    settled = self.settled_before
                    for raw_id, upto in _SETTLED.iter_unpack(data[start:end]):
                        trace_id = int.from_bytes(raw_id, "big")
                        if upto > settled.get(trace_id, 0):
                            settled[trace_id] = upto
        self._next_seq = last_seq + 1

    def recover(self) -> Iterator[Recovered]:
        """The requests a previous run left, oldest first (settled or not: the caller filters by ``settled_before``)."""
        for segment in list(self._segments[:-1]):
            try:
                data = segment.path.read_bytes()[: segment.valid_end]
            except OSError as exc:
                self._log.event("wal_read_failed", always=True, segment=segment.path.name, error=str(exc))
                continue
            records, _, _ = read_records(data)
            for seq, kind, start, end in records:
                if kind == _REQUEST:
                    yield Recovered(seq, data[start:end], segment)

    def track(self, record: Recovered, trace_ids: Iterable[int]) -> None:
        """Keep ``record``'s segment until these traces (replayed from it) are settled."""
        with self._lock:
            self._refer(record.segment, record.seq, trace_ids)

    def recovered(self) -> None:
        """Replay is over: forget the previous run's settled records, delete the segments with nothing left."""
        with self._lock:
            self.settled_before = {}
            self._recovering = False
            self._collect()

    # -- running -----------------------------------------------------------------------

    def append(self, body: bytes, trace_ids: Iterable[int]) -> int | str:
        """Log one request holding spans of ``trace_ids``: its sequence number, or why it is refused."""
        record_size = _HEADER.size + len(body)
        with self._lock:
            if self._total + record_size > self.options.max_bytes:
                self._counters.add("wal_requests_refused")
                return f"write-ahead log full: {self._total} bytes (--wal-max-bytes {self.options.max_bytes})"
            seq = self._next_seq
            try:
                segment = self._writable()
                self._write(segment, frame(seq, _REQUEST, body), sync=self.options.fsync == "always")
            except OSError as exc:
                self._counters.add("wal_requests_refused")
                self._counters.add("wal_write_errors")
                self._log.event("wal_write_failed", directory=str(self._dir), error=str(exc))
                return f"write-ahead log write failed: {exc.strerror or exc}"
            self._next_seq = seq + 1
            self._refer(segment, seq, trace_ids)
            return seq

    def settle(self, settled: Iterable[tuple[int, int]]) -> None:
        """These traces' spans, up to these request sequences, have left (sent, or dropped and counted)."""
        pairs = list(settled)
        if not pairs:
            return
        payload = b"".join(_SETTLED.pack(trace_id.to_bytes(16, "big"), upto) for trace_id, upto in pairs)
        with self._lock:
            try:
                segment = self._writable()
                self._write(segment, frame(self._next_seq, _SETTLE, payload), sync=self.options.fsync == "always")
            except OSError as exc:  # the requests are kept: replayed, at worst, once more
                self._counters.add("wal_write_errors")
                self._log.event("wal_write_failed", directory=str(self._dir), error=str(exc))
            where = self._where
            for trace_id, upto in pairs:
                segments = where.get(trace_id)
                if segments is None:
                    continue
                left = [segment for segment in segments if not _release(segment, trace_id, upto)]
                if left:
                    where[trace_id] = left
                else:
                    del where[trace_id]
            self._collect()

    def held(self) -> dict[str, int]:
        """Bytes and segments on disk now."""
        with self._lock:
            return {"bytes": self._total, "segments": len(self._segments)}

    def close(self) -> None:
        """Sync and close; with nothing unsettled left, the segments are deleted too."""
        self._stop.set()
        if self._syncer is not None:
            self._syncer.join(5.0)
        with self._lock:
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    if self.options.fsync != "never":
                        os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1
            if not self._where:
                for segment in self._segments:
                    with contextlib.suppress(OSError):
                        segment.path.unlink()
                self._segments = []
                self._total = 0
            if self._lock_fd >= 0:
                os.close(self._lock_fd)  # also releases the lock
                self._lock_fd = -1

    # -- internals ---------------------------------------------------------------------

    def _refer(self, segment: _Segment, seq: int, trace_ids: Iterable[int]) -> None:
        refs, where = segment.refs, self._where
        for trace_id in trace_ids:
            if trace_id not in refs:
                where.setdefault(trace_id, []).append(segment)
            refs[trace_id] = seq

    def _writable(self) -> _Segment:
        segment = self._segments[-1] if self._segments else None
        if segment is None or self._fd < 0 or self._broken or segment.size >= self.options.segment_bytes:
            self._start_segment()
            segment = self._segments[-1]
        return segment

    def _start_segment(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            try:
                if self.options.fsync != "never" and not self._broken:
                    os.fsync(fd)
            except OSError as exc:  # what it holds stays readable after a process crash; the new one goes on
                self._counters.add("wal_write_errors")
                self._log.event("wal_sync_failed", directory=str(self._dir), error=str(exc))
            finally:
                os.close(fd)
        path = self._dir / f"{self._next_seq:020d}{_SUFFIX}"
        while any(segment.path == path for segment in self._segments):  # after a write that could not be undone
            self._next_seq += 1
            path = self._dir / f"{self._next_seq:020d}{_SUFFIX}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        segment = _Segment(path, self._next_seq, os.fstat(fd).st_size)
        self._fd = fd
        self._broken = False
        self._segments.append(segment)
        self._total += segment.size
        if self.options.fsync != "never":
            _sync_dir(self._dir)

    def _write(self, segment: _Segment, data: bytes, *, sync: bool) -> None:
        """Append ``data`` whole, or leave the segment as it was (else the next write starts a new one)."""
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if sync:
                os.fdatasync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, segment.size)
            except OSError:
                self._broken = True
            raise
        segment.size += len(data)
        self._total += len(data)
        self._dirty = True

    def _collect(self) -> None:
        """Delete the oldest segments while they hold nothing unsettled (never the one being written)."""
        segments = self._segments
        while not self._recovering and len(segments) > 1 and not segments[0].refs:
            segment = segments.pop(0)
            try:
                segment.path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                self._log.event("wal_delete_failed", segment=segment.path.name, error=str(exc))
            self._total -= segment.size
            self._counters.add("wal_segments_deleted")

    def _sync_loop(self) -> None:
        interval = self.options.fsync_interval_s
        while not self._stop.wait(interval):
            with self._lock:
                if not self._dirty or self._fd < 0:
                    continue
                self._dirty = False
                fd = os.dup(self._fd)  # synced outside the lock: appends go on meanwhile
            try:
                os.fdatasync(fd)
            except OSError as exc:
                self._counters.add("wal_write_errors")
                self._log.event("wal_sync_failed", directory=str(self._dir), error=str(exc))
            finally:
                os.close(fd)


def _release(segment: _Segment, trace_id: int, upto: int) -> bool:
    """Settle ``trace_id`` in ``segment`` up to ``upto``; True when nothing of it is left there."""
    last = segment.refs.get(trace_id)
    if last is None:
        return True
    if last <= upto:
        del segment.refs[trace_id]
        return True
    return False


def _sync_dir(directory: Path) -> None:
    """Make a new segment's name durable (a file's fsync does not cover its directory entry)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
