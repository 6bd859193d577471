"""The per-replica event loop of one disaggregated cluster (layout in layout.py).

One call of `simulate_replica(r, ...)` runs replica r from t = 0 until its measured requests
have all completed. Time is in milliseconds (float64). Each instant is processed in Dynamo's
mocker order: prefill passes that end now (their requests are handed to decode queues), then
decode passes that end now, then arrivals (routing), then new passes on idle prefill workers,
then on idle decode workers.

Decode runs in segments: with a fixed running set of n sequences whose summed context is X0 at
the segment's first step, step j sees context X0 + n*j, so the time of k steps is a sum of a
quadratic in j with a closed form (`decode_span`). A segment lasts until the next completion;
a request that becomes ready on a busy decode worker cuts the segment at the first step boundary
at or after its ready time (a binary search over k), so it joins the next pass, exactly as step-
by-step simulation would. With ip[P_NAIVE] = 1 every segment is one step, timed step by step:
the reference the closed form is tested against.
"""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    DIST_FIXED,
    DIST_LOGNORMAL,
    DIST_UNIFORM,
    F_D0,
    F_D1,
    F_D2,
    F_EVDELAY,
    F_ISL_MU,
    F_ISL_SIG,
    F_OMEGA,
    F_OSL_MU,
    F_OSL_SIG,
    F_P0,
    F_P1,
    F_P2,
    F_RATIO,
    F_SVC,
    F_TAU,
    F_THINK,
    FLOW_AGGREGATED,
    FLOW_PREFILL_FIRST,
    OF_ARR,
    OF_DWAIT,
    OF_E2E,
    OF_ITL,
    OF_PWAIT,
    OF_TTFT,
    OI_CACHED,
    OI_CHOSEN,
    OI_DONE,
    OI_DW,
    OI_GRP,
    OI_ISL,
    OI_OSL,
    OI_PBLK,
    OI_PW,
    OI_SEQ,
    P_ARRIVAL,
    P_B,
    P_BUDGET,
    P_D,
    P_DKV,
    P_FLOW,
    P_G,
    P_ISL_A,
    P_ISL_B,
    P_ISL_KIND,
    P_K,
    P_MAXLOCAL,
    P_MAXSEQ,
    P_N,
    P_NAIVE,
    P_ND,
    P_NP,
    P_OSL_A,
    P_OSL_B,
    P_OSL_KIND,
    P_POLICY,
    P_POP,
    P_PROF,
    P_Q,
    P_RECORD,
    P_WARM,
    POL_PULL,
    PROF_DET,
    PROF_EXP,
    PROF_POLY,
    RF_FIRST_ARR,
    RF_LAST_DONE,
    RI_DONE_MEAS,
    RI_FREE_TOP,
    RI_INFLIGHT,
    RI_SEQ,
    RNG_F_GRP,
    RNG_F_ISL,
    RNG_F_OSL,
    RNG_F_SVC,
    RNG_F_THINK,
    SF_ADM,
    SF_ARR,
    SF_FIRST,
    SF_READY,
    SF_SVC,
    SF_TPF,
    SI_ABP,
    SI_ADMIT,
    SI_APT,
    SI_CACHED,
    SI_CHUNK,
    SI_CLIENT,
    SI_DONE,
    SI_DW,
    SI_FRESH,
    SI_GEN,
    SI_GRP,
    SI_ISL,
    SI_KCOUNT,
    SI_MEAS,
    SI_NEED,
    SI_OSL,
    SI_PFX,
    SI_PW,
    SI_RESERVE,
    SI_SEQ,
    SI_STATE,
    ST_DECODE_Q,
    ST_FREE,
    ST_PREFILL,
    ST_RUNNING,
    WF_BUSY,
    WF_T0,
    WF_WAKE,
    WI_AB,
    WI_APT,
    WI_MIXED,
    WI_NRUN,
    WI_QH,
    WI_QN,
    WI_SEG_M,
    WI_SEG_N,
    WI_SEG_X0,
)

INF = math.inf


