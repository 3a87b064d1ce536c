"""Per-trace instruction counts under valgrind's callgrind: deterministic overhead ratios.

Run:  python benchmarks/instructions.py             (every case; about 10 minutes on 2 cores)
      python benchmarks/instructions.py --case standard --case unmatched
      python benchmarks/overhead.py --instructions   (the same)
      python benchmarks/overhead.py --instructions --write-readme   (every case, into benchmarks/README.md)

For each case and each provider (baseline, candidate), a fresh interpreter runs under
``valgrind --tool=callgrind`` twice: once with 0 measured traces and once with k, after
the same set-up and warm-up; the difference divided by k is the per-trace instruction
count, with start-up, imports and warm-up subtracted out. Trace and span ids are seeded,
hash randomisation is off and the exporter's worker only runs at shutdown (see
quiet_batch_processor), so counts repeat to within about 0.05% (the thread cases, whose
interleaving valgrind's scheduler decides, to within 1%). Valgrind serialises threads, so
lock contention does not show here.

With the standard case it also counts the levers' share apart (``levers_child``): the
root-end work of the latency levers alone, reading the stage spans into samples and
updating the recent-call series, on the inputs the processor gave the last warm-up root.

The interpreter must be the real one, not a pyenv shim: pass --python or set
LATENCY_BUDGET_BENCH_PYTHON when ``sys.executable`` is a wrapper.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import latency_budget
from latency_budget._core import trace_state
from latency_budget._core.call_facts import RecordedCalls, recorded_calls
from workloads import CASES, WIDE_CHILDREN, Case, DiscardExporter, provider, seed_ids, wide_case

HERE = Path(__file__).resolve().parent

# Measured traces per case (k), and the warm-up before them; enough that per-trace noise
# (the exporter's batches, the GC) averages out, few enough that valgrind finishes.
MEASURED = {"wide": 2, "wide-full": 2, "asyncio": 1000, "unmatched": 100, "unmatched-excluded": 100}
DEFAULT_MEASURED = 200
LEVERS_MEASURED = 3000  # root ends of the levers alone (about 25 K instructions each)
SCALING = (1_000, WIDE_CHILDREN)  # widths for --scaling: per-span cost must not grow with them

_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")

# --write-readme replaces what lies between these lines of benchmarks/README.md.
README = HERE / "README.md"
BEGIN, END = "<!-- figures: begin (written by overhead.py --instructions --write-readme) -->", "<!-- figures: end -->"


def _case(key: str) -> Case:
    if key in CASES:
        return CASES[key]
    base, _, width = key.partition("@")  # wide@1000, wide-full@1000
    return wide_case(int(width), full=base == "wide-full")


def _measured(key: str) -> int:
    base, _, width = key.partition("@")
    if width:
        return max(2, 20_000 // int(width))
    return MEASURED.get(base, DEFAULT_MEASURED)


def quiet_batch_processor() -> SpanProcessor:
    """The benchmarks' downstream, a ``BatchSpanProcessor`` that discards, whose worker never wakes early.

    The usual one's worker thread wakes every few seconds and whenever 512 spans wait,
    and under valgrind, where a run takes minutes, how often a timer fires depends on
    the machine's load: that moved counts by up to 2% between runs. With a queue and a
    batch larger than a run's spans and a delay longer than a run, the worker exports
    everything at shutdown, which both the 0-trace and the k-trace run include, so the
    export's cost per span still counts, the same way in every run.
    """
    return BatchSpanProcessor(
        DiscardExporter(), max_queue_size=1 << 20, max_export_batch_size=1 << 20, schedule_delay_millis=1e9
    )


def child(key: str, variant: str, units: int) -> None:
    """Run inside valgrind: set up, warm up, run ``units`` measured units, shut down."""
    case = _case(key)
    seed_ids()
    tracer_provider, _ = provider(case, candidate=variant == "candidate", downstream=quiet_batch_processor)
    tracer = tracer_provider.get_tracer("bench", "1.0")
    case.run(tracer, max(1, min(50, _measured(key) // 4)))
    if units:
        case.run(tracer, units)
    tracer_provider.shutdown()


def levers_child(units: int) -> None:
    """Run inside valgrind: the levers' root-end work on the standard trace, ``units`` times.

    The warm-up runs the standard case through the processor as the benchmark does; the
    last root's inputs to the levers (its raw stage calls and the judged report) are
    taken from ``evaluate``'s arguments. Each measured unit then does what a root's end
    does for the levers: read the calls (``recorded_calls``) and call the processor's
    own lever callback, which updates its recent-call series and estimates when due.
    """
    seed_ids()
    tracer_provider, _ = provider(CASES["standard"], candidate=True, downstream=quiet_batch_processor)
    taken: dict[str, Any] = {}
    evaluate = trace_state.evaluate

    def taking(*args: Any, **kwargs: Any) -> Any:
        levers, calls = kwargs["levers"], kwargs["calls"]

        def levers_taken(given: Any, draft: Any) -> Any:
            taken.update(levers=levers, draft=draft)
            return levers(given, draft)

        if isinstance(calls, RecordedCalls):
            taken["raw"] = list(calls._raw)
            kwargs["levers"] = levers_taken
        return evaluate(*args, **kwargs)

    trace_state.evaluate = taking  # type: ignore[assignment]
    try:
        CASES["standard"].run(tracer_provider.get_tracer("bench", "1.0"), 50)
    finally:
        trace_state.evaluate = evaluate
    tracer_provider.shutdown()  # no worker thread runs during the count
    _root_ends(units, taken["levers"], taken["raw"], taken["draft"])


def _root_ends(units: int, levers: Any, raw: Any, draft: Any) -> None:
    for _ in range(units):  # in a function: a module-level loop costs about 400 instructions a turn
        levers(recorded_calls(raw), draft)


def levers_count(python: str) -> float:
    """The levers' root-end instructions per standard trace (see levers_child)."""
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(_instructions, python, "standard", "levers", units) for units in (0, LEVERS_MEASURED)]
        none, some = (run.result() for run in runs)
    return (some - none) / LEVERS_MEASURED


