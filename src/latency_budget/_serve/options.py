"""``serve``'s options, one row each: the flag, its variable, parser, default, help and the field it fills.

``latency-budget serve`` builds its argparse options and reads ``LATENCY_BUDGET_SERVE_*``
from :data:`OPTIONS`, and fills :class:`~latency_budget._serve.server.ServeOptions` from
each row's ``field``; docs/collector-tier.md's options table is :func:`render_doc_table`
of it (tests/unit/test_serve_options.py checks both). Light on purpose: no grpc, no SDK.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ENV_PREFIX", "OPTIONS", "Option", "option", "render_doc_table"]

ENV_PREFIX = "LATENCY_BUDGET_SERVE_"
MIB = 1024 * 1024


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"expected a positive number of seconds, got {text!r}")
    return value


def interval_or_off(text: str) -> float | None:
    """At least a second, or ``off``."""
    if text.lower() == "off":
        return None
    value = seconds(text)
    if value < 1:
        raise ValueError(f"expected at least 1 second, or off, got {text!r}")
    return value


def count(text: str) -> int:
    """A positive whole number."""
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"expected a positive whole number, got {text!r}")
    return int(text)


def endpoint(text: str) -> str:
    """``HOST:PORT``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (port 0 picks a free one), got {text!r}")
    return text


def endpoint_or_none(text: str) -> str | None:
    """``HOST:PORT``, or ``none``: off."""
    return None if text.lower() == "none" else endpoint(text)


def text(value: str) -> str:
    """Any text, as it is."""
    return value


def choice(*choices: str) -> Callable[[str], str]:
    """One of ``choices``."""

    def parse(value: str) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return parse


@dataclass(frozen=True, slots=True)
class Option:
    """One ``serve`` option: written here once, read by the command line, the environment and the docs."""

    flag: str  # without the leading --
    metavar: str
    parse: Callable[[str], Any]
    default: Any  # the value when neither the option nor its variable is set (None: off, required or derived)
    default_text: str  # the default as --help and the docs say it (Markdown)
    help: str  # one line for --help, the default appended
    doc: str  # the docs table's description
    field: str | None  # the ServeOptions field it fills ("limits.max_bytes"); None: read by the command itself
    derived_from: str | None = None  # the option whose value is the default ("max-bytes")
    short: str | None = None

    @property
    def env(self) -> str:
        """``LATENCY_BUDGET_SERVE_<OPTION>``: the option in capitals, ``-`` as ``_``."""
        return ENV_PREFIX + self.dest.upper()

    @property
    def dest(self) -> str:
        """The argparse attribute."""
        return self.flag.replace("-", "_")

    def help_line(self) -> str:
        """The --help line: the help and the default."""
        said = self.default_text.replace("`", "")
        return f"{self.help} {said}" if said.startswith("(") else f"{self.help} (default {said})"