def build(jit, rng, cache, router, heap, jit_inline=None):
    jit_inline = jit_inline or jit
    rng_below = rng.below
    rng_client_request_id = rng.client_request_id
    rng_exponential = rng.exponential
    rng_normal = rng.normal
    cache_acquire = cache.acquire
    cache_overlap = cache.overlap
    cache_seen_overlap = cache.seen_overlap
    cache_deliver = cache.deliver
    cache_release = cache.release
    router_cand_blocks = router.cand_blocks
    router_cand_tokens = router.cand_tokens
    router_choose = router.choose
    heap_push = heap.push
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

    # ---------------------------------------------------------------- queues
    @jit
    def q_push(queue, wk_i, r, row, s, qcap):
        n = np.int64(wk_i[r, row, WI_QN])
        queue[r, row, (wk_i[r, row, WI_QH] + n) % qcap] = s
        wk_i[r, row, WI_QN] = n + 1

    @jit
    def q_at(queue, wk_i, r, row, i, qcap):
        return np.int64(queue[r, row, (wk_i[r, row, WI_QH] + i) % qcap])

    @jit
    def q_pop(queue, wk_i, r, row, qcap):
        s = np.int64(queue[r, row, wk_i[r, row, WI_QH]])
        wk_i[r, row, WI_QH] = (np.int64(wk_i[r, row, WI_QH]) + 1) % qcap
        wk_i[r, row, WI_QN] -= 1
        return s

    # ---------------------------------------------------------------- timing
    @jit
    def prefill_span(fp, tokens):
        t = np.float64(tokens)
        return fp[F_P2] * t * t + fp[F_P1] * t + fp[F_P0]

    @jit
    def step_ms(fp, x, cap):
        u = x / cap
        if u > 1.0:
            u = 1.0
        return fp[F_D2] * u * u + fp[F_D1] * u + fp[F_D0]

    @jit
    def decode_span(fp, x0, n, k, cap):
        """Time of k decode steps whose summed contexts are x0, x0 + n, ..., x0 + n(k-1)."""
        kf = np.float64(k)
        xf = np.float64(x0)
        nf = np.float64(n)
        s1 = kf * (kf - 1.0) * 0.5
        s2 = (kf - 1.0) * kf * (2.0 * kf - 1.0) / 6.0
        m1 = kf * xf + nf * s1
        m2 = kf * xf * xf + 2.0 * xf * nf * s1 + nf * nf * s2
        return fp[F_D2] * m2 / (cap * cap) + fp[F_D1] * m1 / cap + fp[F_D0] * kf

    # ---------------------------------------------------------------- decode workers
    @jit_inline
    def truncate(ip, fp, wk_i, wk_f, r, d, t_ready):
        """A request becomes ready at t_ready on decode worker d: end its segment at the first step
        boundary at or after t_ready, so the request joins the pass that starts there."""
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
    def hand_to_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, queue, r, s, d, t_ready):
        slot_i[r, s, SI_DW] = d
        slot_i[r, s, SI_STATE] = ST_DECODE_Q
        slot_f[r, s, SF_READY] = t_ready
        q_push(queue, wk_i, r, d, s, ip[P_Q])
        truncate(ip, fp, wk_i, wk_f, r, d, t_ready)

    @jit_inline
    def plan_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, r, d, t):
        qcap = ip[P_Q]
        bs = ip[P_B]
        flow = ip[P_FLOW]
        wk_f[r, d, WF_WAKE] = INF
        admitted_from = np.int64(wk_i[r, d, WI_NRUN])
        # FCFS admission while blocks and sequence slots last
        while np.int64(wk_i[r, d, WI_QN]) > 0:
            s = q_at(queue, wk_i, r, d, np.int64(0), qcap)
            if slot_f[r, s, SF_READY] > t:
                wk_f[r, d, WF_WAKE] = slot_f[r, s, SF_READY]
                break
            if np.int64(wk_i[r, d, WI_NRUN]) >= ip[P_MAXSEQ]:
                break
            total = (np.int64(slot_i[r, s, SI_ISL]) + np.int64(slot_i[r, s, SI_OSL]) + bs - 1) // bs
            pfx = np.int64(0)
            if flow != FLOW_PREFILL_FIRST:
                pfx = np.int64(slot_i[r, s, SI_PFX])
            held = total - pfx
            g = np.int64(slot_i[r, s, SI_GRP])
            if cache_acquire(pc, wk_i, rep_i, ev, fp[F_EVDELAY], t, r, d, g, pfx, held, ip[P_G], ip[P_DKV]) < 0:
                break
            q_pop(queue, wk_i, r, d, qcap)
            slot_i[r, s, SI_RESERVE] = held
            slot_i[r, s, SI_STATE] = ST_RUNNING
            slot_i[r, s, SI_FRESH] = 1
            slot_f[r, s, SF_ADM] = t
            if np.int64(slot_i[r, s, SI_DONE]) < np.int64(slot_i[r, s, SI_NEED]) and slot_f[r, s, SF_TPF] < 0.0:
                slot_f[r, s, SF_TPF] = t
            run[r, d, wk_i[r, d, WI_NRUN]] = s
            wk_i[r, d, WI_NRUN] += 1
        nrun = np.int64(wk_i[r, d, WI_NRUN])
        if nrun == 0:
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
        svc = 0.0
        # chunks are 0 outside passes, so the chunk scan is only needed when a local prefill waits
        for i in range(nrun if n_wait > 0 else 0):
            s = np.int64(run[r, d, i])
            slot_i[r, s, SI_CHUNK] = 0
            rem = np.int64(slot_i[r, s, SI_NEED]) - np.int64(slot_i[r, s, SI_DONE])
            if rem > 0 and budget > 0:
                chunk = rem if rem < budget else budget
                budget -= chunk
                slot_i[r, s, SI_CHUNK] = chunk
                before = (
                    np.int64(slot_i[r, s, SI_ISL]) - np.int64(slot_i[r, s, SI_NEED]) + np.int64(slot_i[r, s, SI_DONE])
                )
                sum_p += before
                sum_pc += before + chunk
                svc += slot_f[r, s, SF_SVC]
                n_pre += 1
        if n_dec == 0 and n_pre == 0:
            return
        cap = np.float64(ip[P_DKV] * bs)
        wk_f[r, d, WF_T0] = t
        wk_i[r, d, WI_SEG_N] = n_dec
        wk_i[r, d, WI_SEG_X0] = x0
        if n_pre > 0:
            if ip[P_PROF] == PROF_POLY:
                dur = prefill_span(fp, bs * (sum_pc // bs - sum_p // bs))
            else:
                dur = svc
            if n_dec > 0:
                dur += step_ms(fp, np.float64(x0), cap)
            wk_i[r, d, WI_MIXED] = 1
            wk_i[r, d, WI_SEG_M] = 1
            first = t + dur
        else:
            wk_i[r, d, WI_MIXED] = 0
            if ip[P_NAIVE] == 1:
                m = 1
                dur = step_ms(fp, np.float64(x0), cap)
            else:
                dur = decode_span(fp, np.int64(x0), np.int64(n_dec), np.int64(m), cap)
            wk_i[r, d, WI_SEG_M] = m
            first = t + step_ms(fp, np.float64(x0), cap)
        # only requests admitted by this call can still wait for their first decode step: a local
        # prefill gets its first token at the end of the pass that completes it (decode_end)
        for i in range(admitted_from, nrun):
            s = np.int64(run[r, d, i])
            if np.int64(slot_i[r, s, SI_FRESH]) == 1 and np.int64(slot_i[r, s, SI_DONE]) == np.int64(
                slot_i[r, s, SI_NEED]
            ):
                slot_i[r, s, SI_FRESH] = 0
                slot_f[r, s, SF_FIRST] = first
        wk_f[r, d, WF_BUSY] = t + dur

    # ---------------------------------------------------------------- arrivals and completions
    @jit_inline
    def new_request(ip, fp, tabs, slot_i, slot_f, rep_i, rep_f, r, key, s, rid, t):
        bs = ip[P_B]
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
        seq = rep_i[r, RI_SEQ]
        rep_i[r, RI_SEQ] = seq + 1
        rep_i[r, RI_INFLIGHT] += 1
        slot_i[r, s, SI_SEQ] = seq
        slot_i[r, s, SI_ISL] = isl
        slot_i[r, s, SI_OSL] = osl
        slot_i[r, s, SI_GRP] = grp
        slot_i[r, s, SI_PFX] = np.int64(math.floor(fp[F_RATIO] * isl)) // bs
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

    @jit_inline
    def record_candidates(ip, slot_i, wk_i, pc, cand, r, s, lo):
        meas = np.int64(slot_i[r, s, SI_MEAS])
        if ip[P_RECORD] == 0 or meas < 0:
            return
        g = np.int64(slot_i[r, s, SI_GRP])
        pfx = np.int64(slot_i[r, s, SI_PFX])
        isl = np.int64(slot_i[r, s, SI_ISL])
        pblk = (isl + ip[P_B] - 1) // ip[P_B]
        for i in range(ip[P_K]):
            cand[r, meas, i, 0] = router_cand_tokens(wk_i, pc, r, lo + i, g, pfx, isl, ip[P_B])
            cand[r, meas, i, 1] = router_cand_blocks(wk_i, pc, r, lo + i, g, pfx, pblk)

    @jit_inline
    def route(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, rep_i, out_i, cand, r, key, s, t):
        """The router's decision for a new request (REFERENCE section 3): a prefill worker in
        prefill_first, a decode worker otherwise."""
        if fp[F_EVDELAY] > 0.0:
            cache_deliver(pc, rep_i, ev, r, t)
        n_p = ip[P_NP]
        n_d = ip[P_ND]
        bs = ip[P_B]
        prefill_first = ip[P_FLOW] == FLOW_PREFILL_FIRST
        policy = ip[P_POLICY]
        g = np.int64(slot_i[r, s, SI_GRP])
        pfx = np.int64(slot_i[r, s, SI_PFX])
        isl = np.int64(slot_i[r, s, SI_ISL])
        pblk = (isl + bs - 1) // bs
        meas = np.int64(slot_i[r, s, SI_MEAS])
        slot_i[r, s, SI_STATE] = ST_PREFILL
        lo = np.int64(0) if prefill_first else n_p
        k = n_p if prefill_first else n_d
        record_candidates(ip, slot_i, wk_i, pc, cand, r, s, lo)
        if prefill_first and policy == POL_PULL:
            q_push(queue, wk_i, r, n_p + n_d, s, ip[P_Q])
            return
        by_tokens = np.int64(1) if prefill_first else np.int64(0)
        w = router_choose(
            policy, wk_i, pc, rep_i, r, key, lo, k, g, pfx, isl, pblk, bs, fp[F_OMEGA], fp[F_TAU], ip[P_D], by_tokens
        )
        # the router books what it believes; workers compute against what they really hold
        seen = cache_seen_overlap(pc, r, w, g, pfx)
        slot_i[r, s, SI_APT] = isl - seen * bs
        slot_i[r, s, SI_ABP] = pblk - seen
        wk_i[r, w, WI_APT] += isl - seen * bs
        wk_i[r, w, WI_AB] += pblk - seen
        if meas >= 0:
            out_i[r, meas, OI_CHOSEN] = w - lo
        if prefill_first:
            slot_i[r, s, SI_PW] = w
            q_push(queue, wk_i, r, w, s, ip[P_Q])
            return
        ov = cache_overlap(pc, r, w, g, pfx)
        need = isl - ov * bs
        slot_i[r, s, SI_CACHED] = ov
        slot_i[r, s, SI_NEED] = need
        shared = n_p + n_d
        if ip[P_FLOW] == FLOW_AGGREGATED or need <= ip[P_MAXLOCAL] or np.int64(wk_i[r, shared, WI_QN]) >= 2:
            hand_to_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, queue, r, s, w, t)
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
        if ip[P_FLOW] == FLOW_PREFILL_FIRST:
            cache_release(pc, wk_i, r, d, g, np.int64(0), np.int64(slot_i[r, s, SI_RESERVE]))
            wk_i[r, d, WI_AB] -= pblk
        else:
            cache_release(pc, wk_i, r, d, g, np.int64(slot_i[r, s, SI_PFX]), np.int64(slot_i[r, s, SI_RESERVE]))
            wk_i[r, d, WI_AB] -= np.int64(slot_i[r, s, SI_ABP])
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
            out_i[r, meas, OI_DONE] += 1
            rep_i[r, RI_DONE_MEAS] += 1
            rep_f[r, RF_LAST_DONE] = t
        slot_i[r, s, SI_STATE] = ST_FREE
        rep_i[r, RI_INFLIGHT] -= 1
        if ip[P_ARRIVAL] == 0:
            c = np.int64(slot_i[r, s, SI_CLIENT])
            wake = t
            if fp[F_THINK] > 0.0:
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
        prefill_span=prefill_span,
        step_ms=step_ms,
        decode_span=decode_span,
        truncate=truncate,
        hand_to_decode=hand_to_decode,
        plan_decode=plan_decode,
        new_request=new_request,
        route=route,
        finish=finish,
    )
