"""docker-compose.yml's "tier" profile agrees with collector-tier.yaml: names, ports and files line up.

Compose cannot run here, so these tests read the two files the way Compose and the
Collector would: the services the tier Collector routes to exist and listen where it
sends, the files they are given are the repository's, and the ports they publish are the
ones the configs open.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
_ENV_DEFAULT = re.compile(r"\$\{env:([A-Z0-9_]+):-([^}]*)\}")


def _compose() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))["services"]
    return services


def _defaults(config: str) -> dict[str, str]:
    """The ``${env:NAME:-default}`` defaults of a repository config file."""
    return dict(_ENV_DEFAULT.findall((REPO / config).read_text(encoding="utf-8")))


def _tier_services() -> dict[str, Any]:
    return {name: service for name, service in _compose().items() if "tier" in service.get("profiles", ())}


def _serve_services() -> dict[str, Any]:
    return {name: s for name, s in _tier_services().items() if s.get("command", [])[:2] == ["latency-budget", "serve"]}


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _port(endpoint: str) -> str:
    return endpoint.rsplit(":", 1)[1]


def _published(service: dict[str, Any]) -> dict[str, str]:
    """Container port -> host port of a service's ``ports``."""
    return {mapping.split(":")[1]: mapping.split(":")[0] for mapping in service.get("ports", [])}


def test_tier_profile_has_a_collector_and_two_serve_instances() -> None:
    """The profile runs one Collector on collector-tier.yaml and two `latency-budget serve` instances."""
    tier = _tier_services()
    assert sorted(_serve_services()) == ["serve-0", "serve-1"]
    collector = tier["tier-collector"]
    config_path = _flag(collector["command"], "--config")
    assert f"./collector-tier.yaml:{config_path}:ro" in collector["volumes"]
    # The same pinned release as the stack's own collector (and tools/otelcol-builder.yaml).
    assert collector["image"] == _compose()["collector"]["image"]


def test_tier_collector_routes_to_every_serve_instance_at_its_grpc_port() -> None:
    """OTELCOL_TIER_BACKENDS names each serve service at the port of its --grpc-endpoint, and nothing else."""
    backends = yaml.safe_load(_tier_services()["tier-collector"]["environment"]["OTELCOL_TIER_BACKENDS"])
    expected = [f"{name}:{_port(_flag(s['command'], '--grpc-endpoint'))}" for name, s in _serve_services().items()]
    assert sorted(backends) == sorted(expected)
    # collector-tier.yaml's own default is the compose list, so the file runs there unchanged.
    assert yaml.safe_load(_defaults("collector-tier.yaml")["OTELCOL_TIER_BACKENDS"]) == backends
    assert set(_tier_services()["tier-collector"]["depends_on"]) == set(_serve_services())


def test_tier_ports_are_the_ones_the_configs_open() -> None:
    """The published container ports are collector-tier.yaml's receiver and health ports and serve's health port."""
    defaults = _defaults("collector-tier.yaml")
    collector = _published(_tier_services()["tier-collector"])
    for variable in ("OTELCOL_OTLP_GRPC_ENDPOINT", "OTELCOL_OTLP_HTTP_ENDPOINT", "OTELCOL_HEALTH_CHECK_ENDPOINT"):
        assert _port(defaults[variable]) in collector, variable
    host_ports = list(collector.values())
    for service in _serve_services().values():
        published = _published(service)
        assert list(published) == [_port(_flag(service["command"], "--health-endpoint"))]
        host_ports += published.values()
    # No two services publish the same host port, nor one the rest of the stack publishes.
    others = [p for name, s in _compose().items() if name not in _tier_services() for p in _published(s).values()]
    assert len(set(host_ports)) == len(host_ports)
    assert not set(host_ports) & set(others)


def test_serve_instances_forward_to_the_stack() -> None:
    """Each serve instance reads a mounted budget file, sends traces to Jaeger, logs and metrics to the collector."""
    assert {"jaeger", "collector"} <= set(_compose())
    jaeger_grpc = _port(_defaults("jaeger-config.yaml")["JAEGER_OTLP_GRPC_ENDPOINT"])
    collector_grpc = _port(_defaults("collector-config.yaml")["OTELCOL_OTLP_GRPC_ENDPOINT"])
    for name, service in _serve_services().items():
        budgets = _flag(service["command"], "--budgets")
        (mount,) = [v for v in service["volumes"] if v.split(":")[1] == budgets]
        assert (REPO / mount.split(":")[0]).is_file(), name
        env = service["environment"]
        assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == f"http://jaeger:{jaeger_grpc}"
        assert env["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"] == f"http://collector:{collector_grpc}"
        assert env["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"] == f"http://collector:{collector_grpc}"
        assert {"jaeger", "collector"} <= set(service["depends_on"])
