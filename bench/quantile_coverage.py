"""Bias and coverage of summary.parquet's quantile figures against M/M/1's closed form.

Stationary M/M/1 queues (service rate 100/s) by Lindley's recursion, 400 requests a replica; for
each load and replica count, CELLS independent cells: the pooled P99's mean relative error against
ln(100) / (mu - lam), the share of cells whose 95% interval holds it, and its mean relative width;
beside it, the same for the mean over replicas of each replica's P99 (`ttft_p99_run_ms`), and the
coverage of the pooled P50 and P90 (ln 2 / (mu - lam), ln 10 / (mu - lam)):

    PYTHONPATH=. python bench/quantile_coverage.py [--cells 200]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np


def main() -> None:
    from poa_mc.stats import sketch
    from poa_mc.stats.intervals import t_interval
    from poa_mc.stats.quantiles import pooled_quantile, pooled_quantiles
    from tests.test_quantiles import mm1_sojourn_ms

    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=200)
    cells = ap.parse_args().cells
    rng = np.random.default_rng(5)
    for rho in (0.8, 0.9):
        lam, mu = rho * 100.0, 100.0
        true = math.log(100.0) / (mu - lam) * 1000.0
        for reps in (8, 16, 64, 256):
            n_cells = cells if reps < 256 else max(cells // 3, 20)
            x = mm1_sojourn_ms(rng, n_cells, reps, 400, lam, mu)
            vals, cov, width, run_vals, run_cov, body = [], 0, [], [], 0, [0, 0]
            t0 = time.perf_counter()
            for c in range(n_cells):
                first, hist = sketch.span(sketch.histograms(x[c]))
                lo, hi = x[c].min(axis=1), x[c].max(axis=1)
                est = pooled_quantile(hist, 0.99, lo, hi, first)
                for j, (q, e) in enumerate(zip((0.5, 0.9), pooled_quantiles(hist, (0.5, 0.9), lo, hi, first))):
                    body[j] += e.lo <= math.log(1.0 / (1.0 - q)) / (mu - lam) * 1000.0 <= e.hi
                vals.append(est.value)
                cov += est.lo <= true <= est.hi
                width.append((est.hi - est.lo) / est.value)
                run = t_interval(np.quantile(x[c], 0.99, axis=1, method="inverted_cdf"))
                run_vals.append(run.value)
                run_cov += run.lo <= true <= run.hi
            ms = (time.perf_counter() - t0) / n_cells * 1000
            print(
                f"load {rho} replicas {reps:3d} ({n_cells} cells): pooled P99 {np.mean(vals) / true - 1:+.1%} "
                f"covers {cov / n_cells:.2f} width {np.mean(width):.2f} | run P99 {np.mean(run_vals) / true - 1:+.1%} "
                f"covers {run_cov / n_cells:.2f} | P50, P90 cover {body[0] / n_cells:.2f}, {body[1] / n_cells:.2f} "
                f"| {ms:.1f} ms a cell"
            )


if __name__ == "__main__":
    main()
