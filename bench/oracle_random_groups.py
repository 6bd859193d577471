"""Dynamo's replay over many workloads against poa-mc, for the fidelity regimes (optional).

Dynamo 1.6.1's synthetic replay at a fixed concurrency draws the same prefix-group sequence
whatever its seed (bench/dynamo_oracle.py), so bench/oracle_regimes.sh's "4 seeds" are one
workload replayed four times. This script replays N workloads instead, each a trace of the same
requests with its groups drawn from another seed (`dynamo_oracle.py --random-groups`), and prints
per figure the replay's mean, standard deviation and range over them beside poa-mc's mean and
range over its replicas (bench/regimes.py, the same cell, drained like a replay). It needs a
Python with ai-dynamo-runtime 1.6.1 (see bench/oracle_regimes.sh); never part of the tests:

    DYNAMO_PY=/tmp/dyn/bin/python python bench/oracle_random_groups.py --only evicting_prefill transfer
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from regimes import _REPLAY_KEYS, REGIMES, oracle_args, summarise  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=["evicting_prefill", "transfer"], choices=sorted(REGIMES))
    ap.add_argument("--workloads", type=int, default=30, help="replays, seeds 1..N")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--replicas", type=int, default=8, help="poa-mc replicas")
    ap.add_argument(
        "--router-blocks", choices=("per_request", "dynamo"), default=None, help="poa-mc's cluster.router_blocks"
    )
    a = ap.parse_args()
    py = os.environ.get("DYNAMO_PY")
    if not py:
        sys.exit("set DYNAMO_PY to a python with ai-dynamo-runtime 1.6.1 (bench/oracle_regimes.sh)")
    for name in a.only:
        runs = []
        for seed in range(1, a.workloads + 1):
            cmd = [py, str(HERE / "dynamo_oracle.py"), *oracle_args(REGIMES[name], a.requests, seed), "--random-groups"]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "DYN_LOG": "warn"})
            runs.append(json.loads(out.stdout))
        spec = REGIMES[name]
        if a.router_blocks:
            spec = replace(spec, cluster=replace(spec.cluster, router_blocks=a.router_blocks))
        ours = summarise(spec, a.replicas, a.requests, 1)
        print(f"{name}: Dynamo's replay over {a.workloads} workloads | poa-mc over {a.replicas} replicas")
        for ours_key, replay_key in _REPLAY_KEYS.items():
            xs = [r[replay_key] for r in runs]
            o = ours[ours_key]
            print(
                f"  {ours_key:15s} replay {statistics.mean(xs):10.4g} sd {statistics.stdev(xs):8.3g} "
                f"[{min(xs):.4g}, {max(xs):.4g}]   poa-mc {o['mean']:10.4g} [{o['min']:.4g}, {o['max']:.4g}]",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
