"""CPU versus CUDA on a real device: same seed, per-request outputs compared field by field.

The documented bound (docs/backends.md): every integer output (which worker, cached blocks,
lengths, groups, arrival order, the router's candidate token and block counts) is identical,
and times agree to 1e-8 relative. Times are not bit-identical because NVVM contracts a*b+c into
fused multiply-adds by default while the CPU rounds twice; the ulp-level differences accumulate
over ~1e5 events per replica (measured on an H200, 2026-11-30: at most 4.1e-9 relative).
Configurations that call log/exp/cos (lognormal lengths, exponential service, temperature > 0:
libdevice against the CPU's libm) may also flip a rare decision: their bound is 1e-7 relative
on times and at most 0.5% of requests with any integer difference. Exits 1 beyond the bound.

    python3 bench/gpu_equality.py [REPLICAS [REQUESTS]] [--wide]

`--wide` compares every kernel path of tests/every_path.py and each built-in grid's smallest cell
instead of the cases below.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

from poa_mc.engine.engine import simulate
from poa_mc.model.profiles import resolve_profile
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.model.spec_workload import Dist, WorkloadSpec

warnings.filterwarnings("ignore")


def cases() -> list[tuple[str, CellSpec, bool]]:
    ref = WorkloadSpec(
        isl=Dist("fixed", 4096), osl=Dist("fixed", 256), prefix_groups=16, prefix_ratio=0.5, concurrency=64
    )
    out = [
        (
            "reference 1P/5D prefill_first kv",
            CellSpec(cluster=ClusterSpec(n_prefill=1, n_decode=5), workload=ref),
            True,
        ),
        (
            "4P/16D C=512 prefill_first kv",
            CellSpec(cluster=ClusterSpec(n_prefill=4, n_decode=16), workload=WorkloadSpec(concurrency=512)),
            True,
        ),
        (
            "1P/5D decode_first kv, uniform lengths, zipf",
            CellSpec(
                cluster=ClusterSpec(n_prefill=1, n_decode=5, flow="decode_first"),
                workload=WorkloadSpec(
                    isl=Dist("uniform", low=256, high=6000),
                    osl=Dist("uniform", low=8, high=300),
                    popularity="zipf",
                    zipf_alpha=1.1,
                    prefix_groups=64,
                    concurrency=96,
                ),
            ),
            True,
        ),
        (
            "2P/4D pull, aggregated-like load",
            CellSpec(
                cluster=ClusterSpec(n_prefill=2, n_decode=4),
                workload=WorkloadSpec(concurrency=128),
                policy=PolicySpec(kind="pull"),
            ),
            True,
        ),
        (
            "aggregated power_of_d",
            CellSpec(
                cluster=ClusterSpec(n_prefill=0, n_decode=6, flow="aggregated"),
                workload=WorkloadSpec(concurrency=96),
                policy=PolicySpec(kind="power_of_d", d=2),
            ),
            True,
        ),
        (
            "reference 1P/5D on the aic B200 table (interpolated timing)",
            CellSpec(
                cluster=ClusterSpec(n_prefill=1, n_decode=5),
                workload=ref,
                profile=resolve_profile({"name": "aic-b200-llama70b-fp8-tp4-vllm"}),
            ),
            True,
        ),
        (
            "lognormal + temperature 0.7 (transcendental)",
            CellSpec(
                cluster=ClusterSpec(n_prefill=2, n_decode=4),
                workload=WorkloadSpec(isl=Dist("lognormal", mean=2048, sigma=0.6, cap=8192), concurrency=64),
                policy=PolicySpec(kind="kv", temperature=0.7),
            ),
            False,
        ),
        (
            "exponential theory profile, poisson (transcendental)",
            CellSpec(
                cluster=ClusterSpec(n_prefill=3, n_decode=1),
                workload=WorkloadSpec(
                    isl=Dist("fixed", 64), osl=Dist("fixed", 1), prefix_ratio=0.0, arrival="poisson", rate_rps=2400.0
                ),
                profile=ProfileSpec(name="exp", kind="exponential", prefill_ms=1.0, decode_ms=0.0),
                policy=PolicySpec(kind="pull"),
            ),
            False,
        ),
        (
            "2P/8D G1 + G2 + G3 on the agentic trace (closed replay, copies timed)",
            _agentic_tiers(),
            True,
        ),
    ]
    return out


def wide_cases() -> list[tuple[str, CellSpec, bool]]:
    """Every kernel path (tests/every_path.py) and each built-in grid's smallest cell (fewest
    workers, then lowest load); exact where no draw or cost calls log, exp or cos."""
    from pathlib import Path

    from poa_mc import data
    from poa_mc.model.config import load_grid

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.every_path import cells, trace_cells

    out = [(f"path {flow} {pol} dkv={dkv}", spec, _exact(spec)) for flow, pol, dkv, spec in cells()]
    out += [(f"path trace {name}", spec, _exact(spec)) for name, spec in trace_cells()]
    for path in sorted((Path(data.__file__).parent / "grids").glob("*.toml")):
        grid = load_grid(path).cells()

        def size(c):
            w = c.spec.workload
            return (c.spec.cluster.n_prefill + c.spec.cluster.n_decode, w.concurrency or 0, w.rate_rps or 0.0)

        smallest = min(grid, key=size).spec
        out.append((f"grid {path.stem}: smallest cell", smallest, _exact(smallest)))
    return out


def _exact(spec: CellSpec) -> bool:
    w = spec.workload
    return (
        spec.policy.temperature == 0
        and "lognormal" not in (w.isl.kind, w.osl.kind)
        and w.arrival != "poisson"
        and w.think_ms == 0
        and spec.profile.kind != "exponential"
    )


def _agentic_tiers() -> CellSpec:
    from poa_mc.model.config import loads_grid

    text = (
        '[workload]\nkind = "trace"\nformat = "mooncake"\npath = "agentic_sample"\nreplay = "closed"\n'
        "[cluster]\nprefill_kv_blocks = 4000\nkv_bytes_per_token = 163840\ng2_blocks = 6000\ng3_blocks = 64000\n"
        "tier_decay_ms = 10000\n"
        '[grid]\ntopology = ["2P/8D"]\nconcurrency = [64]\n[[policy]]\nname = "kv"\n'
    )
    return loads_grid(text).cells()[0].spec


def _tallies(spec: CellSpec, kw: dict, cpu_result) -> tuple[float, float]:
    """(largest relative difference of the tallied sums and extremes, share of histogram counts
    in another bin) between a device-tallied streamed run and the host's tally of the CPU run."""
    import dataclasses

    from poa_mc.stats import sketch
    from poa_mc.stats.accumulate import accumulate

    poa = {"window": 8}
    slo = {"ttft_ms": 500.0}
    d = dataclasses.asdict(spec)
    host = accumulate({**cpu_result.samples}, cpu_result.replica, d, poa, slo)
    dev = simulate(
        spec, backend="cuda", keep=0, tally=True, slo=slo, reduce=lambda c, r, lg: accumulate(c, r, d, poa, slo), **kw
    ).acc
    rel, moved, total = 0.0, 0, 0
    for k, x in host.items():
        if k.startswith(("sum_", "min_", "max_", "first_", "last_")):
            x, y = np.asarray(x, dtype=float), np.asarray(dev[k], dtype=float)
            fin = np.isfinite(x)
            if (fin != np.isfinite(y)).any():
                return float("inf"), 1.0
            rel = max(rel, float((np.abs(x - y)[fin] / np.maximum(np.abs(x[fin]), 1e-12)).max(initial=0.0)))
        elif k.startswith("hist_") and not k.endswith("_lo"):  # spans: compared whole
            x, y = sketch.whole(x, host[f"{k}_lo"]), sketch.whole(dev[k], dev[f"{k}_lo"])
            moved += int(np.abs(x.astype(np.int64) - y).sum()) // 2
            total += int(x.sum())
    return rel, moved / max(total, 1)


