"""The bounds on a budget file, far above any real one, so a hostile or broken file costs little.

A budget file is read at start-up and, with live reload, on a background thread of the
host application: whatever it contains, reading it must take little time and memory and
end in a config or one :class:`~latency_budget.BudgetConfigError`. Real budget files are
a few kilobytes with a handful of stages; these limits are two orders of magnitude above.
docs/reliability.md lists them.
"""

from __future__ import annotations

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_INT_BITS",
    "MAX_NODES",
    "MAX_PROFILES",
    "MAX_RULES",
    "MAX_STAGES",
]

MAX_FILE_BYTES = 256 * 1024
"""Largest budget file (bytes) or text (characters) read."""

MAX_DEPTH = 32
"""Deepest nesting of mappings and lists (a real file nests about 7 deep)."""

MAX_NODES = 20_000
"""Most YAML values in the document, each alias expanded where it is used (a 'billion laughs' stops here)."""

MAX_INT_BITS = 64
"""Integers must fit in 64 bits (OpenTelemetry attributes are int64; no budget needs more)."""

MAX_STAGES = 256
"""Most stages."""

MAX_PROFILES = 256
"""Most profiles."""

MAX_RULES = 1_024
"""Most match rules, over all stages and profiles (each span start may try every one of them)."""
