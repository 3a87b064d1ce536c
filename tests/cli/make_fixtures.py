"""Capture the trace fixtures in tests/cli/fixtures/ from a real demo run, Collector and Jaeger.

    scripts/build-tools                                  # once: builds the Collector and Jaeger
    python tests/cli/make_fixtures.py --from-services

Starts Jaeger and the Collector built by scripts/build-tools (the repository's
``jaeger-config.yaml`` and ``collector-config.yaml``, every trace kept) on free loopback
ports, with tests/e2e/services.py, then runs the demo's 30 requests (seed 19) through
LatencyBudgetProcessor and the real OTLP/gRPC exporter into the Collector, and writes:

* ``expected-reports.json``: the processor's verdict on each request, as it ran;
* ``budgets.yaml``: the budget file the demo ran with (the packaged budgets.example.yaml);
* ``otlp/traces.jsonl``: the Collector's ``file/traces`` output, byte for byte;
* ``jaeger/search.json``: Jaeger's answer to
  ``GET /api/traces?service=support-assistant&limit=100&lookback=1h``, byte for byte;
* ``jaeger/trace.json``: Jaeger's answer to ``GET /api/traces/{id}`` for the slowest request.

The seed fixes the trace and span ids, the durations and the verdicts; the absolute times
(the run ends "now"), the order of the lines and ``service.instance.id`` change from one
capture to the next, which the CLI tests do not depend on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from latency_budget._core.report import TraceReport
from latency_budget._demo import example_budgets, example_budgets_text
from latency_budget._demo.run import DEMO_SERVICE_NAME, DemoRun, demo_resource, run_demo

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script: make tests.e2e importable

from tests.e2e.services import (  # noqa: E402
    CollectorService,
    JaegerService,
    ServiceError,
    find_tools,
    http_get,
    poll,
    start_collector,
    start_jaeger,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEED = 19  # a seed whose 30 requests break every kind of budget at least once
REQUESTS = 30
CONCURRENCY = 4  # the CLI's default: spans of several requests share export batches
# The demo emits its requests in well under a second, and the Collector would write them all
# as one line. Spread over time in batches, as a service's traffic is, they make several
# lines, and some traces span two of them (the tail sampler's late spans), as in a real file.
EXPORT_BATCH_SPANS = 64
EXPORT_PAUSE_S = 1.5  # more than the sampler's decision wait and the batch processor's timeout
DELIVERY_TIMEOUT_S = 120.0
KEEP_EVERY_TRACE = {"OTELCOL_TRACES_SAMPLING_PERCENTAGE": "100", "OTELCOL_TAIL_SAMPLING_DECISION_WAIT": "1s"}
SEARCH_QUERY = {"service": DEMO_SERVICE_NAME, "limit": "100", "lookback": "1h"}


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, capture the fixtures, and say what was written."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--from-services",
        action="store_true",
        help="start the Collector and Jaeger built by scripts/build-tools and capture what they recorded",
    )
    args = parser.parse_args(argv)
    if not args.from_services:
        parser.error("the fixtures are captured from the real Collector and Jaeger: add --from-services")
    tools, missing = find_tools()
    if missing:
        parser.exit(1, f"make_fixtures: missing {', '.join(map(str, missing))}; run scripts/build-tools first\n")
    # Only what this script sets applies: no OTEL_* variable of the caller's shell.
    for name in [name for name in os.environ if name.startswith("OTEL_")]:
        del os.environ[name]
    with tempfile.TemporaryDirectory(prefix="latency-budget-fixtures-") as work:
        jaeger = start_jaeger(tools, Path(work))
        try:
            collector = start_collector(
                tools, Path(work), jaeger_otlp_endpoint=jaeger.otlp_grpc_endpoint, extra_env=KEEP_EVERY_TRACE
            )
            try:
                spans = capture(collector, jaeger)
            except (ServiceError, TimeoutError) as error:
                parser.exit(
                    1, f"make_fixtures: {error}\n{collector.process.log_tail(40)}\n{jaeger.process.log_tail(40)}\n"
                )
            finally:
                collector.stop()
        finally:
            jaeger.process.stop()
    print(f"captured {spans} spans of {REQUESTS} requests into {FIXTURES}")
    return 0


def capture(collector: CollectorService, jaeger: JaegerService) -> int:
    """Run the demo into ``collector``, wait until everything is recorded, and write the fixtures."""
    exporter = _Paced(OTLPSpanExporter(endpoint=collector.otlp_grpc_endpoint, insecure=True))
    batches = BatchSpanProcessor(exporter, max_queue_size=REQUESTS * 30, max_export_batch_size=EXPORT_BATCH_SPANS)
    run = run_demo(
        example_budgets(),
        requests=REQUESTS,
        concurrency=CONCURRENCY,
        seed=SEED,
        downstream=batches,
        resource=demo_resource(),
    )
    reports = [report for report in run.reports if report is not None]
    if len(reports) != REQUESTS:
        raise ServiceError(f"the processor judged {len(reports)} of {REQUESTS} requests")
    spans = sum(request.span_count for request in run.requests)

    traces_jsonl = poll(
        lambda: _when_complete(collector.traces_file.read_bytes() if collector.traces_file.exists() else b"", spans),
        timeout=DELIVERY_TIMEOUT_S,
        what=f"all {spans} spans in the collector's trace file",
    )
    search = poll(
        lambda: _jaeger_answer(jaeger, "/api/traces?" + urllib.parse.urlencode(SEARCH_QUERY), spans),
        timeout=DELIVERY_TIMEOUT_S,
        what=f"all {spans} spans in Jaeger's search",
    )
    slowest = max(reports, key=lambda r: r.total_actual_ms)
    slowest_spans = sum(1 for _ in _trace_spans(json.loads(search), f"{slowest.trace_id:032x}"))
    trace = poll(
        lambda: _jaeger_answer(jaeger, f"/api/traces/{slowest.trace_id:032x}", slowest_spans),
        timeout=DELIVERY_TIMEOUT_S,
        what="the slowest trace in Jaeger",
    )

    (FIXTURES / "otlp").mkdir(parents=True, exist_ok=True)
    (FIXTURES / "jaeger").mkdir(parents=True, exist_ok=True)
    (FIXTURES / "budgets.yaml").write_text(example_budgets_text(), encoding="utf-8")
    _write_reports(run, reports)
    (FIXTURES / "otlp" / "traces.jsonl").write_bytes(traces_jsonl)
    (FIXTURES / "jaeger" / "search.json").write_bytes(search)
    (FIXTURES / "jaeger" / "trace.json").write_bytes(trace)
    return spans


class _Paced(SpanExporter):
    """Exports through ``inner``, then waits ``EXPORT_PAUSE_S`` before the next batch may go."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        time.sleep(EXPORT_PAUSE_S)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()


