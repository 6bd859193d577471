"""The engine-fidelity regimes, summarised like Dynamo's replay reports them.

Each regime is one cell on the dynamo-mocker profile (isl 4096, osl 256, prefix_ratio 0.5), run
like for like with a replay: warm-up 0, a fixed number of requests per replica, and no arrival
after them (`drain`, as the replay; `--steady` keeps the load on instead). Prints, per regime,
TTFT mean/p50/p99 (nearest-rank, lower, as the replay), token-weighted mean ITL, throughput
(requests over the replica's window, and `steady_rps`: completions per second between the C-th
and the (N - C)-th, without start-up and drain, which a replay and poa-mc treat differently) and
the prefix hit rate, each as the mean over replicas with
its range; `--json FILE` writes the same figures for comparison with bench/dynamo_oracle.py.

    python bench/regimes.py [--replicas 16] [--requests 1000] [--only NAME ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

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


def _cell(
    n_p: int,
    n_d: int,
    c: int,
    *,
    flow: str = "prefill_first",
    groups: int = 16,
    isl: int = 4096,
    osl: int = 256,
    ratio: float = 0.5,
    **cluster,
) -> CellSpec:
    return CellSpec(
        cluster=ClusterSpec(n_prefill=n_p, n_decode=n_d, flow=flow, **cluster),
        workload=WorkloadSpec(
            isl=Dist("fixed", isl), osl=Dist("fixed", osl), prefix_groups=groups, prefix_ratio=ratio, concurrency=c
        ),
        policy=PolicySpec(kind="kv"),
    )


REGIMES: dict[str, CellSpec] = {
    "reference": _cell(1, 5, 64),
    "reference_rr": replace(_cell(1, 5, 64), policy=PolicySpec(kind="round_robin")),
    "multi_prefill": _cell(2, 4, 64),
    "decode_pressure": _cell(1, 2, 128, decode_kv_blocks=1200),
    "evicting_prefill": _cell(2, 4, 64, groups=200, prefill_kv_blocks=2048),
    "transfer": _cell(1, 4, 32, kv_bytes_per_token=160_000.0, transfer_gbps=50.0),
    "decode_temperature": replace(_cell(1, 4, 16), policy=PolicySpec(kind="kv", temperature=1.0)),
    "aggregated": _cell(0, 4, 256, flow="aggregated"),
    # the paper's kind of workload: 5 templates of 128 tokens (2 blocks), fully shared
    "templates_c16": _cell(1, 2, 16, groups=5, isl=128, osl=64, ratio=1.0),
    "templates_c64": _cell(1, 2, 64, groups=5, isl=128, osl=64, ratio=1.0),
}


def oracle_args(spec: CellSpec, requests: int, seed: int) -> list[str]:
    """The same cell as flags of bench/dynamo_oracle.py (Dynamo's replay)."""
    c, w, p = spec.cluster, spec.workload, spec.policy
    a = ["--isl", str(w.isl.value), "--osl", str(w.osl.value), "--requests", str(requests)]
    a += ["--concurrency", str(w.concurrency), "--prefix-ratio", str(w.prefix_ratio)]
    a += ["--prefix-groups", str(w.prefix_groups), "--block-size", str(c.block_size), "--seed", str(seed)]
    a += ["--router", "kv" if p.kind == "kv" else "round_robin", "--router-temperature", str(p.temperature)]
    if c.flow == "aggregated":
        a += ["--mode", "agg", "--workers", str(c.n_decode), "--blocks", str(c.decode_kv_blocks)]
    else:
        a += ["--prefill-workers", str(c.n_prefill), "--decode-workers", str(c.n_decode)]
        a += ["--prefill-blocks", str(c.prefill_kv_blocks), "--decode-blocks", str(c.decode_kv_blocks)]
    if c.kv_bytes_per_token > 0 and c.transfer_gbps > 0:
        a += ["--kv-bytes-per-token", str(int(c.kv_bytes_per_token)), "--kv-bandwidth-gbs", str(c.transfer_gbps)]
    return a


def nearest_rank(x: np.ndarray, q: float) -> float:
    s = np.sort(x)
    return float(s[max(0, int(np.ceil(q * len(s))) - 1)])


def summarise(spec: CellSpec, replicas: int, requests: int, seed: int, drain: bool = True) -> dict:
    t0 = time.perf_counter()
    # drain: no arrival after the measured requests, as in the replay (like for like)
    kw = {"drain": True} if drain else {}  # (older commits, run through bench/at_commit.py, lack it)
    res = simulate(
        spec, replicas=replicas, requests=requests, warmup=0, seed=seed, stream=0, record_candidates=False, **kw
    )
    wall = time.perf_counter() - t0
    s = res.samples
    per = {
        "ttft_mean": [],
        "ttft_p50": [],
        "ttft_p99": [],
        "itl_mean": [],
        "throughput_rps": [],
        "steady_rps": [],
        "hit_rate": [],
    }
    conc = spec.workload.concurrency
    for r in range(replicas):
        ttft = s["ttft_ms"][r]
        osl = s["osl"][r].astype(np.float64)
        gaps = s["itl_ms"][r] * np.maximum(osl - 1, 0)
        per["ttft_mean"].append(float(ttft.mean()))
        per["ttft_p50"].append(nearest_rank(ttft, 0.50))
        per["ttft_p99"].append(nearest_rank(ttft, 0.99))
        per["itl_mean"].append(float(gaps.sum() / np.maximum(osl - 1, 0).sum()))
        end = float((s["arrival_ms"][r] + s["e2e_ms"][r]).max())
        per["throughput_rps"].append(requests / (end / 1000.0))
        done = np.sort(s["arrival_ms"][r] + s["e2e_ms"][r])
        c = min(conc, requests // 4)
        lo, hi = c, requests - 1 - c
        per["steady_rps"].append((hi - lo) / (done[hi] - done[lo]) * 1000.0)
        per["hit_rate"].append(float(s["cached_blocks"][r].sum() / s["prompt_blocks"][r].sum()))
    out = {k: {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v))} for k, v in per.items()}
    out["events_per_request"] = float(res.replica["events"].sum() / res.replica["simulated"].sum())
    if "preemptions" in res.replica:
        out["preemptions_per_request"] = float(res.replica["preemptions"].sum() / res.replica["simulated"].sum())
    out["wall_s"] = wall
    return out


