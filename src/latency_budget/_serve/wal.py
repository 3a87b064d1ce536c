"""The write-ahead log of ``serve``: what it acknowledged survives ``kill -9`` (and, with fsync, a reboot).

Each accepted request's protobuf bytes are appended to the current segment file before
the sender is answered. A record starts with a marker, then its length, span count,
sequence number and kind under a CRC-32 of their own, then a CRC-32 of its payload: a
record whose payload is damaged is skipped (its header still says how long it is and how
many spans it held), and after a damaged header the reader finds the next marker whose
header checks out and goes on. What is skipped is counted, in records and spans; a record
cut short at a segment's end is a crash's last write (never acknowledged) and counted
apart as torn.

Segments roll at ``segment_bytes``: by default a quarter of the smaller of ``max_bytes``
and the free space on the log's file system at start, at most 16 MiB, so the log keeps
turning over however small it is. All of them together are bounded by ``max_bytes``
(or by one request larger than that, taken when the log holds nothing else): past that a
request is refused (the sender retries it), never dropped.

When a batch of forwarded spans has been sent (or dropped, and counted), a *settled*
record names its traces and the last request sequence each covered. A segment is deleted
once it and every older one hold nothing unsettled, oldest first, so a settled record
always outlives the requests it settles; the segment being written, once it is the only
one and holds nothing unsettled, is rolled and deleted too when the log is full or a
write fails (a full disk). At start the segments are read back: the spans of traces not
settled are replayed into the buffer, judged as if they had just arrived; the others are
skipped. Files in the directory that are not the log's own (other names, a segment's name
out of range, a segment-named file with no record in it) are left alone, with one log
line. The one window left is a batch the next hop took just before the crash, whose
settled record was not yet written: it is sent again (at least once).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from latency_budget._serve.stats import Counters, EventLog

__all__ = ["FSYNC_POLICIES", "FsyncPolicy", "Recovered", "Scanned", "Wal", "WalError", "WalOptions"]

FsyncPolicy = Literal["always", "interval", "never"]
FSYNC_POLICIES: tuple[FsyncPolicy, ...] = get_args(FsyncPolicy)

# marker, CRC-32 of the rest of the header, payload length, spans, request sequence, kind, CRC-32 of the payload
_MARKER = b"\xa7LBw"
_HEADER = struct.Struct("<4sIIIQBI")
_CHECKED = struct.Struct("<IIQBI")  # the header after its CRC: what the CRC covers
_CHECKED_AT = 8  # where that part starts
_SETTLED = struct.Struct(">16sQ")  # one settled trace: its id, the last request sequence covered
_REQUEST = 1
_SETTLE = 2
_MAX_RECORD = 1 << 30
_MAX_SEQ = 1 << 62  # far beyond any real log (a million requests a second for 146,000 years)
_MAX_SEGMENT = 16 * 1024 * 1024
_SUFFIX = ".wal"
_NAME_DIGITS = 20
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
    segment_bytes: int | None = None  # None: a quarter of max_bytes and of the free space, at most 16 MiB


@dataclass(frozen=True, slots=True)
class Recovered:
    """One request read back at start: its sequence number and protobuf bytes."""

    seq: int
    body: bytes
    segment: _Segment


class _Segment:
    __slots__ = ("first_seq", "path", "refs", "size")

    def __init__(self, path: Path, first_seq: int, size: int = 0) -> None:
        self.path = path
        self.first_seq = first_seq
        self.size = size
        self.refs: dict[int, int] = {}  # trace id -> its last request sequence here, not yet settled


def frame(seq: int, kind: int, payload: bytes, spans: int = 0) -> bytes:
    """One record: marker, header (with its own CRC) and payload."""
    checked = _CHECKED.pack(len(payload), spans, seq, kind, zlib.crc32(payload))
    return _MARKER + struct.pack("<I", zlib.crc32(checked)) + checked + payload


@dataclass(slots=True)
class Scanned:
    """What one segment's bytes hold: its whole records, and what was skipped."""

    records: list[tuple[int, int, int, int]] = field(default_factory=list)  # (seq, kind, start, end) of payloads
    corrupt_records: int = 0  # damaged (a bad payload or header), skipped
    corrupt_spans: int = 0  # the spans of the damaged records whose header survived
    torn: bool = False  # the last record cut short: a crash's last write
    found: bool = False  # at least one header checked out: a segment of the log's own


