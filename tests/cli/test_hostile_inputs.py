"""Hostile recorded input and failing surroundings: bounded reads, one clear line, the documented exit code,
and whatever the reader had to repair stated, never silent."""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from latency_budget.cli import main
from latency_budget.cli._inputs import STREAMED_MAX_SPANS, InputLimits, TraceInputError, read_trace_files
from latency_budget.cli._main import build_parser

from .conftest import BUDGETS, JAEGER_SEARCH, OTLP, run_cli

EXIT_INPUT, EXIT_OUTPUT = 2, 4


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *fragments: str) -> str:
    """Run ``latency-budget ARGV`` in-process: exit 2, nothing on stdout, one stderr line holding ``fragments``."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == EXIT_INPUT, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def otlp_lines() -> list[dict[str, Any]]:
    """The OTLP fixture, one parsed document per line."""
    return [json.loads(line) for line in OTLP.read_text(encoding="utf-8").splitlines()]


def first_span(document: dict[str, Any]) -> dict[str, Any]:
    """The first span of an OTLP document (to spoil one of its fields)."""
    span: dict[str, Any] = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    return span


def write_lines(path: Path, documents: list[dict[str, Any]]) -> Path:
    """Write OTLP JSON lines."""
    path.write_text("".join(json.dumps(d) + "\n" for d in documents), encoding="utf-8")
    return path


# -- limits ----------------------------------------------------------------------------------------


def test_gzip_bomb_stops_at_the_size_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 64 MiB gzip bomb (64 KiB on disk) with --max-input-size 1M ends in one line: no MemoryError, no wait."""
    bomb = tmp_path / "traces.jsonl.gz"
    bomb.write_bytes(gzip.compress(b" " * (64 << 20), compresslevel=9))
    argv = ["check", str(bomb), "-b", str(BUDGETS), "--max-input-size", "1M"]
    one_line_error(capsys, argv, f"{bomb}: more than 1 MiB after decompression (see --max-input-size)")


def test_an_endless_device_stops_at_the_size_limit(capsys: pytest.CaptureFixture[str]) -> None:
    """/dev/zero as a trace file is read only up to the limit."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("needs /dev/zero")
    one_line_error(capsys, ["report", "/dev/zero", "--max-input-size", "64K"], "/dev/zero: more than 64 KiB")


def test_a_line_over_the_line_limit_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In JSON lines, a line longer than --max-line-size is an error naming the file and that line."""
    documents = otlp_lines()
    limit_kib = max(len(json.dumps(d).encode()) for d in documents) // 1024 + 1  # every line as written fits
    first_span(documents[2])["name"] = "x" * (limit_kib * 1024)
    path = write_lines(tmp_path / "traces.jsonl", documents)
    argv = ["check", str(path), "-b", str(BUDGETS), "--max-line-size", f"{limit_kib}K"]
    one_line_error(capsys, argv, f"{path}:3: a line longer than {limit_kib} KiB (see --max-line-size)")


@pytest.mark.parametrize("opener", ["[", '{"resourceSpans": '])
def test_nesting_past_any_parser_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], opener: str) -> None:
    """JSON nested 100,000 deep (RecursionError in the parser) is one line naming the file."""
    path = tmp_path / "deep.json"
    path.write_text(opener * 100_000 + "1" + ("]" if opener == "[" else "}") * 100_000, encoding="utf-8")
    one_line_error(capsys, ["report", str(path)], f"{path}", "nested more than 100 levels deep")


