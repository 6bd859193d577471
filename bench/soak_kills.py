"""Fault-injection soak: `poa-mc run --resume` of a small grid killed with SIGKILL at random moments
(start-up, a cell, the summary, the plots), resumed, many times; each run's final summary.parquet
and poa.parquet must equal an uninterrupted run's.

    python bench/soak_kills.py --kills 200 [--seed 1] [--work /tmp/soak] [--compile-kills 0]

Each round runs into a fresh directory: it starts the run, kills its whole process group (the
figure workers too, as a node failure would) after a random delay drawn uniformly up to the
length of an uninterrupted run, and starts it again with --resume, until one attempt ends by
itself; then it compares the tables. What was on disk at each kill names its phase. With
--compile-kills K the first K kills land while the kernels compile into an empty Numba cache
(a kill there must not leave a cache that breaks the next start). Prints one JSON line: kills by
phase, rounds, mismatches (must be 0), failures (attempts that ended with an error: must be 0).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

GRID = """
[run]
name = "soak"
seed = 11
replicas = 64
requests = 400
warmup = 64
backend = "cpu"

[workload]
isl = 512
osl = 16
prefix_groups = 4

[cluster]
flow = "decode_first"

[grid]
topology = ["1P/2D", "1P/3D"]
concurrency = [4, 32]

[[policy]]
name = "greedy"
kind = "kv"

[[policy]]
name = "rr"
kind = "round_robin"

[poa]
selfish = "greedy"
window = 4
bootstrap = 200
"""

TABLES = ("summary.parquet", "poa.parquet")


def command(grid: Path, out: Path, resume: bool) -> list[str]:
    return [sys.executable, "-m", "poa_mc.cli.main", "run", "--grid", str(grid), "--out", str(out), "-q",
            *(["--resume"] if resume else [])]  # fmt: skip


def phase(out: Path, n_cells: int, since: float) -> str:
    """Where an attempt started at `since` (time.time()) was when it was killed, from what was on disk."""
    if not (out / "cells.parquet").exists():
        return "start-up"
    done = len(list((out / "acc").glob("cell_id=*/part.parquet"))) if (out / "acc").exists() else 0
    if done < n_cells:
        return "cells"
    summary = out / "summary.parquet"
    if not summary.exists():
        return "summary"
    # a resumed attempt of a run whose cells are all done summarises and plots it again
    return "plots" if summary.stat().st_mtime >= since else "resume before its summary"


def attempt(cmd: list[str], delay: float | None, env: dict[str, str]) -> tuple[bool, int, str]:
    """Run cmd; kill its process group after `delay` s (None: never). (killed, returncode, stderr)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, env=env)
        try:
            proc.wait(timeout=delay)
            killed = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            killed = True
        err.seek(0)
        return killed, proc.returncode, err.read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--compile-kills", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = args.work or Path(tempfile.mkdtemp(prefix="poa-mc-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    grid = work / "soak.toml"
    grid.write_text(GRID)
    env = dict(os.environ)

    ref = work / "reference"
    t0, wall0 = time.perf_counter(), time.time()
    killed, rc, err = attempt(command(grid, ref, False), None, env)
    assert rc == 0, err
    full = time.perf_counter() - t0
    # the uninterrupted run's phases, from its files' times: a kill aims at one phase chosen at
    # random, at a uniform moment of it (uniform over the whole run would rarely hit a short phase)
    accs = sorted(p.stat().st_mtime for p in ref.glob("acc/*/part.parquet"))
    marks = [0.0, (ref / "cells.parquet").stat().st_mtime - wall0, accs[-1] - wall0,
             (ref / "summary.parquet").stat().st_mtime - wall0, full]  # fmt: skip
    windows = list(zip(marks[:-1], marks[1:]))
    reference = {name: pl.read_parquet(ref / name) for name in TABLES}
    n_cells = pl.read_parquet(ref / "cells.parquet").height

    kills: dict[str, int] = {}
    rounds = mismatches = 0
    failures: list[str] = []
    compile_left = args.compile_kills
    t_start = time.perf_counter()
    while sum(kills.values()) < args.kills:
        rounds += 1
        out = work / f"round-{rounds}"
        first = True
        to_kill = rng.randint(1, 4)  # this round's kills; its last attempt then runs to its end
        if rounds == 1:
            to_kill += args.compile_kills
        while True:
            run_env = env
            if rounds == 1 and args.compile_kills:
                # the first round compiles into an empty kernel cache: its first attempts are killed
                # while compiling, and its last one must then run on whatever they left there
                run_env = {k: v for k, v in env.items() if k != "NUMBA_CACHE_DIR"}
                run_env["XDG_CACHE_HOME"] = str(work / "cold")
            if compile_left > 0:
                delay = rng.uniform(2.0, 40.0)
            elif to_kill > 0:
                lo, hi = rng.choice(windows)
                delay = rng.uniform(lo, hi)
            else:
                delay = None
            since = time.time()
            killed, rc, err = attempt(command(grid, out, not first), delay, run_env)
            first = False
            if killed:
                to_kill -= 1
                where = "compile" if compile_left > 0 else phase(out, n_cells, since)
                compile_left -= compile_left > 0
                kills[where] = kills.get(where, 0) + 1
                continue
            if rc != 0:
                failures.append(f"round {rounds}: exit {rc}: {err.strip().splitlines()[-1:]}")
                if len(failures) > 5:
                    break
                continue
            break
        if len(failures) > 5:
            break
        for name in TABLES:
            if not pl.read_parquet(out / name).equals(reference[name], null_equal=True):
                mismatches += 1
                failures.append(f"round {rounds}: {name} differs from the uninterrupted run's")
        leftovers = [str(p) for p in out.rglob("*.tmp")]
        if leftovers:
            failures.append(f"round {rounds}: temporaries left: {leftovers[:3]}")
    print(json.dumps({
        "kills": sum(kills.values()), "by_phase": kills, "rounds": rounds, "mismatches": mismatches,
        "failures": failures, "uninterrupted_run_s": round(full, 2), "phase_marks_s": [round(m, 2) for m in marks],
        "soak_s": round(time.perf_counter() - t_start, 1), "work": str(work),
    }))  # fmt: skip
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
