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
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from poa_mc.kernels import layout as L
from poa_mc.kernels import poa_hat, tally, threads
from poa_mc.model.grid import Cell
from poa_mc.model.profiles import decode_ms, pack_profile, prefill_ms
from poa_mc.model.replay import table_for
from poa_mc.model.sections import ConfigError, RunSection
from poa_mc.model.spec import REGIMES, CellSpec, Dist, SpecError
from poa_mc.stats import poa_plan, sketch
from poa_mc.stats.accumulate import ACC_ROW_BYTES

# The target's kernels are imported once the backend is chosen: numba-cuda only where a GPU may be
# there, and the CPU kernels' dispatchers only when a cell runs.

_FLOW = {"prefill_first": L.FLOW_PREFILL_FIRST, "decode_first": L.FLOW_DECODE_FIRST, "aggregated": L.FLOW_AGGREGATED}
_POLICY = L.POLICY_ID  # `[[policy]] kind` -> the kernels' id (one table: poa_mc/kernels/layout.py)
_DIST = {"fixed": L.DIST_FIXED, "uniform": L.DIST_UNIFORM, "lognormal": L.DIST_LOGNORMAL, "empirical": L.DIST_EMPIRICAL}
# an aic profile is pass-timed like the polynomial; fp[F_TAB] tells the kernels to read its table
_PROF = L.PROFILE_ID  # `[profile] kind` -> the kernels' id (one table: poa_mc/kernels/layout.py)

# the sample columns and the request rows' columns they come from (poa_mc/kernels/layout.py's tables)
SAMPLE_FLOAT_FIELDS = tuple(n for n, kind, _ in L.REQUEST_FIELDS if kind == "f")
SAMPLE_INT_FIELDS = tuple(n for n, kind, _ in L.REQUEST_FIELDS if kind == "i")
_OF = tuple(j for _, kind, j in L.REQUEST_FIELDS if kind == "f")
_OI = tuple(j for _, kind, j in L.REQUEST_FIELDS if kind == "i")
_ADDED = {n: j for n, _, j in L.DECISION_FIELDS if "_added_" in n}
# the per-request fields poa_mc.stats.accumulate.poa_hat_sums reads (besides the candidates): with the
# kernels' tallies, the only ones a batch's reduction gathers
POA_HAT_FIELDS = frozenset(
    {"ttft_ms", "e2e_ms", "arrival_ms", "decode_decided_ms", "isl", "prefill_worker", "decode_worker", *_ADDED}
)


_log = logging.getLogger(__name__)

STREAM_BATCH_BYTES = 192 << 20  # a batch's share of memory when requests are not all kept
BatchReducer = Callable[[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]], dict[str, np.ndarray]]


class EngineError(RuntimeError):
    """A simulation that ran but could not finish (e.g. an open loop whose queue grew without bound).
    `key` names the input to change when one is to blame ("load": the cell's load)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass
class SimResult:
    samples: dict[str, np.ndarray]
    candidates: dict[str, np.ndarray]
    replica: dict[str, np.ndarray]
    wall_s: float  # in the kernels, compiling excluded; with `reduce`, beside the previous batch's reduction
    compile_s: float
    backend: str
    device: str
    batches: int = 1
    state_bytes_per_replica: int = 0
    extra: dict = field(default_factory=dict)
    acc: dict = field(default_factory=dict)  # what `reduce` returned for each replica
    # simulate(overlap=True): the last batch's reduction, still running, and the parts before it
    pending: Future | None = None
    reduced_at: float | None = None  # time.perf_counter() when the last reduction ended
    _parts: list = field(default_factory=list, repr=False)

    @property
    def simulated_requests(self) -> int:
        return int(self.replica["simulated"].sum())

    def reduced(self) -> dict:
        """`acc`, once the reduction simulate(overlap=True) left running has ended (its error,
        if it failed, is raised here). Kept samples are complete from then on too."""
        if self.pending is not None:
            self._parts.append(self.pending.result())
            self.acc = _joined(self._parts)
            self.pending = None
            self._parts = []
        return self.acc


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The batches' reductions as one dict of arrays, in replica order (histograms kept as spans
    over the union of the batches', poa_mc.stats.sketch.join_rows)."""
    return sketch.join_rows(parts)


# worker time integrals from the first measured arrival to the end (poa_mc/kernels/layout.py RF_PBUSY..)
_INTEGRALS = {
    "prefill_busy_ms": L.RF_PBUSY,
    "decode_busy_ms": L.RF_DBUSY,
    "decode_batch_ms": L.RF_DBATCH,
    "decode_kv_block_ms": L.RF_DKV,
    "link_busy_ms": L.RF_LINK,
}


