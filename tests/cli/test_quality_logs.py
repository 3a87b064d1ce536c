"""``report`` reads the answers' quality: evaluation results as span events and as log records (``--logs``, or
both signals in one file), guardrail decisions, error status and finish reasons, per stage and model.

Planted recordings: two models in one stage, each request a server root with one chat span;
evaluation records join their call by trace and span id, or by ``gen_ai.response.id``. Each
planted case has a null control (no logs, a wrong trace id, a guardrail on the prompt).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .conftest import assert_one_line_error, run_cli

START = 1_800_000_000_000_000_000
MS = 1_000_000
SCORES = {"gpt-4o": 0.9, "gpt-4o-mini": 0.5}


def _value(value: object) -> dict[str, object]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_value(item) for item in value]}}
    return {"stringValue": str(value)}


def _attributes(attributes: dict[str, object]) -> list[dict[str, object]]:
    return [{"key": key, "value": _value(value)} for key, value in attributes.items()]


def _trace_id(n: int) -> str:
    return f"{n + 1:032x}"


def _span_id(n: int, which: int) -> str:
    return f"{(n + 1) * 16 + which:016x}"


def _span(
    n: int,
    which: int,
    name: str,
    start_ms: float,
    end_ms: float,
    attributes: dict[str, object],
    *,
    parent: int | None = 0,
    kind: int = 1,
    events: Sequence[dict[str, object]] = (),
    error: bool = False,
) -> dict[str, object]:
    base = START + n * 10_000 * MS
    span: dict[str, object] = {
        "traceId": _trace_id(n),
        "spanId": _span_id(n, which),
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(base + int(start_ms * MS)),
        "endTimeUnixNano": str(base + int(end_ms * MS)),
        "attributes": _attributes(attributes),
        "events": [
            {
                "name": event["name"],
                "timeUnixNano": str(base + int(end_ms * MS)),
                "attributes": _attributes(event["attributes"]),  # type: ignore[arg-type]
            }
            for event in events
        ],
        "status": {"code": 2} if error else {},
    }
    if parent is not None:
        span["parentSpanId"] = _span_id(n, parent)
    return span


def _model(n: int) -> str:
    return "gpt-4o" if n % 2 == 0 else "gpt-4o-mini"


def _request(n: int, *, chat: dict[str, object] | None = None, **kwargs: Any) -> list[dict[str, object]]:
    """A server root (span 0) and one chat span (span 1) of request ``n``."""
    model = _model(n)
    duration = 400.0 if model == "gpt-4o" else 200.0
    attributes: dict[str, object] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.provider.name": "openai",
        "gen_ai.response.id": f"chatcmpl-{n}",
        **(chat or {}),
    }
    return [
        _span(n, 0, "POST /ask", 0.0, duration + 50.0, {"http.request.method": "POST"}, parent=None, kind=2),
        _span(n, 1, f"chat {model}", 10.0, 10.0 + duration, attributes, **kwargs),
    ]


def _traces_line(spans: Iterable[dict[str, object]]) -> str:
    return json.dumps(
        {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "app"}, "spans": list(spans)}]}]}
    )


def _evaluation(name: str, score: float | None, **extra: object) -> dict[str, object]:
    attributes: dict[str, object] = {"gen_ai.evaluation.name": name, **extra}
    if score is not None:
        attributes["gen_ai.evaluation.score.value"] = score
    return attributes


def _log_record(
    attributes: dict[str, object], *, trace: str | None, span: str | None, event_name_field: bool = True
) -> dict[str, object]:
    record: dict[str, object] = {"timeUnixNano": str(START), "severityNumber": 9, "body": {}}
    if event_name_field:
        record["eventName"] = "gen_ai.evaluation.result"
        record["attributes"] = _attributes(attributes)
    else:  # the SDKs' older spelling: an event.name attribute
        record["attributes"] = _attributes({"event.name": "gen_ai.evaluation.result", **attributes})
    if trace is not None:
        record["traceId"] = trace
    if span is not None:
        record["spanId"] = span
    return record


def _logs_line(records: Iterable[dict[str, object]]) -> str:
    return json.dumps(
        {"resourceLogs": [{"resource": {}, "scopeLogs": [{"scope": {"name": "evals"}, "logRecords": list(records)}]}]}
    )


def _write(path: Path, lines: Iterable[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _report(*args: str | Path) -> tuple[dict[tuple[str, str], Any], str]:
    result = run_cli("report", *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    models = {(row["stage"], row["model"]): row["quality"] for row in json.loads(result.stdout)["models"]}
    return models, result.stderr


REQUESTS = 40


def _correctness_records(*, trace_of: Any = _trace_id) -> list[dict[str, object]]:
    return [
        _log_record(
            _evaluation("correctness", SCORES[_model(n)] + (0.05 if n % 4 < 2 else -0.05)),
            trace=trace_of(n),
            span=_span_id(n, 1),
        )
        for n in range(REQUESTS)
    ]


def test_evaluations_in_a_logs_file_join_their_calls(tmp_path: Path) -> None:
    """Evaluation log records written apart from the traces (--logs) give each model its mean score, CI and n."""
    traces = _write(tmp_path / "traces.jsonl", [_traces_line(_request(n)) for n in range(REQUESTS)])
    logs = _write(tmp_path / "logs.jsonl", [_logs_line(_correctness_records())])
    models, stderr = _report(traces, "--logs", logs)
    for model, mean in SCORES.items():
        quality = models[("model_call", model)]
        assert quality is not None, model
        (evaluation,) = quality["evaluations"]
        assert evaluation["name"] == "correctness"
        assert evaluation["n"] == REQUESTS // 2
        assert abs(evaluation["mean"] - mean) < 1e-9
        low, high = evaluation["ci95"]
        assert low < mean < high
        assert quality["error_rate"] == 0.0
        assert quality["block_rate"] is None
    assert "named no call" not in stderr


def test_no_logs_give_no_quality_and_no_error(tmp_path: Path) -> None:
    """Null control: the same traces without logs say nothing of quality, and the run succeeds quietly."""
    traces = _write(tmp_path / "traces.jsonl", [_traces_line(_request(n)) for n in range(REQUESTS)])
    models, stderr = _report(traces)
    assert set(models.values()) == {None}
    assert stderr == ""


def test_log_records_beside_the_spans_in_one_file_are_joined(tmp_path: Path) -> None:
    """Both signals in one file, the evaluations first (as a logs pipeline may flush before the traces'), join."""
    lines = [_logs_line(_correctness_records()), *(_traces_line(_request(n)) for n in range(REQUESTS))]
    models, _ = _report(_write(tmp_path / "both.jsonl", lines))
    assert models[("model_call", "gpt-4o")]["evaluations"][0]["n"] == REQUESTS // 2


def test_a_record_without_a_span_id_joins_by_response_id(tmp_path: Path) -> None:
    """A record that names the answer's gen_ai.response.id and no span joins that call; the event.name spelling too."""
    traces = _write(tmp_path / "traces.jsonl", [_traces_line(_request(n)) for n in range(REQUESTS)])
    records = [
        _log_record(
            _evaluation("relevance", 1.0 if _model(n) == "gpt-4o" else 0.0, **{"gen_ai.response.id": f"chatcmpl-{n}"}),
            trace=None,
            span=None,
            event_name_field=n % 2 == 0,
        )
        for n in range(REQUESTS)
    ]
    models, _ = _report(traces, "--logs", _write(tmp_path / "logs.jsonl", [_logs_line(records)]))
    assert models[("model_call", "gpt-4o")]["evaluations"] == [
        {"name": "relevance", "mean": 1.0, "ci95": [1.0, 1.0], "n": REQUESTS // 2}
    ]
    assert models[("model_call", "gpt-4o-mini")]["evaluations"][0]["mean"] == 0.0


def test_a_record_of_another_trace_is_not_joined(tmp_path: Path) -> None:
    """Null control: the right span id under a wrong trace id joins nothing, and says so in one warning."""
    traces = _write(tmp_path / "traces.jsonl", [_traces_line(_request(n)) for n in range(REQUESTS)])
    records = _correctness_records(trace_of=lambda n: f"{n + 1:x}".rjust(32, "f"))
    models, stderr = _report(traces, "--logs", _write(tmp_path / "logs.jsonl", [_logs_line(records)]))
    assert set(models.values()) == {None}
    assert f"{REQUESTS} evaluation results of {REQUESTS} named no call of the recording" in stderr


def test_span_events_errors_and_finish_reasons_are_read(tmp_path: Path) -> None:
    """Evaluation span events, ERROR status and `length` / `content_filter` finish reasons count per model."""
    lines = []
    for n in range(REQUESTS):
        events = [
            {
                "name": "gen_ai.evaluation.result",
                "attributes": _evaluation("toxicity", 0.1, **{"gen_ai.evaluation.score.label": "ok"}),
            }
        ]
        reasons = ["length"] if n % 10 == 0 else ["content_filter"] if n % 10 == 1 else ["stop"]
        lines.append(
            _traces_line(_request(n, chat={"gen_ai.response.finish_reasons": reasons}, events=events, error=n % 4 == 2))
        )
    models, _ = _report(_write(tmp_path / "traces.jsonl", lines))
    big, mini = models[("model_call", "gpt-4o")], models[("model_call", "gpt-4o-mini")]
    assert big["evaluations"][0]["n"] == mini["evaluations"][0]["n"] == REQUESTS // 2
    assert big["errors"] == REQUESTS // 4  # n % 4 == 2 is even: gpt-4o's
    assert mini["errors"] == 0
    assert (big["cut"], big["refused"]) == (REQUESTS // 10, 0)
    assert (mini["cut"], mini["refused"]) == (0, REQUESTS // 10)


def test_a_failed_evaluation_says_nothing(tmp_path: Path) -> None:
    """Null control: an evaluation result with error.type (the evaluator failed) is no score."""
    lines = [
        _traces_line(
            _request(
                n,
                events=[
                    {
                        "name": "gen_ai.evaluation.result",
                        "attributes": _evaluation("toxicity", 0.0, **{"error.type": "timeout"}),
                    }
                ],
            )
        )
        for n in range(REQUESTS)
    ]
    models, _ = _report(_write(tmp_path / "traces.jsonl", lines))
    assert set(models.values()) == {None}


def _guarded(n: int, target: str) -> list[dict[str, object]]:
    spans = _request(n)
    decision = "deny" if _model(n) == "gpt-4o-mini" and n % 4 == 1 else "allow"
    after = 410.0 if _model(n) == "gpt-4o" else 210.0  # the chat span ends at 410 or 210 ms
    spans.append(
        _span(
            n,
            2,
            "apply_guardrail output",
            after,
            after + 30.0,
            {
                "gen_ai.operation.name": "apply_guardrail",
                "gen_ai.security.target.type": target,
                "gen_ai.security.decision.type": decision,
            },
        )
    )
    return spans


def test_a_guardrail_after_the_model_judges_its_answer(tmp_path: Path) -> None:
    """An apply_guardrail span on the output after a chat call gives that model its guardrail block rate."""
    traces = _write(tmp_path / "traces.jsonl", [_traces_line(_guarded(n, "llm_output")) for n in range(REQUESTS)])
    models, _ = _report(traces)
    big, mini = models[("model_call", "gpt-4o")], models[("model_call", "gpt-4o-mini")]
    assert (big["guarded"], big["blocked"]) == (REQUESTS // 2, 0)
    assert (mini["guarded"], mini["blocked"]) == (REQUESTS // 2, REQUESTS // 4)
    assert mini["block_rate"] == 0.5


def test_a_guardrail_on_the_prompt_judges_no_answer(tmp_path: Path) -> None:
    """Null control: the same guardrail spans checking the prompt (llm_input) judge no model's answer."""
    traces = _write(tmp_path / "traces.jsonl", [_traces_line(_guarded(n, "llm_input")) for n in range(REQUESTS)])
    models, _ = _report(traces)
    assert set(models.values()) == {None}


def test_the_text_markdown_and_html_reports_show_the_quality_table(tmp_path: Path) -> None:
    """Text, Markdown and HTML each show each model's evaluation mean, CI and n through their own encoder."""
    traces = _write(tmp_path / "traces.jsonl", [_traces_line(_request(n)) for n in range(REQUESTS)])
    odd = "correct|ness\x1b[31m"
    records = [
        _log_record(_evaluation(odd, SCORES[_model(n)]), trace=_trace_id(n), span=_span_id(n, 1))
        for n in range(REQUESTS)
    ]
    logs = _write(tmp_path / "logs.jsonl", [_logs_line(records)])
    text = run_cli("report", traces, "--logs", logs, "--html", tmp_path / "r.html")
    assert text.returncode == 0, text.stderr
    assert "Answer quality by stage and model" in text.stdout
    assert "\x1b" not in text.stdout
    assert "0.9 (n 20)" in text.stdout or "0.9 (0.9-0.9, n 20)" in text.stdout
    markdown = run_cli("report", traces, "--logs", logs, "--format", "markdown")
    assert markdown.returncode == 0, markdown.stderr
    quality_rows = [line for line in markdown.stdout.splitlines() if line.startswith("| ") and "n 20)" in line]
    assert len(quality_rows) == 2
    assert all(line.count(" | ") == 7 for line in quality_rows)  # the name's | cannot split the row
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert '<table class="quality">' in page
    assert "correct|ness" in page
    assert "\x1b" not in page


def test_a_logs_file_of_another_format_is_one_line_error(tmp_path: Path) -> None:
    """A --logs file that holds no OTLP logs (Jaeger JSON here) fails in one line naming the file, exit 2."""
    traces = _write(tmp_path / "traces.jsonl", [_traces_line(_request(n)) for n in range(4)])
    logs = _write(tmp_path / "logs.json", [json.dumps({"data": []})])
    assert_one_line_error(run_cli("report", traces, "--logs", logs), "logs.json:1", "expected OTLP JSON logs")
    missing = run_cli("check", traces, "--logs", tmp_path / "nope.jsonl", "--budgets", tmp_path / "b.yaml")
    assert missing.returncode == 2


def test_an_empty_logs_file_is_no_error(tmp_path: Path) -> None:
    """Null control: an empty --logs file (a logs pipeline that exported nothing) reads as no evaluations."""
    traces = _write(tmp_path / "traces.jsonl", [_traces_line(_request(n)) for n in range(4)])
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    models, stderr = _report(traces, "--logs", tmp_path / "empty.jsonl")
    assert set(models.values()) == {None}
    assert stderr == ""