def _when_complete(jsonl: bytes, spans: int) -> bytes | None:
    """The file's bytes once its last line is whole and it holds ``spans`` spans."""
    if not jsonl.endswith(b"\n"):
        return None
    count = 0
    for line in jsonl.splitlines():
        for resource in json.loads(line).get("resourceSpans") or []:
            for scope in resource.get("scopeSpans") or []:
                count += len(scope.get("spans") or [])
    return jsonl if count == spans else None


def _jaeger_answer(jaeger: JaegerService, path: str, spans: int) -> bytes | None:
    """Jaeger's answer to ``path``, byte for byte, once it holds ``spans`` spans."""
    status, body = http_get(jaeger.query_url + path)
    if status != 200:
        return None
    count = sum(len(trace.get("spans") or []) for trace in json.loads(body).get("data") or [])
    return body if count == spans else None


def _trace_spans(answer: dict[str, Any], trace_id: str) -> list[dict[str, Any]]:
    return [span for trace in answer["data"] if trace["traceID"] == trace_id for span in trace["spans"]]


def _write_reports(run: DemoRun, reports: list[TraceReport]) -> None:
    document = {"seed": run.seed, "reports": [_report(report) for report in reports]}
    (FIXTURES / "expected-reports.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def _report(report: TraceReport) -> dict[str, Any]:
    return {
        "trace_id": f"{report.trace_id:032x}",
        "profile": report.profile,
        "violated": report.violated,
        "over_budget_stages": list(report.over_budget_stages),
        "warn_stages": list(report.warn_stages),
        "total_actual_ms": report.total_actual_ms,
        "first_token_ms": report.first_token_ms,
        "violations": sorted(f"{v.stage}:{v.kind}:{v.severity}" for v in report.violations),
        "stages": {
            s.stage: {"actual_ms": s.actual_ms, "count": s.count, "first_token_ms": s.first_token_ms}
            for s in report.stages
            if s.seen
        },
    }


if __name__ == "__main__":
    sys.exit(main())
