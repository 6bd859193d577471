"""The host's summary parts on their own, at the scale of the pipeline's 2,560-replica cell:
PoA-hat's window solve (Dynamo's router cost, slot pricing, windows of 8 requests over 5 decode
workers, random prices), a sketch quantile over 2,560 replicas' histograms, and reading an
accumulator frame back (`accumulate.from_frame`). Best of a few calls after one that compiles.

    python bench/bench_summary_parts.py [--windows 100000]
    python bench/at_commit.py COMMIT bench/bench_summary_parts.py      (the same at another commit)
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from poa_mc.stats import accumulate, assignment, sketch


def best(f, repeat: int) -> float:
    f()
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        out = min(out, time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    w, n, k, slots = a.windows, 8, 5, 8
    f_tok, f_blk = rng.uniform(0, 5000, (w, n, k)), rng.uniform(0, 100, (w, n, k))
    a_tok, a_blk = rng.uniform(0, 4096, (w, k)), rng.uniform(0, 64, (w, k))
    t_tok = rng.integers(0, 3, (w, k)).astype(np.float64)
    args = (f_tok, f_blk, a_tok, a_blk, t_tok, t_tok.copy(), slots, 1.0, 64.0)
    solve = best(lambda: assignment._slot_router_opt(*args), a.repeat)
    r = 2560
    hist = np.zeros((r, sketch.NBINS), np.int32)
    for i in range(r):
        np.add.at(hist[i], rng.integers(1000, 1400, 2000), 1)
    lo, hi = np.zeros(r), np.full(r, np.inf)
    quant = best(lambda: sketch.quantile(hist, 0.99, lo, hi), a.repeat)
    acc = {
        "n": np.full(r, 2000),
        "sum_ttft_ms": rng.uniform(size=r),
        **{f"hist_{m}": hist for m in ("ttft", "e2e", "itl")},
    }
    df = accumulate.frame(acc)
    read = best(lambda: accumulate.from_frame(df), a.repeat)
    print(
        f"window solve {solve / w * 1e6:.2f} us a window ({w:,} windows of {n} x {slots * k}); "
        f"sketch quantile {quant * 1e3:.1f} ms ({r:,} replicas); from_frame {read * 1e3:.1f} ms ({r:,} rows)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
