"""The per-replica event loop of one disaggregated cluster (layout in layout.py).

One call of `simulate_replica(r, ...)` runs replica r from t = 0 until its measured requests
have all completed. Time is in milliseconds (float64). Each instant is processed in Dynamo's
mocker order: prefill passes that end now (their requests are handed to decode queues), then
decode passes that end now, then arrivals (routing), then new passes on idle prefill workers,
then on idle decode workers.

Decode runs in segments: with a fixed running set of n sequences whose summed context is X0 at
the segment's first step, step j sees context X0 + n*j, so the time of k steps is a sum of a
quadratic in j with a closed form (kernels/timing.py: `decode_span`, which also sums an aic
table's piecewise-linear steps). A segment lasts until the next completion;
a request that becomes ready on a busy decode worker cuts the segment at the first step boundary
at or after its ready time (a binary search over k), so it joins the next pass, exactly as step-
by-step simulation would. With ip[P_NAIVE] = 1 every segment is one step, timed step by step:
the reference the closed form is tested against.
"""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    DADMIT_REPLAY,
    DIST_FIXED,
    DIST_LOGNORMAL,
    DIST_UNIFORM,
    F_EVDELAY,
    F_ISL_MU,
    F_ISL_SIG,
    F_OSL_MU,
    F_OSL_SIG,
    F_OVH_PASS,
    F_OVH_REQ,
    F_RATIO,
    F_SVC,
    F_THINK,
    F_XFER_LAT,
    F_XFER_TOK,
    FLOW_AGGREGATED,
    FLOW_PREFILL_FIRST,
    GHOST_NONE,
    OF_ARR,
    OF_DDEC,
    OF_DWAIT,
    OF_E2E,
    OF_ITL,
    OF_ONB,
    OF_PWAIT,
    OF_TTFT,
    OI_CACHED,
    OI_CHOSEN,
    OI_DADD_B,
    OI_DADD_T,
    OI_DONE,
    OI_DW,
    OI_GRP,
    OI_H2,
    OI_H3,
    OI_H4,
    OI_ISL,
    OI_OSL,
    OI_PADD_B,
    OI_PADD_T,
    OI_PBLK,
    OI_PW,
    OI_SEQ,
    P_ARRIVAL,
    P_B,
    P_BUDGET,
    P_CTL,
    P_D,
    P_DADMIT,
    P_DEDUP,
    P_DKV,
    P_FLOW,
    P_G,
    P_ISL_A,
    P_ISL_B,
    P_ISL_KIND,
    P_MAXLOCAL,
    P_MAXSEQ,
    P_N,
    P_NAIVE,
    P_ND,
    P_NP,
    P_OSL_A,
    P_OSL_B,
    P_OSL_KIND,
    P_PLAN,
    P_POLICY,
    P_POP,
    P_PROF,
    P_PSHARE,
    P_Q,
    P_RECLAST,
    P_RECORD,
    P_TG,
    P_TRACE,
    P_WARM,
    POL_BATCH,
    POL_KV,
    POL_ORACLE,
    POL_PULL,
    PROF_DET,
    PROF_EXP,
    PROF_POLY,
    RESV_ADMIT,
    RESV_HELD,
    RESV_PENDING,
    RF_FIRST_ARR,
    RF_INFL,
    RF_INFL_T,
    RF_LAST_DONE,
    RF_OMEGA,
    RF_TAU,
    RI_ADMSEQ,
    RI_DECIDE,
    RI_DONE_MEAS,
    RI_FREE_TOP,
    RI_INFLIGHT,
    RI_NDA,
    RI_NPA,
    RI_PREEMPT,
    RI_PWAKE,
    RI_SEQ,
    RI_STATUS,
    RNG_F_GRP,
    RNG_F_ISL,
    RNG_F_OSL,
    RNG_F_SVC,
    RNG_F_THINK,
    SF_ADM,
    SF_ARR,
    SF_FIRST,
    SF_ONB,
    SF_READY,
    SF_SVC,
    SF_TPF,
    SF_TWAIT,
    SI_ABP,
    SI_ADMIT,
    SI_ADMSEQ,
    SI_APT,
    SI_CACHED,
    SI_CHUNK,
    SI_CLIENT,
    SI_DONE,
    SI_DW,
    SI_FRESH,
    SI_GEN,
    SI_GHOST,
    SI_GRP,
    SI_H2,
    SI_H3,
    SI_H4,
    SI_ISL,
    SI_KCOUNT,
    SI_MEAS,
    SI_NEED,
    SI_NEXTB,
    SI_OSL,
    SI_PFX,
    SI_PW,
    SI_RECOMP,
    SI_RESERVE,
    SI_RESV,
    SI_SEQ,
    SI_STATE,
    ST_DECODE_Q,
    ST_FREE,
    ST_PREFILL,
    ST_RUNNING,
    STATUS_OVERCAP,
    TB_GRP,
    TB_ISL,
    TB_OSL,
    TB_PFX,
    TRACE_CLOSED,
    TRACE_NONE,
    WF_BUSY,
    WF_HELD0,
    WF_T0,
    WF_WAKE,
    WI_APT,
    WI_FREE,
    WI_MIXED,
    WI_NRUN,
    WI_PASS_K,
    WI_QH,
    WI_QN,
    WI_SEG_M,
    WI_SEG_N,
    WI_SEG_X0,
    WI_USED,
)

INF = math.inf
NAN = math.nan
_ORACLE_B0 = 200  # random sub-stream of the oracle's tie-breaks (router.py uses 100 + i)


