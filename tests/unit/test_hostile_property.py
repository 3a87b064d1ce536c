"""Property: whatever bytes a budget file or a trace file holds, reading it ends in success or the one
error type of its reader, in bounded memory and time, never in any other exception.

Hypothesis generates hostile inputs (alias bombs, recursive aliases, deep nesting, NUL bytes,
other encodings, huge integers, odd tags, ids and timestamps that are not ids and timestamps,
gzip bombs, half-written files, random bytes); a worker process reads each one under
``setrlimit`` caps on address space and CPU (``hostile_worker.py``). The examples are
derandomized, so the run is the same every time.
"""

from __future__ import annotations

import gzip
import json
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import latency_budget

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs resource limits and select on pipes")

WORKER = Path(__file__).with_name("hostile_worker.py")
ANSWER_WITHIN_S = 120  # a hang detector, not a timing assertion: every input takes a small fraction of it
SETTINGS = settings(
    max_examples=120,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


class Worker:
    """The limited worker process, restarted if an input killed it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.count = 0
        self.process = self._start()

    def _start(self) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": str(Path(latency_budget.__file__).resolve().parents[1])}
        return subprocess.Popen(
            [sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def read(self, kind: str, content: bytes) -> dict[str, str]:
        """The worker's answer for ``content`` written to a file and read as ``kind``."""
        self.count += 1
        path = self.directory / f"input-{self.count}{'.yaml' if kind == 'budget' else '.json'}"
        path.write_bytes(content)
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(json.dumps({"kind": kind, "path": str(path)}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], ANSWER_WITHIN_S)
        line = self.process.stdout.readline() if ready else ""
        path.unlink()
        if not line:
            hung = not ready
            self.process.kill()
            code = self.process.wait()
            self.process = self._start()
            what = f"gave no answer within {ANSWER_WITHIN_S} s" if hung else f"died (exit {code})"
            pytest.fail(f"reading {kind} input {content[:200]!r} ({len(content)} bytes): the worker {what}")
        answer: dict[str, str] = json.loads(line)
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    """One limited worker for the module's examples."""
    with tempfile.TemporaryDirectory() as directory:
        running = Worker(Path(directory))
        yield running
        running.close()


def assert_outcome(answer: dict[str, str], allowed: str, content: bytes) -> None:
    """Success, or the reader's own error as one line."""
    assert answer["outcome"] in ("ok", allowed), f"{answer} for {content[:300]!r}"
    assert "\n" not in answer["message"]


# -- hostile budget files ---------------------------------------------------------------------

_KEYS = [
    "version",
    "total_ms",
    "first_token_ms",
    "severity",
    "stages",
    "profiles",
    "budget_ms",
    "max_calls",
    "match",
    "name",
    "attributes",
    "exists",
    "kind",
    "scope",
    "first_token",
    "events",
    "when",
    "parallelizable",
    "model_call",
    "tool_calls",
]
_ODD_SCALARS = [
    "warn",
    "error",
    "*",
    "[",
    "chat",
    "server",
    "1e999",
    ".nan",
    "0x" + "f" * 40,
    "!!binary 'not base64'",
    "!!timestamp nope",
    "!!bool maybe",
    "!!int x",
    "!!float x",
    "!!python/object:os.system x",
    "!!set {a, b}",
    "2001-02-30",
    "1:2:3:4:5:6:7:8:9:10:11:12:13:14:15",
    "0b" + "1" * 100,
]
_scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.sampled_from(_ODD_SCALARS),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=25,
)
_GOOD = "version: 1\nstages:\n  model_call:\n    budget_ms: 800\n    match: {name: 'chat*'}\n"


def _alias_bomb(width: int, depth: int) -> str:
    lines = ["version: 1", f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]" for n in range(1, depth)]
    return "\n".join(lines) + "\n"


