"""A cell packed into the kernels' parameter arrays: CellSpec -> (ip, fp, tabs), the integer and
float parameters and the lookup tables (length distributions, prefix popularity, a replayed trace)
that the kernels read at the slots poa_mc/kernels/layout.py names.

The kernels take flat arrays, not Python objects: every setting of a cell becomes a slot here, and
the id tables below (_FLOW, _POLICY, _DIST, _PROF) turn the spec's names into the kernels' ids, so
a new setting is packed in this one place. Also the quantities packing derives from a spec and
others share: the pools' sizes (pool_sizes), the routing candidates (n_candidates), the Zipf table,
rep_f's length before the links' clocks (_rep_f_base) and the controller's unit, the baseline TTFT.
"""

from __future__ import annotations

import math

import numpy as np

from poa_mc.kernels import layout as L
from poa_mc.model.profiles import decode_ms, pack_profile, prefill_ms
from poa_mc.model.replay import table_for
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_policy import PICKERS
from poa_mc.model.spec_workload import Dist

_FLOW = {"prefill_first": L.FLOW_PREFILL_FIRST, "decode_first": L.FLOW_DECODE_FIRST, "aggregated": L.FLOW_AGGREGATED}
_POLICY = L.POLICY_ID  # `[[policy]] kind` -> the kernels' id (one table: poa_mc/kernels/layout.py)
_DIST = {"fixed": L.DIST_FIXED, "uniform": L.DIST_UNIFORM, "lognormal": L.DIST_LOGNORMAL, "empirical": L.DIST_EMPIRICAL}
# an aic profile is pass-timed like the polynomial; fp[F_TAB] tells the kernels to read its table
_PROF = L.PROFILE_ID  # `[profile] kind` -> the kernels' id (one table: poa_mc/kernels/layout.py)


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
    ip[L.P_ARRIVAL] = {"closed": 0, "poisson": 1, "constant": L.ARRIVAL_CONSTANT}[w.arrival]
    ip[L.P_C] = w.concurrency if w.arrival == "closed" else 0
    ip[L.P_G] = w.prefix_groups
    ip[L.P_POP] = 1 if w.popularity == "zipf" else 0
    ik, ia, ib, imu, isig, itab = _dist_params(w.isl)
    ok, oa, ob, omu, osig, otab = _dist_params(w.osl)
    ip[L.P_ISL_KIND], ip[L.P_ISL_A], ip[L.P_ISL_B] = ik, ia, ib
    ip[L.P_OSL_KIND], ip[L.P_OSL_A], ip[L.P_OSL_B] = ok, oa, ob
    ip[L.P_N] = requests
    if w.schedule:  # poa_mc/kernels/schedule.py
        ends = w.stage_ends()
        if ends[-1] != requests:
            raise ValueError(f"the schedule's stages hold {ends[-1]} requests, the cell is packed for {requests}")
        ip[L.P_NSTAGE] = len(w.schedule)
        for k, (st, end) in enumerate(zip(w.schedule, ends)):
            ip[L.P_STAGE_END + k] = end
            if w.arrival == "closed":
                ip[L.P_STAGE_C + k] = int(st.load)
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
    fp[L.F_LLMD_WP] = pol.prefix_weight
    fp[L.F_LLMD_WK] = pol.kv_util_weight
    fp[L.F_LLMD_WQ] = pol.queue_weight
    ip[L.P_LLMD_PICK] = PICKERS.index(pol.picker)
    fp[L.F_SGL_CACHE] = pol.cache_threshold
    fp[L.F_SGL_ABS] = pol.balance_abs_threshold
    fp[L.F_SGL_REL] = pol.balance_rel_threshold
    fp[L.F_TAU] = pol.temperature
    fp[L.F_THINK] = w.think_ms
    fp[L.F_RATE] = w.rate_rps / 1000.0
    if w.arrival != "closed":  # the kernels read every gap's rate here (poa_mc/kernels/schedule.py)
        for k, rate in enumerate([st.load for st in w.schedule] or [w.rate_rps]):
            fp[L.F_STAGE_RATE + k] = rate / 1000.0
    # prefix_tokens: the whole prompt, capped at that many tokens (poa_mc/kernels/requests.py)
    fp[L.F_RATIO] = 1.0 if w.prefix_tokens > 0 else w.prefix_ratio
    fp[L.F_PTOK] = float(w.prefix_tokens) if w.prefix_tokens > 0 else 1e300
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


def _batch_scratch(ip: np.ndarray) -> int:
    """Floats of the batch router's work arrays in rep_f (poa_mc/kernels/batch.py)."""
    n = int(ip[L.P_BATCH_N])
    return (n + 1) + 5 * (int(ip[L.P_ND]) * n + 1) if n else 0


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
    hit = math.floor(w.prefix_of(isl)) // bs
    if c.recompute_last_block:
        hit = min(hit, max(math.ceil(isl) - 1, 0) // bs)
    uncached = max(isl - hit * bs, 0.0)
    prefill = prefill_ms(p, uncached) + p.prefill_host_pass_ms + p.prefill_host_request_ms
    xfer = c.transfer_latency_ms
    if c.transfer_gbps > 0 and c.kv_bytes_per_token > 0 and c.flow != "aggregated":
        xfer += uncached * c.kv_bytes_per_token / (c.transfer_gbps * 1e9) * 1e3
    return float(prefill + xfer + decode_ms(p, 0.0, c.decode_kv_blocks, bs))
