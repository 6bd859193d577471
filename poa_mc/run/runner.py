"""Runs a grid: cells -> engine.simulate -> store, then reduce and plots.

The runner owns the order of things and nothing else: config validates, grid expands and shards,
the engine simulates, store writes, reduce and plots summarise; claims share cells with other
processes. Over 500 lines because run_grid keeps a cell's whole path (simulate, reduce beside the
next cell, write, count) in one place, where its overlaps can be read together.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

import poa_mc
from poa_mc.engine.engine import EngineError
from poa_mc.engine.interface import Simulate
from poa_mc.engine.memory import check_memory
from poa_mc.engine.packing import pool_sizes
from poa_mc.io.store import RunDir, RunDirError, fingerprint, git_commit, samples_frame
from poa_mc.kernels import threads
from poa_mc.model.grid import Cell, GridConfig, assign_shards, estimate_cost
from poa_mc.model.spec_json import compact, spec_to_json
from poa_mc.run import speed
from poa_mc.run.claims import Claims
from poa_mc.run.console import RunConsole
from poa_mc.version import engine_source

# Imports inside functions: the plots, the reducer and the kernels' cache probe load only when a run
# gets to them.

if TYPE_CHECKING:
    from poa_mc.plots.figure_workers import FigureWorkers


@dataclass
class RunReport:
    out: Path
    total: int  # cells in the grid
    selected: int  # cells of this shard
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already complete (--resume)
    repaired: list[str] = field(default_factory=list)  # complete but damaged on disk: simulated again
    complete: int = 0  # cells of the grid complete on disk after the run
    reduced: bool = False
    plots: list[Path] = field(default_factory=list)


def _engine_simulate(*args: Any, **kwargs: Any) -> Any:
    from poa_mc.engine.engine import simulate

    return simulate(*args, **kwargs)


_ENGINE: Simulate = _engine_simulate


def _default_simulate() -> Simulate:
    return _ENGINE


def sim_key(grid: GridConfig) -> str:
    """What a cell's samples depend on beyond its cell id (which hashes the cell's spec and stream):
    seed, Monte Carlo sizes and poa-mc's version. Cells of two grids with equal sim keys and cell
    ids are the same simulation, which is what lets --resume grow a grid."""
    r = grid.run
    extra = [*(["drain"] if r.drain else [])]
    if r.warmup_per_client:  # keys that were not there keep the sim keys of runs written before them
        extra.append(["warmup_per_client", r.warmup_per_client])
    blob = json.dumps([r.seed, r.replicas, r.requests, r.warmup, poa_mc.__version__, *extra])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def resolve_backend(requested: str) -> str:
    """`auto` -> what the engine picks (its `resolve_backend` when it has one), else cpu."""
    if requested != "auto":
        return requested
    try:
        from poa_mc.engine import backend
    except ImportError:
        return "cpu"
    resolver = getattr(backend, "resolve_backend", None)
    return resolver("auto") if callable(resolver) else "cpu"


COMMIT_THREADS = 2  # cells of one launch written at once
WRITE_BESIDE_BYTES = 64 << 20  # a cell whose kept samples are larger is written before the next starts


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
            isl=json.dumps(compact(dataclasses.asdict(w.isl))),
            osl=json.dumps(compact(dataclasses.asdict(w.osl))),
            prefix_groups=w.prefix_groups,
            prefix_ratio=w.prefix_ratio,
            popularity=w.popularity,
            zipf_alpha=w.zipf_alpha,
            think_ms=w.think_ms,
            profile=s.profile.name,
            profile_kind=s.profile.kind,
            spec_json=spec_to_json(s),
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
        "engine_source": engine_source(),
        "git_commit": git_commit(),
        "seed": grid.run.seed,
        "backend": backend,
        "fingerprint": fingerprint(resolved),
        "sim_key": sim_key(grid),
        "grid": resolved,
        "source": grid.source,
        "cells": {},
    }


class EnvironmentFault(Exception):
    """This machine cannot run the grid (no GPU for --backend cuda, an unwritable --out); known
    before anything is written. Exit code 2."""


def check_out_dir(out: Path) -> None:
    """--out must be a directory we can create or write: its nearest existing ancestor a writable
    directory. Checked before anything is written, so a refusal leaves nothing behind."""
    probe = out.absolute()
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe != out.absolute() and not probe.is_dir():
        raise EnvironmentFault(f"--out {out}: {probe} is a file, not a directory")
    if probe.is_dir() and not os.access(probe, os.W_OK | os.X_OK):
        raise EnvironmentFault(f"--out {out}: {probe} is not writable (read-only file system or no permission)")
    if probe.is_dir():
        # permission bits do not tell everything (root, /proc, a read-only mount): try, and take it back
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".poa-mc-probe-", dir=probe))
        except OSError as e:
            raise EnvironmentFault(f"--out {out}: cannot write in {probe}: {e.strerror or e}") from None


def check_backend(backend: str) -> None:
    if backend == "cuda":
        from poa_mc.engine.backend import cuda_available

        if not cuda_available():
            raise EnvironmentFault(
                "--backend cuda: no CUDA device here (numba-cuda finds no driver or GPU; "
                "install '.[gpu]' on a GPU machine, or use --backend cpu)"
            )


class StaleCellsError(RunDirError):
    """--resume in a directory whose cells an engine of other sources made (another checkout, an
    edited kernel): the summary would mix two engines. Exit code 2."""

    def __init__(self, out: Path, stale: dict[str, str | None], here: str) -> None:
        there = sorted({str(v) for v in stale.values()})
        super().__init__(
            f"--resume: {len(stale)} cell(s) in {out} were simulated by an engine of other sources "
            f"(engine_source {', '.join(there)} there, {here} here); the summary would mix two engines: "
            "add --recompute to simulate them again, or use another --out"
        )


def _stale_cells(run_dir: RunDir, manifest: dict[str, Any]) -> dict[str, str | None]:
    """The complete cells of this run whose meta names another engine source (cells written
    before poa-mc recorded it are taken as this version's, which the fingerprint checks)."""
    here = manifest["engine_source"]
    out = {}
    for cid in run_dir.complete_cells(manifest["fingerprint"], manifest["sim_key"]):
        there = (run_dir.read_meta(cid) or {}).get("engine_source")
        if there is not None and there != here:
            out[cid] = there
    return out


class CellFailed(Exception):
    """A cell whose input cannot be simulated to the end (an open loop beyond the cluster's
    capacity): said with the cell and the key to change, exit code 2. Finished cells are kept."""


class Interrupted(Exception):
    """Ctrl-C during a run: the finished cells are on disk, nothing half-written is left."""

    def __init__(self, out: Path, done: int, total: int) -> None:
        super().__init__(f"interrupted after {done} of {total} cells")
        self.out, self.done, self.total = out, done, total


def kernels_cold(backend: str, cells: list) -> bool:
    """True when a build these cells run on is not in the on-disk cache yet (a cell compiles)."""
    try:
        from poa_mc.engine.backend import kernel_build
        from poa_mc.kernels._cache import is_warm
    except ImportError:
        return False
    return any(not is_warm(b) for b in {kernel_build(c.spec, backend) for c in cells})


def run_grid(
    grid: GridConfig,
    *,
    out: str | Path | None = None,
    backend: str | None = None,
    shard: tuple[int, int] | None = None,
    resume: bool = False,
    recompute: bool = False,
    quiet: bool = False,
    simulate: Simulate | None = None,
    finish: bool = True,
    log: Callable[[str], None] | None = None,
    workers: FigureWorkers | None = None,
) -> RunReport:
    """Run the cells of `grid` (of one shard) into `out`; reduce and plot when all are present,
    the figures on `workers` when given (poa_mc.plots.figure_workers: the command line starts them as
    it starts), else in this process.

    Raises ConfigError (bad grid) or RunDirError (directory of another run) before anything is
    written, so a refused run leaves no trace. --resume refuses cells an engine of other sources
    made (StaleCellsError) unless `recompute`: then it simulates them again.
    """
    started_ns = time.time_ns()
    cells = grid.cells()
    out = Path(out or grid.run.out)
    backend = resolve_backend(backend or grid.run.backend)
    check_backend(backend)
    check_memory(cells, grid.run)
    check_out_dir(out)
    run_dir = RunDir(out)
    manifest = build_manifest(grid, backend)
    fp = manifest["fingerprint"]
    stale = _stale_cells(run_dir, manifest) if resume else {}
    if stale and not recompute:
        raise StaleCellsError(out, stale, manifest["engine_source"])
    try:
        cell_rows = cells_frame(cells)
        run_dir.prepare(manifest, cell_rows, resume=resume)
        if stale:  # recomputed: the directory's engine is this one from now on
            run_dir.write_manifest({**run_dir.read_manifest(), "engine_source": manifest["engine_source"]})
    except OSError as e:
        raise EnvironmentFault(f"--out {out}: cannot write: {e.strerror or e}") from None

    shard_of = assign_shards(cells, shard[1], grid.run) if shard else [0] * len(cells)
    selected = [c for c, s in zip(cells, shard_of) if shard is None or s == shard[0]]
    report = RunReport(out=out, total=len(cells), selected=len(selected))
    key = manifest["sim_key"]
    done = run_dir.complete_cells(fp, key) if resume else set()
    # a grown grid's new [poa] / [slo] settings: a kept cell whose accumulators used others is
    # re-reduced from its samples, or simulated again when it kept fewer than all of them
    from poa_mc.stats.accumulate import settings as acc_settings

    wanted = acc_settings(manifest["grid"]["poa"], manifest["grid"].get("slo", {}))
    done = {c for c in done if _reducible(run_dir, c, wanted)} - set(stale)
    if stale:
        (log or print)(f"warning: --recompute: {len(stale)} cell(s) made by another engine are simulated again")
    # a cell whose files are not what was written (truncated or altered on disk) is simulated again
    damaged = run_dir.damaged(done & {c.cell_id for c in selected}) if done else {}
    done -= set(damaged)
    todo = [c for c in selected if c.cell_id not in done]
    report.skipped = [c.cell_id for c in selected if c.cell_id in done]

    simulate = simulate or _default_simulate()
    costs = {c.cell_id: estimate_cost(c, grid.run) for c in todo}
    console = RunConsole(len(todo), sum(costs.values()), quiet=quiet)
    if damaged:
        first = next(iter(damaged.items()))
        msg = f"{len(damaged)} damaged cell(s) are simulated again (cell {first[0]}: {first[1]})"
        (log or console.note)(f"warning: {msg}")
    report.repaired = sorted(damaged)
    if todo and simulate is _ENGINE and kernels_cold(backend, todo):
        console.note(
            f"compiling the {backend} kernels (once per machine and poa-mc version; about a minute on 2 cores)",
            always=True,
        )
    from poa_mc.stats.accumulate import accumulate
    from poa_mc.stats.accumulate import frame as acc_frame
    from poa_mc.stats.accumulate import settings as acc_settings

    r = grid.run
    keep = r.keep()
    poa_cfg, slo = manifest["grid"]["poa"], manifest["grid"].get("slo", {})
    acc_key = acc_settings(poa_cfg, slo)
    width = max(sum(pool_sizes(c.spec)) for c in cells)  # candidate columns of every cell's samples

    timed_cost, timed_s = 0.0, 0.0  # cells big enough to time the engine, not its per-call overhead
    # each written cell's statistics, worked out beside the next cell's simulation: the summary at
    # the end takes them instead of reading the accumulators back (bench/NOTES.md)
    from poa_mc.stats.cell_stats import CellStats, cell_stats

    rows = {row["cell_id"]: row for row in cell_rows.iter_rows(named=True)}
    stats: dict[str, CellStats] = {}

    def write(cell: Cell, res: Any, meta: dict, t0: float, before: Any) -> tuple[dict, float]:
        """A cell's accumulators (waiting for its reduction), then its files (meta, samples,
        accumulators last: the commit point) and its statistics; returns (accumulators, the cell's
        share of the run: from its start, or the end of the reduction `before` it when that ran
        beside this cell's simulation, to its accumulators, compilation excluded). Several cells'
        at once, on the commit threads."""
        acc = res.reduced()
        end = res.reduced_at or time.perf_counter()
        before_end = (getattr(before, "reduced_at", None) or 0.0) if before is not None else 0.0
        cell_s = end - max(t0, before_end) - float(getattr(res, "compile_s", 0.0))
        meta["cell_s"] = cell_s
        frame = None
        kept = next(iter(res.samples.values())).shape[1]
        if keep != 0 and kept:  # per-request columns only: per-replica ones are in acc/
            frame = samples_frame(res.samples, res.candidates or None, width=width)
        meta["samples"] = "all" if kept == r.requests and frame is not None else (kept if frame is not None else 0)
        meta["acc_settings"] = acc_key
        run_dir.write_cell(cell.cell_id, acc_frame(acc), meta, frame)
        try:
            stats[cell.cell_id] = cell_stats(acc, rows[cell.cell_id], poa_cfg, r.warmup_for(cell.concurrency))
        except Exception:  # noqa: BLE001 - the summary works it out again from disk, and says why it cannot
            pass
        return acc, cell_s

    def account(cell: Cell, cost: float, simulated: float, cell_s: float) -> None:
        """A written cell's line and counts, one cell at a time, in order."""
        nonlocal timed_cost, timed_s
        if cost >= speed.MIN_TIMED_COST:
            timed_cost, timed_s = timed_cost + cost, timed_s + cell_s
        report.ran.append(cell.cell_id)
        console.cell_done(cell.label(), cost, simulated, cell_s)

    # a launch's cells' files are written on a thread of their own while the next launch simulates
    # (a grid of small cells spent a fifth of its time writing them, bench/NOTES.md); one launch's
    # at a time, its cells on COMMIT_THREADS threads (a small cell's commit is a few ms of polars
    # and fsync, which held a grid of 2,000 cells to one busy core), their lines in order; and
    # only cells whose samples are small, so that memory and a Ctrl-C's wait stay small
    writer = threads.pool("writer", 1)
    committers = threads.pool("commit", COMMIT_THREADS)
    last: list[Any] = [None]  # the last cell handed to `write`: the next one's `before`
    writing: Future | None = None
    pending: Future | None = None  # the previous cell's last reduction, maybe still running

    claims = Claims(run_dir, fp, key, started_ns)

    def commit_all(jobs: list[tuple]) -> None:
        """Write `jobs`' cells at once, then account for them in order; every write is waited for,
        whatever becomes of the others (nothing is left writing behind an error or a Ctrl-C)."""
        writes = []
        for cell, res, meta, _cost, _simulated, t0 in jobs:
            writes.append(committers.submit(write, cell, res, meta, t0, last[0]))
            last[0] = res
        try:
            for (cell, _res, _meta, cost, simulated, _t0), done in zip(jobs, writes):
                try:
                    _acc, cell_s = done.result()
                    account(cell, cost, simulated, cell_s)
                finally:
                    claims.release(cell.cell_id)
        finally:
            wait(writes)
            for cell, *_ in jobs:
                claims.release(cell.cell_id)

    # the engine runs a grid's small cells in batches, several to a launch (poa_mc/engine/cell_batch.py);
    # a test's stand-in engine gets them one at a time
    order, batch_of, batch_len, packed = todo, {}, {}, {}
    if simulate is _ENGINE and todo:
        order, batch_of, batch_len, packed = _batches(todo, grid, backend, poa_cfg, slo)

    def simulate_one(cell: Cell) -> Any:
        def reduce_batch(cols, rep, logs, spec=cell.spec):
            return accumulate(cols, rep, spec, poa_cfg, slo, logs)

        # batches reduced as they leave the kernels, each replica's requests tallied and its
        # PoA-hat windows solved there, the cell's last batch reduced beside the next cell
        streams = {"keep": keep, "reduce": reduce_batch, "tally": True, "slo": slo, "poa": poa_cfg,
                   "overlap": True, "after": pending}  # fmt: skip
        if r.drain:  # a finite run: no arrivals after the measured requests
            streams["drain"] = True
        try:
            res = simulate(
                cell.spec,
                replicas=r.replicas,
                requests=r.requests,
                warmup=r.warmup_for(cell.concurrency),
                seed=r.seed,
                stream=cell.stream,
                backend=backend,
                record_candidates=True,
                **streams,
            )
        except EngineError as e:
            return e
        if not hasattr(res, "reduced"):  # an engine that left `reduce` unused: from its whole result
            res = _Reduced(res, getattr(res, "acc", None) or accumulate(
                {**res.samples, **(res.candidates or {})}, res.replica, cell.spec, poa_cfg, slo, res.extra
            ))  # fmt: skip
        return res

    def simulate_batch(cells: list[Cell]) -> list[Any]:
        from poa_mc.engine.cell_batch import simulate_cells

        reduce = [lambda cols, rep, logs, spec=c.spec: accumulate(cols, rep, spec, poa_cfg, slo, logs) for c in cells]
        return simulate_cells(
            [packed[c.cell_id] for c in cells],
            replicas=r.replicas,
            backend=backend,
            keep=keep,
            reduce=reduce,
            overlap=True,
            after=pending,
        )

    def job(cell: Cell, res: Any, t0: float) -> tuple:
        """A simulated cell's meta, and commit's arguments."""
        wall = float(getattr(res, "wall_s", time.perf_counter() - t0))
        simulated = (
            float(np.sum(res.replica["simulated"]))
            if "simulated" in res.replica
            else float(r.replicas * (r.requests + r.warmup_for(cell.concurrency)))
        )
        meta = {
            "fingerprint": fp,
            "sim_key": key,
            "seed": manifest.get("seed"),
            "poa_mc_version": manifest.get("poa_mc_version"),
            "engine_source": manifest.get("engine_source"),
            "label": cell.label(),
            "wall_s": wall,
            "cell_s": None,  # commit's
            "compile_s": float(getattr(res, "compile_s", 0.0)),
            "backend": str(getattr(res, "backend", backend)),
            "device": str(getattr(res, "device", "")),
            "simulated": int(simulated),
            "sim_rps": simulated / wall if wall > 0 else None,
            "shard": list(shard) if shard else None,
        }
        return (cell, res, meta, costs[cell.cell_id], simulated, t0)

    def finish(jobs: list[tuple]) -> None:
        """Simulated cells' files, written in order beside the next launch when their samples are
        small; the files of the launch before are waited for first (one launch's at a time)."""
        nonlocal writing
        if writing is not None:
            writing.result()
        sizes = (
            sum(a.nbytes for a in (*res.samples.values(), *(res.candidates or {}).values())) for _, res, *_ in jobs
        )
        if max(sizes) <= WRITE_BESIDE_BYTES:
            writing = writer.submit(commit_all, jobs)  # while the next launch simulates
        else:
            writing = None
            commit_all(jobs)

    def run_cells(cells: list[Cell]) -> None:
        """Simulate `cells` (one, or one planned batch) and hand each to `finish`, in order; the
        first that failed raises CellFailed, after the cells before it."""
        nonlocal pending
        t0 = time.perf_counter()
        results = [simulate_one(cells[0])] if len(cells) == 1 else simulate_batch(cells)
        jobs = []
        for cell, res in zip(cells, results):
            if isinstance(res, EngineError):
                if jobs:
                    finish(jobs)
                raise CellFailed(_failed_cell(grid, cell, res))
            pending = getattr(res, "pending", None)
            jobs.append(job(cell, res, t0))
        finish(jobs)

    try:
        waiting = f"waiting for another poa-mc process writing cells of {out} (never two at once)"
        held: list[Cell] = []  # claimed cells of one planned batch, waiting for the rest of it
        for cell in claims.cells(order, report.skipped, lambda: (log or console.note)(waiting)):
            b = batch_of.get(cell.cell_id)
            if held and b != batch_of.get(held[0].cell_id):
                run_cells(held)  # a batch another process took part of
                held = []
            held.append(cell)
            if b is None or len(held) == batch_len[b]:
                run_cells(held)
                held = []
        if held:
            run_cells(held)
        if writing is not None:
            writing.result()
    except KeyboardInterrupt:
        _settle(writing)
        console.close()
        run_dir.remove_own_temporaries()
        raise Interrupted(out, len(report.ran) + len(report.skipped), len(selected)) from None
    finally:
        _settle(writing)  # a failed cell: the one before it is kept whole
        claims.release_all()
        console.close()
    if simulate is _ENGINE and timed_s > 0:
        speed.record(backend, timed_cost, timed_s)

    complete = run_dir.complete_cells(fp, key)
    report.complete = sum(c.cell_id in complete for c in cells)
    if finish and report.complete == len(cells):
        from poa_mc.stats.reduce import reduce_run

        console.note(f"summarising {len(cells)} cells")
        try:
            reduce_run(out, progress=console.summarising, stats=stats)
            console.close()
        except KeyboardInterrupt:
            run_dir.remove_own_temporaries()
            raise Interrupted(out, report.complete, len(cells)) from None
        report.reduced = True
        try:
            from poa_mc.plots.figures import plot_run

            console.note("drawing plots")
            report.plots = plot_run(out, workers)
        except KeyboardInterrupt:
            run_dir.remove_own_temporaries()
            raise Interrupted(out, report.complete, len(cells)) from None
        except Exception as e:  # noqa: BLE001 - figures are a convenience; never lose a finished run over them
            if log:
                log(f"warning: plots failed: {e}")
    elif report.complete == len(cells):
        run_dir.finalize_manifest()
    return report


def _batches(
    todo: list[Cell], grid: GridConfig, backend: str, poa: dict, slo: dict
) -> tuple[list[Cell], dict[str, int], dict[int, int], dict[str, Any]]:
    """The cells to simulate in batch order (poa_mc.engine.cell_batch.plan), each cell's batch and
    each batch's size, and each cell packed for its launch."""
    from poa_mc.engine.cell_batch import plan
    from poa_mc.engine.engine import pack

    r = grid.run
    packed = {
        c.cell_id: pack(
            c.spec,
            requests=r.requests,
            warmup=r.warmup_for(c.concurrency),
            seed=r.seed,
            stream=c.stream,
            drain=r.drain,
            tallied=True,
            slo=slo,
            poa=poa,
        )
        for c in todo
    }
    batches = plan([packed[c.cell_id] for c in todo], replicas=r.replicas, backend=backend)
    order = [todo[i] for b in batches for i in b]
    batch_of = {todo[i].cell_id: n for n, b in enumerate(batches) for i in b}
    return order, batch_of, {n: len(b) for n, b in enumerate(batches)}, packed


class _Reduced:
    """A stand-in engine's result with its accumulators, as the engine's SimResult gives them."""

    def __init__(self, res: Any, acc: dict) -> None:
        self._res, self._acc = res, acc
        self.reduced_at = time.perf_counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._res, name)

    def reduced(self) -> dict:
        return self._acc


def _settle(writing: Future | None) -> None:
    """Wait for a cell's files being written, whatever became of them (the caller is leaving)."""
    if writing is not None:
        wait([writing])


def _failed_cell(grid: GridConfig, cell: Cell, e: Exception) -> str:
    key = getattr(e, "key", None)
    if key == "load":
        key = f"grid.{grid.load_axis}[{list(grid.loads).index(cell.load)}]"
    done = "cells finished before it are kept (--resume goes on after a fix)"
    return f"{key + ': ' if key else ''}cell {cell.label()}: {e}; {done}"


def _reducible(run_dir: RunDir, cell_id: str, wanted: str) -> bool:
    """Can this complete cell be summarised with these [poa] / [slo] settings without simulating
    it again: its accumulators were computed with them, or it kept every sample."""
    meta = run_dir.read_meta(cell_id) or {}
    if meta.get("acc_settings") == wanted:
        return True
    return meta.get("samples") == "all" and run_dir.sample_path(cell_id).exists()
