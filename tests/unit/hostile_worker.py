"""Worker for the hostile-input property test: reads each input under hard memory and CPU limits.

Run as a script. Each line on stdin is JSON ``{"kind": "budget" | "traces", "path": ...}``;
each answer on stdout is JSON ``{"outcome": ..., "message": ...}``, where ``outcome`` is
``ok`` or the exception's type name. Address space and CPU time are capped with
``resource.setrlimit`` before anything is read, so an input that makes the reader grow
or spin without bound ends in ``MemoryError`` or the worker's death, never in a machine
that swaps or a test that hangs.
"""

from __future__ import annotations

import json
import resource
import sys

ADDRESS_SPACE = 768 << 20  # the interpreter with its imports takes about 200 MB of it
CPU_SECONDS = 300  # for the whole worker: a backstop, far above what the examples need


def main() -> None:
    """Answer one line per request until stdin closes."""
    from latency_budget import BudgetConfigError, load_budgets  # noqa: PLC0415 - after the limits are set
    from latency_budget.cli._inputs import InputLimits, TraceInputError, read_trace_files  # noqa: PLC0415

    limits = InputLimits(max_bytes=8 << 20, max_line_bytes=1 << 20, max_depth=100, max_spans=100_000)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["kind"] == "budget":
                load_budgets(request["path"])
            else:
                read_trace_files([request["path"]], limits)
            answer = {"outcome": "ok", "message": ""}
        except (BudgetConfigError, TraceInputError) as exc:
            answer = {"outcome": type(exc).__name__, "message": str(exc)}
        except BaseException as exc:  # what the test exists to catch: reported, not raised
            answer = {"outcome": type(exc).__name__, "message": repr(exc)[:500]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    main()
