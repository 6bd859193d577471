"""The whole `poa-mc run` of bench/bench_pipeline.py, an older commit against this checkout.

bench_pipeline.py runs the CLI in a child process, which imports this checkout whatever the
script was started from (bench/at_commit.py cannot point it elsewhere). This script exports
COMMIT (bench/at_commit.py's layout, with a Numba cache of its own), runs one warm-up of each side
(the older one compiles there), then alternates the two, swapping which goes first each round,
and prints per run the wall from the child's first line to its exit, the process's CPU time and the
kernels' busy time (the sum of `kernels.cpu.run_batch` calls), then the means and the change:

    python bench/ab_pipeline.py COMMIT [--rounds 4] [--replicas 2560] [--samples none]
    python bench/ab_pipeline.py COMMIT --grid paper-70b-1p5d [--set 'run.samples="none"']

--grid runs a grid file or built-in preset instead of bench_pipeline.py's reference cell, with
any --set overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from at_commit import export
from bench_pipeline import GRID

# one run, in a child: the CLI in-process, its kernels' calls timed
DRIVER = r"""
import sys, time
t0, c0 = time.perf_counter(), time.process_time()
root, grid, out = sys.argv[1:4]
sets = sys.argv[4:]
if root:
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, root)
import json
import poa_mc.kernels.cpu as cpu
busy = [0.0]
run_batch = cpu.run_batch
def timed(*a, **k):
    s = time.perf_counter()
    try:
        return run_batch(*a, **k)
    finally:
        busy[0] += time.perf_counter() - s
cpu.run_batch = timed
from poa_mc.cli.main import main
sys.argv = ["poa-mc", "run", "--grid", grid, "-q", "--out", out, *sets]
try:
    main(standalone_mode=False)
except SystemExit as e:
    if e.code:
        raise
wall, cpu_s = time.perf_counter() - t0, time.process_time() - c0
from pathlib import Path
simulated = sum(json.loads(f.read_text())["simulated"] for f in (Path(out) / "meta").glob("*.json"))
print(json.dumps({"wall": wall, "cpu": cpu_s, "kernels": busy[0], "simulated": simulated}))
"""


def run_once(root: str, grid: str, out: Path, env: dict, sets: list[str]) -> dict:
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    cmd = [sys.executable, "-c", DRIVER, root, grid, str(out), *sets]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"a run failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("commit")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--replicas", type=int, default=2560)
    ap.add_argument("--samples", default="none")
    ap.add_argument("--grid", default=None, help="a grid file or built-in preset instead of the reference cell")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE, passed to poa-mc run (repeatable)")
    a = ap.parse_args()
    sets = [x for kv in a.set for x in ("--set", kv)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        old_root = str(export(a.commit, tmp / "old"))
        grid = a.grid
        if grid is None:
            grid = str(tmp / "grid.toml")
            Path(grid).write_text(GRID.format(replicas=a.replicas, samples=a.samples))
        sides = {
            a.commit: (old_root, {**os.environ, "NUMBA_CACHE_DIR": str(tmp / "numba")}),
            "this": ("", dict(os.environ)),
        }
        for root, env in sides.values():  # warm-up: compiles what a side's cache lacks
            run_once(root, grid, tmp / "out", env, sets)
        runs: dict[str, list[dict]] = {name: [] for name in sides}
        for i in range(a.rounds):
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            for name in order:
                root, env = sides[name]
                r = run_once(root, grid, tmp / "out", env, sets)
                runs[name].append(r)
                print(
                    f"round {i + 1} {name}: wall {r['wall']:.2f} s, cpu {r['cpu']:.2f} s, kernels {r['kernels']:.2f} s"
                )
    mean = {n: {k: sum(r[k] for r in rs) / len(rs) for k in ("wall", "cpu", "kernels")} for n, rs in runs.items()}
    old, new = mean[a.commit], mean["this"]
    for k in ("wall", "cpu", "kernels"):
        print(f"mean {k}: {a.commit} {old[k]:.2f} s, this {new[k]:.2f} s, {100 * (new[k] / old[k] - 1):+.1f}%")
    n_req = runs["this"][0]["simulated"]
    print(
        f"{n_req:,.0f} simulated requests a run: {n_req / old['wall'] / 1e6:.2f} M req/s whole process ({a.commit}), "
        f"{n_req / new['wall'] / 1e6:.2f} M (this)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
