"""Runs a grid: cells -> engine.simulate -> store, then reduce and plots.

The runner owns the order of things and nothing else: config validates, grid expands and shards,
the engine simulates, store writes, reduce and plots summarise.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import polars as pl

import poa_mc
from poa_mc.config import GridConfig
from poa_mc.grid import Cell, assign_shards, estimate_cost
from poa_mc.store import RunDir, fingerprint, git_commit, samples_frame

Simulate = Callable[..., Any]


@dataclass
class RunReport:
    out: Path
    total: int  # cells in the grid
    selected: int  # cells of this shard
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already complete (--resume)
    complete: int = 0  # cells of the grid complete on disk after the run
    reduced: bool = False
    plots: list[Path] = field(default_factory=list)


def _default_simulate() -> Simulate:
    from poa_mc.engine import simulate

    return simulate


def resolve_backend(requested: str) -> str:
    """`auto` -> what the engine picks (its `resolve_backend` when it has one), else cpu."""
    if requested != "auto":
        return requested
    try:
        from poa_mc import engine
    except ImportError:
        return "cpu"
    resolver = getattr(engine, "resolve_backend", None)
    return resolver("auto") if callable(resolver) else "cpu"


_INLINE_VALUES = 64


def _compact(obj: Any) -> Any:
    """Empirical length lists (a trace can hold millions) are stored in cells.parquet as their
    count and sha256 rather than inline; the cell id still hashes the full values."""
    if isinstance(obj, dict):
        out = {k: _compact(v) for k, v in obj.items()}
        values = obj.get("values")
        if isinstance(values, (list, tuple)) and len(values) > _INLINE_VALUES:
            digest = hashlib.sha256(json.dumps(list(values)).encode()).hexdigest()
            out["values"] = {"count": len(values), "sha256": digest}
        return out
    if isinstance(obj, (list, tuple)):
        return [_compact(v) for v in obj]
    return obj


def cells_frame(cells: list[Cell]) -> pl.DataFrame:
    """One row per cell: identity, load, policy, and every resolved parameter (+ spec_json)."""
    rows = []
    for c in cells:
        s = c.spec
        row: dict[str, Any] = {
            "cell_id": c.cell_id,
            "index": c.index,
            "point": c.point,
            "stream": c.stream,
            "topology": c.topology,
            "n_prefill": c.n_prefill,
            "n_decode": c.n_decode,
            "load_axis": c.load_axis,
            "concurrency": c.concurrency,
            "rate": c.rate,
            "policy": c.policy,
            "policy_kind": s.policy.kind,
            "overlap_weight": s.policy.overlap_weight,
            "temperature": s.policy.temperature,
            "d": s.policy.d,
        }
        for f in dataclasses.fields(s.cluster):
            if f.name not in ("n_prefill", "n_decode"):
                row[f.name] = getattr(s.cluster, f.name)
        w = s.workload
        row.update(
            arrival=w.arrival,
            isl=json.dumps(_compact(dataclasses.asdict(w.isl))),
            osl=json.dumps(_compact(dataclasses.asdict(w.osl))),
            prefix_groups=w.prefix_groups,
            prefix_ratio=w.prefix_ratio,
            popularity=w.popularity,
            zipf_alpha=w.zipf_alpha,
            think_ms=w.think_ms,
            profile=s.profile.name,
            profile_kind=s.profile.kind,
            spec_json=json.dumps(_compact(dataclasses.asdict(s)), sort_keys=True),
        )
        rows.append(row)
    schema_overrides = {"concurrency": pl.Int64, "rate": pl.Float64, "kv_bytes_per_token": pl.Float64}
    return pl.DataFrame(rows, schema_overrides=schema_overrides, infer_schema_length=None)


def build_manifest(grid: GridConfig, backend: str) -> dict[str, Any]:
    resolved = grid.to_dict()
    return {
        "format": 1,
        "name": grid.run.name,
        "poa_mc_version": poa_mc.__version__,
        "git_commit": git_commit(),
        "seed": grid.run.seed,
        "backend": backend,
        "fingerprint": fingerprint(resolved),
        "grid": resolved,
        "source": grid.source,
        "cells": {},
    }


class Progress:
    """cells done/total, simulated requests per second, time left; on a TTY only, after 2 s."""

    def __init__(self, total_cost: float, n_cells: int, enabled: bool, stream: TextIO) -> None:
        self.total_cost, self.n, self.enabled, self.stream = total_cost, n_cells, enabled, stream
        self.t0 = time.perf_counter()
        self.cost_done = 0.0
        self.done = 0
        self.simulated = 0.0
        self.shown = False

    def update(self, cost: float, simulated: float) -> None:
        self.done += 1
        self.cost_done += cost
        self.simulated += simulated
        elapsed = time.perf_counter() - self.t0
        if not self.enabled or elapsed < 2.0:
            return
        rate = self.simulated / elapsed if elapsed > 0 else 0.0
        left = elapsed * (self.total_cost - self.cost_done) / self.cost_done if self.cost_done else 0.0
        width = 24
        filled = int(width * self.cost_done / self.total_cost) if self.total_cost else width
        bar = "#" * filled + "." * (width - filled)
        m, s = divmod(int(left + 0.5), 60)
        self.stream.write(f"\r[{bar}] {self.done}/{self.n} cells  {rate:,.0f} req/s  {m}:{s:02d} left ")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def run_grid(
    grid: GridConfig,
    *,
    out: str | Path | None = None,
    backend: str | None = None,
    shard: tuple[int, int] | None = None,
    resume: bool = False,
    quiet: bool = False,
    simulate: Simulate | None = None,
    finish: bool = True,
    log: Callable[[str], None] | None = None,
) -> RunReport:
    """Run the cells of `grid` (of one shard) into `out`; reduce and plot when all are present.

    Raises ConfigError (bad grid) or RunDirError (directory of another run) before anything is
    written, so a refused run leaves no trace.
    """
    cells = grid.cells()
    out = Path(out or grid.run.out)
    backend = resolve_backend(backend or grid.run.backend)
    run_dir = RunDir(out)
    manifest = build_manifest(grid, backend)
    fp = manifest["fingerprint"]
    run_dir.prepare(manifest, cells_frame(cells), resume=resume)

    shard_of = assign_shards(cells, shard[1], grid.run) if shard else [0] * len(cells)
    selected = [c for c, s in zip(cells, shard_of) if shard is None or s == shard[0]]
    report = RunReport(out=out, total=len(cells), selected=len(selected))
    done = run_dir.complete_cells(fp) if resume else set()
    todo = [c for c in selected if c.cell_id not in done]
    report.skipped = [c.cell_id for c in selected if c.cell_id in done]

    simulate = simulate or _default_simulate()
    costs = {c.cell_id: estimate_cost(c, grid.run) for c in todo}
    progress = Progress(sum(costs.values()), len(todo), not quiet and sys.stdout.isatty(), sys.stdout)
    r = grid.run
    try:
        for cell in todo:
            t0 = time.perf_counter()
            res = simulate(
                cell.spec,
                replicas=r.replicas,
                requests=r.requests,
                warmup=r.warmup,
                seed=r.seed,
                stream=cell.stream,
                backend=backend,
                record_candidates=True,
            )
            wall = float(getattr(res, "wall_s", time.perf_counter() - t0))
            simulated = (
                float(np.sum(res.replica["simulated"]))
                if "simulated" in res.replica
                else float(r.replicas * (r.requests + r.warmup))
            )
            meta = {
                "fingerprint": fp,
                "seed": manifest.get("seed"),
                "poa_mc_version": manifest.get("poa_mc_version"),
                "label": cell.label(),
                "wall_s": wall,
                "compile_s": float(getattr(res, "compile_s", 0.0)),
                "backend": str(getattr(res, "backend", backend)),
                "device": str(getattr(res, "device", "")),
                "simulated": int(simulated),
                "sim_rps": simulated / wall if wall > 0 else None,
                "shard": list(shard) if shard else None,
            }
            frame = samples_frame(res.samples, res.candidates or None)
            # Per-replica window and request counts travel with the samples so reduce needs no engine.
            frame = _attach_replica_columns(frame, res.replica, r.requests)
            log = getattr(res, "extra", {}).get("switch_log")
            if log is not None:
                frame = _attach_switch_log(frame, log, r.requests)
            run_dir.write_cell(cell.cell_id, frame, meta)
            report.ran.append(cell.cell_id)
            progress.update(costs[cell.cell_id], simulated)
    finally:
        progress.close()

    complete = run_dir.complete_cells(fp)
    report.complete = sum(c.cell_id in complete for c in cells)
    if finish and report.complete == len(cells):
        from poa_mc.reduce import reduce_run

        reduce_run(out)
        report.reduced = True
        try:
            from poa_mc.plots import plot_run

            report.plots = plot_run(out)
        except Exception as e:  # noqa: BLE001 - figures are a convenience; never lose a finished run over them
            if log:
                log(f"warning: plots failed: {e}")
    elif report.complete == len(cells):
        run_dir.finalize_manifest()
    return report


def _attach_switch_log(frame: pl.DataFrame, log: np.ndarray, requests: int) -> pl.DataFrame:
    """The adaptive controller's switches (replicas, S, 3), the j-th of a replica on its j-th row:
    ctl_switch_ms, ctl_switch_from, ctl_switch_to (0 below, 1 transition, 2 saturated), null past
    its last logged switch."""
    r, s, _ = log.shape
    cols = {}
    for i, name in enumerate(("ctl_switch_ms", "ctl_switch_from", "ctl_switch_to")):
        full = np.full((r, requests), np.nan)
        m = min(s, requests)
        full[:, :m] = log[:, :m, i]
        series = pl.Series(name, full.reshape(-1), nan_to_null=True)
        cols[name] = series if i == 0 else series.cast(pl.Int8)
    return frame.with_columns(cols.values())


def _attach_replica_columns(frame: pl.DataFrame, replica: dict[str, Any], requests: int) -> pl.DataFrame:
    """Repeat each (replicas,) array of SimResult.replica on its replica's rows as `replica_<name>`."""
    extra = {}
    for name, arr in replica.items():
        arr = np.asarray(arr)
        if arr.ndim == 1:
            extra[f"replica_{name}"] = np.repeat(arr, requests)
    return frame.with_columns(pl.Series(k, v) for k, v in extra.items()) if extra else frame
