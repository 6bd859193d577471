"""Coverage of the cluster Clopper-Pearson share interval (poa_mc.stats.proportions) on beta-binomial
replicas (200 trials each, intra-replica correlation 0.05), 2,000 cells a case:

    python bench/proportion_coverage.py
"""

from __future__ import annotations

import numpy as np


def main() -> None:
    from poa_mc.stats.proportions import proportion_interval

    for p, reps in ((0.3, 8), (0.3, 32), (0.9, 4), (0.02, 32), (0.02, 8), (0.005, 16)):
        rng = np.random.default_rng(7)
        cells, n, icc = 2000, 200, 0.05
        a, b = p * (1 - icc) / icc, (1 - p) * (1 - icc) / icc
        events = rng.binomial(n, rng.beta(a, b, size=(cells, reps))).astype(float)
        trials = np.full(reps, float(n))
        covered = sum((lambda e: e.lo <= p <= e.hi)(proportion_interval(events[c], trials)) for c in range(cells))
        print(f"p {p}, {reps} replicas: covers {covered / cells:.3f}")


if __name__ == "__main__":
    main()