# fmt: off
OPTIONS: tuple[Option, ...] = (
    Option("budgets", "FILE", text, None, "(required)", "the budget YAML file", "the budget file", None,
           short="-b"),
    Option("reload-interval", "SECONDS|off", interval_or_off, 10.0, "10",
           "check the budget file for changes this often (at least 1); off: read at the start only",
           "how often the budget file is checked for changes; a changed file that loads is used for the traces "
           "judged from then on, a broken one keeps the last good ([Live reload](#live-reload)); `off`: read at "
           "the start only", None),
    Option("grpc-endpoint", "HOST:PORT", endpoint, "localhost:4317", "`localhost:4317`",
           "OTLP/gRPC listen address; port 0: any", "OTLP/gRPC; port 0 picks a free port", "grpc_endpoint"),
    Option("http-endpoint", "HOST:PORT", endpoint_or_none, "localhost:4318", "`localhost:4318`",
           "OTLP/HTTP listen address; none: off",
           "OTLP/HTTP `POST /v1/traces` (and `/v1/logs`, [Evaluation logs](#evaluation-logs)); `none` turns it off",
           "http_endpoint"),
    Option("health-endpoint", "HOST:PORT", endpoint, "localhost:13133", "`localhost:13133`",
           "health and counters (GET /), Prometheus' text (GET /metrics)",
           "`GET /` or `/health`: 200 and the counters while serving, 503 while draining; `GET /metrics`: the "
           "counters and gauges in Prometheus' text format ([Logs, counters and gauges](#logs-counters-and-gauges))",
           "health_endpoint"),
    Option("forward-endpoint", "URL", text, None, "`OTEL_EXPORTER_OTLP_ENDPOINT`",
           "the next hop, instead of OTEL_EXPORTER_OTLP_ENDPOINT", "the next hop, for traces, logs and metrics",
           None),
    Option("handover-endpoint", "URL", text, None, "off",
           "layer 1's OTLP address: rootless parts go back through it to their trace's owner",
           "the layer-1 Collector's OTLP address (resolved as `--forward-endpoint` is): a rootless part quiet for "
           "`--decision-wait`, and at shutdown every open one, is sent back through it to its trace's owner now "
           "([Handover](#handover)); off: forwarded unjudged after `--max-wait`", "handover_endpoint"),
    Option("decision-wait", "SECONDS", seconds, 5.0, "5", "judge a rooted trace this long after its last span",
           "quiet time after a rooted trace's last span", "limits.decision_wait_s"),
    Option("max-wait", "SECONDS", seconds, 60.0, "60", "forward a trace unjudged if its root is not in by then",
           "the longest a rootless trace is held", "limits.max_wait_s"),
    Option("max-traces", "N", count, 50_000, "50,000", "open traces held; past it requests are refused",
           "open traces; past it the quiet rootless ones are forwarded unjudged to make room, else a request is "
           "refused", "limits.max_traces"),
    Option("max-spans-per-trace", "N", count, 10_000, "10,000", "past it a trace is forwarded unjudged",
           "past it a trace is forwarded unjudged (`traces_evicted`, `spans_evicted`)", "limits.max_spans_per_trace"),
    Option("max-bytes", "N", count, 256 * MIB, "256 MiB", "bytes held in open traces; past it requests are refused",
           "bytes held in open traces and waiting for the next hop, each span counted at what it costs held (its "
           "bytes, 450 bytes of fields, its decoded attributes and events); a request whose decode (estimated from "
           "its size and span count before it is decoded) would pass it is refused ([Forwarding and "
           "memory](#forwarding-and-memory)); when full, the quiet rootless traces are forwarded unjudged to make "
           "room before a request is refused", "limits.max_bytes"),
    Option("max-request-bytes", "N", count, 16 * MIB, "16 MiB", "largest request taken; at most --max-bytes",
           "the largest request taken (gRPC receive limit, HTTP body, gzip included); at most `--max-bytes`",
           "max_request_bytes"),
    Option("queue-size", "SPANS", count, 100_000, "100,000",
           "spans queued for the next hop; past it requests are refused",
           "spans waiting for the next hop; past it new requests are refused (retry), nothing is dropped",
           "queue_spans"),
    Option("forward-batch-bytes", "N", count, 3 * MIB, "3 MiB", "bytes of one forwarded request at most",
           "bytes of one forwarded request at most: below the next hop's receive limit (4 MiB at the Collector "
           "and Jaeger)", "forward_batch_bytes"),
    Option("forward-workers", "N", count, 2, "2", "forwarded requests in flight at once",
           "forwarded requests in flight at once", "forward_workers"),
    Option("shutdown-timeout", "SECONDS", seconds, 10.0, "10", "drain deadline after SIGTERM",
           "the drain deadline after SIGTERM", "shutdown_timeout_s"),
    Option("roots", "trace|local", choice("trace", "local"), "trace", "`trace`",
           "trace: one request per trace; local: each local root",
           "one request per trace, or each local root as in process", "roots"),
    Option("reports", "otlp|none", choice("otlp", "none"), "otlp", "`otlp`",
           "violation/hint logs and budget metrics over OTLP",
           "violation and hint logs and budget metrics over OTLP", None),
    Option("metric-interval", "SECONDS", seconds, 10.0, "10", "how often the budget metrics are exported",
           "how often the budget metrics are exported", None),
    Option("partial-in-metrics", "no|yes", choice("no", "yes"), "no", "`no`",
           "count traces judged on part of their spans in the budget metrics",
           "`yes`: the budget metrics count traces judged on part of their spans too ([Partial "
           "traces](#partial-traces)); their roots and violation logs are marked either way", None),
    Option("wal-dir", "DIR", text, None, "off", "write-ahead log: what is acknowledged survives a crash",
           "the write-ahead log: what `serve` acknowledged survives `kill -9` and a restart "
           "([Durability](#durability)); on in the tier's compose profile (`/wal`)", "wal.directory"),
    Option("wal-max-bytes", "N", count, None, "`--max-bytes`",
           "the log's bytes on disk; past it requests are refused; at most --max-bytes",
           "the log's bytes on disk; past it a request is refused (`wal_requests_refused`); at most `--max-bytes`. "
           "Segments are a quarter of it (and of the free space at start), at most 16 MiB", "wal.max_bytes",
           derived_from="max-bytes"),
    Option("wal-fsync", "always|interval|never", choice("always", "interval", "never"), "interval", "`interval`",
           "when the log is synced to disk",
           "when the log is synced to disk ([what each survives](#durability))", "wal.fsync"),
    Option("wal-fsync-interval", "SECONDS", seconds, 1.0, "1", "with --wal-fsync interval: how often",
           "with `interval`: how often", "wal.fsync_interval_s"),
    Option("http-max-connections", "N", count, 128, "128", "OTLP/HTTP connections at once",
           "OTLP/HTTP connections at once; at the limit the one that waited longest for its request is closed to "
           "make room ([Faults](#faults))", "http_max_connections"),
    Option("http-header-timeout", "SECONDS", seconds, 10.0, "10", "an HTTP request's line and headers within",
           "an HTTP request's line and headers must arrive within this of its start (an idle kept-alive "
           "connection included); the health endpoint too", "http_header_timeout_s"),
    Option("http-body-timeout", "SECONDS", seconds, 30.0, "30", "an HTTP request's body within, then 408",
           "an HTTP request's body must arrive within this, else 408", "http_body_timeout_s"),
)
# fmt: on

_BY_FLAG = {row.flag: row for row in OPTIONS}


def option(flag: str) -> Option:
    """The row of ``flag`` (without the leading ``--``)."""
    return _BY_FLAG[flag]


def _cell(value: str) -> str:
    return " ".join(value.replace("|", "\\|").split())


def render_doc_table() -> str:
    """docs/collector-tier.md's options table: one line per row of :data:`OPTIONS`."""
    lines = ["| option | variable | default | |", "| --- | --- | --- | --- |"]
    for row in OPTIONS:
        cells = (f"`--{row.flag} {row.metavar}`", f"`{row.env}`", row.default_text, row.doc)
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)
