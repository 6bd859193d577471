"""What PoA-hat's pass over a batch's request rows costs in the kernels (poa_mc/kernels/poa_hat.py), against
the host's compiled path over the same requests' columns (poa_mc.stats.poa_hat, as the reduction ran
it before the kernels did), on the reference cell of bench/bench_engine.py, [poa] window = 8:

    python bench/bench_poa_pass.py [--replicas 256] [--requests 2000]

Prints the best of 5 of each (the kernels' pass on one thread; the host's on its threads), and
checks that both give the same sums to the bit.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import reference_cell  # noqa: E402

from poa_mc.engine import memory, packing, results  # noqa: E402
from poa_mc.kernels import cpu, threads  # noqa: E402
from poa_mc.kernels import layout as L  # noqa: E402
from poa_mc.stats import poa_plan, sketch  # noqa: E402
from poa_mc.stats.accumulate import poa_hat_sums  # noqa: E402


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=256)
    ap.add_argument("--requests", type=int, default=2000)
    a = ap.parse_args()
    spec = reference_cell(1, 5, 64)
    spec_d, poa = spec, {"window": 8}
    ip, fp, tabs = packing.pack_params(spec, requests=a.requests, warmup=200, seed=1, stream=0, record_candidates=True)
    entries, fp[L.F_POA_OMEGA], step = poa_plan.kernel_params(poa_plan.plan(spec_d, poa), spec_d, a.requests)
    for j, v in entries.items():
        ip[j] = v
    shapes = memory._shapes(ip, fp, int(ip[L.P_NP] + ip[L.P_ND]), a.requests, True)
    out, _ = cpu.run_batch(ip, fp, tabs, sketch.EDGES, shapes, a.replicas, parallel=False, step=step)
    nf, ni = cpu.poa_scratch(ip)
    f, g = np.empty(nf), np.empty(ni, dtype=np.int64)
    rows = (out["out_f"], out["out_i"], out["cand"], out["poa"])
    cell = np.zeros(a.replicas, dtype=np.int64)  # one cell: every replica reads row 0
    kernels = best(lambda: cpu._run_poa(0, a.replicas, 1, cell, ip[None], fp[None], step, *rows, f, g))
    cols = results._batch_columns(out, ip, spec, True)
    cols = {k: np.ascontiguousarray(v) for k, v in cols.items()}
    host = best(lambda: poa_hat_sums(cols, spec_d, poa))
    actual, opt, _ = poa_hat_sums(cols, spec_d, poa)
    same = np.array_equal(actual, out["poa"][:, 0]) and np.array_equal(opt, out["poa"][:, 1])
    n = a.replicas * a.requests
    print(
        f"{a.replicas} replicas x {a.requests} requests: the kernels' pass {kernels:.3f} s on one thread "
        f"({kernels / n * 1e9:.0f} ns a request), the host's {host:.3f} s on {threads.count(a.replicas)} threads; "
        f"same sums: {same}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
