"""CUDA throughput on the reference workload across topologies, loads and replica counts.

For each (topology, C) it doubles... quadruples the replica count from 4096 while the previous
launch took under --max-s seconds and the state fits in a quarter of free GPU memory. Prints
simulated requests per second (kernel time from CUDA events, and wall time with allocation and
copies), GPU memory used, and a lower bound of the achieved memory bandwidth (state + outputs
written once, divided by kernel time), then a table.

    python bench/gpu_bench.py [--requests 2000] [--max-s 20] [--sizes 4096,16384,65536] [--json FILE]

--json FILE writes the reference point (1P/5D, C = 64, its largest replica count run) as
{"kernel_rps", "wall_rps", "replicas"} for bench/gpu_check.sh's bench/gpu_results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench_engine import reference_cell

from poa_mc.engine.engine import simulate
from poa_mc.engine.memory import _shapes, bytes_per_replica
from poa_mc.engine.packing import pack_params
from poa_mc.kernels import cuda as kc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--max-s", type=float, default=20.0)
    ap.add_argument("--sizes", default="4096,16384,65536,131072")
    ap.add_argument("--topologies", default="1P/2D,1P/5D,4P/16D")
    ap.add_argument("--loads", default="64,512")
    ap.add_argument("--json", default=None, help="write the reference point (1P/5D, C = 64) here")
    a = ap.parse_args()
    rows = []
    for topo in a.topologies.split(","):
        n_p, n_d = (int(x[:-1]) for x in topo.split("/"))
        for c in (int(x) for x in a.loads.split(",")):
            spec = reference_cell(n_p, n_d, c)
            ip, fp, _ = pack_params(
                spec, requests=a.requests, warmup=a.warmup, seed=1, stream=0, record_candidates=False
            )
            per = bytes_per_replica(_shapes(ip, fp, n_p + n_d, a.requests, False))
            last = 0.0
            prev_n = 1
            for n in (int(x) for x in a.sizes.split(",")):
                free = kc.free_memory()
                if n * per > free // 4:
                    print(f"{topo} C={c}: {n} replicas need {n * per / 2**30:.1f} GiB, skipped", flush=True)
                    break
                if last and last * (n / prev_n) > a.max_s:
                    print(f"{topo} C={c}: {n} replicas would take ~{last * n / prev_n:.0f} s, skipped", flush=True)
                    break
                t0 = time.perf_counter()
                res = simulate(
                    spec,
                    replicas=n,
                    requests=a.requests,
                    warmup=a.warmup,
                    seed=1,
                    stream=0,
                    backend="cuda",
                    record_candidates=False,
                )
                wall = time.perf_counter() - t0
                k = kc.last_kernel_s
                sim = res.simulated_requests
                used = free - kc.free_memory()
                gbs = n * per / k / 1e9
                row = (topo, c, n, sim, k, sim / k, sim / wall, n * per / 2**30, gbs, res.compile_s)
                rows.append(row)
                print(
                    f"{topo} C={c} replicas={n}: {sim} requests, kernel {k:.3f} s -> {sim / k:,.0f} req/s "
                    f"(wall {wall:.2f} s -> {sim / wall:,.0f} req/s), state+outputs {n * per / 2**30:.2f} GiB, "
                    f">= {gbs:.1f} GB/s, compile {res.compile_s:.1f} s, "
                    f"ttft mean {res.samples['ttft_ms'].mean():.1f} ms",
                    flush=True,
                )
                del res, used
                last, prev_n = k, n
    print(
        "\n| topology | C | replicas | simulated requests | kernel s | req/s (kernel) | req/s (wall) | GiB "
        "| GB/s lower bound |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for t, c, n, sim, k, r1, r2, gib, gbs, _ in rows:
        print(f"| {t} | {c} | {n} | {sim} | {k:.3f} | {r1:,.0f} | {r2:,.0f} | {gib:.2f} | {gbs:.1f} |")
    if a.json:
        ref = [row for row in rows if row[0] == "1P/5D" and row[1] == 64]
        point = max(ref, key=lambda row: row[2]) if ref else None
        with open(a.json, "w") as f:
            json.dump(
                {"replicas": point[2], "kernel_rps": point[5], "wall_rps": point[6]}
                if point
                else {"replicas": None, "kernel_rps": None, "wall_rps": None},
                f,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
