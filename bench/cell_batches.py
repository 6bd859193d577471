"""How a grid's cells fall into launches (poa_mc/engine/cell_batch.py), and what a small cell costs
the kernels against a big one.

    python bench/cell_batches.py plan quickstart paper-70b-1p5d ...   # kinds and launch sizes per grid
    python bench/cell_batches.py small [--grid paper-70b-1p5d] [--every 16]

`plan` packs every cell as `poa-mc run` does and prints the grid's batch kinds and its launches'
sizes on the CPU. `small` simulates every n-th cell of a grid alone at 16 and at 128 replicas
(kernels only, tallied, nothing kept) and prints the kernels' simulated requests per second at
each: how much a cell of few replicas loses by itself.
"""

from __future__ import annotations

import argparse
import collections

from poa_mc.cli.common import builtin_grids
from poa_mc.engine import cell_batch
from poa_mc.engine.engine import pack, simulate
from poa_mc.model.config import load_grid
from poa_mc.run.runner import build_manifest


def _grid(name: str):
    return load_grid(builtin_grids().get(name, name))


def plan(names: list[str]) -> None:
    for name in names:
        g = _grid(name)
        m = build_manifest(g, "cpu")["grid"]
        r = g.run
        cells = g.cells()
        packed = [
            pack(c.spec, requests=r.requests, warmup=r.warmup_for(c.concurrency), seed=r.seed, stream=c.stream,
                 drain=r.drain, tallied=True, slo=m.get("slo", {}), poa=m["poa"])
            for c in cells
        ]  # fmt: skip
        kinds = {cell_batch.batch_key(p) for p in packed}
        launches = cell_batch.plan(packed, replicas=r.replicas, backend="cpu")
        sizes = sorted(collections.Counter(len(b) for b in launches).items())
        print(f"{name}: {len(cells)} cells of {r.replicas} replicas, {len(kinds)} kind(s), "
              f"{len(launches)} launches (cells a launch: count) {sizes}")  # fmt: skip


def small(name: str, every: int) -> None:
    g = _grid(name)
    r = g.run
    pick = g.cells()[::every]
    for reps in (16, 128):
        secs = n = 0.0
        for c in pick:
            res = simulate(c.spec, replicas=reps, requests=r.requests, warmup=r.warmup_for(c.concurrency), seed=r.seed,
                           stream=c.stream, keep=0, reduce=lambda cols, rep, logs: {}, tally=True)  # fmt: skip
            res.reduced()
            secs += res.wall_s
            n += float(res.replica["simulated"].sum())
        print(f"{name}, {len(pick)} cells at {reps} replicas: {n / secs / 1e6:.3f} M simulated req/s ({secs:.2f} s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("plan")
    p.add_argument("grids", nargs="+")
    s = sub.add_parser("small")
    s.add_argument("--grid", default="paper-70b-1p5d")
    s.add_argument("--every", type=int, default=16)
    a = ap.parse_args()
    if a.what == "plan":
        plan(a.grids)
    else:
        small(a.grid, a.every)


if __name__ == "__main__":
    main()