_REPLAY_KEYS = {
    "ttft_mean": "ttft_mean_ms",
    "ttft_p50": "ttft_p50_ms",
    "ttft_p99": "ttft_p99_ms",
    "itl_mean": "itl_mean_ms",
    "throughput_rps": "throughput_rps",
    "steady_rps": "steady_rps",
    "hit_rate": "prefix_hit_rate",
}


def replay_figures(folder: str, name: str) -> dict | None:
    """(min, max) over the seeds of bench/oracle_regimes.sh's output for one regime."""
    runs = [json.loads(p.read_text()) for p in sorted(Path(folder).glob(f"{name}.*.json"))]
    if not runs:
        return None
    return {k: (min(r[v] for r in runs), max(r[v] for r in runs)) for k, v in _REPLAY_KEYS.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", nargs="*", default=None, choices=sorted(REGIMES))
    ap.add_argument("--json", default=None)
    ap.add_argument("--admission", choices=("fcfs", "replay"), default=None, help="cluster.decode_admission")
    ap.add_argument("--no-recompute-last-block", action="store_true", help="cluster.recompute_last_block = false")
    ap.add_argument("--router-blocks", choices=("per_request", "dynamo"), default=None, help="cluster.router_blocks")
    ap.add_argument("--steady", action="store_true", help="keep the load on to the end (poa-mc's default)")
    ap.add_argument("--compare", metavar="DIR", help="print beside each regime the replay's figures in DIR")
    ap.add_argument("--oracle-args", metavar="NAME", help="print the flags of bench/dynamo_oracle.py for NAME")
    a = ap.parse_args()
    if a.oracle_args:
        print(" ".join(oracle_args(REGIMES[a.oracle_args], a.requests, a.seed)))
        return 0
    names = a.only or list(REGIMES)
    results = {}
    cols = ("ttft_mean", "ttft_p50", "ttft_p99", "itl_mean", "throughput_rps", "steady_rps", "hit_rate")
    print(f"{'regime':20s} " + " ".join(f"{c:>16s}" for c in cols))
    for name in names:
        spec = REGIMES[name]
        if a.admission:
            spec = replace(spec, cluster=replace(spec.cluster, decode_admission=a.admission))
        if a.router_blocks:
            spec = replace(spec, cluster=replace(spec.cluster, router_blocks=a.router_blocks))
        if a.no_recompute_last_block:
            spec = replace(spec, cluster=replace(spec.cluster, recompute_last_block=False))
        r = summarise(spec, a.replicas, a.requests, a.seed, drain=not a.steady)
        results[name] = r
        cells = " ".join(f"{r[c]['mean']:16.4g}" for c in cols)
        print(f"{name:20s} {cells}   ({r['wall_s']:.1f} s, {r['events_per_request']:.2f} events/req)", flush=True)
        if a.compare:
            rep = replay_figures(a.compare, name)
            if rep:
                results[name]["replay"] = rep
                cells = " ".join(f"{rep[c][0]:7.4g}-{rep[c][1]:<8.4g}" for c in cols)
                print(f"{'  replay range':20s} {cells}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