def _dist_params(d: Dist) -> tuple[int, int, int, float, float, np.ndarray]:
    empty = np.zeros(0)
    if d.kind == "fixed":
        return L.DIST_FIXED, d.value, d.value, 0.0, 0.0, empty
    if d.kind == "uniform":
        return L.DIST_UNIFORM, d.low, d.high, 0.0, 0.0, empty
    if d.kind == "lognormal":
        mu = math.log(d.mean) - 0.5 * d.sigma * d.sigma
        return L.DIST_LOGNORMAL, 0, d.cap, mu, d.sigma, empty
    vals = np.asarray(d.values, dtype=np.float64)
    return L.DIST_EMPIRICAL, 0, len(vals), 0.0, 0.0, vals


def zipf_cdf(n: int, alpha: float) -> np.ndarray:
    q = np.arange(1, n + 1, dtype=np.float64) ** (-alpha)
    c = np.cumsum(q / q.sum())
    c[-1] = 1.0
    return c


def pool_sizes(spec: CellSpec) -> tuple[int, int]:
    """The prefill and decode workers the kernels hold: the cluster's, or with a planner the most
    of each pool any split has (the router then chooses among the active ones)."""
    c = spec.cluster
    if spec.planner is not None:
        path = spec.planner.splits()
        return max(s[0] for s in path), max(s[1] for s in path)
    return (0 if c.flow == "aggregated" else c.n_prefill), c.n_decode


def n_candidates(spec: CellSpec) -> int:
    c = spec.cluster
    return c.n_prefill if c.flow == "prefill_first" else c.n_decode


