"""The per-replica accumulators' host time (poa_mc/stats/accumulate.py) on one batch of the reference cell.

Simulates the cell of bench/bench_engine.py with the router's candidates recorded, then times
`accumulate` on the result (after one call that loads its compiled parts), and prints the time
of the engine beside it and PoA-hat's part:

    python bench/bench_accumulate.py [--replicas 256] [--repeat 5] [--window 4] [--save OUT.npz]

--save writes PoA-hat's per-replica sums, to compare two commits' solves bit for bit.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from bench_engine import reference_cell

from poa_mc.engine.engine import simulate
from poa_mc.stats.accumulate import accumulate, poa_hat_sums


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--window", type=int, default=4, help="[poa] window")
    ap.add_argument("--save", help="write PoA-hat's per-replica sums to this .npz")
    a = ap.parse_args()
    spec = reference_cell()
    res = simulate(spec, replicas=a.replicas, requests=2000, warmup=200, seed=1, stream=0, record_candidates=True)
    cols, d = {**res.samples, **res.candidates}, spec
    poa = {"window": a.window, "social_cost": "mean_ttft"}
    accumulate(cols, res.replica, d, poa, {})  # loads (or compiles) the compiled parts
    best_acc = best_poa = float("inf")
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        accumulate(cols, res.replica, d, poa, {})
        t1 = time.perf_counter()
        sums = poa_hat_sums(cols, d, poa)
        t2 = time.perf_counter()
        best_acc, best_poa = min(best_acc, t1 - t0), min(best_poa, t2 - t1)
    if a.save:
        np.savez(a.save, actual=sums[0], opt=sums[1], windows=sums[2])
    print(
        f"{a.replicas} replicas x 2000 requests: engine {res.wall_s:.3f} s; accumulate {best_acc:.3f} s "
        f"(best of {a.repeat}), of which PoA-hat {best_poa:.3f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