def build(jit, rng, cache, router, heap, controller, planner, timing, replay, jit_inline=None):
    trace_on = replay.enabled  # a compile-time constant: False in the lean build (source.build)
    replay_take_row = replay.take_row
    jit_inline = jit_inline or jit
    prefill_span = timing.prefill_span
    pass_prefill_ms = timing.pass_prefill_ms
    step_ms = timing.step_ms
    decode_span = timing.decode_span
    rng_below = rng.below
    rng_client_request_id = rng.client_request_id
    rng_exponential = rng.exponential
    rng_normal = rng.normal
    cache_acquire = cache.acquire
    cache_overlap = cache.overlap
    cache_seen_overlap = cache.seen_overlap
    cache_deliver = cache.deliver
    cache_release = cache.release
    cache_fits = cache.fits
    cache_acquire_need = cache.acquire_need
    cache_reclaim = cache.reclaim
    cache_grow = cache.grow
    router_cand_blocks = router.cand_blocks
    router_cand_tokens = router.cand_tokens
    router_choose = router.choose
    router_book_active = router.book_active
    router_unbook_active = router.unbook_active
    heap_push = heap.push
    ctl_tick = controller.tick
    ctl_observe = controller.observe
    pl_observe_ttft = planner.observe_ttft
    pl_observe_itl = planner.observe_itl
    uniform = rng.uniform

    # ---------------------------------------------------------------- request attributes
    @jit
    def draw_len(key, a, field, kind, pa, pb, mu, sig, table):
        if kind == DIST_FIXED:
            return pa
        if kind == DIST_UNIFORM:
            return pa + rng_below(key, a, field * 8, pb - pa + 1)
        if kind == DIST_LOGNORMAL:
            x = np.int64(math.floor(math.exp(mu + sig * rng_normal(key, a, field * 8)) + 0.5))
            if x < 1:
                x = 1
            if x > pb:
                x = pb
            return x
        return np.int64(table[rng_below(key, a, field * 8, pb)])

    @jit
    def draw_group(key, a, n_groups, zipf, cdf):
        if not zipf:
            return rng_below(key, a, np.int64(RNG_F_GRP * 8), n_groups)
        u = uniform(key, a, np.int64(RNG_F_GRP * 8))
        lo = 0
        hi = n_groups - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if cdf[mid] > u:
                hi = mid
            else:
                lo = mid + 1
        return lo

    @jit_inline
    def count_in_flight(ip, rep_i, rep_f, r, t, delta):
        """Requests in flight change by delta at t: RF_INFL gains the old count x the time since the
        last change, once the first measured request has arrived (Little's law: throughput is the
        mean in flight over the mean time in flight, poa_mc.reduce)."""
        if rep_i[r, RI_SEQ] > ip[P_WARM]:
            rep_f[r, RF_INFL] += rep_i[r, RI_INFLIGHT] * (t - rep_f[r, RF_INFL_T])
        rep_f[r, RF_INFL_T] = t
        rep_i[r, RI_INFLIGHT] += delta

    @jit_inline
    def cache_row(ip, w):
        """The worker whose prefix cache worker w uses: its own, or worker 0's when the prefill
        workers share one (P_PSHARE: the global LRU of the caching game)."""
        if ip[P_PSHARE] == 1 and w < ip[P_NP]:
            return np.int64(0)
        return w

    # ---------------------------------------------------------------- queues
    @jit
    def q_push(queue, wk_i, r, row, s, qcap):
        n = np.int64(wk_i[r, row, WI_QN])
        queue[r, row, (wk_i[r, row, WI_QH] + n) % qcap] = s
        wk_i[r, row, WI_QN] = n + 1

    @jit
    def q_at(queue, wk_i, r, row, i, qcap):
        return np.int64(queue[r, row, (wk_i[r, row, WI_QH] + i) % qcap])

    @jit_inline
    def q_remove(queue, wk_i, r, row, i, qcap):
        """Remove entry i of the ring (0: the head), keeping the order of the others."""
        h = np.int64(wk_i[r, row, WI_QH])
        n = np.int64(wk_i[r, row, WI_QN])
        if i == 0:
            wk_i[r, row, WI_QH] = (h + 1) % qcap
        else:
            for j in range(i, n - 1):
                queue[r, row, (h + j) % qcap] = queue[r, row, (h + j + 1) % qcap]
        wk_i[r, row, WI_QN] = n - 1

    @jit
    def q_pop(queue, wk_i, r, row, qcap):
        s = np.int64(queue[r, row, wk_i[r, row, WI_QH]])
        wk_i[r, row, WI_QH] = (np.int64(wk_i[r, row, WI_QH]) + 1) % qcap
        wk_i[r, row, WI_QN] -= 1
        return s

    # ---------------------------------------------------------------- prefix hits
    @jit_inline
    def usable_hit(ip, hit, length):
        """Cached blocks a prefill can use: vLLM (and Dynamo's simulator) caps a prefix hit at
        length - 1 tokens in whole blocks, so a fully cached prompt still computes its last block
        (cluster.recompute_last_block; off, the whole cached prefix counts)."""
        if ip[P_RECLAST] == 1:
            top = (length - 1) // ip[P_B]
            if hit > top:
                return top
        return hit

    # ---------------------------------------------------------------- decode workers
    @jit_inline
    def truncate(ip, fp, wk_i, wk_f, r, d, t_ready):
        """Something happens at t_ready on decode worker d (a request becomes ready, or waits for a
        pass boundary): end its segment at the first step boundary at or after t_ready."""
        busy = wk_f[r, d, WF_BUSY]
        if busy == INF:
            if t_ready < wk_f[r, d, WF_WAKE]:
                wk_f[r, d, WF_WAKE] = t_ready
            return
        if np.int64(wk_i[r, d, WI_MIXED]) == 1 or busy <= t_ready:
            return
        t0 = wk_f[r, d, WF_T0]
        x0 = np.int64(wk_i[r, d, WI_SEG_X0])
        n = np.int64(wk_i[r, d, WI_SEG_N])
        cap = np.float64(ip[P_DKV] * ip[P_B])
        lo = 1
        hi = np.int64(wk_i[r, d, WI_SEG_M])
        while lo < hi:
            mid = (lo + hi) // 2
            if t0 + decode_span(fp, x0, n, mid, cap) >= t_ready:
                hi = mid
            else:
                lo = mid + 1
        wk_i[r, d, WI_SEG_M] = lo
        wk_f[r, d, WF_BUSY] = t0 + decode_span(fp, x0, n, lo, cap)

    @jit_inline
    def hand_to_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, queue, r, s, d, t_ready, resv):
        """Queue request s on decode worker d. resv = RESV_PENDING (prefill_first: the worker
        reserves its blocks at its next pass boundary, then the KV transfer starts) or RESV_ADMIT
        (its blocks are taken at admission; ready at t_ready)."""
        slot_i[r, s, SI_DW] = d
        slot_i[r, s, SI_STATE] = ST_DECODE_Q
        slot_i[r, s, SI_RESV] = resv
        slot_f[r, s, SF_READY] = t_ready
        q_push(queue, wk_i, r, d, s, ip[P_Q])
        truncate(ip, fp, wk_i, wk_f, r, d, t_ready)

    @jit_inline
    def set_reserve(slot_i, r, s, own, bs):
        """Request s holds `own` blocks of its own on its decode worker (besides its prefix chain);
        SI_NEXTB caches the output length they reach, so that a pass end finds who grows by a
        compare rather than a division per sequence."""
        slot_i[r, s, SI_RESERVE] = own
        slot_i[r, s, SI_NEXTB] = (np.int64(slot_i[r, s, SI_PFX]) + own) * bs - np.int64(slot_i[r, s, SI_ISL]) + 1

    @jit_inline
    def grow_to(slot_i, r, s, gen, bs):
        """Blocks request s adds so that its steps up to output token `gen` (context isl + gen - 1)
        have them: a block each B tokens past SI_NEXTB. Returns how many."""
        nextb = np.int64(slot_i[r, s, SI_NEXTB])
        if gen <= nextb:
            return np.int64(0)
        more = np.int64(0)
        while gen > nextb:
            nextb += bs
            more += 1
        slot_i[r, s, SI_RESERVE] += more
        slot_i[r, s, SI_NEXTB] = nextb
        return more

    @jit_inline
    def held_blocks(slot_i, r, s):
        """Blocks request s holds on its decode worker: its share of its group's prefix chain
        (every flow shares it: Dynamo's replay pins a transfer's resident prefix blocks when it
        reserves) and its own blocks."""
        return np.int64(slot_i[r, s, SI_PFX]) + np.int64(slot_i[r, s, SI_RESERVE])

    @jit_inline
    def step_extra(ip, slot_i, run, r, d, nrun, bs, j):
        """Blocks the decoding sequences of d add by their j-th next step (0: the next one): step
        k of a request computes context isl + k - 1, so it needs ceil((isl + gen + j) / B) blocks."""
        extra = np.int64(0)
        for i in range(nrun):
            s = np.int64(run[r, d, i])
            if np.int64(slot_i[r, s, SI_DONE]) == np.int64(slot_i[r, s, SI_NEED]):
                ctx = np.int64(slot_i[r, s, SI_ISL]) + np.int64(slot_i[r, s, SI_GEN]) + j
                held = held_blocks(slot_i, r, s)
                if ctx > held * bs:
                    extra += (ctx + bs - 1) // bs - held
        return extra

    @jit_inline
    def fits_with_spare(ip, slot_i, wk_i, run, r, d, need, nspare):
        """`need` more blocks fit on d while the next step of its first `nspare` running requests
        still gets its blocks. Each of those adds at most one block per step, so the exact sum
        (a scan of the running set) is only needed between the two bounds."""
        avail = ip[P_DKV] - np.int64(wk_i[r, d, WI_USED]) + np.int64(wk_i[r, d, WI_FREE])
        if need + nspare <= avail:
            return True
        if need > avail:
            return False
        return need + step_extra(ip, slot_i, run, r, d, nspare, ip[P_B], np.int64(0)) <= avail

    @jit_inline
    def computed_tokens(slot_i, r, s):
        """Tokens whose KV request s has computed on its worker (the last sampled token is not)."""
        if np.int64(slot_i[r, s, SI_DONE]) < np.int64(slot_i[r, s, SI_NEED]):
            return (
                np.int64(slot_i[r, s, SI_ISL])
                + np.int64(slot_i[r, s, SI_RECOMP])
                - np.int64(slot_i[r, s, SI_NEED])
                + np.int64(slot_i[r, s, SI_DONE])
            )
        gen = np.int64(slot_i[r, s, SI_GEN])
        return np.int64(slot_i[r, s, SI_ISL]) + (gen - 1 if gen > 1 else 0)

    @jit_inline
    def kept_blocks(ip, slot_i, r, s, computed, bs):
        """Of a request's own blocks, the full computed ones that stay cached when it lets go."""
        keep = computed // bs - np.int64(slot_i[r, s, SI_PFX])
        if keep < 0:
            keep = 0
        if keep > np.int64(slot_i[r, s, SI_RESERVE]):
            keep = np.int64(slot_i[r, s, SI_RESERVE])
        return keep

    @jit
    def fit_next_step(ip, slot_i, wk_i, pc, queue, run, rep_i, r, d):
        """Preempt the newest running request of d until the running set's next step gets its
        blocks. True if any was preempted. (Out of line: rare, and the event loop stays small.)"""
        preempted = False
        nrun = np.int64(wk_i[r, d, WI_NRUN])
        extra = step_extra(ip, slot_i, run, r, d, nrun, ip[P_B], np.int64(0))
        while extra > 0 and not cache_fits(wk_i, r, d, ip[P_DKV], extra):
            newest = 0
            for i in range(1, nrun):
                if np.int64(slot_i[r, run[r, d, i], SI_ADMSEQ]) > np.int64(slot_i[r, run[r, d, newest], SI_ADMSEQ]):
                    newest = i
            preempt(ip, slot_i, wk_i, pc, queue, run, rep_i, r, d, newest)
            preempted = True
            nrun -= 1
            extra = step_extra(ip, slot_i, run, r, d, nrun, ip[P_B], np.int64(0))
        return preempted

    @jit
    def preempt(ip, slot_i, wk_i, pc, queue, run, rep_i, r, d, i):
        """vLLM's recompute preemption of running[i]: its full computed blocks stay cached (a run it
        may hit again), the rest are freed, and it goes back to the front of the waiting queue to
        recompute its prompt and the output it has so far."""
        bs = ip[P_B]
        s = np.int64(run[r, d, i])
        last = np.int64(wk_i[r, d, WI_NRUN]) - 1
        run[r, d, i] = run[r, d, last]
        wk_i[r, d, WI_NRUN] = last
        keep = kept_blocks(ip, slot_i, r, s, computed_tokens(slot_i, r, s), bs)
        g = np.int64(slot_i[r, s, SI_GRP])
        pos = cache_release(
            pc, wk_i, rep_i, r, d, g, np.int64(slot_i[r, s, SI_PFX]), np.int64(slot_i[r, s, SI_RESERVE]), keep, s,
            ip[P_G],
        )  # fmt: skip
        slot_i[r, s, SI_GHOST] = pos if pos >= 0 else np.int64(GHOST_NONE)
        slot_i[r, s, SI_RESERVE] = 0
        slot_i[r, s, SI_RECOMP] = slot_i[r, s, SI_GEN]
        slot_i[r, s, SI_CHUNK] = 0
        slot_i[r, s, SI_STATE] = ST_DECODE_Q
        slot_i[r, s, SI_RESV] = RESV_ADMIT
        # front of the waiting queue (vLLM's prepend): step the head back one place
        qcap = ip[P_Q]
        h = (np.int64(wk_i[r, d, WI_QH]) + qcap - 1) % qcap
        queue[r, d, h] = s
        wk_i[r, d, WI_QH] = h
        wk_i[r, d, WI_QN] += 1
        rep_i[r, RI_PREEMPT] += 1

    @jit_inline
    def reserve(ip, fp, slot_i, slot_f, wk_i, pc, ev, queue, run, rep_i, r, d, t, nspare):
        """prefill_first, at a pass boundary of decode worker d: reserve the prompt blocks of the
        oldest transfer waiting for them (its resident prefix shared), if they fit in the free and
        evictable blocks (with room for the next step of the first `nspare` running requests) and
        fewer than max_seqs requests run; its KV transfer
        starts now. As in
        Dynamo's replay, one reservation per boundary, except that a reservation whose transfer
        takes no time is activated at once, which lets the next one reserve at the same instant.
        Returns (earliest ready time among those reserved, 1 if a later transfer still waits for
        a boundary to reserve at, 0 otherwise)."""
        qcap = ip[P_Q]
        bs = ip[P_B]
        first_ready = INF
        for i in range(np.int64(wk_i[r, d, WI_QN])):
            s = q_at(queue, wk_i, r, d, np.int64(i), qcap)
            if np.int64(slot_i[r, s, SI_RESV]) != RESV_PENDING:
                continue
            if first_ready < INF and first_ready > t:
                return first_ready, np.int64(1)
            if np.int64(wk_i[r, d, WI_NRUN]) >= ip[P_MAXSEQ]:
                break
            isl = np.int64(slot_i[r, s, SI_ISL])
            pfx = np.int64(slot_i[r, s, SI_PFX])
            pblk = (isl + bs - 1) // bs
            g = np.int64(slot_i[r, s, SI_GRP])
            if not fits_with_spare(
                ip, slot_i, wk_i, run, r, d, cache_acquire_need(pc, r, d, g, pfx, pblk - pfx), nspare
            ):
                break
            if cache_acquire(pc, wk_i, rep_i, ev, fp[F_EVDELAY], t, r, d, g, pfx, pblk - pfx, ip[P_G], ip[P_DKV]) < 0:
                break
            set_reserve(slot_i, r, s, pblk - pfx, bs)
            slot_i[r, s, SI_RESV] = RESV_HELD
            ready = t
            if fp[F_XFER_TOK] > 0.0 or fp[F_XFER_LAT] > 0.0:
                ready = t + fp[F_XFER_LAT] + fp[F_XFER_TOK] * isl
            slot_f[r, s, SF_READY] = ready
            if ready < first_ready:
                first_ready = ready
        return first_ready, np.int64(0)

    @jit
    def admit(ip, fp, slot_i, wk_i, pc, ev, run, rep_i, r, d, s, t, nspare):
        """Take the blocks of request s at admission (vLLM's test: the blocks it needs beyond those
        running requests already pin must fit in the free and evictable ones, with room for the next
        step of the first `nspare` running requests). A
        preempted request hits what is left of its own blocks. False if they do not fit."""
        bs = ip[P_B]
        ng = ip[P_G]
        isl = np.int64(slot_i[r, s, SI_ISL])
        recomp = np.int64(slot_i[r, s, SI_RECOMP])
        length = isl + recomp
        total = (length + bs - 1) // bs
        pfx = np.int64(slot_i[r, s, SI_PFX])
        g = np.int64(slot_i[r, s, SI_GRP])
        if not fits_with_spare(ip, slot_i, wk_i, run, r, d, cache_acquire_need(pc, r, d, g, pfx, total - pfx), nspare):
            return False
        preempted = np.int64(slot_i[r, s, SI_GHOST]) != -1
        own = np.int64(0)
        if preempted:
            usable = cache_overlap(pc, r, d, g, pfx) == pfx
            own = cache_reclaim(pc, wk_i, r, d, ng, np.int64(slot_i[r, s, SI_GHOST]), s, usable)
            slot_i[r, s, SI_GHOST] = -1
        hit = cache_acquire(pc, wk_i, rep_i, ev, fp[F_EVDELAY], t, r, d, g, pfx, total - pfx - own, ng, ip[P_DKV])
        if hit < 0:
            rep_i[r, RI_STATUS] = STATUS_OVERCAP  # the test above said it fits
            return False
        set_reserve(slot_i, r, s, total - pfx, bs)
        if preempted:
            cached = hit + (own if hit == pfx else 0)
            top = (length - 1) // bs  # vLLM recomputes at least the last token
            if cached > top:
                cached = top
            slot_i[r, s, SI_NEED] = length - cached * bs
            slot_i[r, s, SI_DONE] = 0
        elif ip[P_FLOW] == FLOW_AGGREGATED:
            # an aggregated worker looks the prefix up when it admits the request, not when routed
            hit = usable_hit(ip, hit, isl)
            slot_i[r, s, SI_CACHED] = hit
            slot_i[r, s, SI_NEED] = isl - hit * bs
        return True

    @jit_inline
    def start_running(slot_i, slot_f, wk_i, queue, run, rep_i, r, d, i, s, t, qcap):
        q_remove(queue, wk_i, r, d, i, qcap)
        slot_i[r, s, SI_STATE] = ST_RUNNING
        slot_i[r, s, SI_ADMSEQ] = rep_i[r, RI_ADMSEQ]
        rep_i[r, RI_ADMSEQ] += 1
        slot_f[r, s, SF_ADM] = t
        if np.int64(slot_i[r, s, SI_DONE]) < np.int64(slot_i[r, s, SI_NEED]) and slot_f[r, s, SF_TPF] < 0.0:
            slot_f[r, s, SF_TPF] = t
        run[r, d, wk_i[r, d, WI_NRUN]] = s
        wk_i[r, d, WI_NRUN] += 1

    @jit_inline
    def admit_queue(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, r, d, t, nspare):
        """Admission of waiting requests while sequence slots last (never in a pass that
        preempted). The waiting requests are the queue in order, preempted ones at its front;
        reserved transfers still under way are not waiting yet. A transfer whose KV has arrived
        owns its blocks; the others (preempted requests; every request in decode_first and
        aggregated) take theirs now, while they fit with room left for the next step of the first
        `nspare` running requests (vLLM schedules those first), and the first that does not fit stops them.
        P_DADMIT picks who goes first (layout.py):
        - DADMIT_FCFS (vLLM): queue order; an arrived transfer is not held up by a preempted
          request that cannot fit yet (its blocks are its own: this keeps a worker that runs
          nothing from waiting on itself).
        - DADMIT_REPLAY (Dynamo 1.6.1's replay): while a transfer still waits to reserve blocks
          on d, only arrived transfers are admitted; preempted requests wait for none to be left.
          Under sustained pressure this starves them until the load stops (the replay drains at
          its end; see docs/engine.md).
        Returns the earliest time a queued request becomes ready (INF if none)."""
        qcap = ip[P_Q]
        bs = ip[P_B]
        replay = ip[P_DADMIT] == DADMIT_REPLAY
        next_ready = INF
        pending = False
        if replay:
            for i in range(np.int64(wk_i[r, d, WI_QN])):
                if np.int64(slot_i[r, q_at(queue, wk_i, r, d, np.int64(i), qcap), SI_RESV]) == RESV_PENDING:
                    pending = True
                    break
        blocked = False
        i = 0
        while i < np.int64(wk_i[r, d, WI_QN]) and np.int64(wk_i[r, d, WI_NRUN]) < ip[P_MAXSEQ]:
            s = q_at(queue, wk_i, r, d, np.int64(i), qcap)
            resv = np.int64(slot_i[r, s, SI_RESV])
            if resv == RESV_PENDING:
                i += 1
                continue
            if slot_f[r, s, SF_READY] > t:
                if slot_f[r, s, SF_READY] < next_ready:
                    next_ready = slot_f[r, s, SF_READY]
                if resv == RESV_HELD:
                    i += 1
                    continue
                break  # decode_first: its transfer runs; FCFS
            if resv == RESV_HELD:
                if blocked and replay:
                    break
                # the KV has arrived: the prefill worker lets go of its copy
                pw = cache_row(ip, np.int64(slot_i[r, s, SI_PW]))
                isl = np.int64(slot_i[r, s, SI_ISL])
                pfx = np.int64(slot_i[r, s, SI_PFX])
                cache_release(
                    pc, wk_i, rep_i, r, pw, np.int64(slot_i[r, s, SI_GRP]), pfx, (isl + bs - 1) // bs - pfx,
                    isl // bs - pfx, np.int64(-1), ip[P_G],
                )  # fmt: skip
                if ip[P_PSHARE] == 1 or (
                    wk_f[r, pw, WF_BUSY] == INF
                    and (np.int64(wk_i[r, pw, WI_QN]) > 0 or np.int64(wk_i[r, ip[P_NP] + ip[P_ND], WI_QN]) > 0)
                ):
                    rep_i[r, RI_PWAKE] = 1  # it may have been waiting for these blocks
                slot_i[r, s, SI_RESV] = RESV_ADMIT
            elif pending or blocked:
                i += 1
                continue
            elif not admit(ip, fp, slot_i, wk_i, pc, ev, run, rep_i, r, d, s, t, nspare):
                blocked = True
                i += 1
                continue
            start_running(slot_i, slot_f, wk_i, queue, run, rep_i, r, d, np.int64(i), s, t, qcap)
        return next_ready

    @jit
    def settle(ip, fp, slot_i, wk_i, wk_f, pc, ev, run, rep_i, r, d, t):
        """Decode worker d is in a segment at t: hold now the blocks of the steps that have started
        by t (vLLM allocates a step's blocks when it schedules it), evicting for them, so that a
        reader of d's cache sees what a step-by-step run would. decode_end then adds the rest."""
        if wk_f[r, d, WF_BUSY] == INF or np.int64(wk_i[r, d, WI_MIXED]) == 1:
            return
        t0 = wk_f[r, d, WF_T0]
        x0 = np.int64(wk_i[r, d, WI_SEG_X0])
        n = np.int64(wk_i[r, d, WI_SEG_N])
        cap = np.float64(ip[P_DKV] * ip[P_B])
        # steps started: the largest j in [1, M] whose step j - 1 starts at or before t
        lo = np.int64(1)
        hi = np.int64(wk_i[r, d, WI_SEG_M])
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if t0 + decode_span(fp, x0, n, mid - 1, cap) <= t:
                lo = mid
            else:
                hi = mid - 1
        bs = ip[P_B]
        growth = np.int64(0)
        for i in range(np.int64(wk_i[r, d, WI_NRUN])):
            s = np.int64(run[r, d, i])
            if np.int64(slot_i[r, s, SI_DONE]) == np.int64(slot_i[r, s, SI_NEED]):
                growth += grow_to(slot_i, r, s, np.int64(slot_i[r, s, SI_GEN]) + lo, bs)
        if growth > 0 and not cache_grow(pc, wk_i, rep_i, ev, fp[F_EVDELAY], t, r, d, ip[P_G], ip[P_DKV], growth):
            rep_i[r, RI_STATUS] = STATUS_OVERCAP

    @jit_inline
    def waiting_for_blocks(ip, slot_i, wk_i, queue, r, d):
        """True if a request that takes its blocks at admission (a preempted one) waits on d."""
        qcap = ip[P_Q]
        for i in range(np.int64(wk_i[r, d, WI_QN])):
            if np.int64(slot_i[r, q_at(queue, wk_i, r, d, np.int64(i), qcap), SI_RESV]) == RESV_ADMIT:
                return True
        return False

    @jit
    def steps_that_fit(ip, slot_i, run, r, d, nrun, m, avail):
        """The most steps, up to m, whose blocks fit in `avail` (binary search; out of line: only
        under KV pressure)."""
        lo = np.int64(1)
        hi = m
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if step_extra(ip, slot_i, run, r, d, nrun, ip[P_B], mid - 1) <= avail:
                lo = mid
            else:
                hi = mid - 1
        return lo

    @jit_inline
    def plan_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, r, d, t):
        bs = ip[P_B]
        prefill_first = ip[P_FLOW] == FLOW_PREFILL_FIRST
        kv_cap = ip[P_DKV]
        wk_f[r, d, WF_WAKE] = INF
        replay = ip[P_DADMIT] == DADMIT_REPLAY
        first_ready = INF
        more = np.int64(0)
        if prefill_first and replay:
            # the replay's pass boundary first hands blocks to a waiting transfer, keeping no room
            # for the running requests' growth (they may be preempted for it)
            first_ready, more = reserve(ip, fp, slot_i, slot_f, wk_i, pc, ev, queue, run, rep_i, r, d, t, np.int64(0))
        # running requests next: the next step must get its blocks, else the newest is preempted
        # (each adds at most a block per step, so with that much room nothing is scanned)
        preempted = False
        nrun = np.int64(wk_i[r, d, WI_NRUN])
        avail = kv_cap - np.int64(wk_i[r, d, WI_USED]) + np.int64(wk_i[r, d, WI_FREE])
        if nrun > avail:
            preempted = fit_next_step(ip, slot_i, wk_i, pc, queue, run, rep_i, r, d)
            nrun = np.int64(wk_i[r, d, WI_NRUN])
        admitted_from = nrun
        if prefill_first and not replay and not waiting_for_blocks(ip, slot_i, wk_i, queue, r, d):
            # vLLM: blocks go to the waiting (preempted) requests first, then to a transfer,
            # leaving room for the running requests' next step
            first_ready, more = reserve(ip, fp, slot_i, slot_f, wk_i, pc, ev, queue, run, rep_i, r, d, t, nrun)
        if not preempted:
            nxt = admit_queue(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, r, d, t, nrun)
            if nxt < first_ready:
                first_ready = nxt
        if np.int64(wk_i[r, d, WI_USED]) > kv_cap:
            rep_i[r, RI_STATUS] = STATUS_OVERCAP
        nrun = np.int64(wk_i[r, d, WI_NRUN])
        if nrun == 0:
            wk_f[r, d, WF_WAKE] = first_ready
            return
        n_dec = 0
        n_wait = 0
        x0 = np.int64(0)
        m = np.int64(1) << np.int64(40)
        for i in range(nrun):
            s = np.int64(run[r, d, i])
            if np.int64(slot_i[r, s, SI_DONE]) == np.int64(slot_i[r, s, SI_NEED]):
                n_dec += 1
                x0 += np.int64(slot_i[r, s, SI_ISL]) + np.int64(slot_i[r, s, SI_GEN])
                left = np.int64(slot_i[r, s, SI_OSL]) - np.int64(slot_i[r, s, SI_GEN])
                if left < m:
                    m = left
            else:
                n_wait += 1
        budget = ip[P_BUDGET] - n_dec
        sum_p = np.int64(0)
        sum_pc = np.int64(0)
        n_pre = 0
        n_tok = np.int64(0)
        x_done = np.int64(0)
        n_done = np.int64(0)  # prefills this pass completes: they take the pass's decode step too
        svc = 0.0
        # chunks are 0 outside passes, so the chunk scan is only needed when a prefill waits
        for i in range(nrun if n_wait > 0 else 0):
            s = np.int64(run[r, d, i])
            slot_i[r, s, SI_CHUNK] = 0
            rem = np.int64(slot_i[r, s, SI_NEED]) - np.int64(slot_i[r, s, SI_DONE])
            if rem > 0 and budget > 0:
                chunk = rem if rem < budget else budget
                budget -= chunk
                slot_i[r, s, SI_CHUNK] = chunk
                isl = np.int64(slot_i[r, s, SI_ISL])
                before = computed_tokens(slot_i, r, s)
                # recomputed output tokens take budget but no prefill time (the mocker counts
                # prompt tokens only)
                a = before if before < isl else isl
                b = before + chunk if before + chunk < isl else isl
                if b > a:
                    sum_p += a
                    sum_pc += b
                    n_tok += 1
                svc += slot_f[r, s, SF_SVC]
                n_pre += 1
                if chunk == rem:
                    x_done += isl + np.int64(slot_i[r, s, SI_RECOMP])
                    n_done += 1
        if n_dec == 0 and n_pre == 0:
            return
        cap = np.float64(kv_cap * bs)
        wk_f[r, d, WF_T0] = t
        wk_f[r, d, WF_HELD0] = np.float64(np.int64(wk_i[r, d, WI_USED]) - np.int64(wk_i[r, d, WI_FREE]))
        wk_i[r, d, WI_SEG_N] = n_dec
        wk_i[r, d, WI_SEG_X0] = x0
        if n_pre > 0:
            dur = 0.0
            if prefill_first:
                dur = 0.0  # a disaggregated decode worker is charged no prefill time (the mocker's rule)
            elif ip[P_PROF] == PROF_POLY:
                dur = pass_prefill_ms(fp, sum_p, sum_pc, n_tok)
            else:
                dur = svc
            if n_dec > 0 or x_done > 0:
                dur += step_ms(fp, np.float64(x0 + x_done), n_dec + n_done, cap)
            wk_i[r, d, WI_MIXED] = 1
            wk_i[r, d, WI_SEG_M] = 1
            first = t + dur
        else:
            wk_i[r, d, WI_MIXED] = 0
            if ip[P_NAIVE] == 1 or preempted or more == 1:
                m = 1  # the next boundary admits (none in a pass that preempted) or reserves
            # blocks bound the segment too: it ends before the first step that cannot get its
            # blocks (there the newest request is preempted), a cheap bound first
            avail = kv_cap - np.int64(wk_i[r, d, WI_USED]) + np.int64(wk_i[r, d, WI_FREE])
            if m > 1 and n_dec * (m // bs + 2) > avail:
                m = steps_that_fit(ip, slot_i, run, r, d, nrun, m, avail)
            if m == 1:
                dur = step_ms(fp, np.float64(x0), n_dec, cap)
            else:
                dur = decode_span(fp, np.int64(x0), np.int64(n_dec), np.int64(m), cap)
            wk_i[r, d, WI_SEG_M] = m
            first = t + step_ms(fp, np.float64(x0), n_dec, cap)
        # only requests admitted by this call can still wait for their first decode step: a local
        # prefill gets its first token at the end of the pass that completes it (decode_end)
        for i in range(admitted_from, nrun):
            s = np.int64(run[r, d, i])
            if np.int64(slot_i[r, s, SI_FRESH]) == 1 and np.int64(slot_i[r, s, SI_DONE]) == np.int64(
                slot_i[r, s, SI_NEED]
            ):
                slot_i[r, s, SI_FRESH] = 0
                slot_f[r, s, SF_FIRST] = first
                if ip[P_CTL] == 1:
                    ctl_tick(ip, fp, rep_i, rep_f, r, t)
                    ctl_observe(ip, rep_i, rep_f, r, first - slot_f[r, s, SF_ARR], first)
                if ip[P_PLAN] == 1:
                    pl_observe_ttft(ip, rep_i, rep_f, r, first - slot_f[r, s, SF_ARR], first)
        wk_f[r, d, WF_BUSY] = t + dur
        if first_ready > t and first_ready < INF:
            truncate(ip, fp, wk_i, wk_f, r, d, first_ready)

    # ---------------------------------------------------------------- arrivals and completions
    @jit_inline
    def new_request(ip, fp, tabs, slot_i, slot_f, rep_i, rep_f, r, key, s, rid, t):
        bs = ip[P_B]
        pfx = np.int64(-1)
        if trace_on and ip[P_TRACE] != TRACE_NONE:  # a replayed trace's row (kernels/replay.py)
            row, cycle = replay_take_row(ip, tabs, slot_i, slot_f, rep_i, r, key, s, rid)
            isl = np.int64(tabs[TB_ISL, row])
            osl = np.int64(tabs[TB_OSL, row])
            grp = np.int64(tabs[TB_GRP, row])
            if grp >= 0:
                grp = (grp + cycle * ip[P_TG]) % ip[P_G]
                pfx = np.int64(tabs[TB_PFX, row])
            else:
                grp = draw_group(key, rid, ip[P_G], ip[P_POP] == 1, tabs[2])
        else:
            isl = draw_len(
                key,
                rid,
                np.int64(RNG_F_ISL),
                ip[P_ISL_KIND],
                ip[P_ISL_A],
                ip[P_ISL_B],
                fp[F_ISL_MU],
                fp[F_ISL_SIG],
                tabs[0],
            )
            osl = draw_len(
                key,
                rid,
                np.int64(RNG_F_OSL),
                ip[P_OSL_KIND],
                ip[P_OSL_A],
                ip[P_OSL_B],
                fp[F_OSL_MU],
                fp[F_OSL_SIG],
                tabs[1],
            )
            grp = draw_group(key, rid, ip[P_G], ip[P_POP] == 1, tabs[2])
        if pfx < 0:
            pfx = np.int64(math.floor(fp[F_RATIO] * isl)) // bs
        seq = rep_i[r, RI_SEQ]
        count_in_flight(ip, rep_i, rep_f, r, t, 1)  # before the count of arrivals moves on
        rep_i[r, RI_SEQ] = seq + 1
        slot_i[r, s, SI_SEQ] = seq
        slot_i[r, s, SI_ISL] = isl
        slot_i[r, s, SI_OSL] = osl
        slot_i[r, s, SI_GRP] = grp
        slot_i[r, s, SI_PFX] = pfx
        slot_i[r, s, SI_NEED] = isl
        slot_i[r, s, SI_DONE] = 0
        slot_i[r, s, SI_CHUNK] = 0
        slot_i[r, s, SI_GEN] = 0
        slot_i[r, s, SI_CACHED] = 0
        slot_i[r, s, SI_PW] = -1
        slot_i[r, s, SI_DW] = -1
        slot_i[r, s, SI_APT] = 0
        slot_i[r, s, SI_ABP] = 0
        slot_i[r, s, SI_ADMIT] = 0
        slot_i[r, s, SI_RESERVE] = 0
        slot_i[r, s, SI_FRESH] = 1
        slot_i[r, s, SI_RECOMP] = 0
        slot_i[r, s, SI_GHOST] = -1
        slot_i[r, s, SI_RESV] = RESV_ADMIT
        slot_i[r, s, SI_H2] = 0
        slot_i[r, s, SI_H3] = 0
        slot_i[r, s, SI_H4] = 0
        slot_f[r, s, SF_ONB] = 0.0
        meas = seq - ip[P_WARM]
        if meas < 0 or meas >= ip[P_N]:
            meas = -1
        elif meas == 0:
            rep_f[r, RF_FIRST_ARR] = t
        slot_i[r, s, SI_MEAS] = meas
        slot_f[r, s, SF_ARR] = t
        slot_f[r, s, SF_TPF] = -1.0
        slot_f[r, s, SF_READY] = -1.0
        slot_f[r, s, SF_ADM] = -1.0
        slot_f[r, s, SF_FIRST] = -1.0
        svc = 0.0
        if ip[P_PROF] == PROF_EXP:
            svc = rng_exponential(key, rid, np.int64(RNG_F_SVC * 8), fp[F_SVC])
        elif ip[P_PROF] == PROF_DET:
            svc = fp[F_SVC]
        slot_f[r, s, SF_SVC] = svc

    def record_candidates(ip, slot_i, wk_i, pc, cand, r, s, lo, k, with_overlap):
        """The router's view of workers lo..lo+k-1 at this decision, in their global columns.
        The decode choice of prefill_first ignores overlap unless its weight is > 0."""
        meas = np.int64(slot_i[r, s, SI_MEAS])
        if ip[P_RECORD] == 0 or meas < 0:
            return
        g = np.int64(slot_i[r, s, SI_GRP])
        apfx = np.int64(slot_i[r, s, SI_PFX])
        pfx = apfx if with_overlap else np.int64(0)
        isl = np.int64(slot_i[r, s, SI_ISL])
        pblk = (isl + ip[P_B] - 1) // ip[P_B]
        for w in range(lo, lo + k):
            cw = cache_row(ip, w)
            cand[r, meas, w, 0] = router_cand_tokens(wk_i, pc, r, w, cw, g, pfx, isl, ip[P_B])
            cand[r, meas, w, 1] = router_cand_blocks(wk_i, pc, r, w, cw, g, pfx, apfx, pblk)

    # inlined at the prefill decision (route); called at the decode decision and in batches, so
    # that the event loop does not carry a second copy (compile time)
    record_candidates_call = jit(record_candidates)
    record_candidates = jit_inline(record_candidates)

    @jit
    def pick_least(key, dec, best, best_v, ties, w, v):
        """One step of an argmin with ties broken uniformly at random (reservoir over the tied
        set): returns (best, best_v, ties) after candidate w of value v."""
        if best < 0 or v < best_v:
            return w, v, np.int64(1)
        if v == best_v:
            ties += 1
            if uniform(key, dec, np.int64(_ORACLE_B0) + w) * ties < 1.0:
                return w, v, ties
        return best, best_v, ties

    @jit
    def oracle_prefill(ip, fp, slot_i, wk_i, wk_f, pc, queue, rep_i, r, key, s, lo, k, t):
        """The prefill worker with the least predicted time to this request's prefill end, from the
        true state: the rest of the pass in progress, then one pass of the queued uncached tokens
        and its own (true overlap), with the host time of each request."""
        dec = rep_i[r, RI_DECIDE]
        rep_i[r, RI_DECIDE] = dec + 1
        bs = ip[P_B]
        g = np.int64(slot_i[r, s, SI_GRP])
        pfx = np.int64(slot_i[r, s, SI_PFX])
        isl = np.int64(slot_i[r, s, SI_ISL])
        best = np.int64(-1)
        best_v = 0.0
        ties = np.int64(0)
        for w in range(lo, lo + k):
            rest = wk_f[r, w, WF_BUSY] - t if wk_f[r, w, WF_BUSY] < INF else 0.0
            queued = np.int64(0)
            nq = np.int64(wk_i[r, w, WI_QN])
            for i in range(np.int64(wk_i[r, w, WI_PASS_K]), nq):
                q = q_at(queue, wk_i, r, w, i, ip[P_Q])
                # a request not yet looked up needs its whole prompt so far: an upper bound
                queued += np.int64(slot_i[r, q, SI_NEED]) - np.int64(slot_i[r, q, SI_DONE])
            own = isl - usable_hit(ip, cache_overlap(pc, r, cache_row(ip, w), g, pfx), isl) * bs
            waiting = nq - np.int64(wk_i[r, w, WI_PASS_K]) + 1
            v = rest + prefill_span(fp, queued + own) + fp[F_OVH_PASS] + waiting * fp[F_OVH_REQ]
            best, best_v, ties = pick_least(key, dec, best, best_v, ties, w, v)
        return best

    @jit
    def oracle_decode(ip, fp, slot_i, wk_i, wk_f, pc, queue, run, rep_i, r, key, s, lo, k, t):
        """The decode worker with the least predicted wait for this request's first token, from the
        true state: the step in progress (a ready request joins at the next step boundary), a step
        for each request queued ahead of it (a boundary admits them in turn), then one step over
        the running set's context, the queued prompts and its own; a worker whose free blocks
        cannot take its prompt (it would wait for a completion) only as a last resort."""
        dec = rep_i[r, RI_DECIDE]
        rep_i[r, RI_DECIDE] = dec + 1
        bs = ip[P_B]
        isl = np.int64(slot_i[r, s, SI_ISL])
        pblk = (isl + bs - 1) // bs
        cap = np.float64(ip[P_DKV] * bs)
        best = np.int64(-1)
        best_v = 0.0
        ties = np.int64(0)
        for d in range(lo, lo + k):
            ctx = np.int64(0)
            for i in range(np.int64(wk_i[r, d, WI_NRUN])):
                ctx += computed_tokens(slot_i, r, np.int64(run[r, d, i])) + 1
            for i in range(np.int64(wk_i[r, d, WI_QN])):
                ctx += np.int64(slot_i[r, q_at(queue, wk_i, r, d, i, ip[P_Q]), SI_ISL])
            seqs = np.int64(wk_i[r, d, WI_NRUN]) + np.int64(wk_i[r, d, WI_QN])
            step = step_ms(fp, np.float64(ctx), seqs, cap)
            v = step_ms(fp, np.float64(ctx + isl), seqs + 1, cap) + np.int64(wk_i[r, d, WI_QN]) * step
            if wk_f[r, d, WF_BUSY] < INF:
                v += min(wk_f[r, d, WF_BUSY] - t, step)
            avail = ip[P_DKV] - np.int64(wk_i[r, d, WI_USED]) + np.int64(wk_i[r, d, WI_FREE])
            if pblk > avail:
                v += 1e12
            best, best_v, ties = pick_least(key, dec, best, best_v, ties, d, v)
        return best

    @jit_inline
    def route(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, s, t):
        """The router's decision for a new request (docs/sources.md, "Dynamo's request path"): a prefill worker in
        prefill_first, a decode worker otherwise."""
        n_p = ip[P_NP]
        n_d = ip[P_ND]
        bs = ip[P_B]
        prefill_first = ip[P_FLOW] == FLOW_PREFILL_FIRST
        if not prefill_first:
            # the decode workers' caches are read now: give them the blocks their steps took so far
            for w in range(n_p, n_p + n_d):
                settle(ip, fp, slot_i, wk_i, wk_f, pc, ev, run, rep_i, r, w, t)
        if fp[F_EVDELAY] > 0.0:
            cache_deliver(pc, rep_i, ev, r, t)
        policy = ip[P_POLICY]
        g = np.int64(slot_i[r, s, SI_GRP])
        pfx = np.int64(slot_i[r, s, SI_PFX])
        isl = np.int64(slot_i[r, s, SI_ISL])
        pblk = (isl + bs - 1) // bs
        meas = np.int64(slot_i[r, s, SI_MEAS])
        slot_i[r, s, SI_STATE] = ST_PREFILL
        lo = np.int64(0) if prefill_first else n_p
        k = rep_i[r, RI_NPA] if prefill_first else rep_i[r, RI_NDA]  # the workers the router may choose
        if ip[P_PLAN] == 1 and ip[P_RECORD] == 1 and meas >= 0:
            for w in range(cand.shape[2]):  # the planner's inactive workers were no candidates
                cand[r, meas, w, 0] = NAN
                cand[r, meas, w, 1] = NAN
        record_candidates(ip, slot_i, wk_i, pc, cand, r, s, lo, k, True)
        if prefill_first and policy == POL_PULL:
            q_push(queue, wk_i, r, n_p + n_d, s, ip[P_Q])
            return
        by_tokens = np.int64(1) if prefill_first else np.int64(0)
        if ip[P_CTL] == 1:
            ctl_tick(ip, fp, rep_i, rep_f, r, t)
        if policy == POL_ORACLE:
            w = oracle_prefill(ip, fp, slot_i, wk_i, wk_f, pc, queue, rep_i, r, key, s, lo, k, t)
        else:
            # the batch router chooses its prefill workers as the kv router does
            pol = np.int64(POL_KV) if policy == POL_BATCH else policy
            # a shared cache offers every candidate the same overlap: the costs move by one
            # constant, which changes no argmin and no softmax (it sees cost differences over
            # their range), so the choice is made without it
            pfx_seen = np.int64(0) if prefill_first and ip[P_PSHARE] == 1 else pfx
            w = router_choose(
                pol, wk_i, pc, rep_i, r, key, lo, k, g, pfx_seen, isl, pblk, bs, rep_f[r, RF_OMEGA],
                rep_f[r, RF_TAU], ip[P_D], by_tokens,
            )  # fmt: skip
        # the router books what it believes; workers compute against what they really hold
        seen = cache_seen_overlap(pc, r, cache_row(ip, w), g, pfx)
        slot_i[r, s, SI_APT] = isl - seen * bs
        wk_i[r, w, WI_APT] += isl - seen * bs
        if prefill_first and ip[P_DEDUP] == 1:  # Dynamo's prefill router tracks no active blocks
            slot_i[r, s, SI_ABP] = 0
            added = np.int64(0)
        else:
            added = router_book_active(wk_i, slot_i, r, s, w, g, pfx, pblk, seen)
        if meas >= 0:
            out_i[r, meas, OI_CHOSEN] = w - lo
            if prefill_first:
                out_i[r, meas, OI_PADD_T] = isl - seen * bs
                out_i[r, meas, OI_PADD_B] = added
            else:
                out_i[r, meas, OI_DADD_T] = isl - seen * bs
                out_i[r, meas, OI_DADD_B] = added
                out_f[r, meas, OF_DDEC] = t
        if prefill_first:
            slot_i[r, s, SI_PW] = w
            q_push(queue, wk_i, r, w, s, ip[P_Q])
            return
        ov = usable_hit(ip, cache_overlap(pc, r, w, g, pfx), isl)
        need = isl - ov * bs
        slot_i[r, s, SI_CACHED] = ov
        slot_i[r, s, SI_NEED] = need
        shared = n_p + n_d
        if ip[P_FLOW] == FLOW_AGGREGATED or need <= ip[P_MAXLOCAL] or np.int64(wk_i[r, shared, WI_QN]) >= 2:
            hand_to_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, queue, r, s, w, t, np.int64(RESV_ADMIT))
        else:
            slot_i[r, s, SI_DW] = w
            q_push(queue, wk_i, r, shared, s, ip[P_Q])

    @jit_inline
    def finish(ip, fp, slot_i, slot_f, wk_i, pc, queue, rep_i, rep_f, heap_t, heap_c, out_f, out_i, r, key, s, t):
        """Request s emitted its last token at t: record it, free its blocks, wake its client."""
        bs = ip[P_B]
        d = np.int64(slot_i[r, s, SI_DW])
        g = np.int64(slot_i[r, s, SI_GRP])
        isl = np.int64(slot_i[r, s, SI_ISL])
        osl = np.int64(slot_i[r, s, SI_OSL])
        pblk = (isl + bs - 1) // bs
        # every full block it computed stays cached (the last sampled token has no KV)
        keep = kept_blocks(ip, slot_i, r, s, isl + osl - 1, bs)
        cache_release(
            pc, wk_i, rep_i, r, d, g, np.int64(slot_i[r, s, SI_PFX]), np.int64(slot_i[r, s, SI_RESERVE]), keep,
            np.int64(-1), ip[P_G],
        )  # fmt: skip
        # a disaggregated decode router assumes no KV reuse: no group was counted (router.py)
        router_unbook_active(wk_i, slot_i, r, s, d, g if ip[P_FLOW] != FLOW_PREFILL_FIRST else np.int64(-1))
        if ip[P_PLAN] == 1:
            pl_observe_itl(ip, rep_i, rep_f, r, t - slot_f[r, s, SF_FIRST], osl - 1)
        meas = np.int64(slot_i[r, s, SI_MEAS])
        if meas >= 0:
            arr = slot_f[r, s, SF_ARR]
            first = slot_f[r, s, SF_FIRST]
            out_f[r, meas, OF_ARR] = arr
            out_f[r, meas, OF_TTFT] = first - arr
            out_f[r, meas, OF_E2E] = t - arr
            out_f[r, meas, OF_ITL] = (t - first) / (osl - 1) if osl > 1 else 0.0
            # a fully cached prompt is never scheduled in a prefill pass: it waited for no prefill
            tpf = slot_f[r, s, SF_TPF]
            out_f[r, meas, OF_PWAIT] = tpf - arr if tpf >= 0.0 else 0.0
            out_f[r, meas, OF_DWAIT] = slot_f[r, s, SF_ADM] - slot_f[r, s, SF_READY]
            out_i[r, meas, OI_SEQ] = np.int64(slot_i[r, s, SI_SEQ])
            out_i[r, meas, OI_ISL] = isl
            out_i[r, meas, OI_OSL] = osl
            out_i[r, meas, OI_GRP] = g
            out_i[r, meas, OI_PBLK] = pblk
            out_i[r, meas, OI_CACHED] = np.int64(slot_i[r, s, SI_CACHED])
            pw = np.int64(slot_i[r, s, SI_PW])
            out_i[r, meas, OI_PW] = pw
            out_i[r, meas, OI_DW] = d - ip[P_NP]
            out_i[r, meas, OI_H2] = np.int64(slot_i[r, s, SI_H2])
            out_i[r, meas, OI_H3] = np.int64(slot_i[r, s, SI_H3])
            out_i[r, meas, OI_H4] = np.int64(slot_i[r, s, SI_H4])
            out_f[r, meas, OF_ONB] = slot_f[r, s, SF_ONB]
            out_i[r, meas, OI_DONE] += 1
            rep_i[r, RI_DONE_MEAS] += 1
            rep_f[r, RF_LAST_DONE] = t
        slot_i[r, s, SI_STATE] = ST_FREE
        count_in_flight(ip, rep_i, rep_f, r, t, -1)
        if ip[P_ARRIVAL] == 0:
            c = np.int64(slot_i[r, s, SI_CLIENT])
            wake = t
            if trace_on and ip[P_TRACE] == TRACE_CLOSED:
                wake = t + slot_f[r, s, SF_TWAIT]  # its session's next turn, or a new session now
            elif fp[F_THINK] > 0.0:
                rid = rng_client_request_id(c, np.int64(slot_i[r, s, SI_KCOUNT]))
                wake = t + rng_exponential(key, rid, np.int64(RNG_F_THINK * 8), fp[F_THINK])
            heap_push(heap_t, heap_c, rep_i, r, wake, c)
        else:
            n_w = ip[P_NP] + ip[P_ND]
            top = rep_i[r, RI_FREE_TOP]
            queue[r, n_w + 1, top] = s
            rep_i[r, RI_FREE_TOP] = top + 1

    return Namespace(
        draw_len=draw_len,
        draw_group=draw_group,
        q_push=q_push,
        q_at=q_at,
        q_pop=q_pop,
        q_remove=q_remove,
        usable_hit=usable_hit,
        cache_row=cache_row,
        truncate=truncate,
        hand_to_decode=hand_to_decode,
        plan_decode=plan_decode,
        set_reserve=set_reserve,
        grow_to=grow_to,
        held_blocks=held_blocks,
        step_extra=step_extra,
        computed_tokens=computed_tokens,
        kept_blocks=kept_blocks,
        preempt=preempt,
        fit_next_step=fit_next_step,
        steps_that_fit=steps_that_fit,
        reserve=reserve,
        admit=admit,
        admit_queue=admit_queue,
        fits_with_spare=fits_with_spare,
        waiting_for_blocks=waiting_for_blocks,
        settle=settle,
        start_running=start_running,
        new_request=new_request,
        route=route,
        oracle_prefill=oracle_prefill,
        oracle_decode=oracle_decode,
        record_candidates=record_candidates,
        record_candidates_call=record_candidates_call,
        book_active=router_book_active,
        finish=finish,
    )
