"""Seeded latency distributions with realistic tails, for the simulated pipeline.

Service latencies are roughly log-normal around their median, and now and then much
slower: a cold cache, a retried connection, a provider under load. :class:`Latency`
models both, and draws from a caller's ``random.Random`` so a seed replays a run.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["MS", "Latency"]

MS = 1_000_000  # nanoseconds per millisecond


@dataclass(frozen=True, slots=True)
class Latency:
    """A log-normal latency around ``median_ms`` with a slow tail.

    ``spread`` is the log-normal's sigma (0.3: most draws within about 0.6x to 1.8x the
    median). With probability ``tail_p`` a draw is multiplied by a Pareto-distributed
    factor of at least ``tail_factor``, which gives the long right tail real services
    have. Draws never go below ``floor_ms``.
    """

    median_ms: float
    spread: float = 0.3
    tail_p: float = 0.0
    tail_factor: float = 3.0
    floor_ms: float = 0.2

    def sample_ms(self, rng: random.Random) -> float:
        """One draw, in milliseconds."""
        value = self.median_ms * math.exp(rng.gauss(0.0, self.spread))
        if self.tail_p and rng.random() < self.tail_p:
            value *= self.tail_factor * rng.paretovariate(3.0)
        return max(self.floor_ms, value)

    def sample_ns(self, rng: random.Random) -> int:
        """One draw, in whole nanoseconds."""
        return round(self.sample_ms(rng) * MS)
