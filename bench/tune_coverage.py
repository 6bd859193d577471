"""Coverage of `poa-mc tune`'s validation intervals on a stand-in engine with known gains
(tests/test_tune.py's cases, more seeds): a point's gain over the own settings (true 10%, 16
replicas, 20% noise per replica not common to the pair), and a controller's mean gain over three
loads (true 20%, 10%, 0%: a mean of 10%, 8 replicas each).

    python bench/tune_coverage.py [--seeds 1000]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from poa_mc.run.tune import search  # noqa: E402
from poa_mc.run.tune.space import load_tune  # noqa: E402
from tests.test_tune import CONTROLLER_GRID, GRID, fake_engine  # noqa: E402


def with_seed(spec, k: int, **kw):
    run = dataclasses.replace(spec.grid.run, seed=k)
    return dataclasses.replace(spec, grid=dataclasses.replace(spec.grid, run=run), **kw)


def point_coverage(folder: Path, seeds: int) -> int:
    p = folder / "grid.toml"
    p.write_text(GRID.format(seed=1, objective="ttft_mean", candidates=4, validate=16))
    spec = load_tune(p)
    (cell,) = spec.grid.cells()
    best = {"overlap_weight": 0.5, "temperature": 0.5}
    engine = fake_engine(lambda pol: 100.0 if pol.overlap_weight == 1.0 else 90.0, noise=0.2)

    def simulate(sp, **kw):
        kw["stream"] += 0 if sp.policy.overlap_weight == 1.0 else 7919
        return engine(sp, **kw)

    hits = 0
    for k in range(seeds):
        (g,) = search.validate(with_seed(spec, k), cell, best, simulate)
        hits += g.lo <= 0.10 <= g.hi
    return hits


def mean_coverage(folder: Path, seeds: int) -> int:
    p = folder / "ctl.toml"
    p.write_text(CONTROLLER_GRID.format(seed=1, candidates=4, validate=8))
    spec = load_tune(p)
    cells = spec.grid.cells()
    best = {"theta1": 2000.0, "saturated_temperature": 0.5, "below_overlap_weight": 0.5}
    gain_at = {8: 0.2, 32: 0.1, 128: 0.0}

    def simulate(sp, *, stream, **kw):
        own = sp.policy.controller.theta1 == 1000.0
        value = 100.0 if own else 100.0 * (1 - gain_at[sp.workload.concurrency])
        return fake_engine(lambda _: value, noise=0.2)(sp, stream=stream + (0 if own else 7919), **kw)

    hits = 0
    for k in range(seeds):
        s = with_seed(spec, k, compare=())
        m = search.mean_gain([search.validate(s, c, best, simulate)[0] for c in cells], "own")
        hits += m.lo <= 0.10 <= m.hi
    return hits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1000)
    a = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        one = point_coverage(Path(d), a.seeds)
        mean = mean_coverage(Path(d), a.seeds)
    print(f"a point's gain (16 replicas): {one} of {a.seeds} intervals held the true 10%")
    print(f"a controller's mean gain over 3 loads (8 replicas each): {mean} of {a.seeds} held the true 10%")
    print(f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
