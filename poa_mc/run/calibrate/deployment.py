"""A deployment to calibrate: its grid, its measured load points, what to fit and against what.

The deployment file is a grid file (docs/grid.md) of one topology and one policy (the deployment's
router) with a [calibrate] table:

    [calibrate]
    measured = ["bench/c8.json", "bench/c32.json"]   # files or globs, relative to this file
    fit = { prefill_scale = [0.5, 2.0], prefill_host_request_ms = [0.0, 20.0] }
    figures = ["ttft_mean", "ttft_p99", "itl_mean", "throughput"]
    held_out = true                                   # leave-one-load-out validation
    replay = "points"                                 # or "schedule": the stages back to back

The measured points set the grid's load axis (their concurrency or request rate): the grid's own
[grid] load list is replaced by theirs. With `replay = "points"` each is simulated on its own
(sorted by load); with `replay = "schedule"` they are a benchmark's stages in the order listed (an
inference-perf folder: by stage number), simulated back to back in one run as a [schedule] of their
request counts, each stage's figures from its own requests (docs/schedules.md).

Bad input raises ConfigError naming the key (or BenchmarkFormatError naming the file and line).
"""

from __future__ import annotations

import glob
import math
from dataclasses import dataclass
from pathlib import Path

from poa_mc.io.benchmarks.common import BenchmarkFormatError, LoadPoint
from poa_mc.io.benchmarks.read import read_benchmark
from poa_mc.model.config import parse_grid, read_with_table
from poa_mc.model.grid import GridConfig
from poa_mc.model.sections import ConfigError

# the free parameters: what each does to the profile (poa_mc.run.calibrate.figures.apply)
PARAMS = {
    "prefill_scale": "multiplies every prefill pass's time (p0, p1, p2; prefill_ms)",
    "decode_scale": "multiplies every decode step's time (d0, d1, d2, d_min; decode_ms)",
    "prefill_host_request_ms": "host time per request in a prefill pass (ms)",
    "prefill_host_pass_ms": "host time per prefill pass (ms)",
    "transfer_gbps": "the P->D KV transfer's bandwidth inside a node (GB/s; prefill_first, kv_bytes_per_token > 0)",
    "transfer_latency_ms": "each P->D KV transfer's fixed latency (ms; prefill_first, kv_bytes_per_token > 0)",
    "nixl_post_us": 'vLLM\'s handover: CPU time to post one read descriptor (us; handover = "vllm")',
}
# searched in their reciprocal: a transfer's time goes as one over its bandwidth, so the figures
# move evenly with the search's steps (poa_mc/run/calibrate/fit.py)
RECIPROCAL = ("transfer_gbps",)
# the parameters of the cluster ([cluster]) rather than of the timing profile
CLUSTER_PARAMS = ("transfer_gbps", "transfer_latency_ms", "nixl_post_us")

# the figures a fit can match: (the LoadPoint's latency dict or attribute, its statistic)
FIGURES = {
    "ttft_mean": ("ttft_ms", "mean"),
    "ttft_p50": ("ttft_ms", "p50"),
    "ttft_p90": ("ttft_ms", "p90"),
    "ttft_p99": ("ttft_ms", "p99"),
    "itl_mean": ("itl_ms", "mean"),
    "itl_p99": ("itl_ms", "p99"),
    "e2e_mean": ("e2e_ms", "mean"),
    "e2e_p99": ("e2e_ms", "p99"),
    "throughput": ("throughput_rps", None),
}
DEFAULT_FIGURES = ("ttft_mean", "ttft_p99", "itl_mean", "throughput")
REPLAYS = ("points", "schedule")


@dataclass(frozen=True)
class FitParam:
    name: str
    lo: float
    hi: float
    start: float


@dataclass(frozen=True)
class Deployment:
    source: Path
    grid: GridConfig  # one topology, one policy, the measured loads on its load axis
    points: tuple[LoadPoint, ...]  # by load, as the grid's cells
    params: tuple[FitParam, ...]
    figures: tuple[str, ...]
    held_out: bool
    staged: bool = False  # replay = "schedule": the points are stages of one run

    def measured(self) -> list[list[float]]:
        """measured[i][j]: point i's figure j."""
        return [[measured_figure(p, f) for f in self.figures] for p in self.points]


def measured_figure(point: LoadPoint, figure: str) -> float | None:
    attr, stat = FIGURES[figure]
    value = getattr(point, attr)
    if stat is not None:
        value = value.get(stat)
    return None if value is None or not math.isfinite(value) or value <= 0 else float(value)


def load_deployment(path: str | Path) -> Deployment:
    path = Path(path)
    doc, cal = read_with_table(path, "calibrate", ("measured", "fit", "figures", "held_out", "replay"), "measured, fit")
    replay = cal.get("replay", "points")
    if replay not in REPLAYS:
        raise ConfigError("calibrate.replay", f"must be one of {', '.join(REPLAYS)}, got {replay!r}")
    staged = replay == "schedule"
    points = _read_points(path, cal.get("measured"), staged)
    axis = points[0].load_axis
    grid_t = doc.setdefault("grid", {})
    if not isinstance(grid_t, dict):
        raise ConfigError("grid", "must be a table")
    for key in ("concurrency", "rate"):
        grid_t.pop(key, None)
    grid_t[axis] = [int(p.load) if axis == "concurrency" else float(p.load) for p in points]
    if staged:
        if "schedule" in doc:
            raise ConfigError("schedule", 'replay = "schedule" makes the schedule of the measured stages: remove it')
        doc["schedule"] = {"requests": [p.requests for p in points]}
    workload = doc.setdefault("workload", {})
    if isinstance(workload, dict) and "arrival" not in workload:
        workload["arrival"] = "closed" if axis == "concurrency" else "poisson"
    grid = parse_grid(doc, str(path), path.parent)
    if len(grid.topologies) != 1:
        raise ConfigError("grid.topology", f"a deployment has one topology, got {len(grid.topologies)}")
    if len(grid.policies) != 1:
        raise ConfigError("policy", f"a deployment has one router ([[policy]]), got {len(grid.policies)}")
    params = _params(cal.get("fit"), grid)
    figures = _figures(cal.get("figures", list(DEFAULT_FIGURES)), points)
    held_out = cal.get("held_out", True)
    if not isinstance(held_out, bool):
        raise ConfigError("calibrate.held_out", f"must be true or false, got {held_out!r}")
    if len(points) * len(figures) <= len(params):
        raise ConfigError(
            "calibrate.fit",
            f"{len(params)} parameters from {len(points)} load points x {len(figures)} figures: too few figures",
        )
    if held_out and len(points) < 2:
        raise ConfigError("calibrate.held_out", "leave-one-load-out needs two measured load points at least")
    return Deployment(path, grid, tuple(points), params, figures, held_out, staged)


