"""The repository's collector configs and jaeger-config.yaml pass the built binaries' ``validate``.

scripts/build-tools runs the same check after every build; this test keeps it in the
pytest run, so an edited config fails here even when the binaries were not rebuilt.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .services import COLLECTOR_CONFIG, COLLECTOR_TIER_CONFIG, JAEGER_CONFIG, Tools

pytestmark = pytest.mark.e2e


def _validate(binary: Path, config: Path) -> subprocess.CompletedProcess[str]:
    # Unset the variables the configs read, so their defaults are what gets validated.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTELCOL_", "JAEGER_"))}
    return subprocess.run(
        [str(binary), "validate", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("which", ["otelcol", "otelcol-tier", "jaeger"])
def test_repository_config_validates(otel_tools: Tools, which: str) -> None:
    """`validate` accepts the config each binary runs in tests and in docker compose."""
    binary, config = {
        "otelcol": (otel_tools.otelcol, COLLECTOR_CONFIG),
        "otelcol-tier": (otel_tools.otelcol, COLLECTOR_TIER_CONFIG),
        "jaeger": (otel_tools.jaeger, JAEGER_CONFIG),
    }[which]
    result = _validate(binary, config)
    assert result.returncode == 0, result.stdout + result.stderr


def test_validate_rejects_a_misspelt_setting(otel_tools: Tools, tmp_path: Path) -> None:
    """`validate` is a real check: a misspelt tail-sampling setting fails it."""
    broken = tmp_path / "collector-config.yaml"
    broken.write_text(COLLECTOR_CONFIG.read_text().replace("decision_wait:", "decision_wiat:", 1))
    result = _validate(otel_tools.otelcol, broken)
    assert result.returncode != 0
    assert "decision_wiat" in result.stdout + result.stderr


def test_validate_rejects_a_misspelt_tier_setting(otel_tools: Tools, tmp_path: Path) -> None:
    """`validate` checks collector-tier.yaml's load-balancing exporter: a misspelt resolver fails it."""
    broken = tmp_path / "collector-tier.yaml"
    broken.write_text(COLLECTOR_TIER_CONFIG.read_text().replace("static:", "statik:", 1))
    result = _validate(otel_tools.otelcol, broken)
    assert result.returncode != 0
    assert "statik" in result.stdout + result.stderr
