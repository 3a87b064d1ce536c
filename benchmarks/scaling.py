"""What ``report``, ``check`` and ``suggest`` cost on recordings of growing size (issue 33).

    python benchmarks/scaling.py                          # 100,000 spans of each workload
    python benchmarks/scaling.py --spans 100000 --spans 1000000 --write-readme

Writes OTLP/JSON-lines recordings of two workloads (seeded, so a size always gives the
same file) and runs each command on each, in a fresh interpreter, measuring that
process's CPU time (user + system) and peak resident memory (``wait4``'s rusage). The
floor is a ``json.loads`` pass over the same lines, keeping nothing: what merely reading
the file costs in Python. ``--write-readme`` replaces the scaling block of
benchmarks/README.md with the table of this run and the command that made it.

The workloads:

* ``standard``: the standard AI trace of workloads.py (1 root, 3 stage spans, 6 unmatched,
  the same names and attributes), with seeded durations and token counts per trace;
* ``one-model``: a busy service of one model, 500 distinct requests of 8 spans (a root,
  retrieval, two model calls of one model, two tool calls, two database calls),
  replicated with fresh trace ids until the size is reached.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads  # the benchmarks' own module, next to this file

REPO = Path(__file__).resolve().parents[1]
README = REPO / "benchmarks" / "README.md"
# A block per command line: "<!-- scaling: begin `python benchmarks/scaling.py ...` -->".
BEGIN = "<!-- scaling: begin "
END = "<!-- scaling: end -->"
SPANS_PER_LINE = 512  # spans per ExportTraceServiceRequest line, as a Collector's batches
TRACES_PER_SECOND = 50  # how far apart the recorded requests start

# The command under test and its options after the recording and --budgets.
COMMANDS: dict[str, list[str]] = {
    "report": ["report", "--format", "json"],
    "check": ["check"],
    "suggest": ["suggest"],
}
FLOOR = "json.loads"
_FLOOR_CODE = "import json, sys\nfor line in open(sys.argv[1], 'rb'):\n    json.loads(line)\n"

Span = dict[str, Any]


def _value(value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def _span(
    trace_id: str,
    span_id: int,
    parent: int | None,
    name: str,
    kind: int,
    start: int,
    end: int,
    attributes: dict[str, Any],
) -> Span:
    span: Span = {
        "traceId": trace_id,
        "spanId": f"{span_id:016x}",
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": [{"key": key, "value": _value(value)} for key, value in attributes.items()],
    }
    if parent is not None:
        span["parentSpanId"] = f"{parent:016x}"
    return span


_SERVER, _CLIENT, _INTERNAL = 2, 3, 1
_MS = 1_000_000


def standard_trace(rng: random.Random, trace_id: str, start: int) -> list[Span]:
    """workloads.standard_trace's 10 spans, one after another, with seeded durations (in ms) and token counts."""
    root = rng.getrandbits(63) | 1
    input_tokens, output_tokens = rng.randint(300, 4000), rng.randint(40, 600)
    chat: dict[str, Any] = {
        **workloads.CHAT,
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.response.time_to_first_chunk": round(0.15 + input_tokens / 20_000, 3),
    }
    children: list[tuple[str, int, dict[str, Any], float]] = [
        ("GET session", _CLIENT, workloads.CACHE, rng.uniform(0.3, 2)),
        ("GET profile", _CLIENT, workloads.HTTP_CLIENT, rng.uniform(5, 30)),
        ("SELECT tickets", _CLIENT, workloads.DB, rng.uniform(2, 15)),
        ("embeddings text-embedding-3-small", _INTERNAL, workloads.EMBED, rng.uniform(20, 120)),
        ("SELECT documents", _CLIENT, workloads.DB, rng.uniform(5, 40)),
        ("chat gpt-4o-mini", _CLIENT, chat, 200 + output_tokens * rng.uniform(6, 10)),
        ("execute_tool lookup_order", _INTERNAL, workloads.TOOL, rng.uniform(30, 400)),
        ("render answer", _INTERNAL, {"app.template": "answer", "app.locale": "en"}, rng.uniform(1, 5)),
    ]
    spans: list[Span] = []
    now = start + _MS
    for name, kind, attributes, ms in children:
        span_id = rng.getrandbits(63) | 1
        end = now + int(ms * _MS)
        spans.append(_span(trace_id, span_id, root, name, kind, now, end, attributes))
        if name.startswith("execute_tool"):  # the tool's own HTTP call, inside it
            inner = now + int(ms * _MS * 0.8)
            spans.append(
                _span(
                    trace_id, rng.getrandbits(63) | 1, span_id, "GET order", _CLIENT, now, inner, workloads.HTTP_CLIENT
                )
            )
        now = end
    spans.append(_span(trace_id, root, None, "POST /v1/answer", _SERVER, start, now + _MS, workloads.HTTP_SERVER))
    return spans


