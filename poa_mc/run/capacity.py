"""The highest load that still meets a latency SLO, per topology and policy (`poa-mc capacity`).

An SLO is a set of percentile targets (TTFT P99 <= 2,000 ms, ITL P99 <= 50 ms, ...). For each
(topology, policy) of a grid the load (concurrency or arrival rate, the grid's axis) is bisected
between the grid's smallest and largest load: a probe simulates the cell at that load (the grid's
replicas, requests and warm-up; the streams of a load are those the grid would give it, so every
policy sees the same requests) and reduces it as `run` does (poa_mc.stats.cell_stats). A probe
meets the SLO when every target's pooled quantile is within it; an open loop beyond its capacity
(unstable) never does.

What is reported (capacity.parquet): `capacity`, the highest probed load that met the SLO on the
point estimates; and a bracket from the intervals, `capacity_lo`, the highest probed load whose
upper 95% bounds meet every target (the SLO is met there beyond reasonable doubt), and
`capacity_hi`, the lowest probed load whose lower bound misses some target (missed beyond doubt).
The bracket says how far the Monte Carlo error moves the answer; it is a bracket of probed loads,
not an interval with a coverage. `status` says when the answer lies outside the grid's range
("above": met even at the largest load; "below": missed at the smallest).

Latency quantiles increase with load (more queueing) wherever the cluster is not pathological;
bisection assumes it, and probes that contradict it (met above a load that missed) are recorded
in `probes` for the reader to see.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from poa_mc.model.grid import GridConfig, point_stream
from poa_mc.model.sections import ConfigError
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_json import spec_to_json
from poa_mc.run.runner import resolve_backend

METRICS = ("ttft", "itl", "e2e")
PERCENTILES = {"ttft": (50, 90, 99), "itl": (50, 90, 99), "e2e": (99,)}  # what cell_stats pools
RATE_TOLERANCE = 0.02  # a rate's bisection stops when its bracket is this narrow (relative)


@dataclass(frozen=True)
class Target:
    metric: str  # ttft, itl, e2e
    percentile: int
    ms: float

    @property
    def column(self) -> str:
        return f"{self.metric}_p{self.percentile}_ms"

    def __str__(self) -> str:
        return f"{self.metric.upper()} P{self.percentile} <= {self.ms:g} ms"


def parse_target(text: str) -> Target:
    """`ttft:p99=2000` (metric, percentile, milliseconds); ConfigError naming what is wrong."""
    m = re.fullmatch(r"\s*([a-z0-9]+)\s*:\s*p(\d+)\s*=\s*([0-9.eE+]+)\s*", text)
    if not m:
        raise ConfigError("--slo", f"expected METRIC:pN=MS (e.g. ttft:p99=2000), got {text!r}")
    metric, pct, ms = m.group(1), int(m.group(2)), float(m.group(3))
    if metric not in METRICS:
        raise ConfigError("--slo", f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if pct not in PERCENTILES[metric]:
        allowed = ", ".join(f"p{p}" for p in PERCENTILES[metric])
        raise ConfigError("--slo", f"{metric} percentile must be one of {allowed}, got p{pct}")
    if not ms > 0:
        raise ConfigError("--slo", f"target must be > 0 ms, got {ms:g}")
    return Target(metric, pct, ms)


@dataclass
class Probe:
    load: float
    meets: bool  # point estimates within every target (and stable)
    surely_meets: bool  # upper bounds within every target
    surely_misses: bool  # some lower bound beyond its target, or unstable
    figures: dict[str, Any]


@dataclass
class Capacity:
    topology: str
    policy: str
    load_axis: str
    capacity: float | None
    capacity_lo: float | None
    capacity_hi: float | None
    status: str  # within, above, below
    probes: list[Probe]


def judge(row: dict[str, Any], targets: list[Target], load: float) -> Probe:
    """A probe's verdict from its cell's summary row."""
    unstable = bool(row.get("unstable"))
    meets = surely = not unstable
    misses = unstable
    for t in targets:
        v, lo, hi = (row.get(t.column + p) for p in ("", "_lo", "_hi"))
        if v is None or not math.isfinite(v) or v > t.ms:
            meets = False
        if hi is None or not math.isfinite(hi) or hi > t.ms:
            surely = False
        if lo is not None and math.isfinite(lo) and lo > t.ms:
            misses = True
    figures = {t.column: row.get(t.column) for t in targets}
    return Probe(load, meets, surely and meets, misses, figures)


def bisect(probe: Callable[[float], Probe], lo: float, hi: float, integer: bool) -> tuple[str, list[Probe]]:
    """Probes from the range's ends inwards until the met/missed boundary is one load apart
    (integer loads) or RATE_TOLERANCE of the load apart (rates)."""
    probes = [probe(lo)]
    if not probes[0].meets:
        return "below", probes
    probes.append(probe(hi))
    if probes[-1].meets:
        return "above", probes
    good, bad = lo, hi
    while (bad - good > 1) if integer else (bad - good > RATE_TOLERANCE * bad):
        mid = (good + bad) // 2 if integer else math.sqrt(good * bad)  # rates: halve the ratio
        p = probe(float(mid))
        probes.append(p)
        if p.meets:
            good = mid
        else:
            bad = mid
    return "within", probes


def summarise(topology: str, policy: str, axis: str, status: str, probes: list[Probe]) -> Capacity:
    met = [p.load for p in probes if p.meets]
    sure = [p.load for p in probes if p.surely_meets]
    missed = [p.load for p in probes if p.surely_misses]
    return Capacity(
        topology, policy, axis,
        capacity=max(met) if met else None,
        capacity_lo=max(sure) if sure else None,
        capacity_hi=min(missed) if missed else None,
        status=status, probes=sorted(probes, key=lambda p: p.load),
    )  # fmt: skip


def at_load(spec: CellSpec, axis: str, load: float) -> CellSpec:
    """The cell at another load (the grid's axis)."""
    if axis == "concurrency":
        workload = dataclasses.replace(spec.workload, concurrency=int(load), rate_rps=0.0)
    else:
        workload = dataclasses.replace(spec.workload, rate_rps=float(load))
    return dataclasses.replace(spec, workload=workload)


def find_capacities(grid: GridConfig, targets: list[Target], simulate: Callable[..., Any]) -> list[Capacity]:
    """Every (topology, policy) of the grid, bisected over the grid's load range."""
    from poa_mc.stats.accumulate import accumulate
    from poa_mc.stats.cell_stats import cell_stats

    r = grid.run
    backend = resolve_backend(r.backend)
    axis = grid.load_axis
    lo, hi = float(min(grid.loads)), float(max(grid.loads))
    poa = dataclasses.asdict(grid.poa)
    out = []
    first_load = {}
    for c in grid.cells():
        first_load.setdefault((c.topology, c.policy), c)
    for (topology, policy), cell in first_load.items():

        def probe(load: float, cell: Any = cell) -> Probe:
            spec = at_load(cell.spec, axis, load)
            spec.validate()
            stream = point_stream(cell.n_prefill, cell.n_decode, axis, load)
            warm = r.warmup_for(int(load) if axis == "concurrency" else None)
            res = simulate(
                spec, replicas=r.replicas, requests=r.requests, warmup=warm, seed=r.seed, stream=stream,
                backend=backend, record_candidates=False,
            )  # fmt: skip
            acc = accumulate(res.samples, res.replica, spec, poa, None, res.extra)
            row = cell_stats(acc, {"cell_id": "probe", "spec_json": spec_to_json(spec)}, poa, warm).row
            return judge(row, targets, load)

        status, probes = bisect(probe, lo, hi, integer=axis == "concurrency")
        out.append(summarise(topology, policy, axis, status, probes))
    return out
