"""One side of an A/B run (bench/ab_paired.sh, bench/ab_alternating.sh): the reference cell of
bench_engine.py on one thread (on all of numba's with --parallel), 256 replicas (--replicas N) x
2000 measured requests, once to load the kernels and then 9 times; prints the best and the median
rate in simulated requests per second. `--grid G --cell I` runs cell I of grid G (a file or a
built-in name) instead, at `--replicas` and the grid's requests: with the aiconfigurator tables of
the paper presets, the timing path differs from the reference cell's polynomial.

Each call allocates its arrays afresh; glibc maps an array of more than 32 MiB anew every time
(its largest mmap threshold) and the kernels then take its page faults, where arrays under it are
recycled from the heap after the first call. At 256 replicas the candidate costs (192 KB a
replica) are above it; `poa-mc run` streams smaller batches (bench/NOTES.md, 2026-12-03)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import reference_cell  # noqa: E402

try:
    from poa_mc.engine.engine import simulate
except ImportError:  # a commit before the layers (bench/at_commit.py, bench/ab_paired.sh)
    from poa_mc.engine import simulate

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--parallel", action="store_true")
    ap.add_argument("--replicas", type=int, default=256)
    ap.add_argument("--grid", help="run a cell of this grid instead of the reference cell")
    ap.add_argument("--cell", type=int, default=0, help="which cell of --grid (its index in grid order)")
    args = ap.parse_args()
    spec = reference_cell()
    kw = dict(replicas=args.replicas, requests=2000, warmup=200, seed=1, stream=0, parallel=args.parallel)
    if args.grid:
        from poa_mc.cli.common import load_grid_arg

        grid = load_grid_arg(args.grid)
        cell = grid.cells()[args.cell]
        spec = cell.spec
        kw.update(requests=grid.run.requests, warmup=grid.run.warmup, seed=grid.run.seed, stream=cell.stream)
    first = simulate(spec, **kw)
    walls = sorted(simulate(spec, **kw).wall_s for _ in range(9))
    n = first.simulated_requests
    print(f"best {n / walls[0] / 1e6:.3f} M  median {n / walls[4] / 1e6:.3f} M")