def pack_params(
    spec: CellSpec,
    *,
    requests: int,
    warmup: int,
    seed: int,
    stream: int,
    record_candidates: bool,
    naive_decode: bool = False,
    drain: bool = False,
    check_blocks: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CellSpec -> (ip, fp, tabs): the integer and float parameters and lookup tables of the kernels."""
    spec.validate()
    c, w, p, pol = spec.cluster, spec.workload, spec.profile, spec.policy
    n_p, n_d = pool_sizes(spec)
    slots = w.concurrency if w.arrival == "closed" else c.max_inflight
    nodes = c.nodes()  # with nodes and links, each worker's node after the parameters (poa_mc/kernels/links.py)
    ip = np.zeros(L.NP_I + len(nodes), dtype=np.int64)
    fp = pack_profile(p)
    ip[L.P_NP] = n_p
    ip[L.P_ND] = n_d
    pl = spec.planner
    if pl is not None:
        path = pl.splits()
        ip[L.P_PLAN] = 1
        ip[L.P_PL_G], ip[L.P_PL_GP], ip[L.P_PL_GD] = pl.gpu_budget, pl.prefill_gpus, pl.decode_gpus
        ip[L.P_PL_I0] = path.index((c.n_prefill, c.n_decode))
        ip[L.P_PL_LOG] = pl.log_moves
        fp[L.F_PL_INT], fp[L.F_PL_START] = pl.interval_ms, pl.startup_ms
        fp[L.F_PL_SLO_T], fp[L.F_PL_SLO_I] = pl.ttft_ms, pl.itl_ms
    ip[L.P_FLOW] = _FLOW[c.flow]
    ip[L.P_B] = c.block_size
    ip[L.P_BSHIFT] = c.block_size.bit_length() if c.block_size & (c.block_size - 1) == 0 else 0
    ip[L.P_PKV] = c.prefill_kv_blocks
    if pol.cache == "global":
        ip[L.P_PSHARE] = 1
        ip[L.P_PKV] = c.prefill_kv_blocks * n_p  # one LRU over the pool's blocks
    ip[L.P_DKV] = c.decode_kv_blocks
    ip[L.P_BUDGET] = c.token_budget
    ip[L.P_MAXSEQ] = c.max_seqs
    ip[L.P_MAXLOCAL] = c.max_local_prefill
    ip[L.P_POLICY] = _POLICY[pol.kind]
    ip[L.P_D] = pol.d
    ip[L.P_ARRIVAL] = 0 if w.arrival == "closed" else 1
    ip[L.P_C] = w.concurrency if w.arrival == "closed" else 0
    ip[L.P_G] = w.prefix_groups
    ip[L.P_POP] = 1 if w.popularity == "zipf" else 0
    ik, ia, ib, imu, isig, itab = _dist_params(w.isl)
    ok, oa, ob, omu, osig, otab = _dist_params(w.osl)
    ip[L.P_ISL_KIND], ip[L.P_ISL_A], ip[L.P_ISL_B] = ik, ia, ib
    ip[L.P_OSL_KIND], ip[L.P_OSL_A], ip[L.P_OSL_B] = ok, oa, ob
    ip[L.P_N] = requests
    ip[L.P_WARM] = warmup
    ip[L.P_S] = slots
    ip[L.P_Q] = slots
    ip[L.P_PROF] = _PROF[p.kind]
    ip[L.P_RECORD] = 1 if record_candidates else 0
    ip[L.P_K] = n_candidates(spec)
    ip[L.P_SEED] = seed
    ip[L.P_STREAM] = stream
    ip[L.P_NAIVE] = 1 if naive_decode else 0
    ip[L.P_DADMIT] = L.DADMIT_REPLAY if c.decode_admission == "replay" else L.DADMIT_FCFS
    ip[L.P_DRAIN] = 1 if drain else 0
    ip[L.P_RECLAST] = 1 if c.recompute_last_block else 0
    ip[L.P_DEDUP] = 1 if c.router_blocks == "dynamo" else 0
    ip[L.P_H] = max(slots, 1)
    if c.has_tiers():
        ip[L.P_G2CAP], ip[L.P_G3CAP] = c.g2_blocks, c.g3_blocks
        ip[L.P_DECAY] = round(c.tier_decay_ms)
        for i in range(3):
            ip[L.P_CR1 + i] = round(1000 * pol.tier_credit[i])
        fp[L.F_G2_MS] = c.tier_copy_ms(c.g2_gbps)
        fp[L.F_G3_MS] = c.tier_copy_ms(c.g3_gbps) if c.g3_blocks > 0 else 0.0
        ip[L.P_G4CAP] = c.g4_blocks
        ip[L.P_CR4] = round(1000 * pol.tier_credit[3])
        fp[L.F_G4_MS] = c.tier_copy_ms(c.g4_gbps) if c.g4_blocks > 0 else 0.0
        if pol.cache == "global":  # the pool's G2 and G3, as its G1: one LRU each over every worker's
            ip[L.P_G2CAP], ip[L.P_G3CAP] = c.g2_blocks * n_p, c.g3_blocks * n_p
    ip[L.P_CHECK] = 1 if check_blocks else 0
    if nodes:
        ip[L.P_LINKS] = 1
        ip[L.NP_I :] = nodes
        fp[L.F_NIC_GBPS] = c.node_nic_gbps
        fp[L.F_KV_BYTES] = c.kv_bytes_per_token
    if c.handover == "vllm":
        ip[L.P_HANDOVER] = L.HANDOVER_VLLM
        fp[L.F_NIXL_POST] = c.nixl_descriptors_per_block * c.nixl_post_us / 1000.0
    if w.client is not None:  # the load generator (poa_mc/kernels/client.py)
        ip[L.P_CLIENT] = 1
        ip[L.P_CONN] = w.client.max_connections
        fp[L.F_CL_OVH] = w.client.overhead_ms
    ip[L.P_LINEAGE] = 1 if c.tier_eviction == "lineage" else 0
    if pol.kind == "batch":
        ip[L.P_BATCH_N] = pol.batch_size
        fp[L.F_BATCH_MS] = pol.batch_ms
    if pol.kind == "adaptive":
        ctl = pol.controller
        ip[L.P_CTL] = 1
        ip[L.P_CTL_WIN] = ctl.window
        ip[L.P_CTL_LOG] = ctl.log_switches
        scale = baseline_ttft_ms(spec) if ctl.threshold_unit == "baseline" else 1.0
        fp[L.F_CTL_PERIOD] = ctl.period_ms
        fp[L.F_CTL_ALPHA] = ctl.ewma_alpha
        fp[L.F_CTL_TH1] = ctl.theta1 * scale
        fp[L.F_CTL_TH2] = ctl.theta2 * scale
        fp[L.F_CTL_HYST] = ctl.hysteresis
        fp[L.F_CTL_DWELL] = ctl.min_dwell_ms
        for i in range(3):
            fp[L.F_CTL_TAU + i] = ctl.temperature[i]
            fp[L.F_CTL_OMEGA + i] = ctl.overlap_weight[i]
    osl_max = w.osl.max_value()
    per_req = 8 + (osl_max if naive_decode else 0)
    ip[L.P_MAXEVENTS] = per_req * (requests + warmup + slots) * 4 + 1_000_000
    fp[L.F_OMEGA] = pol.overlap_weight
    fp[L.F_TAU] = pol.temperature
    fp[L.F_THINK] = w.think_ms
    fp[L.F_RATE] = w.rate_rps / 1000.0
    fp[L.F_RATIO] = w.prefix_ratio
    fp[L.F_ISL_MU], fp[L.F_ISL_SIG] = imu, isig
    fp[L.F_OSL_MU], fp[L.F_OSL_SIG] = omu, osig
    if c.transfer_gbps > 0 and c.kv_bytes_per_token > 0:
        fp[L.F_XFER_TOK] = c.kv_bytes_per_token / (c.transfer_gbps * 1e9) * 1e3
    fp[L.F_XFER_LAT] = c.transfer_latency_ms
    fp[L.F_EVDELAY] = c.kv_event_delay_ms
    fp[L.F_DOMEGA] = pol.decode_overlap_weight
    cdf = zipf_cdf(w.prefix_groups, w.zipf_alpha) if w.popularity == "zipf" else np.zeros(0)
    table = _replay_table(spec)
    width = max(1, len(itab), len(otab), len(cdf), len(table) if table is not None else 0)
    tabs = np.zeros((L.NTB if table is not None else 3, width), dtype=np.float64)
    tabs[0, : len(itab)] = itab
    tabs[1, : len(otab)] = otab
    tabs[2, : len(cdf)] = cdf
    if table is not None:
        tr = w.trace
        ip[L.P_TRACE] = L.TRACE_CLOSED if tr.replay == "closed" else L.TRACE_TIMES
        ip[L.P_TN], ip[L.P_TS] = len(table), len(table.starts)
        ip[L.P_TSAMPLE] = 1 if tr.sample == "sessions" else 0
        if table.groups:
            # a replay that wraps starts a new pass with fresh groups (poa_mc/kernels/replay.py): enough
            # passes for every request a replica can start (sessions: at most one per client plus
            # one per shortest session's turns)
            turns = np.diff(np.append(table.starts, len(table)))
            bound = requests + warmup + slots
            per_pass = len(table) if tr.replay == "timestamps" else len(table.starts)
            if tr.replay == "closed":
                bound = slots + -(-(requests + warmup) // int(turns.min()))
            ip[L.P_TG] = table.groups
            ip[L.P_G] = table.groups * (-(-bound // per_pass) + 1)
        if tr.replay == "timestamps":
            fp[L.F_TPERIOD] = table.period_ms
            fp[L.F_TSCALE] = table.rate_rps / w.rate_rps  # 1 / speedup: the grid's rate is the target
        n = len(table)
        tabs[L.TB_ISL, :n], tabs[L.TB_OSL, :n] = table.isl, table.osl
        tabs[L.TB_GRP, :n], tabs[L.TB_PFX, :n] = table.group, table.pfx
        tabs[L.TB_TIME, :n], tabs[L.TB_DELAY, :n], tabs[L.TB_NEXT, :n] = table.time_ms, table.delay_ms, table.next_row
        tabs[L.TB_START, : len(table.starts)] = table.starts
    if nodes:  # the links' clocks follow the other regions of rep_f
        ip[L.P_LINK_F] = _rep_f_base(ip)
    return ip, fp, tabs


def _rep_f_base(ip: np.ndarray) -> int:
    """rep_f's length before the links' clocks: its fields, the controller's ring and log, the batch
    router's scratch or the planner's log (poa_mc/kernels/layout.py)."""
    return L.NRF + 2 * int(ip[L.P_CTL_WIN]) + 3 * int(ip[L.P_CTL_LOG]) + _batch_scratch(ip) + 3 * int(ip[L.P_PL_LOG])


def kernel_build(spec: CellSpec, backend: str) -> str:
    """The compiled build a cell runs on (its on-disk cache's name): on the CPU, cells without lower
    KV tiers or a replayed trace run the lean build (poa_mc/kernels/source.py), as kernels.cpu.lean decides
    from the packed parameters."""
    if backend != "cpu":
        return backend
    return "cpu" if spec.cluster.has_tiers() or spec.workload.trace is not None else "cpu-lean"


def _replay_table(spec: CellSpec):
    """The replayed trace's table at this cluster's block size (poa_mc.model.replay), or None."""
    tr = spec.workload.trace
    if tr is None:
        return None

    return table_for(
        tr.path, tr.format, tr.sha256, replay=tr.replay, block_size=spec.cluster.block_size,
        trace_block_size=tr.trace_block_size,
    )  # fmt: skip


def baseline_ttft_ms(spec: CellSpec) -> float:
    """TTFT of a lone request on an idle cluster (mean prompt, its shared prefix cached, the last
    block recomputed as the cluster says): one prefill pass with its host time, the KV transfer,
    one decode step at an empty cache. The unit of `threshold_unit = "baseline"`."""

    c, w, p = spec.cluster, spec.workload, spec.profile
    d = w.isl
    isl = {"fixed": d.value, "uniform": (d.low + d.high) / 2, "lognormal": d.mean}.get(
        d.kind, sum(d.values) / max(len(d.values), 1)
    )
    bs = c.block_size
    hit = math.floor(w.prefix_ratio * isl) // bs
    if c.recompute_last_block:
        hit = min(hit, max(math.ceil(isl) - 1, 0) // bs)
    uncached = max(isl - hit * bs, 0.0)
    prefill = prefill_ms(p, uncached) + p.prefill_host_pass_ms + p.prefill_host_request_ms
    xfer = c.transfer_latency_ms
    if c.transfer_gbps > 0 and c.kv_bytes_per_token > 0 and c.flow != "aggregated":
        xfer += uncached * c.kv_bytes_per_token / (c.transfer_gbps * 1e9) * 1e3
    return float(prefill + xfer + decode_ms(p, 0.0, c.decode_kv_blocks, bs))


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
    pfx = math.floor(fp[L.F_RATIO] * isl) // bs
    runs = [n for n in (isl // bs - pfx, (isl + osl - 1) // bs - pfx) if n > 0]
    kv = max(int(ip[L.P_PKV]), int(ip[L.P_DKV]), int(ip[L.P_G2CAP]))  # G2's ring of runs has as many rows
    return min(RING_MAX, kv // min(runs, default=kv) + int(ip[L.P_S]) + 2)


def _batch_scratch(ip: np.ndarray) -> int:
    """Floats of the batch router's work arrays in rep_f (poa_mc/kernels/batch.py)."""
    n = int(ip[L.P_BATCH_N])
    return (n + 1) + 5 * (int(ip[L.P_ND]) * n + 1) if n else 0


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
        plan = memory_plan(cell.spec, replicas=run.replicas, requests=run.requests, warmup=run.warmup)
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


# Device files an NVIDIA driver makes (WSL2's GPU: /dev/dxg). On Linux without any of them no CUDA
# device can be opened, and importing numba.cuda to ask took 75-155 ms of every start of a run
# with backend = "auto" (bench/NOTES.md).
_CUDA_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def cuda_available() -> bool:
    """True when a CUDA device can be used (poa_mc.kernels.cuda_available, which asks numba.cuda),
    answered without numba.cuda on a Linux machine with no GPU device file (CUDA's simulator aside)."""
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    if sys.platform.startswith("linux") and not simulator and not any(map(os.path.exists, _CUDA_DEVICE_FILES)):
        return False
    from poa_mc.kernels import cuda_available as probe

    return probe()


def resolve_backend(backend: str) -> str:
    if backend not in ("auto", "cpu", "cuda"):
        raise SpecError("run.backend", f"must be auto, cpu or cuda, got {backend!r}")
    if backend == "auto":
        return "cuda" if cuda_available() else "cpu"
    return backend


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
    tallied = tally and reduce is not None
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
    shapes = _shapes(ip, fp, n_workers, requests, record_candidates)
    per_rep = bytes_per_replica(shapes)
    if backend == "cuda" and ip[L.P_POA]:  # a GPU's PoA-hat scratch is per replica (a CPU's per thread)
        nf, ni = poa_hat.sizes(requests, int(ip[L.P_POA_WIN]), int(ip[L.P_POA_K]), int(ip[L.P_POA_SLOTS]))
        per_rep += 8 * (nf + ni)
    budget = max_batch_bytes if max_batch_bytes is not None else _available_memory() // 2
    if backend == "cuda":
        from poa_mc.kernels import cuda as target

        budget = min(budget, target.free_memory() // 2) if max_batch_bytes is None else budget
    else:
        from poa_mc.kernels import cpu as target
    if per_rep > budget:
        raise EngineError(
            f"one replica needs {per_rep / 2**20:.1f} MiB of state, more than the "
            f"{budget / 2**20:.1f} MiB available; reduce requests or cluster.max_inflight"
        )
    kept = requests if keep is None else max(0, min(int(keep), requests))
    streaming = reduce is not None or kept < requests
    if streaming:  # one batch's per-request arrays at a time, reduced as it leaves the kernels
        # the kernels' arrays of a batch, and as much again for what its reduction computes
        per_rep_streamed = per_rep + 2 * requests * result_bytes_per_request(n_workers, record_candidates)
        # a GPU needs tens of thousands of replicas per launch to be busy: its batches may take an
        # eighth of the host's memory (the batch is reduced on the host)
        cap = STREAM_BATCH_BYTES if backend == "cpu" else max(STREAM_BATCH_BYTES, _available_memory() // 8)
        batch = max(1, min(replicas, budget // per_rep, cap // per_rep_streamed))
    else:
        batch = max(1, min(replicas, budget // per_rep))
    n_batches = -(-replicas // batch)
    if n_batches > 1 and not streaming:
        _log.warning(
            "%d replicas x %.1f MiB exceed the %.0f MiB memory budget: running them in %d batches of %d "
            "(results are the same as in one batch)",
            replicas, per_rep / 2**20, budget / 2**20, n_batches, batch,
        )  # fmt: skip
    # the kept samples: one block per dtype, a field per row (_scatter_fields fills them)
    f_names = [*SAMPLE_FLOAT_FIELDS, *(["decode_decided_ms"] if record_candidates else [])]
    f_src = np.array([*_OF, *([L.OF_DDEC] if record_candidates else [])], dtype=np.int64)
    i_names = [n for n in SAMPLE_INT_FIELDS if n != "seq"] + (["chosen", *_ADDED] if record_candidates else [])
    i_src = np.array(
        [oi for n, oi in zip(SAMPLE_INT_FIELDS, _OI) if n != "seq"]
        + ([L.OI_CHOSEN, *_ADDED.values()] if record_candidates else []),
        dtype=np.int64,
    )
    f_block = np.empty((len(f_names), replicas, kept))
    i_block = np.empty((len(i_names), replicas, kept), dtype=np.int32)
    by_name = {**dict(zip(f_names, f_block)), **dict(zip(i_names, i_block))}
    by_name["seq"] = np.empty((replicas, kept), dtype=np.int64)
    samples = {name: by_name[name] for name in (*SAMPLE_FLOAT_FIELDS, *SAMPLE_INT_FIELDS)}
    cands = {}
    if record_candidates:
        cands = {
            "cand_tokens": np.empty((replicas, kept, n_workers)),
            "cand_blocks": np.empty((replicas, kept, n_workers)),
            **{name: by_name[name] for name in ("chosen", *_ADDED, "decode_decided_ms")},
        }
    rep: dict[str, np.ndarray] = {}
    n_log = int(ip[L.P_CTL_LOG])
    n_moves = int(ip[L.P_PL_LOG]) if ip[L.P_PLAN] else 0
    # with the kernels' tallies the host reads of a batch's request rows only the kept samples and
    # what PoA-hat and the conservation count read: on a GPU only those come back (poa_mc/kernels/cuda.py)
    wanted = _wanted_rows(kept, bool(ip[L.P_POA])) if tallied else None
    logs: dict[str, np.ndarray] = {}
    parts = []
    compile_s = 0.0
    wall = 0.0
    # a batch is reduced on a thread of its own while the next one simulates: the reduction's
    # serial numpy stretches, and the copies of the kept samples, leave a core the kernels then use
    # (bench/NOTES.md). One batch at a time, in batch order, so at most two batches' arrays are
    # alive and results are unchanged
    reducer = threads.pool("reduce", 1) if reduce else None
    reducing: Future | None = None

    def keep_samples(of: np.ndarray, oi: np.ndarray, cols: dict[str, np.ndarray], r0: int) -> None:
        if not kept:
            return
        _scatter_fields(of, f_src, f_block, r0, kept)
        _scatter_fields(oi, i_src, i_block, r0, kept)
        samples["seq"][r0 : r0 + len(cols["seq"])] = cols["seq"][:, :kept]
        for name in ("cand_tokens", "cand_blocks") if record_candidates else ():
            cands[name][r0 : r0 + len(cols[name])] = cols[name][:, :kept]

    def keep_and_reduce(of, oi, cols, rep_b, logs_b, r0: int) -> dict[str, np.ndarray]:
        keep_samples(of, oi, cols, r0)
        # the reduction reads whole fields: each field's column gathered from the request rows,
        # one at a time, read the batch's outputs once per field (a third of the reduction's time
        # without PoA-hat, bench/NOTES.md); here every row is read once, its fields to contiguous
        # arrays of the same dtype and values
        nr, n = of.shape[0], of.shape[1]
        if kept == n:  # keep_samples just gathered them into the kept samples' blocks
            dense = {**dict(zip(f_names, f_block[:, r0 : r0 + nr])), **dict(zip(i_names, i_block[:, r0 : r0 + nr]))}
        else:  # with the kernels' tallies, only PoA-hat's fields (the others stay views of the rows),
            # and none where the kernels worked PoA-hat out too
            dense = {}
            solved = "poa_kernel" in cols and not np.isnan(cols["poa_kernel"][:, 1]).any()
            for names, src, rows, dtype in ((f_names, f_src, of, np.float64), (i_names, i_src, oi, np.int32)):
                pick = [j for j, name in enumerate(names) if not tallied or (name in POA_HAT_FIELDS and not solved)]
                block = np.empty((len(pick), nr, n), dtype=dtype)
                _scatter_fields(rows, src[pick], block, 0, n)
                dense.update(zip([names[j] for j in pick], block))
        return reduce({**cols, **dense}, rep_b, logs_b)

    try:
        for b in range(n_batches):
            r0 = b * batch
            nr = min(batch, replicas - r0)
            ipb = ip.copy()
            ipb[L.P_RBASE] = r0
            t0 = time.perf_counter()
            out, csec = target.run_batch(
                ipb, fp, tabs, sketch.EDGES, shapes, nr, parallel=parallel, wanted=wanted, step=step
            )
            wall += time.perf_counter() - t0 - csec
            compile_s += csec
            cols = _batch_columns(out, ip, spec, record_candidates)
            if tallied:
                cols.update(tally_f=out["tally_f"], tally_h=out["tally_h"], tally_slo=fp[[L.F_SLO_TTFT, L.F_SLO_ITL]])
            if ip[L.P_POA]:
                cols.update(poa_kernel=out["poa"], poa_settings=poa_plan.settings(poa))
            rep_b = _batch_replica(out, ip)
            logs_b = _batch_logs(out, ip, n_log, n_moves)
            if reducer is None:
                keep_samples(out["out_f"], out["out_i"], cols, r0)
            for name, arr in rep_b.items():
                rep.setdefault(name, np.empty(replicas, dtype=arr.dtype))[r0 : r0 + nr] = arr
            for name, arr in logs_b.items():
                logs.setdefault(name, np.empty((replicas, *arr.shape[1:])))[r0 : r0 + nr] = arr
            if reducer is not None:
                if reducing is not None:
                    parts.append(reducing.result())
                elif after is not None:
                    wait([after])  # an earlier call's: its error is its own caller's to raise
                # the outputs only: the batch's state arrays are let go now
                reducing = reducer.submit(keep_and_reduce, out["out_f"], out["out_i"], cols, rep_b, logs_b, r0)
            del out, cols
        if reducing is not None and not overlap:
            parts.append(reducing.result())
            reducing = None
    except BaseException:
        if reducing is not None:
            reducing.cancel()  # an error or Ctrl-C: a reduction not started yet is not wanted
        raise
    bad = np.flatnonzero(rep["status"] != 0)
    if bad.size:
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
        raise EngineError(f"{bad.size} of {replicas} replicas failed: {why}", key="load" if code == 1 else None)
    # seq order (arrival order) is the row order already: rows are indexed by seq - warmup
    res = SimResult(
        samples=samples,
        candidates=cands,
        replica=rep,
        wall_s=wall,
        compile_s=compile_s,
        backend=backend,
        device=target.device_name(),
        batches=n_batches,
        state_bytes_per_replica=bytes_per_replica(shapes, L.STATE_NAMES),
        extra=logs,
        acc={} if reducing is not None else _joined(parts),
        pending=reducing,
        reduced_at=None if reducing is not None else time.perf_counter(),
        _parts=parts if reducing is not None else [],
    )
    if reducing is not None:  # stamped as the reduction ends (on the reducer's thread, or here if it has)
        reducing.add_done_callback(lambda _: setattr(res, "reduced_at", time.perf_counter()))
    return res


def _batch_columns(out: dict[str, np.ndarray], ip: np.ndarray, spec: CellSpec, record: bool) -> dict[str, np.ndarray]:
    """A batch's per-request outputs by name (views of the kernels' arrays): the samples, then,
    when recorded, the router's candidates (see the module docstring)."""
    of, oi = out["out_f"], out["out_i"]
    cols = {name: of[:, :, j] for name, j in zip(SAMPLE_FLOAT_FIELDS, _OF)}
    cols.update({name: oi[:, :, j] for name, j in zip(SAMPLE_INT_FIELDS, _OI)})
    cols["seq"] = cols["seq"].astype(np.int64)
    if record:
        tok, blk = out["cand"][:, :, :, 0], out["cand"][:, :, :, 1]
        if spec.cluster.flow != "prefill_first":  # no prefill decision: its columns are unused
            tok, blk = tok.copy(), blk.copy()
            tok[:, :, : int(ip[L.P_NP])] = np.nan
            blk[:, :, : int(ip[L.P_NP])] = np.nan
        cols.update(cand_tokens=tok, cand_blocks=blk, chosen=oi[:, :, L.OI_CHOSEN])
        cols.update({name: oi[:, :, j] for name, j in _ADDED.items()})
        cols["decode_decided_ms"] = of[:, :, L.OF_DDEC]
    return cols


@numba.njit(cache=True, nogil=True)
def _scatter_fields(
    src: np.ndarray, fields: np.ndarray, dst: np.ndarray, r0: int, kept: int
) -> None:  # pragma: no cover
    """dst[j, r0 + r, i] = src[r, i, fields[j]] for a batch's replicas r and their first `kept`
    requests i: the kernels' request rows (a request's fields side by side) to one array per
    field, each row read once. A numpy copy per field read the whole batch once per field, and
    was most of the host's time with every sample kept (bench/NOTES.md)."""
    for r in range(src.shape[0]):
        for i in range(kept):
            for j in range(fields.shape[0]):
                dst[j, r0 + r, i] = src[r, i, fields[j]]


def _wanted_rows(kept: int, poa_in_kernels: bool = False) -> dict:
    """What a tallied batch's reduction and kept samples read of its request rows and candidates
    (the kernels' run_batch `wanted`): every field of the first `kept` requests, the written flag
    _batch_replica counts of all of them, and PoA-hat's fields and candidates of all of them,
    unless the kernels work PoA-hat out (then only where they leave a replica to the host: its
    "fallback"). A PoA-hat field of neither kind raises KeyError here rather than reading as NaN
    from a GPU run."""
    floats = {**dict(zip(SAMPLE_FLOAT_FIELDS, _OF)), "decode_decided_ms": L.OF_DDEC}
    ints = {**dict(zip(SAMPLE_INT_FIELDS, _OI)), **_ADDED}
    out_f, out_i = set(), set()
    for name in POA_HAT_FIELDS:
        if name in floats:
            out_f.add(floats[name])
        else:
            out_i.add(ints[name])
    poa = {"out_f": out_f, "out_i": out_i, "cand": True}
    if poa_in_kernels:
        return {"rows": kept, "out_f": set(), "out_i": {L.OI_DONE}, "cand": False, "fallback": poa}
    return {"rows": kept, "out_f": out_f, "out_i": out_i | {L.OI_DONE}, "cand": True}


def _batch_replica(out: dict[str, np.ndarray], ip: np.ndarray) -> dict[str, np.ndarray]:
    """SimResult.replica's arrays of one batch (see the module docstring)."""
    ri, rf, oi = out["rep_i"], out["rep_f"], out["out_i"]
    nr = ri.shape[0]
    rep = {
        "window_ms": rf[:, L.RF_LAST_DONE] - rf[:, L.RF_FIRST_ARR],
        "simulated": ri[:, L.RI_SEQ].copy(),
        "events": ri[:, L.RI_EVENTS].copy(),
        "status": ri[:, L.RI_STATUS].copy(),
        "preemptions": ri[:, L.RI_PREEMPT].copy(),
        "ring_merges": ri[:, L.RI_MERGES].copy(),
        "written": oi[:, :, L.OI_DONE].sum(axis=1).astype(np.int64),
        "sim_ms": rf[:, L.RF_T].copy(),
        "switches": ri[:, L.RI_SWITCHES].copy(),
        "planner_moves": ri[:, L.RI_PL_MOVES].copy(),
    }
    # time in each regime: the closed ones, plus the current one up to the end
    regt = rf[:, L.RF_REGT : L.RF_REGT + 3].copy()
    if ip[L.P_CTL]:
        regt[np.arange(nr), ri[:, L.RI_REGIME]] += rf[:, L.RF_T] - rf[:, L.RF_LASTSW]
    else:
        regt[:, 0] = rf[:, L.RF_T]  # a fixed policy stays in its one setting
    rep.update({f"regime_ms_{name}": regt[:, i] for i, name in enumerate(REGIMES)})
    rep.update({name: rf[:, j].copy() for name, j in _INTEGRALS.items()})
    rep["measured_ms"] = rf[:, L.RF_T] - rf[:, L.RF_FIRST_ARR]
    # requests in flight x time over measured_ms: the kernels' integral, closed at the end
    rep["inflight_ms"] = rf[:, L.RF_INFL] + ri[:, L.RI_INFLIGHT] * (rf[:, L.RF_T] - rf[:, L.RF_INFL_T])
    # completions between the first and the last measured arrival (the open loop's throughput)
    rep["done_in_window"] = ri[:, L.RI_DONE_WIN].copy()
    return rep


def _batch_logs(out: dict[str, np.ndarray], ip: np.ndarray, n_log: int, n_moves: int) -> dict[str, np.ndarray]:
    """The controller's switch log and the planner's move log of one batch, NaN past the last."""
    ri, rf = out["rep_i"], out["rep_f"]
    nr = ri.shape[0]
    logs = {}
    for key, count, at, n in (
        ("switch_log", L.RI_SWITCHES, L.NRF + 2 * int(ip[L.P_CTL_WIN]), n_log),
        ("move_log", L.RI_PL_MOVES, L.NRF + 2 * int(ip[L.P_CTL_WIN]) + 3 * n_log, n_moves),
    ):
        if n:
            logged = rf[:, at : at + 3 * n].reshape(nr, n, 3)
            kept = np.arange(n)[None, :] < ri[:, count][:, None]
            logs[key] = np.where(kept[:, :, None], logged, np.nan)
    return logs


def default_threads() -> int:
    return int(os.environ.get("NUMBA_NUM_THREADS", os.cpu_count() or 1))
