"""Where the processor spends its time: a pyinstrument profile of the candidate, per case.

Run:  pip install -e '.[bench]'
      python benchmarks/hotspots.py                     (cases standard, unmatched, wide-full)
      python benchmarks/hotspots.py --case wide --seconds 10 --tree

Runs a case through the candidate provider (LatencyBudgetProcessor in front of a
discarding BatchSpanProcessor) under pyinstrument's sampling profiler, then reports the
share of the run spent inside the processor's hooks (not counting the downstream
processor they call) and the functions with the most self time in there, SDK functions
the hooks call included. Profiles the main thread only, so the threaded cases show
nothing useful; everything else is single-threaded.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from pyinstrument import Profiler
from pyinstrument.frame import Frame

from workloads import CASES, Case, provider

DEFAULT_CASES = ("standard", "unmatched", "wide-full")
_HOOKS = ("on_start", "on_end")


def _is_processor_hook(frame: Frame) -> bool:
    return frame.function in _HOOKS and frame.file_path is not None and "latency_budget" in frame.file_path


def _is_downstream_hook(frame: Frame) -> bool:
    return frame.function in _HOOKS and not _is_processor_hook(frame)


def _label(frame: Frame) -> str:
    path = frame.file_path or "?"
    marker = path.rfind("latency_budget/")
    if marker < 0:
        marker = path.rfind("opentelemetry/")
    short = path[marker:] if marker >= 0 else frame.file_path_short or path
    owner = f"{frame.class_name}." if frame.class_name else ""
    return f"{owner}{frame.function}  {short}:{frame.line_no}"


@dataclass
class Hotspots:
    """Self time by function inside the processor's hooks, and the run's total."""

    total: float = 0.0
    inside: float = 0.0
    by_function: collections.Counter[str] = field(default_factory=collections.Counter)

    def walk(self, frame: Frame, inside: bool = False) -> None:
        if inside and _is_downstream_hook(frame):
            return  # the downstream processor's time is not ours
        if _is_processor_hook(frame):
            inside = True
        if inside:
            self.by_function[_label(frame)] += frame.total_self_time
            self.inside += frame.total_self_time
        for child in frame.children:
            if not child.is_synthetic:
                self.walk(child, inside)


def profile(case: Case, seconds: float, interval: float) -> tuple[Hotspots, Profiler]:
    """Profile ``case`` on the candidate provider for about ``seconds``."""
    tracer_provider, _ = provider(case, candidate=True)
    tracer = tracer_provider.get_tracer("bench", "1.0")
    units = case.units(200)
    case.run(tracer, max(1, units // 4))  # warm up
    profiler = Profiler(interval=interval, async_mode="disabled")
    profiler.start()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        case.run(tracer, units)
    profiler.stop()
    tracer_provider.shutdown()
    root = profiler.last_session.root_frame(trim_stem=False) if profiler.last_session else None
    spots = Hotspots()
    if root is not None:
        spots.total = root.time
        spots.walk(root)
    return spots, profiler


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=list(CASES), action="append", help=f"default: {', '.join(DEFAULT_CASES)}")
    parser.add_argument("--seconds", type=float, default=5.0, help="profiled time per case")
    parser.add_argument("--interval", type=float, default=0.0002, help="sampling interval, seconds")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--tree", action="store_true", help="also print pyinstrument's call tree")
    args = parser.parse_args(argv)
    for key in args.case or DEFAULT_CASES:
        spots, profiler = profile(CASES[key], args.seconds, args.interval)
        share = spots.inside / spots.total if spots.total else 0.0
        print(f"\n{key}: {CASES[key].title}")
        print(f"  inside LatencyBudgetProcessor hooks (downstream excluded): {share:.0%} of {spots.total:.1f} s")
        for label, self_time in spots.by_function.most_common(args.top):
            print(f"  {self_time / spots.total:6.1%}  {self_time / spots.inside:6.1%} of hooks  {label}")
        if args.tree:
            print(profiler.output_text(unicode=False, color=False, show_all=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