def test_max_json_depth_is_settable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real fixture passes at the default depth and fails at --max-json-depth 5, naming the first line."""
    argv = ["report", str(OTLP), "-b", str(BUDGETS), "--format", "json"]
    assert main(argv) == 0
    capsys.readouterr()
    one_line_error(capsys, [*argv, "--max-json-depth", "5"], f"{OTLP}:1: JSON nested more than 5 levels deep")


def test_span_count_limit(capsys: pytest.CaptureFixture[str]) -> None:
    """--max-spans stops reading once the spans read pass it, naming the line where they did."""
    first = sum(len(scope["spans"]) for rs in otlp_lines()[0]["resourceSpans"] for scope in rs["scopeSpans"])
    argv = ["check", str(OTLP), "-b", str(BUDGETS), "--max-spans", str(first)]
    one_line_error(capsys, argv, f"{OTLP}:2: more than {first} spans in all (see --max-spans)")


@pytest.mark.parametrize(
    ("command", "default"),
    [("check", 10_000_000), ("report", 10_000_000), ("suggest", 10_000_000), ("doctor", 1_000_000)],
)
def test_max_spans_defaults_to_ten_million_where_traces_are_judged_as_read(command: str, default: int) -> None:
    """check, report and suggest keep a report a request (10M spans); doctor holds every span (1M)."""
    assert (STREAMED_MAX_SPANS, InputLimits().max_spans) == (10_000_000, 1_000_000)
    args = build_parser().parse_args([command, str(OTLP), "-b", str(BUDGETS)])
    assert args.max_spans == default


def test_limits_are_checked_when_given(capsys: pytest.CaptureFixture[str]) -> None:
    """A malformed limit is a usage error (exit 2, one line), like any bad option."""
    with pytest.raises(SystemExit) as exited:
        main(["check", str(OTLP), "-b", str(BUDGETS), "--max-input-size", "lots"])
    assert exited.value.code == EXIT_INPUT
    assert "expected a size such as 512M" in capsys.readouterr().err


# -- parser failures -------------------------------------------------------------------------------


def test_an_integer_over_4300_digits_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A JSON number too long for int() (ValueError in the parser) names the file and line."""
    path = tmp_path / "big.jsonl"
    path.write_text('{"resourceSpans": ' + "9" * 5000 + "}\n", encoding="utf-8")
    one_line_error(capsys, ["report", str(path)], f"{path}:1: unusable JSON: a number with more than 4,300 digits")


@pytest.mark.parametrize(
    "value",
    ["9" * 5000, "١٢٣٤", "1e18", str(1 << 64)],
    ids=["5000 digits", "Arabic-Indic digits", "exponent", "over fixed64"],
)
def test_a_timestamp_that_is_not_fixed64_nanoseconds_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """startTimeUnixNano must be ASCII digits of a 64-bit unsigned number; anything else names the field."""
    documents = otlp_lines()
    first_span(documents[0])["startTimeUnixNano"] = value
    path = write_lines(tmp_path / "traces.jsonl", documents)
    where = f"{path}:1: resourceSpans[0].scopeSpans[0].spans[0].startTimeUnixNano: expected nanoseconds"
    line = one_line_error(capsys, ["check", str(path), "-b", str(BUDGETS)], where)
    assert len(line) < 300  # the value is quoted cut short


@pytest.mark.parametrize(
    "span_id",
    [
        "abc",
        "0x634976b823e1e0",
        " 634976b823e1e0b1 ",
        "\uff16\uff13\uff14\uff19\uff17\uff16b823e1e0b1",
        "634976b823e1e0b",
        "0000000000000000",
    ],
    ids=["too short", "0x prefix", "spaces", "fullwidth digits", "15 digits", "all zeros"],
)
def test_an_otlp_span_id_that_is_not_16_hex_digits_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], span_id: str
) -> None:
    """OTLP ids are exactly 16 (or 32) ASCII hex digits, not zero: anything else is an error naming line and field."""
    documents = otlp_lines()
    first_span(documents[0])["spanId"] = span_id
    path = write_lines(tmp_path / "traces.jsonl", documents)
    one_line_error(
        capsys, ["check", str(path), "-b", str(BUDGETS)], f"{path}:1: resourceSpans[0].scopeSpans[0].spans[0].spanId:"
    )


def test_jaeger_ids_may_omit_leading_zeros_but_must_be_hex(tmp_path: Path) -> None:
    """Jaeger writes ids without leading zeros ('abc' is 0xabc); '0x' prefixes and non-hex digits are errors."""
    document = json.loads(JAEGER_SEARCH.read_text(encoding="utf-8"))
    span = document["data"][0]["spans"][0]
    span["traceID"] = "abc"
    short = tmp_path / "short.json"
    short.write_text(json.dumps(document), encoding="utf-8")
    assert 0xABC in {s.trace_id for s in read_trace_files([str(short)]).spans}
    span["traceID"] = "0xabc"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(TraceInputError, match=r"bad\.json:1: data\[0\]\.spans\[0\]\.traceID: not a valid 128-bit id"):
        read_trace_files([str(bad)])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("\n".join(json.dumps(d) for d in []), "the file is empty"),
        (json.dumps({"resourceSpans": []}).encode("utf-16"), "UTF-16 or UTF-32 text"),
        (b'{"resourceSpans": []}\n{"resourceSpans": [\xff]}\n', ":2: not UTF-8 text"),
        (b"\x1f\x8b\x08\x00garbage", "cannot read"),
        (gzip.compress(b'{"resourceSpans": []}\n')[:-12], "the compressed data is truncated"),
    ],
    ids=["empty", "UTF-16", "not UTF-8", "corrupt gzip", "truncated gzip"],
)
def test_unreadable_bytes_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes, message: str
) -> None:
    """Encodings, broken and truncated compression end in one line naming the file."""
    path = tmp_path / "traces.jsonl"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    one_line_error(capsys, ["report", str(path)], f"{path}", message)