def _chat(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        **workloads.CHAT,
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.response.time_to_first_chunk": round(0.1 + input_tokens / 25_000, 3),
    }


def _one_model_request(rng: random.Random) -> list[tuple[str, int, int | None, dict[str, Any], float, float]]:
    """One request of the one-model service: (name, kind, parent index, attributes, start ms, duration ms)."""
    prompt = rng.randint(500, 6000)
    first_output = rng.randint(20, 80)
    second_prompt = prompt + rng.randint(200, 1500)
    second_output = rng.randint(60, 700)
    first = _chat(prompt, first_output)
    second = _chat(second_prompt, second_output)
    steps: list[tuple[str, int, dict[str, Any], float]] = [
        ("SELECT session", _CLIENT, workloads.DB, rng.uniform(1, 8)),
        ("embeddings text-embedding-3-small", _INTERNAL, workloads.EMBED, rng.uniform(20, 90)),
        ("chat gpt-4o-mini", _CLIENT, first, 150 + first_output * rng.uniform(6, 10)),
        ("execute_tool lookup_order", _INTERNAL, workloads.TOOL, rng.uniform(20, 300)),
        ("execute_tool lookup_order", _INTERNAL, workloads.TOOL, rng.uniform(20, 300)),
        ("chat gpt-4o-mini", _CLIENT, second, 150 + second_output * rng.uniform(6, 10)),
        ("SELECT history", _CLIENT, workloads.DB, rng.uniform(1, 10)),
    ]
    out: list[tuple[str, int, int | None, dict[str, Any], float, float]] = []
    now = 1.0
    for name, kind, attributes, ms in steps:
        out.append((name, kind, 0, attributes, now, ms))
        now += ms
    return [("POST /v1/answer", _SERVER, None, workloads.HTTP_SERVER, 0.0, now + 1.0), *out]


def one_model_traces(rng: random.Random) -> Callable[[random.Random, str, int], list[Span]]:
    """A trace maker that cycles through the same 500 requests, each time with fresh trace and span ids."""
    requests = [_one_model_request(rng) for _ in range(500)]
    count = 0

    def make(ids: random.Random, trace_id: str, start: int) -> list[Span]:
        nonlocal count
        shape = requests[count % len(requests)]
        count += 1
        span_ids = [ids.getrandbits(63) | 1 for _ in shape]
        spans = [
            _span(
                trace_id,
                span_ids[n],
                None if parent is None else span_ids[parent],
                name,
                kind,
                start + int(at * _MS),
                start + int((at + ms) * _MS),
                attributes,
            )
            for n, (name, kind, parent, attributes, at, ms) in enumerate(shape)
        ]
        return [*spans[1:], spans[0]]  # the root ends last

    return make


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    spans_per_trace: int
    maker: Callable[[random.Random], Callable[[random.Random, str, int], list[Span]]]


WORKLOADS = {
    "standard": Workload(
        "standard",
        "standard AI trace of workloads.py (1 root, 3 stage, 6 unmatched spans), seeded durations",
        10,
        lambda rng: standard_trace,
    ),
    "one-model": Workload(
        "one-model",
        "one-model service: 500 requests of 8 spans, replicated with fresh trace ids",
        8,
        one_model_traces,
    ),
}


def _lines(workload: Workload, spans: int) -> Iterator[str]:
    rng = random.Random(f"{workload.name}:{spans}")
    make = workload.maker(random.Random(f"{workload.name}:shapes"))
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "support-assistant"}}]}
    batch: list[Span] = []
    written = 0
    trace = 0
    start = 1_700_000_000 * 1_000_000_000
    while written < spans:
        trace_spans = make(rng, f"{rng.getrandbits(128) | 1:032x}", start + trace * 1_000_000_000 // TRACES_PER_SECOND)
        trace += 1
        batch.extend(trace_spans)
        written += len(trace_spans)
        if len(batch) >= SPANS_PER_LINE or written >= spans:
            scope = {"scope": {"name": "support_assistant"}, "spans": batch}
            yield json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}, separators=(",", ":"))
            batch = []


def write_recording(workload: Workload, spans: int, path: Path) -> None:
    """``spans`` spans of ``workload`` (whole traces: the last trace may go a few spans over) at ``path``."""
    with path.open("w", encoding="utf-8") as handle:
        for line in _lines(workload, spans):
            handle.write(line + "\n")


@dataclass(frozen=True)
class Measured:
    cpu_s: float
    rss_mb: float
    exit: int


