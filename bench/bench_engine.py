"""Engine throughput on the reference workload (issue: engine; docs/sources.md, "Dynamo's offline replay").

dynamo-mocker profile, isl 4096, osl 256, 16 prefix groups, prefix_ratio 0.5, prefill_first, kv
router, 1P/5D, C = 64, 256 replicas x 2000 measured requests (plus warm-up). Prints simulated
requests per wall second (compile excluded, reported apart), peak memory and state bytes per
replica, and appends a row to bench/RESULTS.md with --record.

    python bench/bench_engine.py [--replicas 256] [--requests 2000] [--backend cpu] [--record] [--each]
    python bench/bench_engine.py --streamed tally   # batches as `poa-mc run` streams them, tallied

--streamed plain / tally / poa: the kernels' cost of the replicas' tally (poa_mc/kernels/tally.py) and of
their PoA-hat windows (poa_mc/kernels/poa_hat.py, poa: both, as `poa-mc run` has them), in batches of
`poa-mc run`'s size handed to a reducer that does nothing.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import sys
from pathlib import Path

try:
    from poa_mc.engine.engine import simulate
    from poa_mc.model.spec import CellSpec
    from poa_mc.model.spec_cluster import ClusterSpec
    from poa_mc.model.spec_policy import PolicySpec
    from poa_mc.model.spec_workload import Dist, WorkloadSpec
except ImportError:  # an older commit (bench/at_commit.py, bench/ab_paired.sh)
    try:  # the specs in one module
        from poa_mc.engine.engine import simulate
        from poa_mc.model.spec import CellSpec, ClusterSpec, Dist, PolicySpec, WorkloadSpec
    except ImportError:  # before the layers
        from poa_mc.spec import CellSpec, ClusterSpec, Dist, PolicySpec, WorkloadSpec

        from poa_mc.engine import simulate


def reference_cell(n_prefill: int = 1, n_decode: int = 5, concurrency: int = 64) -> CellSpec:
    return CellSpec(
        cluster=ClusterSpec(n_prefill=n_prefill, n_decode=n_decode, flow="prefill_first"),
        workload=WorkloadSpec(
            isl=Dist("fixed", 4096), osl=Dist("fixed", 256), prefix_groups=16, prefix_ratio=0.5, concurrency=concurrency
        ),
        policy=PolicySpec(kind="kv"),
    )


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=256)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--topology", default="1P/5D")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--no-candidates", action="store_true", help="do not record the router's candidate costs")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--record", action="store_true", help="append the result to bench/RESULTS.md")
    ap.add_argument("--serial", action="store_true", help="one thread (steadier for A/B comparisons)")
    ap.add_argument("--each", action="store_true", help="also print each call's rate, in call order")
    ap.add_argument("--decode-kv-blocks", type=int, default=None, help="e.g. 1200: a cell under KV pressure")
    ap.add_argument("--profile", default=None, help="a built-in profile instead of dynamo-mocker, e.g. an aic table")
    ap.add_argument(
        "--streamed",
        choices=("off", "plain", "tally", "poa"),
        default="off",
        help="as `poa-mc run` streams: batches handed to a reducer that does nothing, nothing kept; "
        "'tally' adds the kernels' tally of each replica (poa_mc/kernels/tally.py), 'poa' that and its PoA-hat windows "
        "(poa_mc/kernels/poa_hat.py, [poa] window = 8), 'plain' neither",
    )
    a = ap.parse_args()
    n_p, n_d = (int(x[:-1]) for x in a.topology.split("/"))
    spec = reference_cell(n_p, n_d, a.concurrency)
    if a.decode_kv_blocks:
        from dataclasses import replace

        spec = replace(spec, cluster=replace(spec.cluster, decode_kv_blocks=a.decode_kv_blocks))
    if a.profile:
        from dataclasses import replace

        from poa_mc.model.profiles import resolve_profile

        spec = replace(spec, profile=resolve_profile({"name": a.profile}))
    kw = dict(
        replicas=a.replicas,
        requests=a.requests,
        warmup=a.warmup,
        seed=1,
        stream=0,
        backend=a.backend,
        record_candidates=not a.no_candidates,
    )
    if a.serial:
        kw["parallel"] = False
    if a.streamed != "off":
        kw.update(keep=0, reduce=lambda cols, rep, logs: {}, tally=a.streamed in ("tally", "poa"))
        if a.streamed == "poa":
            kw["poa"] = {"window": 8}
    first = simulate(spec, **kw)
    walls = [first.wall_s] + [simulate(spec, **kw).wall_s for _ in range(a.repeat - 1)]
    wall = sorted(walls)[len(walls) // 2]
    simulated = first.simulated_requests
    rate = simulated / wall
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    threads = os.environ.get("NUMBA_NUM_THREADS", str(os.cpu_count()))
    about = f"streamed ({a.streamed})" if a.streamed != "off" else f"ttft mean {first.samples['ttft_ms'].mean():.1f} ms"
    line = (
        f"{a.topology} C={a.concurrency} {a.replicas}x{a.requests}(+{a.warmup}) "
        f"backend={'cpu (serial)' if a.serial else first.device}"
        + (f" decode_kv_blocks={a.decode_kv_blocks}" if a.decode_kv_blocks else "")
        + (f" profile={a.profile}" if a.profile else "")
        + ": "
        f"{simulated} requests in {wall:.3f} s (median of {len(walls)}) = {rate:,.0f} simulated req/s; "
        f"compile {first.compile_s:.1f} s; peak RSS {peak_mib:.0f} MiB; "
        f"state {first.state_bytes_per_replica} B/replica; {about}; "
        f"{first.replica['events'].sum() / simulated:.2f} events/request"
    )
    if "preemptions" in first.replica:  # older commits (bench/at_commit.py) have no such counter
        line += f", {first.replica['preemptions'].sum() / simulated:.3f} preemptions/request"
    print(line)
    if a.each:
        print("each call (M req/s): " + " ".join(f"{simulated / w / 1e6:.2f}" for w in walls))
    if a.record:
        out = Path(__file__).with_name("RESULTS.md")
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        cmd = "python " + " ".join(["bench/bench_engine.py", *sys.argv[1:]])
        with out.open("a") as f:
            f.write(f"| {stamp} | {cpu_model()}, {os.cpu_count()} cores, {threads} threads | `{cmd}` | {line} |\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