def _read_points(path: Path, measured: object, staged: bool = False) -> list[LoadPoint]:
    if not isinstance(measured, list) or not measured or not all(isinstance(m, str) for m in measured):
        raise ConfigError("calibrate.measured", "a list of benchmark files (or globs), relative to this file")
    files: list[Path] = []
    for i, m in enumerate(measured):
        found = sorted(glob.glob(str(path.parent / m))) if any(c in m for c in "*?[") else [str(path.parent / m)]
        if not found:
            raise ConfigError(f"calibrate.measured[{i}]", f"{m!r} matches no file")
        files.extend(Path(f) for f in found)
    points: list[LoadPoint] = []
    for f in files:
        points.extend(read_benchmark(f))
    for p in points:
        if p.load_axis is None or p.load is None:
            raise BenchmarkFormatError(p.source, "states no load (concurrency or request rate) to simulate it at")
    axes = {p.load_axis for p in points}
    if len(axes) != 1:
        raise ConfigError("calibrate.measured", f"the files mix load axes ({', '.join(sorted(axes))})")
    if staged:  # stages in the order they ran: loads may repeat
        for p in points:
            if p.requests < 1:
                raise BenchmarkFormatError(p.source, "states no request count, which a replayed stage needs")
        return points
    points.sort(key=lambda p: p.load)
    loads = [p.load for p in points]
    dup = next((a for a, b in zip(loads, loads[1:]) if a == b), None)
    if dup is not None:
        raise ConfigError("calibrate.measured", f"two files measure {points[0].load_axis} {dup:g}")
    return points


def _params(fit: object, grid: GridConfig) -> tuple[FitParam, ...]:
    if not isinstance(fit, dict) or not fit:
        raise ConfigError("calibrate.fit", f"a table of parameter = [low, high], parameters: {', '.join(PARAMS)}")
    profile = grid.profile
    out = []
    for name, bounds in fit.items():
        key = f"calibrate.fit.{name}"
        if name not in PARAMS:
            raise ConfigError(key, f"unknown parameter (one of {', '.join(PARAMS)})")
        ok = isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int | float) for b in bounds)
        if not ok or not 0 <= bounds[0] < bounds[1] or not math.isfinite(bounds[1]):
            raise ConfigError(key, f"must be [low, high] with 0 <= low < high, got {bounds!r}")
        if name.endswith("_scale") and profile.kind == "aic":
            raise ConfigError(key, "a timing table (kind aic) takes no scale here; fit its host times")
        if name in CLUSTER_PARAMS:
            _check_cluster_param(key, name, bounds, grid)
        lo, hi = float(bounds[0]), float(bounds[1])
        holder = grid.cluster if name in CLUSTER_PARAMS else profile
        own = 1.0 if name.endswith("_scale") else float(getattr(holder, name))
        start = own if lo <= own <= hi else (lo + hi) / 2
        out.append(FitParam(name, lo, hi, start))
    return tuple(out)


def _check_cluster_param(key: str, name: str, bounds: list, grid: GridConfig) -> None:
    """A transfer's or handover's parameter only where the deployment has that transfer or handover."""
    c = grid.cluster
    if c.flow != "prefill_first":
        raise ConfigError(key, f"a disaggregated (prefill_first) deployment's; this one's flow is {c.flow}")
    if name.startswith("transfer_") and not c.kv_bytes_per_token > 0:
        raise ConfigError(key, "transfers move kv_bytes_per_token per prompt token: give [cluster] kv_bytes_per_token")
    if name == "transfer_gbps" and not bounds[0] > 0:
        raise ConfigError(key, f"a bandwidth's low must be > 0, got {bounds!r}")
    if name == "nixl_post_us" and not (c.handover == "vllm" and c.nixl_descriptors_per_block > 0):
        why = 'vLLM\'s handover posts descriptors: give [cluster] handover = "vllm" and nixl_descriptors_per_block'
        raise ConfigError(key, why)


def _figures(figures: object, points: list[LoadPoint]) -> tuple[str, ...]:
    if not isinstance(figures, list) or not figures or not all(isinstance(f, str) for f in figures):
        raise ConfigError("calibrate.figures", f"a list of figures ({', '.join(FIGURES)})")
    for f in figures:
        if f not in FIGURES:
            raise ConfigError("calibrate.figures", f"unknown figure {f!r} (one of {', '.join(FIGURES)})")
        lacking = next((p for p in points if measured_figure(p, f) is None), None)
        if lacking is not None:
            raise ConfigError("calibrate.figures", f"{lacking.source} gives no {f}")
    return tuple(dict.fromkeys(figures))
