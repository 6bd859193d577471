"""Mean TTFT of M/M/1 at load 0.9 started empty, with the default warm-up and with the warm-up
rule's (poa_mc.stats.warmup): the mean over cells against the closed form 1 / (mu - lam) = 100 ms and
how many cells' 95% t-intervals hold it (64 replicas x 1,000 requests a cell, 60 cells):

    PYTHONPATH=. python bench/warmup_coverage.py
"""

from __future__ import annotations

import numpy as np


def main() -> None:
    from poa_mc.stats.intervals import t_interval
    from poa_mc.stats.warmup import check
    from tests.test_warmup import mm1_sojourn

    rng = np.random.default_rng(11)
    rule = check(None, 1000, 100, utilisation=0.9).suggested
    for warm in (100, rule):
        means, covered = [], 0
        for _ in range(60):
            x = mm1_sojourn(rng, 64, 1000, 90.0, 100.0, stationary=False, skip=warm)
            est = t_interval(x.mean(axis=1))
            means.append(est.value)
            covered += est.lo <= 100.0 <= est.hi
        bias = np.mean(means) / 100.0 - 1
        print(f"warm-up {warm}: mean TTFT {bias:+.1%}, interval holds it in {covered} of 60 cells")


if __name__ == "__main__":
    main()