@st.composite
def hostile_yaml(draw: st.DrawFn) -> bytes:
    """Bytes that a careless user, a hostile file or a half-finished write could put in a budget file."""
    kind = draw(st.integers(min_value=0, max_value=10))
    if kind == 0:
        return _alias_bomb(draw(st.integers(2, 12)), draw(st.integers(2, 12))).encode()
    if kind == 1:
        return draw(st.sampled_from(["a: &a [*a]\n", "version: 1\nstages: &s\n  x: *s\n", "&a {b: *a}\n"])).encode()
    if kind == 2:
        depth = draw(st.integers(1, 30_000))
        opener, closer = draw(st.sampled_from([("[", "]"), ("{a: ", "}"), ("- ", "")]))
        balanced = draw(st.booleans())
        return ("version: 1\nx: " + opener * depth + ("1" + closer * depth if balanced else "")).encode()
    if kind == 3:
        depth = draw(st.integers(1, 300))
        return ("version: 1\n" + "".join(" " * n + "a:\n" for n in range(depth))).encode()
    if kind == 4:
        digits = draw(st.integers(1, 6000))
        form = draw(st.sampled_from(["{}", "0x{}", "-{}", "{}: 1", "0b{}", "0{}"]))
        number = draw(st.sampled_from(["9", "1", "7"])) * digits
        return ("version: 1\ntotal_ms: " + form.format(number) + "\n").encode()
    if kind == 5:
        text = draw(st.sampled_from([_GOOD, yaml.safe_dump(draw(_values))]))
        at = draw(st.integers(0, len(text)))
        junk = draw(st.sampled_from(["\x00", "\x07", "\ufffe", "\ud800", "\x85", "\t", "\r", "'", '"', "&a", "*a"]))
        return (text[:at] + junk + text[at:]).encode("utf-8", "surrogatepass")
    if kind == 6:
        encoding = draw(st.sampled_from(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "latin-1"]))
        return (_GOOD + "# café\n").encode(encoding)
    if kind == 7:
        return draw(st.binary(max_size=300))
    if kind == 8:
        return _GOOD.encode()[: draw(st.integers(0, len(_GOOD)))]  # caught mid-write
    if kind == 9:
        return ("version: 1\n" + yaml.safe_dump({"stages": draw(_values)}, allow_unicode=True)).encode()
    return yaml.safe_dump(draw(_values), allow_unicode=True).encode()


@SETTINGS
@given(content=hostile_yaml())
def test_hostile_budget_files_end_in_a_config_or_one_budget_config_error(worker: Worker, content: bytes) -> None:
    """Any budget file loads or raises BudgetConfigError (one line), within the worker's memory and CPU limits."""
    assert_outcome(worker.read("budget", content), "BudgetConfigError", content)


# -- hostile trace files ----------------------------------------------------------------------

_ID_POOL_16 = ["0af7651916cd43dd8448eb211c80319c", "0000000000000000000000000000000a"]
_ID_POOL_8 = ["b7ad6b7169203331", "00f067aa0ba902b7", "0000000000000001"]
_ids = st.one_of(
    st.sampled_from(_ID_POOL_16 + _ID_POOL_8),  # a small pool: duplicates and cycles happen
    st.sampled_from(["abc", "0x" + "1" * 14, " b7ad6b7169203331 ", "١٢٣٤٥٦٧٨٩٠١٢٣٤٥٦", "AAAAAAAAAAA=", "", "0" * 16]),
    st.text(max_size=40),
    st.integers(),
    st.none(),
)
_times = st.one_of(
    st.integers(min_value=-5, max_value=2**70),
    st.integers(min_value=0, max_value=2**64).map(str),
    st.integers(4000, 5000).map(lambda n: "9" * n),
    st.sampled_from(["١٢٣", "²", "1e9", "-1", " 12"]),
    st.floats(),
    st.text(max_size=10),
)
_json_scalars = st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.booleans(), st.none(), st.text(max_size=10))
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@st.composite
def otlp_line(draw: st.DrawFn) -> dict[str, Any]:
    """One ExportTraceServiceRequest whose fields may be anything."""
    spans = []
    for _ in range(draw(st.integers(0, 4))):
        span: dict[str, Any] = {
            "traceId": draw(_ids),
            "spanId": draw(_ids),
            "name": draw(st.one_of(st.text(max_size=20), _json_scalars)),
            "kind": draw(st.one_of(st.integers(-1, 6), st.sampled_from(["SPAN_KIND_SERVER", "x"]))),
            "startTimeUnixNano": draw(_times),
            "endTimeUnixNano": draw(_times),
        }
        if draw(st.booleans()):
            span["parentSpanId"] = draw(_ids)
        if draw(st.booleans()):
            span["attributes"] = draw(
                st.one_of(
                    _json, st.lists(st.fixed_dictionaries({"key": st.text(max_size=5), "value": _json}), max_size=3)
                )
            )
        if draw(st.booleans()):
            span["events"] = draw(st.lists(st.fixed_dictionaries({"name": _json, "timeUnixNano": _times}), max_size=2))
        spans.append(span)
    return {
        "resourceSpans": [
            {"resource": {"attributes": draw(_json)}, "scopeSpans": [{"scope": {"name": "s"}, "spans": spans}]}
        ]
    }


