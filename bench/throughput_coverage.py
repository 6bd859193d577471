"""Open-loop throughput against the arrival rate: bias and coverage of throughput_rps's interval.

M/M/1 (1 ms exponential service) at loads 0.6, 0.9 and 0.95, CELLS independent cells of 16
replicas x 400 measured requests after the relaxation rule's warm-up (poa_mc.stats.warmup); for each
load, the mean relative error over cells and how many cells' 95% intervals hold the arrival rate,
for the completions over the measured arrivals' window (today's estimator) and for Little's law
over a window that ends at the last measured completion (the estimator before):

    PYTHONPATH=. python bench/throughput_coverage.py [--cells 60]
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    from poa_mc.engine.engine import simulate
    from poa_mc.stats.accumulate import accumulate
    from poa_mc.stats.cell_stats import request_rate
    from poa_mc.stats.intervals import ratio_interval
    from poa_mc.stats.warmup import check
    from tests.test_engine_theory import queue_cell

    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=60)
    cells = ap.parse_args().cells
    reps, n = 16, 400
    for rho in (0.6, 0.9, 0.95):
        rate = rho * 1000.0
        warm = check(np.ones((2, 16)), n, 0, utilisation=rho).suggested
        spec = queue_cell(1, rate_rps=rate)
        res = simulate(spec, replicas=cells * reps, requests=n, warmup=warm, seed=51, stream=int(rho * 100))
        acc = accumulate(res.samples, res.replica, spec, {"window": 4})
        for label, open_loop in (("window to the last arrival", True), ("Little, to the last completion", False)):
            vals, cov = [], 0
            for c in range(cells):
                part = {
                    k: v[c * reps : (c + 1) * reps] for k, v in acc.items() if np.ndim(v) and len(v) == cells * reps
                }
                est = ratio_interval(*request_rate(part, n, open_loop=open_loop))
                vals.append(est.value)
                cov += est.lo <= rate <= est.hi
            print(
                f"load {rho:.2f} (warm-up {warm}): {label:32s} bias {np.mean(vals) / rate - 1:+.2%}  "
                f"covers {cov}/{cells}"
            )


if __name__ == "__main__":
    main()
