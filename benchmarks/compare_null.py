"""How often ``latency-budget compare`` calls a change between two samples of the same traffic.

Run:  python benchmarks/compare_null.py --pairs 40 --requests 200

Each pair is two runs of the demo (``run_demo``, the same code as ``latency-budget demo``)
with different seeds and no lever applied: the same traffic, sampled twice. Each pair is
compared as ``compare`` compares two recordings (:func:`latency_budget._core.comparison.compare`,
default statistics), and a pair is *flagged* when any row, first token, critical-path or
quality change, or the end-to-end verdict, says faster, slower, better or worse. The
intervals hold together at 95%, so about 1 pair in 20 may be flagged; docs/cli.md quotes
the count of this run with its defaults. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

from latency_budget._core.comparison import Comparison, compare
from latency_budget._demo import example_budgets, run_demo


def changes(found: Comparison) -> list[str]:
    """Every change the comparison calls, named."""
    named = [
        f"{row.profile}/{row.stage}/{row.model}: {what}"
        for row in (*found.rows, found.end_to_end)
        for what, change in (
            ("time", row.change),
            ("first token", row.first_token_change),
            ("critical", row.critical_change),
        )
        if change is not None and change.verdict != "no change"
    ]
    named += [
        f"{row.profile}/{row.stage}: {q.metric}" for row in found.rows for q in row.quality if q.worse or q.better
    ]
    if found.end_to_end_verdict not in (None, "no change"):
        named.append(f"end to end: {found.end_to_end_verdict}")
    return named


def main() -> None:
    """Compare ``--pairs`` pairs of demo runs (seeds 500 and 501, 502 and 503, ...); print the flagged ones."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    config = example_budgets()
    profiles = ["default", *(p.name for p in config.profiles)]
    flagged = {}
    started = time.process_time()
    comparisons = 0
    for pair in range(args.pairs):
        sides = [
            [report for _, report in run_demo(config, requests=args.requests, seed=500 + 2 * pair + n).judged()]
            for n in (0, 1)
        ]
        found = compare(sides[0], sides[1], stages=config.stage_names, profiles=profiles)
        comparisons = found.tests
        if changes(found):
            flagged[pair] = changes(found)
    print(
        json.dumps(
            {
                "pairs": args.pairs,
                "requests": args.requests,
                "comparisons_per_pair": comparisons,
                "flagged": len(flagged),
                "which": flagged,
                "cpu_s": round(time.process_time() - started, 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