def test_lookback_and_timeout_out_of_range_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """A lookback of 10^400 days or a timeout of 1e308 s is one line, not an OverflowError."""
    argv = ["check", "--jaeger", "http://127.0.0.1:9", "--service", "s", "-b", str(BUDGETS)]
    one_line_error(capsys, [*argv, "--lookback", "1" + "0" * 400 + "d"], "--lookback: expected a duration of at most")
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--timeout", "1e308"])
    assert exited.value.code == EXIT_INPUT
    assert "at most a day" in capsys.readouterr().err


def test_suggest_refuses_a_headroom_no_budget_could_hold(capsys: pytest.CaptureFixture[str]) -> None:
    """`suggest --headroom 1e308` is a usage error (exit 2, one line), not an OverflowError traceback."""
    with pytest.raises(SystemExit) as exited:
        main(["suggest", str(OTLP), "--headroom", "1e308"])
    assert exited.value.code == EXIT_INPUT
    err = capsys.readouterr().err
    assert "--headroom: expected a positive factor of at most 100" in err
    assert "Traceback" not in err


def test_closed_stdin_is_one_line() -> None:
    """`check -` started with standard input closed (`<&-`) says so in one line and exits 2."""
    result = subprocess.run(
        [sys.executable, "-m", "latency_budget", "check", "-", "-b", str(BUDGETS)],
        capture_output=True, text=True, timeout=120, check=False, preexec_fn=lambda: os.close(0),
    )  # fmt: skip
    assert result.returncode == EXIT_INPUT
    assert result.stderr.strip() == "latency-budget: <stdin>: standard input is closed"


# -- repairs: duplicates and cycles are counted and reported ------------------------------------------


def test_duplicate_spans_are_left_out_and_reported(tmp_path: Path) -> None:
    """The whole recording written twice judges like once; stderr and --format json count the 312 left out."""
    twice = tmp_path / "twice.jsonl"
    twice.write_text(OTLP.read_text(encoding="utf-8") * 2, encoding="utf-8")
    once = run_cli("check", OTLP, "-b", BUDGETS, "--format", "json")
    doubled = run_cli("check", twice, "-b", BUDGETS, "--format", "json")
    assert doubled.returncode == once.returncode == 1
    base, repaired = json.loads(once.stdout), json.loads(doubled.stdout)
    assert repaired["checks"] == base["checks"]
    assert base["input_repairs"] == {"duplicate_spans": 0, "parent_cycles": 0}
    assert repaired["input_repairs"] == {"duplicate_spans": 312, "parent_cycles": 0}
    assert once.stderr == ""
    second_copy = len(OTLP.read_text(encoding="utf-8").splitlines()) + 1  # captures differ in their lines
    assert doubled.stderr.strip() == (
        f"latency-budget: warning: {twice}: 312 spans had the trace and span id of an earlier span and were left out, "
        f"keeping the first (first at {twice}:{second_copy}: resourceSpans[0].scopeSpans[0].spans[0])"
    )


def test_jaeger_spans_sharing_one_id_are_counted_not_silently_dropped(tmp_path: Path) -> None:
    """12 Jaeger spans given one span id: 11 are left out, and the header and stderr say so."""
    document = json.loads(JAEGER_SEARCH.read_text(encoding="utf-8"))
    # A trace of at least 12 spans: captures differ in the order Jaeger lists traces.
    index = next(i for i, found in enumerate(document["data"]) if len(found["spans"]) >= 12)
    spans = document["data"][index]["spans"]
    shared = spans[0]["spanID"]
    for span in spans[1:12]:
        span["spanID"] = shared
    path = tmp_path / "search.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    result = run_cli("report", path, "-b", BUDGETS)
    assert result.returncode == 0, result.stderr
    assert "11 spans had the trace and span id of an earlier span" in result.stderr
    assert f"data[{index}].spans[1]" in result.stderr
    assert "11 duplicate spans left out" in result.stdout.splitlines()[0]


