"""The OTLP exporters, built by one rule for :func:`~latency_budget.export.configure` and the demo.

Protocol, per signal: the argument, else ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else
``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``grpc``. Endpoint: the argument (a base URL; over
OTLP/HTTP each signal gets its path, ``/v1/traces`` and so on), else the exporters read
``OTEL_EXPORTER_OTLP_ENDPOINT`` and the per-signal variables themselves, as the
specification says. Headers, timeouts and certificates always come from the standard
variables, read by the exporters.

A bad protocol or endpoint (an argument, or ``OTEL_EXPORTER_OTLP_ENDPOINT``) is, with
``strict``, an :class:`OtlpSettingError` naming the setting (for a command line); without,
one warning and a fallback to grpc or the local default (an application keeps running).
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # named LogExporter before SDK 1.39; only the type checker needs the name
    from opentelemetry.sdk._logs.export import LogRecordExporter
    from opentelemetry.sdk.metrics.export import MetricExporter
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["PROTOCOLS", "OtlpSettingError", "OtlpTarget", "Protocol", "otlp_target", "resolve_protocol"]

logger = logging.getLogger("latency_budget")

Protocol = Literal["grpc", "http/protobuf"]
Signal = Literal["traces", "logs", "metrics"]
PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")
_DEFAULT_PROTOCOL: Protocol = "grpc"
_LOCAL = {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}
_HTTP_PATHS = {"traces": "/v1/traces", "logs": "/v1/logs", "metrics": "/v1/metrics"}
_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"


class OtlpSettingError(ValueError):
    """An OTLP endpoint or protocol that cannot be used; the message names the setting and the value."""


@dataclass(frozen=True)
class OtlpTarget:
    """Where and how the exporters send: one protocol per signal, and a base URL or None (the environment's)."""

    protocols: Mapping[Signal, Protocol]
    endpoint: str | None

    def url(self, signal: Signal = "traces") -> str:
        """Where ``signal`` goes, for people (the environment's value, or ``(default)``)."""
        if self.endpoint is not None:
            return _http_signal_url(self.endpoint, signal) if self.protocols[signal] != "grpc" else self.endpoint
        signal_env = f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        return os.environ.get(signal_env) or os.environ.get(_ENDPOINT_ENV) or "(default)"

    def describe(self, signal: Signal = "traces") -> str:
        """``URL (OTLP protocol)``."""
        return f"{self.url(signal)} (OTLP {self.protocols[signal]})"

    def span_exporter(self) -> SpanExporter:
        """An OTLP span exporter (gRPC or HTTP)."""
        if self.protocols["traces"] == "grpc":
            # Imported here: gRPC takes a moment to load, and only this path needs it.
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter  # noqa: PLC0415

            return OTLPSpanExporter(endpoint=self.endpoint) if self.endpoint else OTLPSpanExporter()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans  # noqa: PLC0415

        return HttpSpans(endpoint=self.url("traces")) if self.endpoint else HttpSpans()

    def log_exporter(self) -> LogRecordExporter:
        """An OTLP log record exporter (gRPC or HTTP)."""
        if self.protocols["logs"] == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter  # noqa: PLC0415

            return OTLPLogExporter(endpoint=self.endpoint) if self.endpoint else OTLPLogExporter()
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs  # noqa: PLC0415

        return HttpLogs(endpoint=self.url("logs")) if self.endpoint else HttpLogs()

    def metric_exporter(self) -> MetricExporter:
        """An OTLP metric exporter (gRPC or HTTP)."""
        if self.protocols["metrics"] == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter  # noqa: PLC0415

            return OTLPMetricExporter(endpoint=self.endpoint) if self.endpoint else OTLPMetricExporter()
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # noqa: PLC0415
            OTLPMetricExporter as HttpMetrics,
        )

        return HttpMetrics(endpoint=self.url("metrics")) if self.endpoint else HttpMetrics()


def otlp_target(
    endpoint: str | None = None,
    protocol: str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    strict: bool = False,
    endpoint_name: str = "endpoint",
) -> OtlpTarget:
    """Resolve the protocols and the endpoint by the module's rule.

    ``endpoint_name`` is what a message calls the ``endpoint`` argument (``--otlp-endpoint``).
    """
    env = os.environ if env is None else env
    protocols: dict[Signal, Protocol] = {}
    checked: dict[tuple[str, str], Protocol] = {}  # the signals usually share a variable: one warning
    for signal in ("traces", "logs", "metrics"):
        setting = _protocol_setting(protocol, env, signal)
        if setting not in checked:
            checked[setting] = _checked_protocol(*setting, strict=strict)
        protocols[signal] = checked[setting]
    return OtlpTarget(protocols, _endpoint(endpoint, env, protocols["traces"], strict, endpoint_name))


def resolve_protocol(
    explicit: str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    signal: Signal = "traces",
    strict: bool = False,
) -> Protocol:
    """The OTLP protocol of ``signal``: argument, else the signal's variable, else the generic one, else grpc."""
    setting = _protocol_setting(explicit, os.environ if env is None else env, signal)
    return _checked_protocol(*setting, strict=strict)


def _protocol_setting(explicit: str | None, env: Mapping[str, str], signal: Signal) -> tuple[str, str]:
    """The protocol's value and where it came from."""
    if explicit is not None:
        return explicit.strip(), "protocol"
    for source in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = env.get(source, "").strip()
        if value:
            return value, source
    return "", ""


def _checked_protocol(value: str, source: str, *, strict: bool) -> Protocol:
    if not value:
        return _DEFAULT_PROTOCOL
    for known in PROTOCOLS:
        if value == known:
            return known
    if strict:
        raise OtlpSettingError(
            f"{source}: OTLP protocol {value!r} is not supported; use one of: {', '.join(PROTOCOLS)}"
        )
    logger.warning(
        "latency_budget: unsupported OTLP protocol %r (expected grpc or http/protobuf); using %s",
        value,
        _DEFAULT_PROTOCOL,
    )
    return _DEFAULT_PROTOCOL


def _endpoint(endpoint: str | None, env: Mapping[str, str], protocol: Protocol, strict: bool, name: str) -> str | None:
    """The base URL to hand to the exporters, or None to let them read the environment."""
    explicit = endpoint is not None
    value = ((endpoint if explicit else env.get(_ENDPOINT_ENV)) or "").strip()
    if not value and not (explicit and strict):
        return None
    if _is_url(value):
        return value if explicit else None
    source = name if explicit else _ENDPOINT_ENV
    if strict:
        raise OtlpSettingError(f"{source}: expected a URL such as http://localhost:4317, got {value!r}")
    fallback = _LOCAL[protocol]
    logger.warning(
        "latency_budget: %s=%r is not an http(s)://host:port URL; exporting to %s instead", source, value, fallback
    )
    return fallback


def _is_url(value: str) -> bool:
    parsed = urllib.parse.urlsplit(value)
    try:
        parsed.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.hostname)


def _http_signal_url(endpoint: str, signal: Signal) -> str:
    """The OTLP/HTTP URL of ``signal`` for a base URL given as an argument.

    A base URL gets the signal's path (as for OTEL_EXPORTER_OTLP_ENDPOINT) and another
    signal's path is swapped for it; any other traces URL is used as given.
    """
    base = endpoint.rstrip("/")
    for path in _HTTP_PATHS.values():
        if base.endswith(path):
            return base[: -len(path)] + _HTTP_PATHS[signal]
    if signal == "traces" and urllib.parse.urlsplit(endpoint).path not in ("", "/"):
        return endpoint
    return base + _HTTP_PATHS[signal]
