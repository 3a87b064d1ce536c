"""``latency-budget serve``: an OTLP trace receiver that judges whole traces and forwards them.

Every option has an environment variable, ``LATENCY_BUDGET_SERVE_<OPTION>`` (the option
in capitals, ``-`` as ``_``); the option wins. Where the spans, violation logs and
budget metrics go is the standard ``OTEL_EXPORTER_OTLP_*`` settings, or
``--forward-endpoint``. The server runs until SIGTERM or SIGINT, then drains within
``--shutdown-timeout`` and exits 0. A second SIGTERM or SIGINT while it drains is logged
(``signal_during_drain``) and the drain goes on to its deadline; SIGHUP is logged
(``signal_ignored``) and changes nothing: the budget file is read at the start only.
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import os
import signal
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from latency_budget._config import BudgetConfigError, load_budgets
from latency_budget.cli._common import CliError, example_epilog, raw_help

__all__ = ["register", "run"]

T = TypeVar("T")
_ENV = "LATENCY_BUDGET_SERVE_"
_DEFAULT_HTTP: str | None = "localhost:4318"


def register(commands: Any) -> None:
    """Add the ``serve`` subcommand."""
    parser = commands.add_parser(
        "serve",
        help="judge whole traces from any language: an OTLP receiver behind the Collector",
        description=(
            "Receive spans over OTLP (gRPC, and HTTP with protobuf or JSON), judge each whole trace "
            "against the budget file with the in-process accounting, annotate its root, and forward "
            "every span to the next OTLP hop (OTEL_EXPORTER_OTLP_* or --forward-endpoint). Violation "
            "and hint logs and budget metrics go to the same OTLP settings. Every option has an "
            "environment variable LATENCY_BUDGET_SERVE_<OPTION>; the option wins. See docs/collector-tier.md."
        ),
        epilog=example_epilog(
            "latency-budget serve --budgets budgets.yaml",
            "OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4317 latency-budget serve --budgets budgets.yaml \\\n"
            "      --grpc-endpoint 0.0.0.0:4317 --http-endpoint none",
        ),
        formatter_class=raw_help(),
    )
    add = parser.add_argument
    add("--budgets", "-b", metavar="FILE", help="the budget YAML file (required)")
    add("--grpc-endpoint", metavar="HOST:PORT", help="OTLP/gRPC address (default localhost:4317; port 0: any)")
    add("--http-endpoint", metavar="HOST:PORT", help="OTLP/HTTP listen address (default localhost:4318; none: off)")
    add("--health-endpoint", metavar="HOST:PORT", help="health and counters, GET / (default localhost:13133)")
    add("--forward-endpoint", metavar="URL", help="the next hop, instead of OTEL_EXPORTER_OTLP_ENDPOINT")
    add("--decision-wait", metavar="SECONDS", help="judge a rooted trace this long after its last span (default 5)")
    add("--max-wait", metavar="SECONDS", help="forward a trace unjudged if its root is not in by then (default 60)")
    add("--max-traces", metavar="N", help="open traces held; past it requests are refused (default 50000)")
    add("--max-spans-per-trace", metavar="N", help="past it a trace is forwarded unjudged (default 10000)")
    add("--max-bytes", metavar="N", help="bytes held in open traces; past it requests are refused (default 256 MiB)")
    add("--max-request-bytes", metavar="N", help="largest request taken (default 16 MiB)")
    add("--queue-size", metavar="SPANS", help="spans queued for the next hop; past it requests are refused (100000)")
    add("--forward-batch-bytes", metavar="N", help="bytes of one forwarded request at most (default 3 MiB)")
    add("--forward-workers", metavar="N", help="forwarded requests in flight at once (default 2)")
    add("--shutdown-timeout", metavar="SECONDS", help="drain deadline after SIGTERM (default 10)")
    add("--roots", metavar="trace|local", help="trace: one request per trace (default); local: each local root")
    add("--reports", metavar="otlp|none", help="violation/hint logs and budget metrics over OTLP (default otlp)")
    add("--metric-interval", metavar="SECONDS", help="how often the budget metrics are exported (default 10)")
    add("--wal-dir", metavar="DIR", help="write-ahead log: what is acknowledged survives a crash (default: off)")
    add("--wal-max-bytes", metavar="N", help="the log's bytes on disk; past it requests are refused (default 256 MiB)")
    add("--wal-fsync", metavar="always|interval|never", help="when the log is synced to disk (default interval)")
    add("--wal-fsync-interval", metavar="SECONDS", help="with --wal-fsync interval: how often (default 1)")
    add("--http-max-connections", metavar="N", help="OTLP/HTTP connections at once (default 128)")
    add("--http-header-timeout", metavar="SECONDS", help="an HTTP request's line and headers within (default 10)")
    add("--http-body-timeout", metavar="SECONDS", help="an HTTP request's body within, then 408 (default 30)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; 0 after a drain, 2 for bad options or an address in use."""
    settings = _Settings(args, os.environ)
    budgets = settings.get("budgets", str, None)
    if budgets is None:
        raise CliError("serve: --budgets FILE (or LATENCY_BUDGET_SERVE_BUDGETS) is required")
    try:
        config = load_budgets(budgets)
    except BudgetConfigError as exc:
        raise CliError(str(exc)) from None

    # Imported here: grpc and the exporters take a moment to load, and only serve needs them.
    from latency_budget._serve.assembly import Limits  # noqa: PLC0415
    from latency_budget._serve.forwarder import DEFAULT_BATCH_BYTES, DEFAULT_WORKERS, open_sender  # noqa: PLC0415
    from latency_budget._serve.reports import open_report_sinks  # noqa: PLC0415
    from latency_budget._serve.server import ServeOptions, Server  # noqa: PLC0415
    from latency_budget._serve.wal import FSYNC_POLICIES, WalError, WalOptions  # noqa: PLC0415
    from latency_budget.export._otlp import OtlpSettingError, otlp_target  # noqa: PLC0415

    limits = Limits(
        decision_wait_s=settings.get("decision-wait", _seconds, 5.0),
        max_wait_s=settings.get("max-wait", _seconds, 60.0),
        max_traces=settings.get("max-traces", _count, 50_000),
        max_spans_per_trace=settings.get("max-spans-per-trace", _count, 10_000),
        max_bytes=settings.get("max-bytes", _count, 256 * 1024 * 1024),
    )
    wal_dir = settings.get("wal-dir", str, None)
    wal = None
    if wal_dir is not None:
        wal = WalOptions(
            directory=wal_dir,
            max_bytes=settings.get("wal-max-bytes", _count, limits.max_bytes),
            fsync=settings.get("wal-fsync", _choice(*FSYNC_POLICIES), "interval"),  # type: ignore[arg-type]
            fsync_interval_s=settings.get("wal-fsync-interval", _seconds, 1.0),
        )
        if wal.max_bytes > limits.max_bytes:
            # What the log holds must fit back in the buffer when it is replayed.
            raise CliError("serve: --wal-max-bytes must not be larger than --max-bytes")
    http = settings.get("http-endpoint", _endpoint_or_none, _DEFAULT_HTTP)
    options = ServeOptions(
        grpc_endpoint=settings.get("grpc-endpoint", _endpoint, "localhost:4317"),
        http_endpoint=http,
        health_endpoint=settings.get("health-endpoint", _endpoint, "localhost:13133"),
        limits=limits,
        roots=settings.get("roots", _choice("trace", "local"), "trace"),  # type: ignore[arg-type]
        queue_spans=settings.get("queue-size", _count, 100_000),
        max_request_bytes=settings.get("max-request-bytes", _count, 16 * 1024 * 1024),
        shutdown_timeout_s=settings.get("shutdown-timeout", _seconds, 10.0),
        wal=wal,
        http_max_connections=settings.get("http-max-connections", _count, 128),
        http_header_timeout_s=settings.get("http-header-timeout", _seconds, 10.0),
        http_body_timeout_s=settings.get("http-body-timeout", _seconds, 30.0),
        forward_batch_bytes=settings.get("forward-batch-bytes", _count, DEFAULT_BATCH_BYTES),
        forward_workers=settings.get("forward-workers", _count, DEFAULT_WORKERS),
    )
    if options.max_request_bytes > limits.max_bytes:
        raise CliError("serve: --max-request-bytes must not be larger than --max-bytes")
    reports = settings.get("reports", _choice("otlp", "none"), "otlp")
    metric_interval = settings.get("metric-interval", _seconds, 10.0)
    try:
        target = otlp_target(
            settings.get("forward-endpoint", str, None), strict=True, endpoint_name="--forward-endpoint"
        )
    except OtlpSettingError as exc:
        raise CliError(f"serve: {exc}") from None

    # The exporters log every failed attempt; the server logs the next hop going down and up once.
    logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
    sinks, flush = open_report_sinks(target, metric_interval_s=metric_interval) if reports == "otlp" else ([], None)
    try:
        server = Server(
            config, options, open_sender(target), destination=target.describe("traces"), sinks=sinks, flush_sinks=flush
        )
    except WalError as exc:
        raise CliError(f"serve: {exc}") from None
    except (OSError, RuntimeError) as exc:
        raise CliError(f"serve: cannot listen: {exc}") from None
    stop = threading.Event()

    def later(event: str, **fields: object) -> None:
        # Logged on a thread of its own: the handler may have interrupted the main thread inside the log's lock.
        threading.Thread(target=server.log.event, args=(event,), kwargs={"always": True, **fields}).start()

    def on_stop(signum: int, _frame: object) -> None:
        if stop.is_set():
            name = signal.Signals(signum).name
            later("signal_during_drain", signal=name, action="the drain goes on until --shutdown-timeout")
        stop.set()

    def on_hangup(signum: int, _frame: object) -> None:
        later("signal_ignored", signal="SIGHUP", reason="the budget file is read at the start only: restart to reload")

    handlers = {signal.SIGTERM: on_stop, signal.SIGINT: on_stop, signal.SIGHUP: on_hangup}
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        server.start()
        # Everything loaded so far (grpc, protobuf, the SDK) lives as long as the process: kept
        # out of the garbage collector's full passes, which otherwise scan it again and again.
        gc.freeze()
        stop.wait()
        server.drain()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


class _Settings:
    """An option's value: the command line's, else ``LATENCY_BUDGET_SERVE_<OPTION>``, else the default."""

    def __init__(self, args: argparse.Namespace, env: Mapping[str, str]) -> None:
        self._args = args
        self._env = env

    def get(self, option: str, parse: Callable[[str], T], default: T) -> T:
        """``parse`` of the option's text (a bad one is a one-line error naming the option or variable)."""
        raw = getattr(self._args, option.replace("-", "_"), None)
        source = f"--{option}"
        if raw is None:
            variable = _ENV + option.replace("-", "_").upper()
            raw = self._env.get(variable)
            source = variable
            if raw is None or not raw.strip():
                return default
        try:
            return parse(raw.strip())
        except ValueError as exc:
            raise CliError(f"serve: {source}: {exc}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"expected a positive number of seconds, got {text!r}")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"expected a positive whole number, got {text!r}")
    return int(text)


def _endpoint(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (port 0 picks a free one), got {text!r}")
    return text


def _endpoint_or_none(text: str) -> str | None:
    return None if text.lower() == "none" else _endpoint(text)


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return parse