def _header_at(data: bytes, offset: int) -> tuple[int, int, int, int, int] | None:
    """(length, spans, seq, kind, payload CRC) of a record header at ``offset`` that checks out, else None."""
    if offset + _HEADER.size > len(data):
        return None
    marker, crc, length, spans, seq, kind, payload_crc = _HEADER.unpack_from(data, offset)
    if marker != _MARKER or zlib.crc32(data[offset + _CHECKED_AT : offset + _HEADER.size]) != crc:
        return None
    if length > _MAX_RECORD or kind not in (_REQUEST, _SETTLE) or seq >= _MAX_SEQ:
        return None
    return length, spans, seq, kind, payload_crc


def read_records(data: bytes) -> Scanned:
    """The records of one segment's bytes, skipping damaged ones and resynchronising on the next good header.

    A record whose payload fails its CRC is skipped whole (its header says how long it is
    and how many spans it held). After a header that does not check out, the reader looks
    for the next marker whose header does; the records lost in between are counted from
    the gap in sequence numbers (at least one). Bytes at the end too short for a header,
    or a last record longer than what is left, are a torn tail.
    """
    found = Scanned()
    offset, size = 0, len(data)
    last_seq: int | None = None
    damaged = False  # bytes skipped since the last good header
    while offset < size:
        header = _header_at(data, offset)
        if header is None:
            if size - offset < _HEADER.size and not damaged:
                found.torn = True
                break
            following = data.find(_MARKER, offset + 1)
            while following >= 0 and _header_at(data, following) is None:
                following = data.find(_MARKER, following + 1)
            if following < 0:
                found.corrupt_records += 1
                break
            damaged, offset = True, following
            continue
        length, spans, seq, kind, payload_crc = header
        found.found = True
        start = offset + _HEADER.size
        end = start + length
        if end > size:
            found.torn = True
            break
        if damaged:
            found.corrupt_records += max(1, seq - last_seq - 1) if last_seq is not None and seq > last_seq else 1
            damaged = False
        if zlib.crc32(data[start:end]) == payload_crc:
            found.records.append((seq, kind, start, end))
        else:
            found.corrupt_records += 1
            found.corrupt_spans += spans
        last_seq = seq
        offset = end
    return found


