"""A grid's small cells as one batch: their replicas in one launch of the kernels.

A cell of a few replicas gives the kernels little to share: two CPU threads get a handful each,
and a GPU launch of 16 threads leaves the device nearly empty. Cells whose kernel state agrees in
shape run together instead. Each replica carries the index of its cell (`cell[r]`) and reads that
cell's row of the stacked parameters (poa_mc/kernels/cells.py): policy, load, topology sizes and
profile are per cell inside the kernels. A replica's random key is its cell's (seed, stream,
replica index within the cell), as simulate gives it, so every result is bit-identical to the
cell-by-cell run; replicas of different cells share no state.

Shapes: the arrays whose extent the kernels read (the workers' rows, the prefix cache and its
ring, the event buffer, the requests' rows, the candidates, the tallies) must be equal across a
batch; the others (PADDED: the request slots, queues, the running list, the arrival heap and the
replica's float record) are padded to the batch's largest, their extent taken from each cell's
own parameters. `plan` groups cells by `batch_key` and fills batches up to the memory a streamed
batch may take; a cell too big for that runs alone, its replicas streamed in batches by simulate.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

import numpy as np

from poa_mc.engine.backend import resolve_backend
from poa_mc.engine.engine import (
    BatchReducer,
    EngineError,
    Outputs,
    Packed,
    batch_budget,
    stream_cap,
    streamed_per_replica,
    target_for,
)
from poa_mc.engine.results import SimResult
from poa_mc.kernels import cells as stacks
from poa_mc.kernels import layout as L
from poa_mc.kernels import threads
from poa_mc.stats import sketch

# the kernel arrays' dimensions (of one replica's shape) whose extent no kernel reads from the
# shape, each cell's ip giving it: the request slots, the workers' rows, the queues, the running
# lists, the arrival heap, the replica's float record, and the candidates' workers (each cell's
# outputs are cut back to its own). The others are read: wk_i's width (the router's dedup), pc's
# ring and width (tiers), ev's capacity.
PADDED = {
    "slot_i": (0,), "slot_f": (0,), "wk_i": (0,), "wk_f": (0,), "pc": (0,), "queue": (0, 1), "run": (0, 1),
    "heap_t": (0,), "heap_c": (0,), "rep_f": (0,), "cand": (1,),
}  # fmt: skip

# replicas in one CPU launch at most: beyond a few hundred the CPU gains nothing (the threads are
# busy) and a Ctrl-C or a kill loses more finished work
CPU_MAX_REPLICAS = 256


def batch_key(cell: Packed) -> tuple:
    """Cells of equal keys can share a launch: the same build and passes (lower tiers or a trace,
    the tallies, PoA-hat and its step table, the candidates), the same float parameters' length
    (a profile table's lookup runs to fp's end) and equal extents of the dimensions not PADDED."""
    ip = cell.ip
    step = b"" if cell.step is None else np.ascontiguousarray(cell.step, dtype=np.float64).tobytes()
    shapes = tuple(
        (name, tuple(None if d in PADDED.get(name, ()) else n for d, n in enumerate(shape)), np.dtype(dtype).str)
        for name, (shape, dtype) in sorted(cell.shapes.items())
    )
    flags = (stacks.lean(ip), int(ip[L.P_TALLY]), int(ip[L.P_POA]), cell.record, cell.requests, cell.fp.size)
    return (*flags, step, shapes)


def batch_shapes(cells: list[Packed]) -> dict[str, tuple]:
    """The kernel arrays' per-replica (shape, dtype) for a batch: PADDED dimensions to the largest."""
    keys = {batch_key(c) for c in cells}
    if len(keys) != 1:
        raise ValueError(f"cells of one batch must agree in their kernel shapes ({len(keys)} kinds given)")
    shapes = dict(cells[0].shapes)
    for name in PADDED.keys() & shapes.keys():
        dims = zip(*(c.shapes[name][0] for c in cells))
        shapes[name] = (tuple(max(d) for d in dims), shapes[name][1])
    return shapes


