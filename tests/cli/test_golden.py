"""Golden outputs: ``report``, ``check`` and ``suggest`` on a committed recording give the committed answers.

The recording (``fixtures/golden/traces.jsonl``) is 30 requests of ``latency-budget demo``
(seed 5, two models, violations of several kinds and seven lever hints), its spans written
as OTLP/JSON lines of 20 spans each in the order they ended, as a Collector's file
exporter writes a service's batches: most traces span two lines. The expected outputs
were produced by the code *before* the streaming reader (issue 33), so these tests show
that reading trace by trace gives the same answers as reading the whole file first.

A deliberate change to what the report says is made by regenerating them, from the
repository root, and reviewing the diff::

    PYTHONPATH=src python tests/cli/test_golden.py            # the expected outputs only
    PYTHONPATH=src python tests/cli/test_golden.py --traces   # the recording too, then the outputs
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from latency_budget.cli import main

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "fixtures" / "golden"
TRACES = GOLDEN / "traces.jsonl"
BUDGETS = HERE / "fixtures" / "budgets.yaml"
SPANS_PER_LINE = 20
# The command, its options after the recording, and the file its expected output is in.
COMMANDS = {
    "report": (["--format", "json"], "report.json"),
    "check": (["--format", "json"], "check.json"),
    "suggest": ([], "suggest.yaml"),
}


def _run(command: str, *extra: str) -> tuple[int, str]:
    options, _ = COMMANDS[command]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main([command, str(TRACES), "--budgets", str(BUDGETS), *options, *extra])
    return code, out.getvalue()


def _comparable(command: str, text: str) -> Any:
    """The output with the paths of the inputs (which depend on where the repository is) left out."""
    if command == "suggest":
        return [line for line in text.splitlines() if str(HERE) not in line and "golden/traces.jsonl" not in line]
    data = json.loads(text)
    data.pop("budgets", None)
    data.pop("sources", None)
    return data


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_output_matches_the_committed_golden_output(command: str) -> None:
    """The command's output on the golden recording is the committed one, exit code included."""
    expected = json.loads((GOLDEN / "expected.json").read_text(encoding="utf-8"))[command]
    code, text = _run(command)
    assert code == expected["exit"]
    assert _comparable(command, text) == expected["output"]


def test_a_short_window_judges_traces_early_and_gives_the_same_report() -> None:
    """With --window 60 (a fifth of the recording), traces are judged as they close, and the report is the same."""
    expected = json.loads((GOLDEN / "expected.json").read_text(encoding="utf-8"))["report"]
    code, text = _run("report", "--window", "60")
    assert code == expected["exit"]
    assert _comparable("report", text) == expected["output"]


def _write_traces() -> None:
    """Run the demo and write its spans as OTLP/JSON lines of SPANS_PER_LINE spans, in the order they ended."""
    with tempfile.TemporaryDirectory() as folder:
        saved = Path(folder) / "demo.jsonl"
        subprocess.run(
            [
                *(sys.executable, "-m", "latency_budget", "demo", "--requests", "30", "--seed", "5", "--show", "0"),
                *("--budgets", str(BUDGETS), "--save-traces", str(saved)),
            ],
            check=True,
            capture_output=True,
        )
        spans = []
        for line in saved.read_text(encoding="utf-8").splitlines():
            for resource_spans in json.loads(line)["resourceSpans"]:
                for scope_spans in resource_spans["scopeSpans"]:
                    for span in scope_spans["spans"]:
                        spans.append((resource_spans["resource"], scope_spans["scope"], span))
    spans.sort(key=lambda item: (int(item[2]["endTimeUnixNano"]), item[2]["spanId"]))
    lines = []
    for first in range(0, len(spans), SPANS_PER_LINE):
        batch = spans[first : first + SPANS_PER_LINE]
        scopes: dict[str, Any] = {}
        for _resource, scope, span in batch:
            scopes.setdefault(scope["name"], {"scope": scope, "spans": []})["spans"].append(span)
        document = {"resourceSpans": [{"resource": batch[0][0], "scopeSpans": list(scopes.values())}]}
        lines.append(json.dumps(document, separators=(",", ":")))
    TRACES.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _write_expected() -> None:
    expected = {}
    for command in sorted(COMMANDS):
        code, text = _run(command)
        expected[command] = {"exit": code, "output": _comparable(command, text)}
    (GOLDEN / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    GOLDEN.mkdir(parents=True, exist_ok=True)
    if "--traces" in sys.argv[1:]:
        _write_traces()
    _write_expected()
