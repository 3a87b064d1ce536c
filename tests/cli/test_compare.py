"""``latency-budget compare``: planted recordings before and after, read as report reads them, and the CI gate.

The recordings are OTLP JSON lines written here from seeded log-normal stage times with
explicit timestamps: each request is a server span around a retrieval, then a chat call
with a ``prefetch`` beside it (shorter than the call, so off the critical path).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import math
import random
import re
import sys
import tracemalloc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from latency_budget._core.comparison import compare
from latency_budget.cli import main

from .conftest import REPO, assert_one_line_error, run_cli

BUDGETS = """\
version: 1
requests: all
stages:
  retrieval:
    match: {name: "retrieve *"}
  model_call: {}
  prefetch:
    match: {name: "prefetch *"}
"""
JAEGER = ("--jaeger", "http://127.0.0.1:9", "--service", "s")  # windows are checked before any request is sent
MEDIANS = {"retrieval": 120.0, "model_call": 800.0, "prefetch": 300.0}
START_NS = 1_700_000_000_000_000_000


def _attributes(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    def value(v: Any) -> dict[str, Any]:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, float):
            return {"doubleValue": v}
        return {"stringValue": str(v)}

    return [{"key": k, "value": value(v)} for k, v in values.items()]


def _span(trace: str, span: int, parent: int | None, name: str, start: int, end: int, **attrs: Any) -> dict[str, Any]:
    found = {
        "traceId": trace,
        "spanId": f"{span:016x}",
        "name": name,
        "kind": 2 if parent is None else 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": _attributes(attrs),
    }
    if parent is not None:
        found["parentSpanId"] = f"{parent:016x}"
    return found


def write_recording(
    path: Path,
    seed: int,
    n: int,
    medians: Mapping[str, float],
    streamed: float = 0.0,
    quality: tuple[float, float] | None = None,
) -> Path:
    """``n`` requests, one OTLP JSON line each, stage times drawn from log-normals around ``medians``; a
    ``streamed`` share of the chat calls stream, their first chunk after a quarter of the call; with
    ``quality`` (error rate, mean relevance), the chat span's status and a ``gen_ai.evaluation.result`` event."""
    rng = random.Random(seed)
    lines = []
    for index in range(n):
        retrieval, model_call, prefetch = (medians[s] * math.exp(rng.gauss(0, 0.3)) for s in MEDIANS)
        begin = START_NS + index * 10_000_000_000
        ms = 1_000_000
        trace = f"{seed:08x}{index:024x}"
        t1 = begin + round(retrieval * ms)
        call_end = t1 + round(model_call * ms)
        prefetch_end = t1 + round(prefetch * ms)
        end = max(call_end, prefetch_end) + 2 * ms
        stream: dict[str, Any] = {"gen_ai.request.stream": rng.random() < streamed}
        if stream["gen_ai.request.stream"]:
            stream["gen_ai.response.time_to_first_chunk"] = model_call / 4 / 1000
        chat_extra: dict[str, Any] = {}
        if quality is not None:
            error_rate, relevance = quality
            score = round(min(1.0, max(0.0, rng.gauss(relevance, 0.1))), 3)
            evaluation = {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": score}
            chat_extra["events"] = [
                {
                    "name": "gen_ai.evaluation.result",
                    "timeUnixNano": str(call_end),
                    "attributes": _attributes(evaluation),
                }
            ]
            if rng.random() < error_rate:
                chat_extra["status"] = {"code": 2}
        spans = [
            _span(trace, 1, None, "POST /chat", begin, end),
            _span(trace, 2, 1, "retrieve documents", begin, t1),
            _span(
                trace,
                3,
                1,
                "chat gpt-4o-mini",
                t1,
                call_end,
                **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini", **stream},
            )
            | chat_extra,
            _span(trace, 4, 1, "prefetch profile", t1, prefetch_end),
        ]
        document = {
            "resourceSpans": [
                {
                    "resource": {"attributes": _attributes({"service.name": "planted"})},
                    "scopeSpans": [{"scope": {"name": "planted"}, "spans": spans}],
                }
            ]
        }
        lines.append(json.dumps(document))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def budgets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The planted recordings' budget file."""
    path = tmp_path_factory.mktemp("compare-budgets") / "budgets.yaml"
    path.write_text(BUDGETS, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Budgets, a before recording, and an after one: model call 25% faster, retrieval 40% slower, prefetch halved."""
    folder = tmp_path_factory.mktemp("compare")
    budgets = folder / "budgets.yaml"
    budgets.write_text(BUDGETS, encoding="utf-8")
    after = {"retrieval": 120.0 * 1.4, "model_call": 800.0 * 0.75, "prefetch": 150.0}
    return {
        "budgets": budgets,
        "before": write_recording(folder / "before.jsonl", 1, 400, MEDIANS),
        "after": write_recording(folder / "after.jsonl", 2, 400, after),
        "same": write_recording(folder / "same.jsonl", 3, 400, MEDIANS),
    }


def _main(*argv: str | Path, stdin: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def _json(planted: Mapping[str, Path], before: str, after: str, *extra: str) -> tuple[int, dict[str, Any]]:
    code, out, err = _main("compare", planted[before], planted[after], "-b", planted["budgets"], "-f", "json", *extra)
    assert code in (0, 1), err
    return code, json.loads(out)


def _row(document: Mapping[str, Any], stage: str, model: str | None = None) -> dict[str, Any]:
    return next(r for r in document["rows"] if r["stage"] == stage and r["model"] == model)


def test_planted_changes_are_found_with_their_sign_and_within_their_intervals(planted: dict[str, Path]) -> None:
    """From two recordings: model call faster, retrieval slower, each interval holding the planted p50 change."""
    code, document = _json(planted, "before", "after")
    assert code == 0
    model, retrieval = _row(document, "model_call"), _row(document, "retrieval")
    assert model["verdict"] == "faster"
    assert retrieval["verdict"] == "slower"
    assert model["change"]["low_ms"] <= -200.0 <= model["change"]["high_ms"]
    assert retrieval["change"]["low_ms"] <= 48.0 <= retrieval["change"]["high_ms"]
    assert document["end_to_end"]["verdict"] == "faster"
    assert document["statistics"]["resamples"] == 2000
    assert document["statistics"]["seed"] == 0


def test_a_faster_stage_off_the_critical_path_is_reported_as_not_moving_the_end_to_end(
    planted: dict[str, Path],
) -> None:
    """Prefetch halved beside a longer model call: faster, not reaching the end to end, said in the headline."""
    _code, document = _json(planted, "before", "after")
    prefetch = _row(document, "prefetch")
    assert prefetch["verdict"] == "faster"
    assert prefetch["reached_end_to_end"] is False
    assert any(
        line.startswith("Did not reach the end to end time") and "prefetch" in line for line in document["headline"]
    )


def test_two_samples_of_the_same_traffic_show_no_change(planted: dict[str, Path]) -> None:
    """Before against a second sample of the same traffic: every verdict is no change, exit 0 under a gate."""
    code, document = _json(planted, "before", "same", "--max-regression", "5%")
    assert code == 0
    assert {row["verdict"] for row in document["rows"]} == {"no change"}
    assert document["end_to_end"]["verdict"] == "no change"
    assert document["gate"]["passed"] is True


def test_max_regression_fails_a_slower_stage_with_exit_1(planted: dict[str, Path]) -> None:
    """--max-regression retrieval=10% fails on a 40% slower retrieval (exit 1) and names it; 60% passes."""
    code, out, _ = _main(
        "compare", planted["before"], planted["after"], "-b", planted["budgets"], "--max-regression", "retrieval=10%"
    )
    assert code == 1
    assert "Gate: FAILED at p50:" in out
    assert "- retrieval=10%: profile default, +" in out
    code, out, _ = _main(
        "compare", planted["before"], planted["after"], "-b", planted["budgets"], "--max-regression", "retrieval=60%"
    )
    assert code == 0
    assert "Gate: passed (retrieval=60% at p50)." in out


def test_max_regression_of_the_end_to_end_in_ms(planted: dict[str, Path]) -> None:
    """A bare limit is the end to end's: the after side against the before side fails where it is slower."""
    code, _, _ = _main(
        "compare", planted["after"], planted["before"], "-b", planted["budgets"], "--max-regression", "50ms"
    )
    assert code == 1  # reversed: before is the faster recording, so end to end is slower by about 140ms
    code, _, _ = _main(
        "compare", planted["before"], planted["after"], "-b", planted["budgets"], "--max-regression", "50ms"
    )
    assert code == 0


def test_one_side_reads_standard_input(planted: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """'-' reads a side from standard input and compares as the file would."""
    text = planted["after"].read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text)))
    code, out, err = _main("compare", planted["before"], "-", "-b", planted["budgets"], "-f", "json")
    assert code == 0, err
    assert _row(json.loads(out), "model_call")["verdict"] == "faster"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["-", "-"], "only one side can read standard input"),
        (["{before}", "{after}", "--max-regression", "nowhere=10%"], "no stage 'nowhere'"),
        (["{before}", "{after}", "--max-regression", "ten"], "expected [STAGE=]LIMIT"),
        (["{before}", "{after}", "--resamples", "5"], "expected 100 to 100,000 resamples"),
        (["{before}", "{missing}"], "cannot read"),
        ([*JAEGER, "2h", "1h"], "BEFORE: with --jaeger, expected a window FROM..TO of durations ago"),
        ([*JAEGER, "1h..2h", "1h..now"], "1h..2h: the window must start before it ends"),
        ([*JAEGER, "2h..1h", "soon..now"], "soon..now: expected a duration"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(planted: dict[str, Path], argv: list[str], fragment: str) -> None:
    """Bad options and unreadable sides are one line on standard error, exit 2."""
    names = {**{k: str(v) for k, v in planted.items()}, "missing": str(planted["before"]) + ".missing"}
    result = run_cli("compare", *(a.format(**names) for a in argv), "-b", planted["budgets"])
    assert result.returncode == 2
    assert_one_line_error(result, fragment)


def test_markdown_and_html_outputs(planted: dict[str, Path], tmp_path: Path) -> None:
    """Markdown gives the table and headline; --html overlays before (outline) and after (bars) per stage."""
    page = tmp_path / "compare.html"
    code, out, err = _main(
        "compare", planted["before"], planted["after"], "-b", planted["budgets"], "-f", "markdown", "--html", page
    )
    assert code == 0, err
    assert out.startswith("### Before against after")
    assert "| default | `model_call` | 400 → 400 |" in out
    html = page.read_text(encoding="utf-8")
    assert "Content-Security-Policy" in html
    assert "<script" not in html
    cards = html.split('class="row-card')[1:]
    assert len(cards) == 5  # end to end, three stages, the model's calls
    assert all('class="before"' in card and 'class="after"' in card for card in cards)


def test_the_readme_quotes_a_compare_of_the_demo_before_and_after_streaming(tmp_path: Path) -> None:
    """The README's commands, run again: each line of its abridged compare output is printed, in that order."""
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Did the change win the time back: `latency-budget compare`", 1)[1]
    commands = section.split("```bash\n", 1)[1].split("\n```", 1)[0].splitlines()
    quoted = section.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert [c.split()[:2] for c in commands] == [["latency-budget", "demo"]] * 2 + [["latency-budget", "compare"]]
    for command in commands[:2]:
        result = run_cli(*command.split()[1:], cwd=tmp_path, timeout=300)
        assert result.returncode == 0, result.stderr
    result = run_cli(*commands[2].split()[1:], cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    printed = iter(result.stdout.splitlines())
    missing = [line for line in quoted if line != "..." and not any(line == out for out in printed)]
    assert missing == []
    assert len([line for line in quoted if line != "..."]) >= 8


def _held_per_request(tmp_path: Path) -> float:
    """Bytes the comparison keeps per request of each side, beside the reports (600 against 300 requests)."""
    from latency_budget.cli._recorded import judge_recording, load_config  # noqa: PLC0415

    sys.path.insert(0, str(REPO / "benchmarks"))
    import scaling  # type: ignore[import-not-found]  # noqa: PLC0415 - the benchmark's own recordings
    import workloads  # type: ignore[import-not-found]  # noqa: PLC0415

    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(workloads.BUDGETS, encoding="utf-8")
    config, _ = load_config(str(budgets))
    held = []
    for traces in (300, 600):
        path = tmp_path / f"standard-{traces}.jsonl"
        scaling.write_recording(scaling.WORKLOADS["standard"], traces * 10, path)
        reports = judge_recording([str(path)], config)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            found = compare(reports, reports, stages=config.stage_names, resamples=200)
            gc.collect()
            held.append(tracemalloc.get_traced_memory()[0] - before)
            del found
        finally:
            tracemalloc.stop()
    return (held[1] - held[0]) / 300 / 2


def test_docs_quote_the_bytes_the_comparison_keeps_per_request(tmp_path: Path) -> None:
    """docs/cli.md's bytes kept per request of each side by the comparison, beside report's, to 10%."""
    text = " ".join((REPO / "docs" / "cli.md").read_text(encoding="utf-8").split())
    quoted = re.search(r"the comparison keeps about \*\*([\d,]+) bytes\*\* per request of each side", text)
    assert quoted is not None
    assert int(quoted.group(1).replace(",", "")) == pytest.approx(_held_per_request(tmp_path), rel=0.1)


def test_a_lever_the_after_side_shows_applied_is_shown_against_its_estimate(tmp_path: Path, budgets: Path) -> None:
    """Half the answers streamed before, all after: streaming's estimate stands beside the measured wait for text,
    and the measured interval holds the estimate; the same traffic twice shows no lever applied."""
    before = write_recording(tmp_path / "before.jsonl", 31, 400, MEDIANS, streamed=0.5)
    after = write_recording(tmp_path / "after.jsonl", 32, 400, MEDIANS, streamed=1.0)
    code, out, err = _main("compare", before, after, "-b", budgets, "-f", "json")
    assert code == 0, err
    [lever] = json.loads(out)["predicted_against_measured"]
    assert (lever["kind"], lever["stage"], lever["saves"]) == ("streaming", "model_call", "first_token")
    assert re.fullmatch(r"answers streamed: (4\d|5\d)% → 100%", lever["shows"])
    measured = lever["measured"]
    assert measured["verdict"] == "faster"
    assert measured["low_ms"] <= -lever["predicted_saving_ms"] <= measured["high_ms"]
    same = write_recording(tmp_path / "same.jsonl", 33, 400, MEDIANS, streamed=0.5)
    code, out, _ = _main("compare", before, same, "-b", budgets, "-f", "json")
    assert json.loads(out)["predicted_against_measured"] == []


def test_a_faster_model_call_with_worse_answers_is_marked_and_gated(tmp_path: Path, budgets: Path) -> None:
    """Evaluation events and error status in the recordings, read by issue 46's reader: the faster model call's
    answers got worse (errors 2% → 25%, relevance 0.8 → 0.55): faster, but worse answers; --max-quality-drop exit 1."""
    faster = {**MEDIANS, "model_call": 600.0}
    before = write_recording(tmp_path / "before.jsonl", 11, 300, MEDIANS, quality=(0.02, 0.8))
    after = write_recording(tmp_path / "after.jsonl", 12, 300, faster, quality=(0.25, 0.55))
    code, out, err = _main("compare", before, after, "-b", budgets, "-f", "json")
    assert code == 0, err
    model = _row(json.loads(out), "model_call")
    assert model["verdict"] == "faster"
    worse = {q["metric"]: q for q in model["quality"] if q["worse"]}
    assert set(worse) == {"errors", "score: relevance"}
    assert worse["errors"]["low"] <= 0.23 <= worse["errors"]["high"]
    code, out, _ = _main("compare", before, after, "-b", budgets, "--max-quality-drop", "model_call=10%")
    assert code == 1
    assert "faster, but worse answers (errors, score: relevance)" in out
    assert "- model_call=10%: profile default, model_call, errors" in out
    same = write_recording(tmp_path / "same.jsonl", 13, 300, MEDIANS, quality=(0.02, 0.8))
    code, out, _ = _main("compare", before, same, "-b", budgets, "--max-quality-drop", "5%", "-f", "json")
    assert code == 0
    assert not any(q["worse"] for row in json.loads(out)["rows"] for q in row["quality"])


def test_evaluation_log_records_of_each_side_are_joined_to_its_calls(tmp_path: Path, budgets: Path) -> None:
    """--before-logs and --after-logs: evaluation results as log records, each side's joined to its own calls."""

    def logs(path: Path, recording: Path, relevance: float) -> Path:
        records = []
        for line in recording.read_text(encoding="utf-8").splitlines():
            chat = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][2]
            attributes = {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": relevance}
            records.append(
                {
                    "timeUnixNano": chat["endTimeUnixNano"],
                    "eventName": "gen_ai.evaluation.result",
                    "traceId": chat["traceId"],
                    "spanId": chat["spanId"],
                    "attributes": _attributes(attributes),
                }
            )
        document = {
            "resourceLogs": [{"resource": {}, "scopeLogs": [{"scope": {"name": "evals"}, "logRecords": records}]}]
        }
        path.write_text(json.dumps(document) + "\n", encoding="utf-8")
        return path

    before = write_recording(tmp_path / "before.jsonl", 14, 100, MEDIANS)
    after = write_recording(tmp_path / "after.jsonl", 15, 100, MEDIANS)
    code, out, err = _main(
        "compare", before, after, "-b", budgets, "-f", "json",
        "--before-logs", logs(tmp_path / "before-logs.jsonl", before, 0.9),
        "--after-logs", logs(tmp_path / "after-logs.jsonl", after, 0.4),
    )  # fmt: skip
    assert code == 0, err
    [score] = [q for q in _row(json.loads(out), "model_call")["quality"] if q["metric"] == "score: relevance"]
    assert (score["before"], score["after"], score["worse"]) == (pytest.approx(0.9), pytest.approx(0.4), True)