def _segment_number(name: str) -> int | None:
    """The first sequence number a segment named ``name`` holds, or None: not a name the log gives."""
    stem = name[: -len(_SUFFIX)] if name.endswith(_SUFFIX) else ""
    if len(stem) != _NAME_DIGITS or not (stem.isascii() and stem.isdigit()):
        return None
    number = int(stem)
    return number if number < _MAX_SEQ else None


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
        self.segment_bytes = options.segment_bytes or _MAX_SEGMENT  # set from the free space in open()
        self.settled_before: dict[int, int] = {}  # from the previous run: trace id -> last sequence settled
        self.corrupt_records = 0  # read back at start: damaged records skipped, and their spans
        self.corrupt_spans = 0
        self.torn_records = 0  # a segment's last record cut short by a crash
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
        foreign: list[str] = []
        if self.options.segment_bytes is None:
            stat = os.statvfs(self._dir)
            free = stat.f_bavail * stat.f_frsize
            self.segment_bytes = max(1, min(_MAX_SEGMENT, self.options.max_bytes // 4, max(free // 4, 64 * 1024)))
        for path in sorted(self._dir.iterdir()):
            name = path.name
            if name == _LOCK_NAME:
                continue
            first_seq = _segment_number(name)
            if first_seq is None or path.is_symlink() or not path.is_file():
                foreign.append(name)
                continue
            data = path.read_bytes()
            if not data:  # rolled just before a crash: it holds nothing
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            scanned = read_records(data)
            if not scanned.found:
                foreign.append(name)
                continue
            self.corrupt_records += scanned.corrupt_records
            self.corrupt_spans += scanned.corrupt_spans
            self.torn_records += scanned.torn
            segment = _Segment(path, first_seq, len(data))
            self._segments.append(segment)
            self._total += len(data)
            last_seq = max(last_seq, first_seq)  # a new segment's name sorts after every old one
            for seq, kind, start, end in scanned.records:
                last_seq = max(last_seq, seq)
                if kind == _SETTLE:
                    settled = self.settled_before
                    for raw_id, upto in _SETTLED.iter_unpack(data[start:end]):
                        trace_id = int.from_bytes(raw_id, "big")
                        if upto > settled.get(trace_id, 0):
                            settled[trace_id] = upto
        self._next_seq = last_seq + 1
        if foreign:
            self._log.event(
                "wal_foreign_files",
                always=True,
                directory=str(self._dir),
                files=len(foreign),
                names=foreign[:5],
                note="not the log's own: left as they are",
            )

    def recover(self) -> Iterator[Recovered]:
        """The requests a previous run left, oldest first (settled or not: the caller filters by ``settled_before``)."""
        for segment in list(self._segments[:-1]):
            try:
                data = segment.path.read_bytes()
            except OSError as exc:
                self._log.event("wal_read_failed", always=True, segment=segment.path.name, error=str(exc))
                continue
            for seq, kind, start, end in read_records(data).records:
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

    def append(self, body: bytes, trace_ids: Iterable[int], spans: int = 0) -> int | str:
        """Log one request holding ``spans`` spans of ``trace_ids``: its sequence number, or why it is refused.

        Never raises: whatever goes wrong is a refusal, which the sender retries.
        """
        with self._lock:
            try:
                return self._append(body, trace_ids, spans)
            except Exception as exc:  # a bug of ours: the request is refused (retried), never an error
                self._counters.add("wal_requests_refused")
                self._log.event("internal_error", where="wal_append", error=repr(exc)[:300])
                return "write-ahead log failed"

    def _append(self, body: bytes, trace_ids: Iterable[int], spans: int) -> int | str:
        record_size = _HEADER.size + len(body)
        limit = self.options.max_bytes
        if self._total + record_size > limit:
            self._reclaim()
            # A request larger than the whole bound is taken when the log holds nothing else: never a jam.
            if self._total + record_size > limit and (self._total or record_size <= limit):
                self._counters.add("wal_requests_refused")
                return f"write-ahead log full: {self._total} bytes (--wal-max-bytes {limit})"
        seq = self._next_seq
        data = frame(seq, _REQUEST, body, spans)
        try:
            try:
                segment = self._write_record(data)
            except OSError:
                if not self._reclaim():  # a full disk: the segment being written may be all that is left
                    raise
                segment = self._write_record(data)
        except OSError as exc:
            self._counters.add("wal_requests_refused")
            self._counters.add("wal_write_errors")
            self._log.event("wal_write_failed", directory=str(self._dir), error=str(exc))
            return f"write-ahead log write failed: {exc.strerror or exc}"
        self._next_seq = seq + 1
        self._refer(segment, seq, trace_ids)
        return seq

    def _write_record(self, data: bytes) -> _Segment:
        segment = self._writable()
        self._write(segment, data, sync=self.options.fsync == "always")
        return segment

    def settle(self, settled: Iterable[tuple[int, int]]) -> None:
        """These traces' spans, up to these request sequences, have left (sent, or dropped and counted)."""
        pairs = list(settled)
        if not pairs:
            return
        payload = b"".join(_SETTLED.pack(trace_id.to_bytes(16, "big"), upto) for trace_id, upto in pairs)
        with self._lock:
            try:
                self._write_record(frame(self._next_seq, _SETTLE, payload))
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
        """Bytes and segments on disk now, and the size at which a segment rolls."""
        with self._lock:
            return {"bytes": self._total, "segments": len(self._segments), "segment_bytes": self.segment_bytes}

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
        if segment is None or self._fd < 0 or self._broken or segment.size >= self.segment_bytes:
            self._start_segment()
            self._collect()  # the one it rolled from may hold nothing unsettled already
            segment = self._segments[-1]
        return segment

    def _reclaim(self) -> bool:
        """Roll and delete the segment being written if it is the only one left and holds nothing unsettled."""
        self._collect()
        segments = self._segments
        if self._recovering or len(segments) != 1 or segments[0].refs or not segments[0].size:
            return False
        try:
            self._start_segment()
        except OSError as exc:  # no new file (no inode left, say): the next write tries again
            self._counters.add("wal_write_errors")
            self._log.event("wal_write_failed", directory=str(self._dir), error=str(exc))
            return False
        self._collect()
        return True

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
        while True:  # a name taken (a file not the log's own, a write that could not be undone): the next one
            path = self._dir / f"{self._next_seq:0{_NAME_DIGITS}d}{_SUFFIX}"
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            except FileExistsError:
                self._next_seq += 1
                continue
            break
        segment = _Segment(path, self._next_seq, 0)
        self._fd = fd
        self._broken = False
        self._segments.append(segment)
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
