"""A deployment simulated at given parameter values, and the figures a benchmark reports of it.

Every evaluation simulates each load point with the same seed and stream (common random numbers):
two parameter values see the same requests, so the figures move with the parameters, not with the
draw, and the loss is a smooth function of them away from the ties the event order has.

Figures, as the benchmark tools compute them over one load point's successful requests:
TTFT and end-to-end mean and percentiles (numpy's linear interpolation, as vLLM and AIPerf do)
over every measured request of every replica; ITL the mean over requests with more than one output
token of each request's mean gap ((E2E - TTFT) / (OSL - 1): AIPerf's inter-token latency; vLLM's
mean ITL over every gap weights long answers more, equal when output lengths are); throughput the
steady-state request rate the summary reports (poa_mc.stats.cell_stats.request_rate: Little's law
in a closed loop, completions over the arrivals' span in an open one). A benchmark's own
throughput, its requests over its whole duration, includes the ramp-up and the drain and reads low
by about C / N (concurrency over requests): under 1% for a run of a few thousand requests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.run.calibrate.deployment import CLUSTER_PARAMS, FIGURES, Deployment
from poa_mc.stats.cell_stats import request_rate
from poa_mc.stats.stages import bench_span_s

_PREFILL = ("p0", "p1", "p2", "prefill_ms")
_DECODE = ("d0", "d1", "d2", "d_min", "decode_ms")


def apply(profile: ProfileSpec, values: dict[str, float]) -> ProfileSpec:
    """`profile` with the fitted parameters' values (poa_mc.run.calibrate.deployment.PARAMS; the
    cluster's are left to `apply_cluster`)."""
    changes: dict[str, float] = {}
    for name, v in values.items():
        if name in CLUSTER_PARAMS:
            continue
        if name == "prefill_scale":
            changes.update({k: getattr(profile, k) * v for k in _PREFILL})
        elif name == "decode_scale":
            changes.update({k: getattr(profile, k) * v for k in _DECODE})
        else:
            changes[name] = v
    return dataclasses.replace(profile, **changes)


def apply_cluster(cluster: ClusterSpec, values: dict[str, float]) -> ClusterSpec:
    """`cluster` with the fitted transfer and handover parameters' values."""
    return dataclasses.replace(cluster, **{k: v for k, v in values.items() if k in CLUSTER_PARAMS})


def apply_spec(spec: CellSpec, values: dict[str, float]) -> CellSpec:
    """A cell with the fitted parameters' values, on its profile and its cluster."""
    return dataclasses.replace(spec, profile=apply(spec.profile, values), cluster=apply_cluster(spec.cluster, values))


def cell_figures(res, figures: Sequence[str], open_loop: bool = False, stage: slice | None = None) -> list[float]:
    """The figures of one simulated load point (a SimResult with every sample kept), or with `stage`
    of one stage of a schedule (its requests' columns): its throughput then the benchmark's, the
    stage's requests over its first arrival to its last completion (request_rate's bench_span_s)."""
    s, rep = res.samples, res.replica
    if stage is not None:
        s = {k: s[k][:, stage] for k in ("ttft_ms", "e2e_ms", "osl", "arrival_ms")}
    ttft, e2e = s["ttft_ms"].ravel(), s["e2e_ms"].ravel()
    osl = s["osl"].ravel()
    multi = osl > 1
    itl = (e2e[multi] - ttft[multi]) / (osl[multi] - 1)
    n = s["ttft_ms"].shape[1]
    tallies = {  # what the summary's steady-state rate reads (poa_mc.stats.cell_stats.request_rate)
        "n": np.full(len(rep["status"]), n),
        "sum_e2e_ms": s["e2e_ms"].sum(axis=1),
        "first_arrival_ms": s["arrival_ms"].min(axis=1),
        "last_arrival_ms": s["arrival_ms"].max(axis=1),
    }
    if stage is None:
        tallies.update(
            replica_inflight_ms=rep["inflight_ms"],
            replica_measured_ms=rep["measured_ms"],
            replica_done_in_window=rep["done_in_window"],
        )
    else:
        tallies["bench_span_s"] = bench_span_s(s["arrival_ms"], s["e2e_ms"])
    num, den = request_rate(tallies, n, open_loop=open_loop)
    per = {
        "ttft_ms": ttft,
        "e2e_ms": e2e,
        "itl_ms": itl if itl.size else np.zeros(1),
    }
    out = []
    for f in figures:
        attr, stat = FIGURES[f]
        if attr == "throughput_rps":
            out.append(float(np.sum(num) / np.sum(den)))
        elif stat == "mean":
            out.append(float(np.mean(per[attr])))
        else:
            out.append(float(np.quantile(per[attr], float(stat[1:]) / 100.0)))
    return out


def simulate_figures(
    dep: Deployment,
    values: dict[str, float],
    simulate: Callable,
    points: Sequence[int] | None = None,
    *,
    seed: int | None = None,
    benchmark: bool = False,
) -> np.ndarray:
    """(points, figures): the deployment's figures at `values` for its load points `points` (all
    by default). Each point is simulated as its benchmark ran: runs of its measured request count
    (at most [run] requests), the grid's [run] replicas of them (with `benchmark`, one: a
    synthetic benchmark), at the grid's seed (or `seed`) and the cell's stream (common random
    numbers). A run as long as the benchmark's has the same start-up and end effects in its
    figures, which a shorter one would mistake for the parameters' doing. A staged deployment
    (replay = "schedule") runs all its stages in one simulation and reads each stage's figures."""
    r = dep.grid.run
    cells = dep.grid.cells()
    points = range(len(dep.points)) if points is None else points
    out = np.empty((len(points), len(dep.figures)))
    open_loop = dep.grid.load_axis == "rate"
    if dep.staged:  # one run of every stage, whichever stages are asked for: each carries the last's state
        cell = cells[0]
        res = simulate(
            apply_spec(cell.spec, values),
            replicas=1 if benchmark else r.replicas,
            requests=r.requests,
            warmup=r.warmup_for(cell.concurrency),
            seed=r.seed if seed is None else seed,
            stream=cell.stream,
            record_candidates=False,
            drain=r.drain,
        )
        ends = (0, *cell.spec.workload.stage_ends())
        for k, i in enumerate(points):
            out[k] = cell_figures(res, dep.figures, open_loop=open_loop, stage=slice(ends[i], ends[i + 1]))
        return out
    for k, i in enumerate(points):
        cell = cells[i]
        spec = apply_spec(cell.spec, values)
        res = simulate(
            spec,
            replicas=1 if benchmark else r.replicas,
            requests=min(dep.points[i].requests, r.requests),
            warmup=r.warmup_for(cell.concurrency),
            seed=r.seed if seed is None else seed,
            stream=cell.stream,
            record_candidates=False,
            drain=r.drain,
        )
        out[k] = cell_figures(res, dep.figures, open_loop=open_loop)
    return out
