"""The one rule that builds OTLP exporters for configure() and the demo: protocol, endpoint, bad values."""

from __future__ import annotations

import logging
import re

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

from latency_budget.export._otlp import OtlpSettingError, otlp_target


def test_a_signals_own_protocol_variable_wins_over_the_generic_one() -> None:
    """OTEL_EXPORTER_OTLP_TRACES_PROTOCOL sets the traces' protocol; the others follow OTEL_EXPORTER_OTLP_PROTOCOL."""
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}
    target = otlp_target(env=env)
    assert dict(target.protocols) == {"traces": "grpc", "logs": "http/protobuf", "metrics": "http/protobuf"}


def test_the_protocol_argument_wins_over_every_variable() -> None:
    """An explicit protocol applies to all three signals, whatever the environment says."""
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "grpc"}
    assert set(otlp_target(protocol="http/protobuf", env=env).protocols.values()) == {"http/protobuf"}


@pytest.mark.parametrize(
    ("endpoint", "traces", "logs"),
    [
        ("http://collector:4318", "http://collector:4318/v1/traces", "http://collector:4318/v1/logs"),
        ("http://collector:4318/", "http://collector:4318/v1/traces", "http://collector:4318/v1/logs"),
        ("http://collector:4318/v1/traces", "http://collector:4318/v1/traces", "http://collector:4318/v1/logs"),
        ("http://gw:80/otlp/traces", "http://gw:80/otlp/traces", "http://gw:80/otlp/traces/v1/logs"),
    ],
)
def test_over_http_an_endpoint_argument_gets_each_signals_path(endpoint: str, traces: str, logs: str) -> None:
    """A base URL gains /v1/traces, /v1/logs; a signal path given is swapped; another traces URL is kept."""
    target = otlp_target(endpoint, "http/protobuf", env={})
    assert target.url("traces") == traces
    assert target.url("logs") == logs
    assert isinstance(target.span_exporter(), HttpSpans)
    assert isinstance(target.log_exporter(), HttpLogs)
    assert isinstance(target.metric_exporter(), HttpMetrics)


def test_over_grpc_every_signal_uses_the_endpoint_as_given() -> None:
    """gRPC has no per-signal paths: the one URL serves traces, logs and metrics."""
    target = otlp_target("http://collector:4317", env={})
    assert {target.url(s) for s in ("traces", "logs", "metrics")} == {"http://collector:4317"}
    assert target.describe() == "http://collector:4317 (OTLP grpc)"
    assert isinstance(target.span_exporter(), GrpcSpans)


def test_a_valid_environment_endpoint_is_left_to_the_exporters() -> None:
    """With OTEL_EXPORTER_OTLP_ENDPOINT set and valid, the exporters read it (and per-signal variables) themselves."""
    assert otlp_target(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}).endpoint is None


@pytest.mark.parametrize(
    ("endpoint", "env", "message"),
    [
        ("collector:4317", {}, "--otlp-endpoint: expected a URL such as http://localhost:4317, got 'collector:4317'"),
        ("http://collector:99999", {}, "--otlp-endpoint: expected a URL such as"),
        ("", {}, "--otlp-endpoint: expected a URL such as http://localhost:4317, got ''"),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://x:1"}, "OTEL_EXPORTER_OTLP_ENDPOINT: expected a URL"),
        (
            None,
            {"OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL: OTLP protocol 'http/json' is not supported; "
            "use one of: grpc, http/protobuf",
        ),
    ],
)
def test_strict_bad_values_raise_naming_the_setting(endpoint: str | None, env: dict[str, str], message: str) -> None:
    """With strict (the command line), a bad endpoint or protocol is an error that names where it came from."""
    with pytest.raises(OtlpSettingError, match="^" + re.escape(message)):
        otlp_target(endpoint, env=env, strict=True, endpoint_name="--otlp-endpoint")


def test_lenient_bad_values_warn_once_each_and_fall_back(caplog: pytest.LogCaptureFixture) -> None:
    """Without strict (an application), a bad protocol shared by all signals warns once; a bad endpoint once."""
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"}
    with caplog.at_level(logging.WARNING, logger="latency_budget"):
        target = otlp_target(env=env)
    assert set(target.protocols.values()) == {"grpc"}
    assert target.endpoint == "http://localhost:4317"
    assert [r.getMessage() for r in caplog.records] == [
        "latency_budget: unsupported OTLP protocol 'http/json' (expected grpc or http/protobuf); using grpc",
        "latency_budget: OTEL_EXPORTER_OTLP_ENDPOINT='collector:4317' is not an http(s)://host:port URL; "
        "exporting to http://localhost:4317 instead",
    ]