@dataclass
class Count:
    """Per-trace instructions of one case for both providers."""

    key: str
    units: int
    spans_per_unit: int
    baseline: float
    candidate: float

    @property
    def ratio(self) -> float:
        return self.candidate / self.baseline

    def line(self) -> str:
        added = (self.candidate - self.baseline) / self.spans_per_unit
        return (
            f"{self.key:<17} ratio {self.ratio:.3f}  baseline {self.baseline:>13,.0f}  "
            f"candidate {self.candidate:>13,.0f} instr/trace  ({added:+,.0f} instr/span, k={self.units})"
        )


def _instructions(python: str, key: str, variant: str, units: int) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        python,
        str(HERE / "instructions.py"),
        "--child",
        key,
        variant,
        str(units),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    found = _COLLECTED.findall(done.stderr)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return int(found[-1])


def compile_sources(python: str) -> None:
    """Write the package's and the benchmarks' .pyc files before any valgrind run.

    Otherwise a run that writes them counts their compilation, and runs started together
    race to write them: after an edit, that moved a per-trace count by up to 500.
    """
    package = Path(latency_budget.__file__).resolve().parent
    subprocess.run([python, "-m", "compileall", "-q", str(package), str(HERE)], capture_output=True, check=False)


def count(python: str, keys: Sequence[str], jobs: int) -> Iterator[Count]:
    """Instruction counts for ``keys`` in order, running ``jobs`` valgrind processes at once."""
    with ThreadPoolExecutor(jobs) as pool:
        pending = {
            (key, variant, units): pool.submit(_instructions, python, key, variant, units)
            for key in keys
            for variant in ("baseline", "candidate")
            for units in (0, _measured(key))
        }
        for key in keys:
            k = _measured(key)
            per_unit = [
                (pending[(key, v, k)].result() - pending[(key, v, 0)].result()) / k for v in ("baseline", "candidate")
            ]
            yield Count(key, k, _case(key).spans_per_unit, per_unit[0], per_unit[1])


def figures_table(counts: Sequence[Count], python: str, command: str, levers: float | None = None) -> str:
    """The figures block of benchmarks/README.md: one row per case, all from this run."""
    commit = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    lines = [
        BEGIN,
        "",
        f"One run of `{command}` at commit `{commit or '?'}`:",
        f"CPython {platform.python_version()} ({os.path.basename(python)}), opentelemetry-sdk "
        f"{version('opentelemetry-sdk')}, {os.cpu_count()} cores. Instructions per trace under callgrind: the count",
        "with k measured traces less the count with none, over k (see Method).",
        "",
        "| case | baseline instr/trace | candidate instr/trace | ratio | added per span | k |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in counts:
        added = (c.candidate - c.baseline) / c.spans_per_unit
        lines.append(
            f"| `{c.key}`: {_case(c.key).title} | {c.baseline:,.0f} | {c.candidate:,.0f} | {c.ratio:.3f} "
            f"| {added:+,.0f} | {c.units} |"
        )
    if levers is not None:
        lines += [
            "",
            f"The levers' share of the `standard` case, counted apart: {levers:,.0f} instructions per trace at the",
            "root's end (reading its stage spans and updating the recent-call series; "
            f"k={LEVERS_MEASURED:,}, see Method).",
        ]
    lines += ["", END]
    return "\n".join(lines)


def write_readme(block: str) -> None:
    """Replace the figures block of benchmarks/README.md with ``block``."""
    text = README.read_text(encoding="utf-8")
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{README}: no figures block ({BEGIN} ... {END}) to replace")
    README.write_text(head + block + tail, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", help="cases to count (default: all); wide@N for N children")
    parser.add_argument("--scaling", action="store_true", help=f"also the wide cases at {SCALING[0]:,} children")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="valgrind processes at once")
    parser.add_argument("--python", default=os.environ.get("LATENCY_BUDGET_BENCH_PYTHON", sys.executable))
    parser.add_argument(
        "--write-readme",
        action="store_true",
        help="write the figures table of benchmarks/README.md from this run (every case, or those given)",
    )
    parser.add_argument("--child", nargs=3, metavar=("CASE", "VARIANT", "UNITS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        key, variant, units = args.child
        if variant == "levers":
            levers_child(int(units))
        else:
            child(key, variant, int(units))
        return 0
    if shutil.which("valgrind") is None:
        print("instructions: valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    python = os.path.realpath(args.python)
    if args.write_readme and args.scaling:
        parser.error("--write-readme writes the cases of one run: drop --scaling")
    keys = list(args.case or CASES)
    if args.scaling:
        keys += [f"wide@{SCALING[0]}", f"wide-full@{SCALING[0]}"]
    for key in keys:
        _case(key)  # unknown names fail here, before any valgrind run
    print(f"callgrind instruction counts per trace, {python}; k measured traces minus 0")
    compile_sources(python)
    counts = []
    for result in count(python, keys, args.jobs):
        print(result.line(), flush=True)
        counts.append(result)
    levers = None
    if "standard" in keys:
        levers = levers_count(python)
        print(f"{'levers':<17} {levers:,.0f} instr/trace at the standard trace's root end (k={LEVERS_MEASURED:,})")
    if args.write_readme:
        cases = "".join(f" --case {key}" for key in args.case or ())
        command = f"python benchmarks/overhead.py --instructions --write-readme{cases}"
        write_readme(figures_table(counts, python, command, levers))
        print(f"Wrote the figures table of {README}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
