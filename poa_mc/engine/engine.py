"""Runs one cell (CellSpec) for many replicas on a backend and returns per-request samples.

API (stable contract for the rest of the library):

    simulate(spec, *, replicas, requests, warmup, seed, stream, backend="cpu",
             record_candidates=True) -> SimResult

`check_blocks=True` checks after every event that each worker's KV tiers hold exactly the blocks
their counters say, within capacity (a debug mode the tests run; slower).
`drain=True` makes a finite run, as Dynamo's replay: no request arrives after the measured ones,
so the load falls away at the end (the default keeps it on until the last measured request ends).
`stream` keys the request streams: give every policy of one (topology, load) point the same
`stream` and they see identical requests in every replica (common random numbers). The random
key of replica r is (seed, stream, r), so results never depend on batch size, thread count or
backend.

SimResult.samples: dict of numpy arrays of shape (replicas, requests), the measured requests of
each replica in arrival order (the first `warmup` arrivals of each replica are dropped):
    seq            int64   arrival index within the replica
    arrival_ms     float64 arrival time
    ttft_ms        float64 arrival -> first token on the decode worker
    e2e_ms         float64 arrival -> last token
    itl_ms         float64 mean inter-token latency (0 when osl == 1)
    prefill_wait_ms float64 arrival -> first prefill pass that schedules it
    decode_wait_ms float64 KV ready on the decode worker -> admitted to a decode pass
    isl, osl       int32   token counts
    group          int32   prefix group
    prompt_blocks  int32   ceil(isl / block_size)
    cached_blocks  int32   leading prompt blocks found in the prefilling worker's cache (any tier)
    cached_g2..g4  int32   of those, the ones found in its G2, G3 and in G4 (lower tiers, docs/tiers.md)
    onboard_ms     float64 the copy of lower-tier hits to G1 its first prefill pass waited for
    client_wait_ms float64 with a [client]: its creation -> its arrival at the frontend (connection
                           pool wait + overhead; arrival, TTFT and E2E then run from the creation)
    transfer_ms    float64 prefill_first: its KV transfer, from its reads' start to the KV's arrival (0 otherwise)
    prefill_worker int32   worker index (0-based among prefill workers), -1 if prefilled locally
    decode_worker  int32   0-based among decode workers
SimResult.candidates (only with record_candidates): the router's view at each routing decision,
shape (replicas, requests, W) with one column per worker (prefill workers first, then decode):
the prefill decision of prefill_first fills the prefill columns, the decode decision (every
flow) the decode columns; columns no decision considers are NaN.
    cand_tokens    float64 active_prefill_tokens_w + isl - overlap_w * block_size
    cand_blocks    float64 active_blocks_w + new_blocks_w
  The decode decision of prefill_first sees no overlap (overlap_w = 0) unless the policy's
  decode_overlap_weight is > 0. Dynamo's cost is overlap_weight * cand_tokens / block_size +
  cand_blocks. Also (replicas, requests): `chosen` int32 (the policy decision's worker within its
  stage), what each decision booked on its worker (prefill_added_tokens, prefill_added_blocks,
  decode_added_tokens, decode_added_blocks, int32) and decode_decided_ms (when the decode worker
  was chosen: arrival, or the prefill's end in prefill_first).
SimResult.replica: dict of (replicas,) arrays: window_ms (first measured arrival -> last
measured completion), simulated (requests simulated in all, warm-up and tail included),
events, preemptions (decode preemptions, warm-up included), ring_merges (see poa_mc/kernels/cache.py),
sim_ms (simulated time), and the adaptive controller's switches and regime_ms_below,
regime_ms_transition, regime_ms_saturated (time in each regime; a fixed policy spends it all in
"below"), and time integrals over measured_ms (first measured arrival -> end of the run), summed
over workers: prefill_busy_ms and decode_busy_ms (time in a pass), decode_batch_ms (running
sequences x time), decode_kv_block_ms (blocks held by requests x time), and inflight_ms (requests
in flight, arrival to last token, x time); done_in_window: completions (warm-up requests included)
after the first measured arrival and before the last.
SimResult.extra["switch_log"] (adaptive only): (replicas, log_switches, 3) of (time ms, from, to)
per switch, NaN past the last. With a planner, replica["planner_moves"] counts its moves and
SimResult.extra["move_log"] is (replicas, log_moves, 3) of (time ms, prefill workers, decode
workers) per completed move, NaN past the last; the prefill_worker and decode_worker indices
then count among the most workers of either pool any split has.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from poa_mc.engine import memory
from poa_mc.engine.backend import resolve_backend
from poa_mc.engine.packing import pack_params
from poa_mc.engine.results import (
    _ADDED,
    _OF,
    _OI,
    POA_HAT_FIELDS,
    SAMPLE_FLOAT_FIELDS,
    SAMPLE_INT_FIELDS,
    SimResult,
    _batch_columns,
    _batch_logs,
    _batch_replica,
    _joined,
    _scatter_fields,
    _wanted_rows,
)
from poa_mc.kernels import layout as L
from poa_mc.kernels import poa_hat, threads
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_error import SpecError
from poa_mc.stats import poa_plan, sketch

# The target's kernels are imported once the backend is chosen: numba-cuda only where a GPU may be
# there, and the CPU kernels' dispatchers only when a cell runs.

_log = logging.getLogger(__name__)

BatchReducer = Callable[[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]], dict[str, np.ndarray]]


class EngineError(RuntimeError):
    """A simulation that ran but could not finish (e.g. an open loop whose queue grew without bound).
    `key` names the input to change when one is to blame ("load": the cell's load)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass
class Packed:
    """A cell packed for the kernels (poa_mc.engine.packing), with what its launches and the
    unpacking of its outputs need: the tallies and PoA-hat settings, the step table (`step`, None
    without the kernels' PoA-hat sums) and each kernel array's per-replica shape."""

    spec: CellSpec
    ip: np.ndarray
    fp: np.ndarray
    tabs: np.ndarray
    step: np.ndarray | None
    shapes: dict[str, tuple]
    n_workers: int
    requests: int
    record: bool
    tallied: bool
    poa: dict[str, Any] | None

    @property
    def per_replica(self) -> int:
        return memory.bytes_per_replica(self.shapes)


def pack(
    spec: CellSpec,
    *,
    requests: int,
    warmup: int,
    seed: int,
    stream: int,
    record_candidates: bool = True,
    naive_decode: bool = False,
    drain: bool = False,
    check_blocks: bool = False,
    tallied: bool = False,
    slo: dict[str, float] | None = None,
    poa: dict[str, Any] | None = None,
) -> Packed:
    """One cell as simulate and simulate_cells launch it (their arguments of the same names;
    `tallied`: the kernels tally each replica, as simulate's tally=True with a `reduce`)."""
    ip, fp, tabs = pack_params(
        spec,
        requests=requests,
        warmup=warmup,
        seed=seed,
        stream=stream,
        record_candidates=record_candidates,
        naive_decode=naive_decode,
        drain=drain,
        check_blocks=check_blocks,
    )
    if tallied:
        ip[L.P_TALLY] = 1
        fp[L.F_SLO_TTFT] = float((slo or {}).get("ttft_ms", 0.0))
        fp[L.F_SLO_ITL] = float((slo or {}).get("itl_ms", 0.0))
    step = None  # with the kernels' PoA-hat sums, the step table (empty for the router cost)
    if tallied and poa is not None and record_candidates:
        made = poa_plan.kernel_params(poa_plan.plan(spec, poa), spec, requests)
        if made is not None:
            entries, fp[L.F_POA_OMEGA], step = made
            for j, v in entries.items():
                ip[j] = v
    n_workers = int(ip[L.P_NP] + ip[L.P_ND])
    shapes = memory._shapes(ip, fp, n_workers, requests, record_candidates)
    return Packed(spec, ip, fp, tabs, step, shapes, n_workers, requests, record_candidates, tallied, poa)


def target_for(backend: str):
    """The backend's kernels module (poa_mc.kernels.cpu or .cuda), imported on first use."""
    if backend == "cuda":
        from poa_mc.kernels import cuda as target
    else:
        from poa_mc.kernels import cpu as target
    return target


def batch_budget(backend: str, max_batch_bytes: int | None) -> int:
    """Bytes a launch's kernel state may take: half the available memory (and of the GPU's free
    memory on CUDA), or `max_batch_bytes`."""
    if max_batch_bytes is not None:
        return max_batch_bytes
    budget = memory._available_memory() // 2
    if backend == "cuda":
        budget = min(budget, target_for(backend).free_memory() // 2)
    return budget


def state_per_replica(cell: Packed, backend: str) -> int:
    """Bytes of one replica's kernel state on `backend` (a GPU's PoA-hat scratch is per replica,
    a CPU's per thread)."""
    per_rep = cell.per_replica
    if backend == "cuda" and cell.ip[L.P_POA]:
        ip = cell.ip
        nf, ni = poa_hat.sizes(cell.requests, int(ip[L.P_POA_WIN]), int(ip[L.P_POA_K]), int(ip[L.P_POA_SLOTS]))
        per_rep += 8 * (nf + ni)
    return per_rep


def streamed_per_replica(cell: Packed, backend: str) -> int:
    """Bytes one replica holds while its batch streams through a reduction: its kernel state, and
    twice its per-request arrays (the batch's outputs and what its reduction computes)."""
    return state_per_replica(cell, backend) + 2 * cell.requests * memory.result_bytes_per_request(
        cell.n_workers, cell.record
    )


def stream_cap(backend: str) -> int:
    """A streamed batch's share of memory: STREAM_BATCH_BYTES on the CPU; a GPU needs tens of
    thousands of replicas per launch to be busy, so its batches may take an eighth of the host's
    memory (the batch is reduced on the host)."""
    if backend == "cpu":
        return memory.STREAM_BATCH_BYTES
    return max(memory.STREAM_BATCH_BYTES, memory._available_memory() // 8)


class Outputs:
    """One cell's results, gathered batch by batch as they leave the kernels: its kept samples and
    candidates, its per-replica arrays and logs, and (with `reduce`) each batch's reduction, run on
    the reducer's thread one batch at a time, in batch order."""

    def __init__(
        self, cell: Packed, replicas: int, kept: int, reduce: BatchReducer | None, after: Future | None
    ) -> None:
        self.cell, self.replicas, self.kept, self.reduce = cell, replicas, kept, reduce
        ip, record = cell.ip, cell.record
        # the kept samples: one block per dtype, a field per row (_scatter_fields fills them)
        self.f_names = [*SAMPLE_FLOAT_FIELDS, *(["decode_decided_ms"] if record else [])]
        self.f_src = np.array([*_OF, *([L.OF_DDEC] if record else [])], dtype=np.int64)
        self.i_names = [n for n in SAMPLE_INT_FIELDS if n != "seq"] + (["chosen", *_ADDED] if record else [])
        self.i_src = np.array(
            [oi for n, oi in zip(SAMPLE_INT_FIELDS, _OI) if n != "seq"]
            + ([L.OI_CHOSEN, *_ADDED.values()] if record else []),
            dtype=np.int64,
        )
        self.f_block = np.empty((len(self.f_names), replicas, kept))
        self.i_block = np.empty((len(self.i_names), replicas, kept), dtype=np.int32)
        by_name = {**dict(zip(self.f_names, self.f_block)), **dict(zip(self.i_names, self.i_block))}
        by_name["seq"] = np.empty((replicas, kept), dtype=np.int64)
        self.samples = {name: by_name[name] for name in (*SAMPLE_FLOAT_FIELDS, *SAMPLE_INT_FIELDS)}
        self.cands: dict[str, np.ndarray] = {}
        if record:
            self.cands = {
                "cand_tokens": np.empty((replicas, kept, cell.n_workers)),
                "cand_blocks": np.empty((replicas, kept, cell.n_workers)),
                **{name: by_name[name] for name in ("chosen", *_ADDED, "decode_decided_ms")},
            }
        self.rep: dict[str, np.ndarray] = {}
        self.logs: dict[str, np.ndarray] = {}
        self.n_log = int(ip[L.P_CTL_LOG])
        self.n_moves = int(ip[L.P_PL_LOG]) if ip[L.P_PLAN] else 0
        self.parts: list[dict[str, np.ndarray]] = []
        self.reducing: Future | None = None
        self.after = after

    def wanted(self) -> dict | None:
        """What the kernels' run_batch need copy back of a tallied batch's request rows: only the
        kept samples and what PoA-hat and the conservation count read (poa_mc/kernels/cuda.py)."""
        return _wanted_rows(self.kept, bool(self.cell.ip[L.P_POA])) if self.cell.tallied else None

    def _keep_samples(self, of: np.ndarray, oi: np.ndarray, cols: dict[str, np.ndarray], r0: int) -> None:
        kept = self.kept
        if not kept:
            return
        _scatter_fields(of, self.f_src, self.f_block, r0, kept)
        _scatter_fields(oi, self.i_src, self.i_block, r0, kept)
        self.samples["seq"][r0 : r0 + len(cols["seq"])] = cols["seq"][:, :kept]
        for name in ("cand_tokens", "cand_blocks") if self.cell.record else ():
            self.cands[name][r0 : r0 + len(cols[name])] = cols[name][:, :kept]

    def _keep_and_reduce(self, of, oi, cols, rep_b, logs_b, r0: int) -> dict[str, np.ndarray]:
        self._keep_samples(of, oi, cols, r0)
        # the reduction reads whole fields: each field's column gathered from the request rows,
        # one at a time, read the batch's outputs once per field (a third of the reduction's time
        # without PoA-hat, bench/NOTES.md); here every row is read once, its fields to contiguous
        # arrays of the same dtype and values
        nr, n = of.shape[0], of.shape[1]
        f_names, i_names, tallied = self.f_names, self.i_names, self.cell.tallied
        if self.kept == n:  # _keep_samples just gathered them into the kept samples' blocks
            dense = {
                **dict(zip(f_names, self.f_block[:, r0 : r0 + nr])),
                **dict(zip(i_names, self.i_block[:, r0 : r0 + nr])),
            }
        else:  # with the kernels' tallies, only PoA-hat's fields (the others stay views of the rows),
            # and none where the kernels worked PoA-hat out too
            dense = {}
            solved = "poa_kernel" in cols and not np.isnan(cols["poa_kernel"][:, 1]).any()
            for names, src, rows, dtype in (
                (f_names, self.f_src, of, np.float64),
                (i_names, self.i_src, oi, np.int32),
            ):
                pick = [j for j, name in enumerate(names) if not tallied or (name in POA_HAT_FIELDS and not solved)]
                block = np.empty((len(pick), nr, n), dtype=dtype)
                _scatter_fields(rows, src[pick], block, 0, n)
                dense.update(zip([names[j] for j in pick], block))
        return self.reduce({**cols, **dense}, rep_b, logs_b)

    def take(self, out: dict[str, np.ndarray], r0: int, reducer) -> None:
        """A batch's kernel arrays for this cell's replicas r0.. (views of the launch's arrays)."""
        cell, ip = self.cell, self.cell.ip
        nr = out["rep_i"].shape[0]
        cols = _batch_columns(out, ip, cell.spec, cell.record)
        if cell.tallied:
            cols.update(tally_f=out["tally_f"], tally_h=out["tally_h"], tally_slo=cell.fp[[L.F_SLO_TTFT, L.F_SLO_ITL]])
        if ip[L.P_POA]:
            cols.update(poa_kernel=out["poa"], poa_settings=poa_plan.settings(cell.poa))
        rep_b = _batch_replica(out, ip)
        logs_b = _batch_logs(out, ip, self.n_log, self.n_moves)
        if reducer is None:
            self._keep_samples(out["out_f"], out["out_i"], cols, r0)
        for name, arr in rep_b.items():
            self.rep.setdefault(name, np.empty(self.replicas, dtype=arr.dtype))[r0 : r0 + nr] = arr
        for name, arr in logs_b.items():
            self.logs.setdefault(name, np.empty((self.replicas, *arr.shape[1:])))[r0 : r0 + nr] = arr
        if reducer is not None:
            if self.reducing is not None:
                self.parts.append(self.reducing.result())
            elif self.after is not None:
                wait([self.after])  # an earlier call's: its error is its own caller's to raise
            # the outputs only: the batch's state arrays are let go with `out`
            self.reducing = reducer.submit(self._keep_and_reduce, out["out_f"], out["out_i"], cols, rep_b, logs_b, r0)

    def settle(self, overlap: bool) -> None:
        """Without `overlap`, wait for the last batch's reduction."""
        if self.reducing is not None and not overlap:
            self.parts.append(self.reducing.result())
            self.reducing = None

    def cancel(self) -> None:
        if self.reducing is not None:
            self.reducing.cancel()  # an error or Ctrl-C: a reduction not started yet is not wanted

    def failure(self) -> EngineError | None:
        """The error of a cell some of whose replicas failed (their status), else None."""
        rep, ip, spec = self.rep, self.cell.ip, self.cell.spec
        bad = np.flatnonzero(rep["status"] != 0)
        if not bad.size:
            return None
        code = int(rep["status"][bad[0]])
        why = {
            1: f"more than cluster.max_inflight={int(ip[L.P_S])} requests in flight (the offered load "
            "exceeds the cluster's capacity: lower the rate or raise max_inflight)",
            2: "the event limit was reached (the cluster made no progress"
            + (
                '; cluster.decode_admission = "replay" starves preempted requests under sustained KV pressure: '
                'set cluster.decode_admission = "fcfs", or run.drain = true (a finite run, as the replay\'s)'
                if spec.cluster.decode_admission == "replay"
                else ""
            )
            + ")",
            3: "the simulation stalled with requests left (a request cannot fit a worker)",
            L.STATUS_OVERCAP: "a worker held more KV blocks than it has (an engine bug: please report it)",
            L.STATUS_TIERS: "the KV tiers did not conserve blocks (an engine bug: please report it)",
        }.get(code, str(code))
        return EngineError(f"{bad.size} of {self.replicas} replicas failed: {why}", key="load" if code == 1 else None)

    def result(self, *, wall: float, compile_s: float, backend: str, device: str, batches: int) -> SimResult:
        """The cell's SimResult (raises its EngineError if replicas failed); seq order (arrival
        order) is the row order already: rows are indexed by seq - warmup."""
        err = self.failure()
        if err is not None:
            raise err
        reducing = self.reducing
        res = SimResult(
            samples=self.samples,
            candidates=self.cands,
            replica=self.rep,
            wall_s=wall,
            compile_s=compile_s,
            backend=backend,
            device=device,
            batches=batches,
            state_bytes_per_replica=memory.bytes_per_replica(self.cell.shapes, L.STATE_NAMES),
            extra=self.logs,
            acc={} if reducing is not None else _joined(self.parts),
            pending=reducing,
            reduced_at=None if reducing is not None else time.perf_counter(),
            _parts=self.parts if reducing is not None else [],
        )
        if reducing is not None:  # stamped as the reduction ends (on the reducer's thread, or here if it has)
            reducing.add_done_callback(lambda _: setattr(res, "reduced_at", time.perf_counter()))
        return res


def simulate(
    spec: CellSpec,
    *,
    replicas: int,
    requests: int,
    warmup: int,
    seed: int,
    stream: int,
    backend: str = "cpu",
    record_candidates: bool = True,
    naive_decode: bool = False,
    drain: bool = False,
    max_batch_bytes: int | None = None,
    parallel: bool = True,
    check_blocks: bool = False,
    keep: int | None = None,
    reduce: BatchReducer | None = None,
    overlap: bool = False,
    after: Future | None = None,
    tally: bool = False,
    slo: dict[str, float] | None = None,
    poa: dict[str, Any] | None = None,
) -> SimResult:
    """Simulate `replicas` independent replicas of one cell; see the module docstring.

    `reduce(cols, replica, logs)`, when given, is called on each batch of replicas as it leaves
    the kernels (cols: that batch's samples and candidates, (nr, requests[, W]) each; replica and
    logs as in SimResult) and returns a dict of (nr, ...) arrays; SimResult.acc holds them for all
    replicas, in replica order (a histogram kept as a span, `hist_*` beside `hist_*_lo`, over the
    union of the batches' spans: poa_mc.stats.sketch.join_rows). It runs on a thread of its own while
    the next batch simulates, one batch at a time and in batch order, and must not write into
    cols. `keep` (None: all) is how many measured requests of each replica SimResult.samples and
    .candidates keep (the first ones). With `reduce`, or fewer than all kept, the replicas run in
    batches of about STREAM_BATCH_BYTES on the CPU (an eighth of the host's memory on CUDA): with
    nothing kept, memory is flat in the number of requests per replica.

    overlap=True (with `reduce`) returns once the kernels are done, the last batch's reduction
    still running: SimResult.reduced() waits for it (a grid's next cell then simulates beside it).
    `after`, an earlier call's SimResult.pending, is waited for before this call's first reduction
    is submitted, so that no more than two batches' arrays are alive across calls either.

    tally=True (with `reduce`): the kernels tally each replica's requests as it ends
    (poa_mc/kernels/tally.py; `slo`, the [slo] bounds, for the count of requests within them), and
    `reduce` finds the batch's tallies in cols as "tally_f", "tally_h" and "tally_slo" (the
    bounds they were counted against); the request columns it is given are then gathered only
    as far as PoA-hat reads them.
    """
    if replicas < 1:
        raise SpecError("run.replicas", f"must be >= 1, got {replicas}")
    if requests < 1:
        raise SpecError("run.requests", f"must be >= 1, got {requests}")
    if warmup < 0:
        raise SpecError("run.warmup", f"must be >= 0, got {warmup}")
    backend = resolve_backend(backend)
    cell = pack(
        spec,
        requests=requests,
        warmup=warmup,
        seed=seed,
        stream=stream,
        record_candidates=record_candidates,
        naive_decode=naive_decode,
        drain=drain,
        check_blocks=check_blocks,
        tallied=tally and reduce is not None,
        slo=slo,
        poa=poa,
    )
    ip = cell.ip
    per_rep = state_per_replica(cell, backend)
    budget = batch_budget(backend, max_batch_bytes)
    target = target_for(backend)
    if per_rep > budget:
        raise EngineError(
            f"one replica needs {per_rep / 2**20:.1f} MiB of state, more than the "
            f"{budget / 2**20:.1f} MiB available; reduce requests or cluster.max_inflight"
        )
    kept = requests if keep is None else max(0, min(int(keep), requests))
    streaming = reduce is not None or kept < requests
    if streaming:  # one batch's per-request arrays at a time, reduced as it leaves the kernels
        batch = max(1, min(replicas, budget // per_rep, stream_cap(backend) // streamed_per_replica(cell, backend)))
    else:
        batch = max(1, min(replicas, budget // per_rep))
    n_batches = -(-replicas // batch)
    if n_batches > 1 and not streaming:
        _log.warning(
            "%d replicas x %.1f MiB exceed the %.0f MiB memory budget: running them in %d batches of %d "
            "(results are the same as in one batch)",
            replicas, per_rep / 2**20, budget / 2**20, n_batches, batch,
        )  # fmt: skip
    outs = Outputs(cell, replicas, kept, reduce, after)
    wanted = outs.wanted()
    compile_s = 0.0
    wall = 0.0
    # a batch is reduced on a thread of its own while the next one simulates: the reduction's
    # serial numpy stretches, and the copies of the kept samples, leave a core the kernels then use
    # (bench/NOTES.md). One batch at a time, in batch order, so at most two batches' arrays are
    # alive and results are unchanged
    reducer = threads.pool("reduce", 1) if reduce else None
    try:
        for b in range(n_batches):
            r0 = b * batch
            nr = min(batch, replicas - r0)
            ipb = ip.copy()
            ipb[L.P_RBASE] = r0
            t0 = time.perf_counter()
            out, csec = target.run_batch(
                ipb, cell.fp, cell.tabs, sketch.EDGES, cell.shapes, nr, parallel=parallel, wanted=wanted, step=cell.step
            )
            wall += time.perf_counter() - t0 - csec
            compile_s += csec
            outs.take(out, r0, reducer)
            del out
        outs.settle(overlap)
    except BaseException:
        outs.cancel()
        raise
    return outs.result(wall=wall, compile_s=compile_s, backend=backend, device=target.device_name(), batches=n_batches)