def main() -> int:
    wide = "--wide" in sys.argv
    argv = [a for a in sys.argv[1:] if a != "--wide"]
    replicas = int(argv[0]) if argv else 256
    requests = int(argv[1]) if len(argv) > 1 else 300
    failed = 0
    todo = wide_cases() if wide else cases()
    if wide:  # load schedules: their stages' request counts are the run's
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.every_path import schedule_cells

        todo += [(f"path schedule {name}", spec, _exact(spec)) for name, spec in schedule_cells(requests)]
    for name, spec, exact in todo:
        kw = dict(replicas=replicas, requests=requests, warmup=50, seed=2026, stream=1)
        a = simulate(spec, backend="cpu", **kw)
        b = simulate(spec, backend="cuda", **kw)
        worst_rel = 0.0
        int_diff = 0
        fields = {**a.samples, **a.candidates}
        other = {**b.samples, **b.candidates}
        for k, x in fields.items():
            y = other[k]
            if np.issubdtype(x.dtype, np.floating):
                rel = np.abs(x - y) / np.maximum(np.abs(x), 1e-12)
                worst_rel = max(worst_rel, float(rel.max()))
            else:
                int_diff = max(int_diff, int((x != y).sum()))
        equal = worst_rel == 0.0 and int_diff == 0
        ok = (worst_rel <= 1e-8 and int_diff == 0) if exact else (worst_rel <= 1e-7 and int_diff <= 0.005 * x.size)
        # the replicas tallied on the device (poa_mc/kernels/tally.py) against the host's tally of the CPU's
        # requests: sums within the times' bound, histogram counts moved by at most 1e-4 of them
        # (a time within its last bits of an edge; 0.5% where a decision may flip)
        tally_rel, moved = _tallies(spec, kw, a)
        ok_tally = tally_rel <= (1e-8 if exact else 1e-7) and moved <= (1e-4 if exact else 0.005)
        failed += not (ok and ok_tally)
        print(
            f"{'OK  ' if ok and ok_tally else 'FAIL'} {name}: identical={equal} max_rel_diff={worst_rel:.3g} "
            f"int_mismatches={int_diff} tally_rel_diff={tally_rel:.3g} hist_moved={moved:.2g} "
            f"({replicas}x{requests}, cpu {a.wall_s:.2f}s, gpu {b.wall_s:.2f}s)",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