def test_a_parent_cycle_is_broken_at_its_earliest_span_and_reported(tmp_path: Path) -> None:
    """A root whose parent is its own child: the earliest span becomes the root again, and the cycle is reported."""
    documents = otlp_lines()
    spans = documents[0]["resourceSpans"][0]["scopeSpans"][0]["spans"]
    root = next(s for s in spans if "parentSpanId" not in s or not s["parentSpanId"])
    child = next(s for s in spans if s.get("parentSpanId") == root["spanId"])
    root["parentSpanId"] = child["spanId"]
    path = write_lines(tmp_path / "cycle.jsonl", documents)
    cycled = run_cli("check", path, "-b", BUDGETS, "--format", "json")
    original = run_cli("check", OTLP, "-b", BUDGETS, "--format", "json")
    assert json.loads(cycled.stdout)["checks"] == json.loads(original.stdout)["checks"]
    assert json.loads(cycled.stdout)["input_repairs"] == {"duplicate_spans": 0, "parent_cycles": 1}
    assert "1 parent cycle (spans that are their own ancestors) broken" in cycled.stderr
    assert f"{path}:1: resourceSpans[0].scopeSpans[0].spans[{spans.index(root)}]" in cycled.stderr


def test_repairs_are_counted_by_the_reader(tmp_path: Path) -> None:
    """read_trace_files() counts a span that is its own parent as a cycle, and keeps it, as a root."""
    documents = otlp_lines()[:1]
    span = first_span(documents[0])
    span["parentSpanId"] = span["spanId"]
    traces = read_trace_files([str(write_lines(tmp_path / "self.jsonl", documents))], InputLimits())
    assert (traces.repairs.duplicate_spans, traces.repairs.parent_cycles) == (0, 1)
    written = sum(len(scope["spans"]) for rs in documents[0]["resourceSpans"] for scope in rs["scopeSpans"])
    assert len(traces.spans) == written
    (repaired,) = [s for s in traces.spans if s.span_id == int(span["spanId"], 16)]
    assert repaired.parent_id is None


# -- output ----------------------------------------------------------------------------------------


def test_a_full_disk_on_stdout_is_one_line_and_exit_4() -> None:
    """Writing the report to /dev/full fails with one line and the output exit code 4, not a traceback."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "latency_budget", "check", str(OTLP), "-b", str(BUDGETS)],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert result.returncode == EXIT_OUTPUT
    assert result.stderr.strip() == "latency-budget: cannot write the output: No space left on device"


def test_an_output_file_that_cannot_be_written_is_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """suggest -o into a missing folder is one line naming the file, exit 4."""
    target = tmp_path / "missing" / "budgets.yaml"
    assert main(["suggest", str(OTLP), "-o", str(target)]) == EXIT_OUTPUT
    assert capsys.readouterr().err.strip() == f"latency-budget: {target}: cannot write: No such file or directory"


PIPE_BYTES = 4096


def test_a_reader_that_stops_early_is_not_an_error() -> None:
    """`check --format json | head -c 1`: the reader closes the pipe; check exits with its verdict (1), quietly."""
    whole = run_cli("check", OTLP, "-b", BUDGETS, "--format", "json")
    assert len(whole.stdout) > PIPE_BYTES + 1000  # more than the pipe holds: the writer meets the closed pipe
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    process = subprocess.Popen(
        [sys.executable, "-m", "latency_budget", "check", str(OTLP), "-b", str(BUDGETS), "--format", "json"],
        stdout=write_end, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(write_end)
    assert os.read(read_end, 1) == b"{"
    os.close(read_end)
    assert process.stderr is not None
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == whole.returncode == 1
    assert err == ""


def test_a_command_started_with_stdout_closed_keeps_its_verdict() -> None:
    """`check ... >&-` prints nowhere, says nothing and exits with its verdict."""
    result = subprocess.run(
        [sys.executable, "-m", "latency_budget", "check", str(OTLP), "-b", str(BUDGETS)],
        stderr=subprocess.PIPE, text=True, timeout=120, check=False, preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == ""
