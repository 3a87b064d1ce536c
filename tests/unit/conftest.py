"""Property tests repeat: every Hypothesis run here is derandomized, with no example database.

Tests are deterministic (the suite's rule): a property test that found a failure once finds
it every time, and one that passes cannot fail on the next CI run by a new draw.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("latency-budget", derandomize=True, database=None)
settings.load_profile("latency-budget")
