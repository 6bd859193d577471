"""A schedule's per-stage throughput (poa_mc/stats/stages.py) against its known answer: bias and
coverage of each stage's 95% interval.

M/M/1 FCFS (1 ms exponential service), two stages of 400 requests back to back at loads 0.8 then
0.5, a warm-up of 400 at the first; RUNS independent runs of 16 replicas. A stage's benchmark
throughput is its n requests over its first arrival to its last completion, whose mean at steady
state is (n - 1) / lam + 1 / (mu - lam) (the gaps, then the last request's sojourn): the target is
n / E[span]. Prints, per stage, the mean relative error and the share of intervals holding it:

    PYTHONPATH=. python bench/stage_coverage.py [--runs 300]
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    from poa_mc.engine.engine import simulate
    from poa_mc.model.spec_json import spec_to_json
    from poa_mc.model.spec_workload import Stage
    from poa_mc.stats.stages import stage_rows
    from tests.test_engine_theory import queue_cell
    from tests.test_kernels_schedule import staged

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=300)
    runs = ap.parse_args().runs
    n, lams = 400, (0.8, 0.5)
    spec = staged(queue_cell(1, rate_rps=800.0), [Stage(800.0, n), Stage(500.0, n)])
    cell = {"cell_id": "c", "spec_json": spec_to_json(spec)}
    poa = {"window": 4, "social_cost": "mean_ttft"}
    hits, err = np.zeros(len(lams)), [[] for _ in lams]
    for i in range(runs):
        res = simulate(spec, replicas=16, requests=2 * n, warmup=400, seed=5000 + i, stream=0)
        rows = stage_rows(res.samples, cell, poa, None)
        for k, lam in enumerate(lams):
            target = n / ((n - 1) / lam + 1 / (1 - lam)) * 1000.0
            hits[k] += rows[k]["throughput_rps_lo"] <= target <= rows[k]["throughput_rps_hi"]
            err[k].append(rows[k]["throughput_rps"] / target - 1)
    for k, lam in enumerate(lams):
        print(
            f"stage {k} (load {lam}): bias {np.mean(err[k]):+.2%}, covered {int(hits[k])}/{runs} = {hits[k] / runs:.1%}"
        )


if __name__ == "__main__":
    main()
