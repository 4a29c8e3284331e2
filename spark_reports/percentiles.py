"""Which percentiles the reports print, how they are defined, and the reference computation.

Percentiles come from raw samples, per run and per window, never by averaging per-window
percentiles (docs/design.md, Run records). Spark's ``percentile_approx`` returns a sample whose rank is
ceil(p·n) (the nearest-rank definition, evaluated in floating point) to within n / accuracy ranks;
small groups (about 10,000 samples, Spark's sketch compression threshold) come out exact. Run
totals use accuracy 100,000 so p99.99 stays distinct from the maximum on millions of samples (at
Spark's default of 10,000 its rank error is the whole 0.01 % tail); the many small 10 s windows use
10,000, the floor the reports accept, which roughly halves the cost of the aggregation.
"""

import math
from collections.abc import Sequence
from typing import Final

PERCENTILES: Final = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999)
LABELS: Final = ("p50", "p75", "p95", "p99", "p99.9", "p99.99")
DEFAULT_ACCURACY: Final = 100_000  # run totals
DEFAULT_WINDOW_ACCURACY: Final = 10_000  # 10 s windows: many small groups, each finer sketch costs time
MIN_ACCURACY: Final = 10_000
# Points for CDF plots: every percent, then each further nine in tenths (p99.1 … p99.999).
CDF_GRID: Final = (
    0.0,
    *(i / 100 for i in range(1, 100)),
    *(0.99 + i / 1000 for i in range(1, 10)),
    *(0.999 + i / 10_000 for i in range(1, 10)),
    *(0.9999 + i / 100_000 for i in range(1, 10)),
)


def nearest_rank_index(p: float, n: int) -> int:
    """0-based index into the sorted samples of the nearest-rank percentile p (a fraction)."""
    if n <= 0:
        raise ValueError("no samples")
    # ceil of the double product, which is what Spark 4 percentile_approx returns on small groups
    # (so 0.07 × 100 = 7.000000000000001 asks for rank 8, one above the decimal answer).
    return max(0, math.ceil(p * n) - 1)


def nearest_rank(sorted_values: Sequence[int], p: float) -> int:
    """The nearest-rank percentile of already sorted samples (the reference the tests hold Spark to)."""
    return sorted_values[nearest_rank_index(p, len(sorted_values))]
