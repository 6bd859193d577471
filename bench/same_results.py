"""Are the engine's results unchanged? Simulates the fidelity regimes of bench/regimes.py (the
reference cell among them), cells with lower KV tiers, every candidate-picking policy on each
flow, and cells of the paper preset (aiconfigurator tables), and writes every per-request array
(samples and router candidates) to an npz,
so that two commits can be compared array by array:

    python bench/at_commit.py COMMIT bench/same_results.py /tmp/before.npz
    python bench/same_results.py /tmp/after.npz --compare /tmp/before.npz
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from regimes import REGIMES  # noqa: E402

from poa_mc.engine.engine import simulate


def tier_cells() -> dict[str, object]:
    """Cells with lower tiers (G2, G3), written with keys every tiered commit knows: a change that
    leaves them bit-identical did not move the tiers' model."""
    from dataclasses import replace

    try:
        from poa_mc.model.spec import CellSpec
        from poa_mc.model.spec_cluster import ClusterSpec
        from poa_mc.model.spec_policy import PolicySpec
        from poa_mc.model.spec_workload import Dist, WorkloadSpec
    except ImportError:  # an older commit, its specs in one module (bench/at_commit.py)
        from poa_mc.model.spec import CellSpec, ClusterSpec, Dist, PolicySpec, WorkloadSpec

    wl = WorkloadSpec(isl=Dist("uniform", low=64, high=1800), osl=Dist("fixed", 24), prefix_groups=24,
                      popularity="zipf", zipf_alpha=0.9, prefix_ratio=0.6, concurrency=6)  # fmt: skip
    tiers = dict(prefill_kv_blocks=60, g2_blocks=40, g3_blocks=120, kv_bytes_per_token=2e5, tier_decay_ms=20.0)
    out = {}
    for pol in ("kv", "round_robin", "hash"):
        for n_p in (1, 2):
            c = ClusterSpec(n_prefill=n_p, n_decode=2, **tiers)
            out[f"tiers-{pol}-{n_p}p"] = CellSpec(cluster=c, workload=wl, policy=PolicySpec(kind=pol))
    c = ClusterSpec(n_prefill=2, n_decode=2, tier_eviction="lineage", **tiers)
    out["tiers-lineage"] = CellSpec(cluster=c, workload=replace(wl, concurrency=10), policy=PolicySpec())
    return out


def policy_cells() -> dict[str, object]:
    """Every candidate-picking policy on each flow (kv also at temperature 0.7): a change that
    leaves them bit-identical did not move router.py's choices or their random draws."""
    try:
        from poa_mc.model.spec import CellSpec
        from poa_mc.model.spec_cluster import ClusterSpec
        from poa_mc.model.spec_policy import PolicySpec
        from poa_mc.model.spec_workload import Dist, WorkloadSpec
    except ImportError:  # an older commit, its specs in one module (bench/at_commit.py)
        from poa_mc.model.spec import CellSpec, ClusterSpec, Dist, PolicySpec, WorkloadSpec

    wl = WorkloadSpec(isl=Dist("uniform", low=256, high=2048), osl=Dist("fixed", 16), prefix_groups=8,
                      prefix_ratio=0.5, concurrency=24)  # fmt: skip
    out = {}
    for flow, n_p, n_d in (("prefill_first", 3, 2), ("decode_first", 1, 3), ("aggregated", 0, 4)):
        for kind in ("random", "least_loaded", "power_of_d", "kv", "round_robin", "hash"):
            if kind == "hash" and flow != "prefill_first":
                continue
            for tau in (0.0, 0.7) if kind == "kv" else (0.0,):
                cluster = ClusterSpec(n_prefill=n_p, n_decode=n_d, flow=flow)
                policy = PolicySpec(kind=kind, d=2, temperature=tau)
                out[f"policy-{flow}-{kind}-{tau}"] = CellSpec(cluster=cluster, workload=wl, policy=policy)
    return out


def table_cells() -> dict[str, object]:
    """Cells of the paper preset (an aiconfigurator table's timing, the adaptive controller, the
    oracle) over its range of loads: a change that leaves them bit-identical did not move the
    tables' interpolation."""
    from poa_mc.cli.common import load_grid_arg

    cells = load_grid_arg("paper-70b-1p5d").cells()
    picks = [c for c in cells if c.spec.workload.concurrency in (1, 64, 512)]
    return {"table-" + c.label().replace(" ", "-").replace("/", ""): c.spec for c in picks[::6]}


def arrays(replicas: int, requests: int) -> dict[str, np.ndarray]:
    out = {}
    for name, spec in sorted({**REGIMES, **tier_cells(), **policy_cells(), **table_cells()}.items()):
        res = simulate(spec, replicas=replicas, requests=requests, warmup=50, seed=5, stream=3)
        for group in (res.samples, res.candidates or {}):
            for k, v in group.items():
                out[f"{name}/{k}"] = np.asarray(v)
    return out


def main(collect=None) -> int:
    """The command line: `collect(replicas, requests)` (default: arrays) into the npz given."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--compare", default=None, help="an npz written by an earlier run of this script")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--requests", type=int, default=300)
    a = ap.parse_args()
    return save_and_compare((collect or arrays)(a.replicas, a.requests), a.out, a.compare)


def save_and_compare(got: dict[str, np.ndarray], out: str, compare: str | None) -> int:
    """Write `got` to the npz `out`; with `compare` (an earlier run's npz) print which arrays
    differ, appeared or went, and return 1 if any differ or went."""
    np.savez_compressed(out, **got)
    if compare is None:
        print(f"{len(got)} arrays -> {out}")
        return 0
    ref = dict(np.load(compare))
    # an array only one side has is a new (or removed) output column, reported apart from changes
    differ = [k for k in sorted(set(ref) & set(got)) if not np.array_equal(ref[k], got[k], equal_nan=True)]
    new, gone = sorted(set(got) - set(ref)), sorted(set(ref) - set(got))
    print(
        f"{len(got)} arrays, {len(ref)} before; {len(differ)} of the {len(set(ref) & set(got))} in both differ"
        + (": " + ", ".join(differ[:10]) if differ else " (bit-identical)")
        + (f"; new: {', '.join(sorted({k.split('/')[-1] for k in new}))}" if new else "")
        + (f"; gone: {', '.join(sorted({k.split('/')[-1] for k in gone}))}" if gone else "")
    )
    return 1 if differ or gone else 0


if __name__ == "__main__":
    sys.exit(main())
