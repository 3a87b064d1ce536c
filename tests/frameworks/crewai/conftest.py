"""CrewAI sends no telemetry of its own and opens no tracing session of its own from the tests."""

from __future__ import annotations

import os

for name in ("CREWAI_DISABLE_TELEMETRY", "CREWAI_DISABLE_TRACKING"):
    os.environ[name] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"
