"""The per-replica accumulators' host time (poa_mc/accumulate.py) on one batch of the reference cell.

Simulates the cell of bench/bench_engine.py with the router's candidates recorded, then times
`accumulate` on the result (after one call that loads its compiled parts), and prints the time
of the engine beside it and PoA-hat's part:

    python bench/bench_accumulate.py [--replicas 256] [--repeat 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from bench_engine import reference_cell

from poa_mc.accumulate import accumulate, poa_hat_sums
from poa_mc.engine import simulate


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    spec = reference_cell()
    res = simulate(spec, replicas=a.replicas, requests=2000, warmup=200, seed=1, stream=0, record_candidates=True)
    cols, d = {**res.samples, **res.candidates}, dataclasses.asdict(spec)
    poa = {"window": 4, "social_cost": "mean_ttft"}
    accumulate(cols, res.replica, d, poa, {})  # loads (or compiles) the compiled parts
    best_acc = best_poa = float("inf")
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        accumulate(cols, res.replica, d, poa, {})
        t1 = time.perf_counter()
        poa_hat_sums(cols, d, poa)
        t2 = time.perf_counter()
        best_acc, best_poa = min(best_acc, t1 - t0), min(best_poa, t2 - t1)
    print(
        f"{a.replicas} replicas x 2000 requests: engine {res.wall_s:.3f} s; accumulate {best_acc:.3f} s "
        f"(best of {a.repeat}), of which PoA-hat {best_poa:.3f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