def plan(cells: list[Packed], *, replicas: int, backend: str, max_batch_bytes: int | None = None) -> list[list[int]]:
    """The cells' indices in launches: cells of one `batch_key` together, in their order, as many as
    a streamed batch's memory holds (and CPU_MAX_REPLICAS on the CPU); a cell whose replicas do not
    fit one streamed batch alone. Batches come in the order of their first cell."""
    backend = resolve_backend(backend)
    cap = min(stream_cap(backend), batch_budget(backend, max_batch_bytes))
    most = CPU_MAX_REPLICAS if backend == "cpu" else None
    batches: list[list[int]] = []
    open_: dict[tuple, tuple[list[int], int]] = {}  # key -> (its open batch, that batch's bytes)
    for i, cell in enumerate(cells):
        need = replicas * streamed_per_replica(cell, backend)
        if need > cap or (most is not None and 2 * replicas > most):
            batches.append([i])
            continue
        key = batch_key(cell)
        members, used = open_.get(key, (None, 0))
        full = members is not None and (
            used + need > cap or (most is not None and (len(members) + 1) * replicas > most)
        )
        if members is None or full:
            members, used = [], 0
            batches.append(members)
        members.append(i)
        open_[key] = (members, used + need)
    return sorted(batches, key=lambda b: b[0])


def simulate_cells(
    cells: list[Packed],
    *,
    replicas: int,
    backend: str = "cpu",
    keep: int | None = None,
    reduce: list[BatchReducer] | None = None,
    overlap: bool = False,
    after: Future | None = None,
    parallel: bool = True,
) -> list[SimResult | EngineError]:
    """Simulate `replicas` replicas of each of `cells` (packed by poa_mc.engine.engine.pack, all of
    one batch_key) in one launch; each cell's SimResult as simulate(...) gives it for that cell, or
    its EngineError where its replicas failed. `reduce[i]` is cell i's reduction (simulate's
    `reduce`), run on the reducer's thread cell by cell in order; with `overlap` the results
    return with their reductions still running (SimResult.reduced() waits), `after` as in simulate.
    Each result's wall_s is its share of the launch's, by simulated requests."""
    backend = resolve_backend(backend)
    target = target_for(backend)
    shapes = batch_shapes(cells)
    requests = cells[0].requests
    kept = requests if keep is None else max(0, min(int(keep), requests))
    ips, fps, tabss = stacks.stack([c.ip for c in cells], [c.fp for c in cells], [c.tabs for c in cells])
    # replica r of the launch is replica r - i * replicas of cell i: its random key's index
    ips[:, L.P_RBASE] = -replicas * np.arange(len(cells))
    cell_of = np.repeat(np.arange(len(cells), dtype=np.int64), replicas)
    outs = [
        Outputs(c, replicas, kept, reduce[i] if reduce else None, after if i == 0 else None)
        for i, c in enumerate(cells)
    ]
    t0 = time.perf_counter()
    out, compile_s = target.run_batch(
        ips,
        fps,
        tabss,
        sketch.EDGES,
        shapes,
        len(cell_of),
        parallel=parallel,
        wanted=outs[0].wanted(),  # alike for the batch: the same kept rows and passes
        step=cells[0].step,
        cell=cell_of,
    )
    wall = time.perf_counter() - t0 - compile_s
    reducer = threads.pool("reduce", 1) if reduce else None
    try:
        for i, o in enumerate(outs):
            lo = i * replicas
            mine = {name: arr[lo : lo + replicas] for name, arr in out.items()}
            mine["cand"] = mine["cand"][:, :, : cells[i].shapes["cand"][0][1]]  # its own workers' columns
            o.take(mine, 0, reducer)
        del out
        for o in outs:
            o.settle(overlap)
    except BaseException:
        for o in outs:
            o.cancel()
        raise
    simulated = [float(o.rep["simulated"].sum()) for o in outs]
    total = sum(simulated) or 1.0
    device = target.device_name()
    results: list[SimResult | EngineError] = []
    for i, o in enumerate(outs):
        share: dict[str, Any] = {"wall": wall * simulated[i] / total, "compile_s": compile_s if i == 0 else 0.0}
        try:
            results.append(o.result(**share, backend=backend, device=device, batches=1))
        except EngineError as e:
            results.append(e)
    return results
