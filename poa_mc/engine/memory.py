"""The kernels' arrays and what they cost in memory: each per-replica state and output array's
(shape, dtype) for a cell's packed parameters, the bytes of one replica and of one kept request, a
cell's memory plan, and the refusal, before a grid writes anything, of cells this machine cannot
hold (check_memory, naming the grid key to lower).

simulate sizes its batches of replicas from these shapes and `poa-mc run` checks a grid with them,
so the check and the launch agree on what a replica needs. STREAM_BATCH_BYTES and
_available_memory are read from this module when called: a test that patches them patches them here.
"""

from __future__ import annotations

import math

import numpy as np

from poa_mc.engine.packing import _rep_f_base, pack_params
from poa_mc.engine.results import _ADDED, SAMPLE_FLOAT_FIELDS, SAMPLE_INT_FIELDS
from poa_mc.kernels import layout as L
from poa_mc.kernels import tally
from poa_mc.model.grid import Cell
from poa_mc.model.sections import ConfigError, RunSection
from poa_mc.model.spec import CellSpec
from poa_mc.stats import sketch
from poa_mc.stats.accumulate import ACC_ROW_BYTES

STREAM_BATCH_BYTES = 192 << 20  # a batch's share of memory when requests are not all kept

RING_MAX = 1024


def ring_runs(ip: np.ndarray, fp: np.ndarray) -> int:
    """Rows of the released-run ring per worker (poa_mc/kernels/cache.py). With fixed lengths every run
    a request leaves is known, and the ring holds as many as the worker's blocks (or its G2's) can
    (plus the few a preemption leaves); otherwise RING_MAX. A full ring merges its two oldest runs, which a
    replica counts as `ring_merges`."""
    if ip[L.P_ISL_KIND] != L.DIST_FIXED or ip[L.P_OSL_KIND] != L.DIST_FIXED:
        return RING_MAX
    bs = int(ip[L.P_B])
    isl, osl = int(ip[L.P_ISL_A]), int(ip[L.P_OSL_A])
    pfx = math.floor(min(fp[L.F_RATIO] * isl, fp[L.F_PTOK])) // bs  # as poa_mc/kernels/requests.py draws it
    runs = [n for n in (isl // bs - pfx, (isl + osl - 1) // bs - pfx) if n > 0]
    kv = max(int(ip[L.P_PKV]), int(ip[L.P_DKV]), int(ip[L.P_G2CAP]))  # G2's ring of runs has as many rows
    return min(RING_MAX, kv // min(runs, default=kv) + int(ip[L.P_S]) + 2)


def _shapes(ip: np.ndarray, fp: np.ndarray, n_workers: int, requests: int, record: bool) -> dict[str, tuple]:
    slots = int(ip[L.P_S])
    delayed = fp[L.F_EVDELAY] > 0
    qcap = int(ip[L.P_Q])
    runcap = min(slots, int(ip[L.P_MAXSEQ]))
    return {
        "slot_i": ((slots, L.NSI), np.int32),
        "slot_f": ((slots, L.NSF), np.float64),
        "wk_i": ((n_workers + 1, L.NWI + (2 * int(ip[L.P_G]) if ip[L.P_DEDUP] else 0)), np.int32),
        "wk_f": ((n_workers + 1, L.NWF), np.float64),
        "pc": ((n_workers, int(ip[L.P_G]) + ring_runs(ip, fp), L.NPC_T if ip[L.P_G2CAP] > 0 else L.NPC), np.int32),
        "ev": ((4 * slots + 16 if delayed else 1, L.NEV), np.float64),
        "queue": ((n_workers + (4 if ip[L.P_CLIENT] else 2), qcap), np.int32),
        "run": ((n_workers, runcap), np.int32),
        "heap_t": ((int(ip[L.P_H]),), np.float64),
        "heap_c": ((int(ip[L.P_H]),), np.int32),
        "rep_i": ((L.NRI,), np.int64),
        "rep_f": ((_rep_f_base(ip) + (n_workers if ip[L.P_LINKS] else 0),), np.float64),
        "out_f": ((requests, L.NOF), np.float64),
        "out_i": ((requests, L.NOI), np.int32),
        "cand": ((requests, n_workers, L.NCAND) if record else (1, 1, L.NCAND), np.float64),
        "tally_f": ((tally.NTF if ip[L.P_TALLY] else 1,), np.float64),
        "tally_h": ((3, sketch.NBINS) if ip[L.P_TALLY] else (1, 1), np.int32),
        "poa": ((3,) if ip[L.P_POA] else (1,), np.float64),
    }


def kernel_shapes(ip: np.ndarray, fp: np.ndarray, requests: int, record: bool) -> dict[str, tuple]:
    """Each kernel array's per-replica (shape, dtype) for the packed parameters (ip, fp)."""
    return _shapes(ip, fp, int(ip[L.P_NP] + ip[L.P_ND]), requests, record)


def bytes_per_replica(shapes: dict[str, tuple], names=None) -> int:
    total = 0
    for name, (shape, dtype) in shapes.items():
        if names is None or name in names:
            total += math.prod(shape) * np.dtype(dtype).itemsize  # np.prod of a tuple: 20x slower
    return total


def result_bytes_per_request(n_workers: int, record: bool) -> int:
    """Bytes of one measured request in a SimResult's arrays (samples, and candidates when recorded)."""
    per = 8 * len(SAMPLE_FLOAT_FIELDS) + sum(8 if n == "seq" else 4 for n in SAMPLE_INT_FIELDS)
    if record:
        per += 2 * 8 * n_workers + 4 + 4 * len(_ADDED) + 8
    return per


def memory_plan(spec: CellSpec, *, replicas: int, requests: int, warmup: int, record: bool = True) -> dict[str, int]:
    """Bytes a cell needs: `state` for one replica's kernel state and outputs (`largest`: the state
    array that takes most of it), `results` for all replicas' per-request arrays (the runner holds
    these twice while it builds the samples frame)."""
    ip, fp, _ = pack_params(spec, requests=requests, warmup=warmup, seed=0, stream=0, record_candidates=record)
    n_workers = int(ip[L.P_NP] + ip[L.P_ND])
    shapes = _shapes(ip, fp, n_workers, requests, record)
    state = bytes_per_replica(shapes)
    largest = max(shapes, key=lambda k: bytes_per_replica({k: shapes[k]}))
    return {
        "state": state,
        "largest": largest,
        "results": replicas * requests * result_bytes_per_request(n_workers, record),
    }


# the grid key that sizes each kernel state array (_shapes), for memory errors
_STATE_KEYS = {
    "out_f": "run.requests",
    "out_i": "run.requests",
    "cand": "run.requests",
    "slot_i": "cluster.max_inflight",
    "slot_f": "cluster.max_inflight",
    "queue": "cluster.max_inflight",
    "run": "cluster.max_inflight",
    "ev": "cluster.max_inflight",
    "heap_t": "grid.concurrency",
    "heap_c": "grid.concurrency",
    "wk_i": "grid.topology",
    "wk_f": "grid.topology",
    "pc": "grid.topology",
    "rep_f": "controller.window (or controller.log_switches)",
}


def check_memory(cells: list[Cell], run: RunSection, available: int | None = None) -> None:
    """Refuse, before anything is written, a grid whose cells cannot fit this machine's memory:
    one replica's kernel state must fit the engine's batch budget (half the available memory),
    and a cell's kept per-request samples ([run] samples) are held twice (arrays and the samples
    frame) beside one streaming batch of state. Raises ConfigError naming run.requests or run.replicas."""

    avail = available_memory() if available is None else available
    gib = 2**30
    for cell in cells:
        warmup = run.warmup_for(cell.concurrency)
        plan = memory_plan(cell.spec, replicas=run.replicas, requests=run.requests, warmup=warmup)
        if plan["state"] > avail // 2:
            key = _STATE_KEYS.get(plan["largest"], "run.requests")
            raise ConfigError(
                key,
                f"one replica of {cell.label()} needs {plan['state'] / gib:.2f} GiB of state, more than half of "
                f"the {avail / gib:.1f} GiB available here (most of it in its {plan['largest']} arrays); "
                f"lower {key}",
            )
        keep = run.keep()
        kept = run.requests if keep is None else keep
        batch_state = min(run.replicas * plan["state"], avail // 2, max(plan["state"], STREAM_BATCH_BYTES))
        # only the kept requests stay; every replica's accumulator row (its histograms' spans, taken
        # at their widest) is held a few times over (the batches' rows, joined, then as a frame)
        need = 2 * plan["results"] * kept // run.requests + batch_state + 3 * run.replicas * ACC_ROW_BYTES
        if need > avail:
            raise ConfigError(
                "run.replicas",
                f"{run.replicas} replicas x {kept} kept requests of {cell.label()} need about {need / gib:.1f} GiB "
                f"for their samples and accumulators, more than the {avail / gib:.1f} GiB available here; keep fewer "
                '(run.samples = "none" or a number), lower run.replicas or run.requests, '
                "or split the grid with --shard",
            )


def available_memory() -> int:
    """MemAvailable of this machine (bytes); 8 GiB when it cannot be read."""
    return _available_memory()


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30