def measure(argv: list[str], src: Path) -> Measured:
    """Run ``argv`` in a fresh process (``src`` first on its path), output discarded; its CPU time and peak RSS."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return Measured(usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, process.returncode)


def run(sizes: list[int], commands: list[str], folder: Path, src: Path, names: list[str]) -> list[dict[str, Any]]:
    budgets = folder / "budgets.yaml"
    budgets.write_text(workloads.BUDGETS, encoding="utf-8")
    rows = []
    for workload in (WORKLOADS[name] for name in names):
        for spans in sizes:
            path = folder / f"{workload.name}-{spans}.jsonl"
            write_recording(workload, spans, path)
            floor = measure([sys.executable, "-c", _FLOOR_CODE, str(path)], src)
            row: dict[str, Any] = {"workload": workload.name, "spans": spans, FLOOR: floor}
            print(f"{workload.name} {spans:,} spans: {FLOOR} {floor.cpu_s:.1f} s, {floor.rss_mb:.0f} MB", flush=True)
            for command in commands:
                name, *options = COMMANDS[command]
                limits = ["--max-spans", str(spans * 2), "--max-input-size", "64G"]
                argv = [sys.executable, "-m", "latency_budget", name, str(path), "--budgets", str(budgets)]
                result = measure([*argv, *limits, *options], src)
                row[command] = result
                print(f"  {command}: {result.cpu_s:.1f} s, {result.rss_mb:.0f} MB (exit {result.exit})", flush=True)
            rows.append(row)
            path.unlink()
    return rows


def table(rows: list[dict[str, Any]], commands: list[str]) -> list[str]:
    """The Markdown table: per workload and size, each command's CPU, peak RSS and CPU over the floor's."""
    head = "| workload | spans | " + " | ".join(f"`{c}` CPU s | `{c}` peak RSS MB | `{c}` / floor" for c in commands)
    lines = [
        f"{head} | `{FLOOR}` CPU s | `{FLOOR}` peak RSS MB |",
        "| --- | ---: |" + " ---: |" * (3 * len(commands) + 2),
    ]
    for row in rows:
        floor: Measured = row[FLOOR]
        cells = [f"`{row['workload']}`", f"{row['spans']:,}"]
        for command in commands:
            measured: Measured = row[command]
            cells += [f"{measured.cpu_s:.2f}", f"{measured.rss_mb:.0f}", f"{measured.cpu_s / floor.cpu_s:.1f}"]
        cells += [f"{floor.cpu_s:.2f}", f"{floor.rss_mb:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def command_line(sizes: list[int], commands: list[str], names: list[str]) -> str:
    """The command that makes this table, as the README quotes it."""
    parts = ["python benchmarks/scaling.py", *(f"--spans {n}" for n in sizes)]
    if names != list(WORKLOADS):
        parts += [f"--workload {name}" for name in names]
    if commands != list(COMMANDS):
        parts += [f"--command {c}" for c in commands]
    return " ".join([*parts, "--write-readme"])


def write_readme(rows: list[dict[str, Any]], sizes: list[int], commands: list[str], names: list[str]) -> None:
    """Replace the README's block of this command line (or add one, at the end of the Scaling section)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()
    command = command_line(sizes, commands, names)
    begin = f"{BEGIN}`{command}` -->"
    block = [
        begin,
        "",
        f"One run of `{command}` at commit `{commit or 'unknown'}`: CPython {sys.version.split()[0]}, "
        f"{os.cpu_count()} cores. CPU is user + system seconds of the command's own process, peak RSS its "
        "maximum resident set; floor is a `json.loads` pass over the same lines.",
        "",
        *table(rows, commands),
        "",
        END,
    ]
    text = README.read_text(encoding="utf-8")
    if begin in text:
        before, rest = text.split(begin, 1)
        text = before + "\n".join(block) + rest.split(END, 1)[1]
    else:
        marker = "<!-- scaling: blocks end -->"
        if marker not in text:
            text = text.rstrip("\n") + "\n\n" + marker + "\n"
        text = text.replace(marker, "\n".join(block) + "\n\n" + marker)
    README.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, action="append", help="recording size in spans (repeat; default 100000)")
    parser.add_argument("--command", action="append", choices=list(COMMANDS), help="command to measure (repeat)")
    parser.add_argument("--workload", action="append", choices=list(WORKLOADS), help="workload to run (repeat)")
    parser.add_argument("--write-readme", action="store_true", help="write the table into benchmarks/README.md")
    parser.add_argument("--src", default=str(REPO / "src"), help="the package source to measure (default: src/)")
    parser.add_argument("--folder", help="where to write the recordings (default: a temporary folder)")
    args = parser.parse_args(argv)
    sizes = args.spans or [100_000]
    commands = [c for c in COMMANDS if c in (args.command or list(COMMANDS))]
    names = [w for w in WORKLOADS if w in (args.workload or list(WORKLOADS))]
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        rows = run(sizes, commands, Path(folder), Path(args.src), names)
    print("\n".join(table(rows, commands)))
    if args.write_readme:
        write_readme(rows, sizes, commands, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