@st.composite
def jaeger_document(draw: st.DrawFn) -> dict[str, Any]:
    """A Jaeger search answer whose fields may be anything."""
    spans = []
    for _ in range(draw(st.integers(0, 5))):
        span: dict[str, Any] = {
            "traceID": draw(_ids),
            "spanID": draw(_ids),
            "operationName": draw(st.text(max_size=10)),
            "startTime": draw(_times),
            "duration": draw(_times),
            "processID": "p1",
        }
        if draw(st.booleans()):
            span["references"] = [{"refType": "CHILD_OF", "spanID": draw(_ids)}]
        if draw(st.booleans()):
            span["tags"] = draw(
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "key": st.text(max_size=5),
                            "type": st.sampled_from(["string", "int64", "float64", "bool", "x"]),
                            "value": _json,
                        }
                    ),
                    max_size=3,
                )
            )
        spans.append(span)
    return {"data": [{"traceID": "1", "spans": spans, "processes": {"p1": draw(_json)}}]}


@st.composite
def hostile_traces(draw: st.DrawFn) -> bytes:
    """Bytes a broken exporter, a hostile file or a failing disk could hand to `check`."""
    kind = draw(st.integers(min_value=0, max_value=9))
    if kind == 0:
        lines = [json.dumps(draw(otlp_line())) for _ in range(draw(st.integers(1, 3)))]
        return "\n".join(lines).encode()
    if kind == 1:
        return json.dumps(draw(jaeger_document()), indent=draw(st.sampled_from([None, 2]))).encode()
    if kind == 2:
        depth = draw(st.integers(1, 100_000))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}"), ('{"resourceSpans":', "}")]))
        return (opener * depth + "1" + closer * depth).encode()
    if kind == 3:
        return ('{"resourceSpans": ' + "9" * draw(st.integers(4000, 6000)) + "}\n").encode()
    if kind == 4:
        size = draw(st.sampled_from([1 << 10, 9 << 20, 32 << 20]))
        return gzip.compress(draw(st.sampled_from([b"0", b"[", b"\n", b'{"data": []}\n'])) * size, compresslevel=1)
    if kind == 5:
        text = json.dumps(draw(otlp_line()))
        at = draw(st.integers(0, len(text)))
        return text.encode()[:at]  # truncated mid-write
    if kind == 6:
        return json.dumps(draw(otlp_line())).encode(draw(st.sampled_from(["utf-16", "utf-16-le", "utf-32-be"])))
    if kind == 7:
        return draw(st.binary(max_size=300))
    if kind == 8:
        return json.dumps(draw(_json)).encode()
    return (
        '{"data": [{"spans": [' + '{"spanID": "\\ud800", "traceID": NaN}' * draw(st.integers(1, 3)) + "]}]}"
    ).encode()


@SETTINGS
@given(content=hostile_traces())
def test_hostile_trace_files_end_in_spans_or_one_trace_input_error(worker: Worker, content: bytes) -> None:
    """Any trace file reads or raises TraceInputError (one line), within the worker's memory and CPU limits."""
    assert_outcome(worker.read("traces", content), "TraceInputError", content)
