"""Aggregates for the report: mean ± standard deviation, and a bootstrap interval.

The bootstrap resamples *cases* (with replacement) and recomputes the mean paired
uplift (with-skill score minus without-skill score of the same case, each averaged over
its attempts). Cases are the unit because they are what varies between datasets; the
seed is fixed so the same raw results always give the same interval.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

BOOTSTRAP_SEED = 20261202
BOOTSTRAP_SAMPLES = 10000


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def stddev(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1); 0 for a single value."""
    if len(values) < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


def bootstrap_mean_ci(
    diffs: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED, level: float = 0.95
) -> Interval:
    """Percentile bootstrap interval of the mean of ``diffs``."""
    if not diffs:
        return Interval(math.nan, math.nan)
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(samples))
    tail = (1.0 - level) / 2.0
    low = means[int(math.floor(tail * (samples - 1)))]
    high = means[int(math.ceil((1.0 - tail) * (samples - 1)))]
    return Interval(low, high)
