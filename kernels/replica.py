"""Prefill passes, decode pass ends and the event loop of one replica (see cluster.py)."""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    F_DOMEGA,
    F_EVDELAY,
    F_G2_MS,
    F_G3_MS,
    F_G4_MS,
    F_OMEGA,
    F_OVH_PASS,
    F_OVH_REQ,
    F_RATE,
    F_TAU,
    F_XFER_LAT,
    F_XFER_TOK,
    FLOW_PREFILL_FIRST,
    OF_DDEC,
    OI_CHOSEN,
    OI_DADD_B,
    OI_DADD_T,
    P_ARRIVAL,
    P_B,
    P_BUDGET,
    P_C,
    P_CHECK,
    P_CR1,
    P_CR4,
    P_CTL,
    P_DECAY,
    P_DKV,
    P_DRAIN,
    P_FLOW,
    P_G,
    P_G2CAP,
    P_G3CAP,
    P_G4CAP,
    P_LINEAGE,
    P_MAXEVENTS,
    P_MAXSEQ,
    P_N,
    P_ND,
    P_NP,
    P_PKV,
    P_PLAN,
    P_POLICY,
    P_PROF,
    P_Q,
    P_RBASE,
    P_S,
    P_SEED,
    P_STREAM,
    P_TRACE,
    P_WARM,
    POL_BATCH,
    POL_KV,
    POL_ORACLE,
    POL_PULL,
    PROF_POLY,
    RESV_ADMIT,
    RESV_PENDING,
    RF_BATCH_DUE,
    RF_DBATCH,
    RF_DBUSY,
    RF_DKV,
    RF_FIRST_ARR,
    RF_NEXT_ARR,
    RF_OMEGA,
    RF_PBUSY,
    RF_T,
    RF_TAU,
    RI_DONE_MEAS,
    RI_EVENTS,
    RI_FREE_TOP,
    RI_HEAPN,
    RI_NDA,
    RI_NOPEN,
    RI_NPA,
    RI_PWAKE,
    RI_SEQ,
    RI_STATUS,
    RNG_F_GAP,
    SF_ARR,
    SF_FIRST,
    SF_ONB,
    SF_SVC,
    SF_TPF,
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
    SI_STATE,
    SI_TROW,
    ST_FREE,
    STATUS_OVERCAP,
    STATUS_TIERS,
    TRACE_NONE,
    TRACE_TIMES,
    WF_BUSY,
    WF_HELD0,
    WF_T0,
    WF_WAKE,
    WI_APT,
    WI_CR1,
    WI_DECAY,
    WI_FREE,
    WI_G2CAP,
    WI_G3CAP,
    WI_G4CAP,
    WI_LH2,
    WI_LH3,
    WI_LH4,
    WI_LINEAGE,
    WI_MIXED,
    WI_NRUN,
    WI_PASS_K,
    WI_QN,
    WI_SEG_M,
    WI_USED,
)

INF = math.inf
STATUS_SLOTS = 1
STATUS_EVENTS = 2
STATUS_STALL = 3
# STATUS_OVERCAP = 4 (layout.py): set by the decode planner


def build(jit, rng, cache, router, heap, controller, planner, cl, batch, timing, tiers, replay, jit_inline=None):
    jit_inline = jit_inline or jit
    tiers_on = tiers.enabled  # compile-time constants: False in the lean build (source.build)
    trace_on = replay.enabled
    replay_start = replay.start
    replay_arrival_ms = replay.arrival_ms
    tiers_conserved = tiers.conserved
    rng_client_request_id = rng.client_request_id
    rng_exponential = rng.exponential
    rng_replica_key = rng.replica_key
    cache_acquire = cache.acquire
    cache_release = cache.release
    cache_grow = cache.grow
    router_fewest_blocks = router.fewest_blocks
    router_book_active = router.book_active
    router_unbook_active = router.unbook_active
    router_decode_choice = router.decode_choice
    router_sample_blocks = router.sample_blocks
    cache_seen_overlap = cache.seen_overlap
    ctl_start = controller.start
    ctl_tick = controller.tick
    ctl_observe = controller.observe
    pl_start = planner.start
    pl_tick = planner.tick
    pl_observe_ttft = planner.observe_ttft
    cl_record_candidates = cl.record_candidates_call
    cl_oracle_decode = cl.oracle_decode
    batch_hold = batch.hold
    batch_flush = batch.flush
    heap_pop = heap.pop
    heap_push = heap.push
    cl_finish = cl.finish
    cl_usable_hit = cl.usable_hit
    cl_cache_row = cl.cache_row
    cl_grow_to = cl.grow_to
    cl_hand_to_decode = cl.hand_to_decode
    cl_new_request = cl.new_request
    cl_plan_decode = cl.plan_decode
    pass_prefill_ms = timing.pass_prefill_ms
    cl_q_at = cl.q_at
    cl_q_pop = cl.q_pop
    cl_q_push = cl.q_push
    cl_route = cl.route

    @jit_inline
    def plan_prefill(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, rep_i, out_i, r, w, t):
        """Start a pass on idle prefill worker w: its own queue first, then (pull) the shared queue.
        Theory profiles take one request per pass and ignore the token budget."""
        qcap = ip[P_Q]
        bs = ip[P_B]
        prefill_first = ip[P_FLOW] == FLOW_PREFILL_FIRST
        shared = ip[P_NP] + ip[P_ND]
        pull = (not prefill_first) or ip[P_POLICY] == POL_PULL
        poly = ip[P_PROF] == PROF_POLY
        max_seq = ip[P_MAXSEQ] if poly else 1
        budget = ip[P_BUDGET]
        n = np.int64(0)
        sum_p = np.int64(0)
        sum_pc = np.int64(0)
        n_tok = np.int64(0)
        copy2 = np.int64(0)
        copy3 = np.int64(0)
        copy4 = np.int64(0)
        svc = 0.0
        while n < max_seq and (budget > 0 or not poly):
            from_shared = False
            if n < np.int64(wk_i[r, w, WI_QN]):
                s = cl_q_at(queue, wk_i, r, w, n, qcap)
            elif pull and np.int64(wk_i[r, shared, WI_QN]) > 0:
                s = cl_q_at(queue, wk_i, r, shared, np.int64(0), qcap)
                from_shared = True
            else:
                break
            if np.int64(slot_i[r, s, SI_ADMIT]) == 0:
                isl = np.int64(slot_i[r, s, SI_ISL])
                pblk = (isl + bs - 1) // bs
                g = np.int64(slot_i[r, s, SI_GRP])
                if prefill_first:
                    pfx = np.int64(slot_i[r, s, SI_PFX])
                    hit = cache_acquire(
                        pc, wk_i, rep_i, ev, fp[F_EVDELAY], t, r, cl_cache_row(ip, w), g, pfx, pblk - pfx, ip[P_G],
                        ip[P_PKV],
                    )  # fmt: skip
                    if hit < 0:
                        break
                    usable = cl_usable_hit(ip, hit, isl)
                    if tiers_on and ip[P_G2CAP] > 0:
                        cw = cl_cache_row(ip, w)
                        h4 = np.int64(wk_i[r, cw, WI_LH4])
                        h3 = np.int64(wk_i[r, cw, WI_LH3])
                        h2 = np.int64(wk_i[r, cw, WI_LH2])
                        # a block the prompt recomputes anyway is not copied: the deepest go first
                        cut = hit - usable
                        c4 = cut if cut < h4 else h4
                        h4 -= c4
                        cut -= c4
                        c3 = cut if cut < h3 else h3
                        h3 -= c3
                        cut -= c3
                        h2 -= cut if cut < h2 else h2
                        slot_i[r, s, SI_H2] = h2
                        slot_i[r, s, SI_H3] = h3
                        slot_i[r, s, SI_H4] = h4
                        copy2 += h2
                        copy3 += h3
                        copy4 += h4
                    slot_i[r, s, SI_CACHED] = usable
                    slot_i[r, s, SI_NEED] = isl - usable * bs
                elif (
                    cache_acquire(
                        pc,
                        wk_i,
                        rep_i,
                        ev,
                        fp[F_EVDELAY],
                        t,
                        r,
                        w,
                        g,
                        np.int64(0),
                        pblk - np.int64(slot_i[r, s, SI_CACHED]),
                        ip[P_G],
                        ip[P_PKV],
                    )
                    < 0
                ):
                    break
                slot_i[r, s, SI_ADMIT] = 1
                slot_f[r, s, SF_TPF] = t
                if from_shared:
                    cl_q_pop(queue, wk_i, r, shared, qcap)
                    cl_q_push(queue, wk_i, r, w, s, qcap)
                    slot_i[r, s, SI_PW] = w
                    meas = np.int64(slot_i[r, s, SI_MEAS])
                    if prefill_first and meas >= 0:
                        out_i[r, meas, OI_CHOSEN] = w
            rem = np.int64(slot_i[r, s, SI_NEED]) - np.int64(slot_i[r, s, SI_DONE])
            chunk = rem
            if poly and chunk > budget:
                chunk = budget
            budget -= chunk
            slot_i[r, s, SI_CHUNK] = chunk
            before = np.int64(slot_i[r, s, SI_ISL]) - np.int64(slot_i[r, s, SI_NEED]) + np.int64(slot_i[r, s, SI_DONE])
            if chunk > 0:
                sum_p += before
                sum_pc += before + chunk
                n_tok += 1
            svc += slot_f[r, s, SF_SVC]
            n += 1
        wk_i[r, w, WI_PASS_K] = n
        if n == 0:
            return
        if poly:
            dur = pass_prefill_ms(fp, sum_p, sum_pc, n_tok)
        else:
            dur = svc
        # host work of a pass and of each request in it (scheduling, transfer set-up), serial
        dur += fp[F_OVH_PASS] + n * fp[F_OVH_REQ]
        if tiers_on and copy2 + copy3 + copy4 > 0:
            # lower-tier hits are copied to G1 before the pass computes: the copies of one pass
            # share each link, G3's and G4's pass through host memory (G2's link) on their way
            onb = max((copy2 + copy3 + copy4) * fp[F_G2_MS], copy3 * fp[F_G3_MS], copy4 * fp[F_G4_MS])
            dur += onb
            for i in range(n):  # every request the pass computes for waits for the copies
                s = cl_q_at(queue, wk_i, r, w, np.int64(i), qcap)
                if np.int64(slot_i[r, s, SI_CHUNK]) > 0:
                    slot_f[r, s, SF_ONB] += onb
        wk_f[r, w, WF_T0] = t
        wk_f[r, w, WF_BUSY] = t + dur

    @jit_inline
    def integrate(ip, rep_i, rep_f, r, at, t0, t, weight):
        """rep_f[at] += weight x the part of [t0, t] after the first measured arrival (once it came)."""
        if rep_i[r, RI_SEQ] > ip[P_WARM]:
            a = rep_f[r, RF_FIRST_ARR]
            if t0 > a:
                a = t0
            if t > a:
                rep_f[r, at] += weight * (t - a)

    @jit_inline
    def prefill_done(
        ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, s, w, t
    ):
        bs = ip[P_B]
        g = np.int64(slot_i[r, s, SI_GRP])
        isl = np.int64(slot_i[r, s, SI_ISL])
        pblk = (isl + bs - 1) // bs
        if ip[P_FLOW] == FLOW_PREFILL_FIRST:
            # the prefill worker keeps the KV until the decode worker has it (plan_decode frees it)
            wk_i[r, w, WI_APT] -= np.int64(slot_i[r, s, SI_APT])
            router_unbook_active(wk_i, slot_i, r, s, w, np.int64(-1))
            if ip[P_POLICY] == POL_BATCH:
                batch_hold(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, rep_f, out_f, out_i, cand, r, s, t)
                return
            omega_d = fp[F_DOMEGA]
            nd = rep_i[r, RI_NDA]  # the decode workers the router may choose
            cl_record_candidates(ip, slot_i, wk_i, pc, cand, r, s, ip[P_NP], nd, omega_d > 0.0)
            pfx = np.int64(slot_i[r, s, SI_PFX])
            if ip[P_POLICY] == POL_ORACLE:
                d = cl_oracle_decode(ip, fp, slot_i, wk_i, wk_f, pc, queue, run, rep_i, r, key, s, ip[P_NP], nd, t)
            elif ip[P_POLICY] != POL_KV:
                d = router_fewest_blocks(wk_i, rep_i, r, key, ip[P_NP], nd, g, pfx)
            else:
                # the calls are spelled out (not one dispatching function): this is the hot path,
                # and on the CPU each call of a compiled function passes its array arguments
                if ip[P_CTL] == 1:
                    ctl_tick(ip, fp, rep_i, rep_f, r, t)
                if omega_d > 0.0:
                    d = router_decode_choice(
                        wk_i, pc, rep_i, r, key, ip[P_NP], nd, g, pfx, isl, pblk, bs, omega_d, rep_f[r, RF_TAU]
                    )
                elif rep_f[r, RF_TAU] > 0.0:
                    d = router_sample_blocks(wk_i, pc, rep_i, r, key, ip[P_NP], nd, g, pfx, rep_f[r, RF_TAU])
                else:
                    d = router_fewest_blocks(wk_i, rep_i, r, key, ip[P_NP], nd, g, pfx)
            seen = cache_seen_overlap(pc, r, d, g, pfx) if omega_d > 0.0 else np.int64(0)
            # Dynamo's disaggregated decode router assumes no KV reuse (-1: no group counted)
            booked = router_book_active(wk_i, slot_i, r, s, d, np.int64(-1), pfx, pblk, seen)
            meas = np.int64(slot_i[r, s, SI_MEAS])
            if meas >= 0:
                out_i[r, meas, OI_DADD_T] = 0
                out_i[r, meas, OI_DADD_B] = booked
                out_f[r, meas, OF_DDEC] = t
            # its decode worker reserves blocks at its next pass boundary, then the transfer runs
            cl_hand_to_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, queue, r, s, d, t, np.int64(RESV_PENDING))
            return
        cache_release(
            pc, wk_i, rep_i, r, w, g, np.int64(0), pblk - np.int64(slot_i[r, s, SI_CACHED]), np.int64(0),
            np.int64(-1), ip[P_G],
        )  # fmt: skip
        d = np.int64(slot_i[r, s, SI_DW])
        wk_i[r, d, WI_APT] -= np.int64(slot_i[r, s, SI_APT])
        xfer = 0.0
        if fp[F_XFER_TOK] > 0.0 or fp[F_XFER_LAT] > 0.0:
            xfer = fp[F_XFER_LAT] + fp[F_XFER_TOK] * np.int64(slot_i[r, s, SI_NEED])
        cl_hand_to_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, queue, r, s, d, t + xfer, np.int64(RESV_ADMIT))

    @jit_inline
    def prefill_end(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, w, t):
        qcap = ip[P_Q]
        integrate(ip, rep_i, rep_f, r, RF_PBUSY, wk_f[r, w, WF_T0], t, 1.0)
        for i in range(np.int64(wk_i[r, w, WI_PASS_K])):
            s = cl_q_at(queue, wk_i, r, w, i, qcap)
            slot_i[r, s, SI_DONE] += np.int64(slot_i[r, s, SI_CHUNK])
            slot_i[r, s, SI_CHUNK] = 0
        wk_i[r, w, WI_PASS_K] = 0
        wk_f[r, w, WF_BUSY] = INF
        while np.int64(wk_i[r, w, WI_QN]) > 0:
            s = cl_q_at(queue, wk_i, r, w, np.int64(0), qcap)
            if np.int64(slot_i[r, s, SI_ADMIT]) == 0 or np.int64(slot_i[r, s, SI_DONE]) < np.int64(
                slot_i[r, s, SI_NEED]
            ):
                break
            cl_q_pop(queue, wk_i, r, w, qcap)
            prefill_done(
                ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, s, w, t
            )

    @jit_inline
    def decode_end(
        ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, heap_t, heap_c, out_f, out_i, r, key, d, t
    ):
        bs = ip[P_B]
        k = np.int64(wk_i[r, d, WI_SEG_M])
        # the pass's running set is fixed from its start
        t0 = wk_f[r, d, WF_T0]
        integrate(ip, rep_i, rep_f, r, RF_DBUSY, t0, t, 1.0)
        integrate(ip, rep_i, rep_f, r, RF_DBATCH, t0, t, np.float64(wk_i[r, d, WI_NRUN]))
        wk_f[r, d, WF_BUSY] = INF
        wk_i[r, d, WI_MIXED] = 0
        # tokens of the pass, and the blocks its steps grew into (plan_decode made sure they fit);
        # finished requests are swapped past the running ones and let go of their blocks only
        # after the growth, which happened first (at the steps' starts)
        growth = np.int64(0)
        n_old = np.int64(wk_i[r, d, WI_NRUN])
        n_live = n_old
        i = 0
        while i < n_live:
            s = np.int64(run[r, d, i])
            chunk = np.int64(slot_i[r, s, SI_CHUNK])
            done = np.int64(slot_i[r, s, SI_DONE])
            need = np.int64(slot_i[r, s, SI_NEED])
            gen = np.int64(slot_i[r, s, SI_GEN])
            if chunk > 0:
                done += chunk
                slot_i[r, s, SI_DONE] = done
                slot_i[r, s, SI_CHUNK] = 0
                if done == need:
                    # a pass that completes a (re)computed prompt emits its next token
                    if slot_f[r, s, SF_FIRST] < 0.0:
                        slot_f[r, s, SF_FIRST] = t
                        if ip[P_CTL] == 1:
                            ctl_tick(ip, fp, rep_i, rep_f, r, t)
                            ctl_observe(ip, rep_i, rep_f, r, t - slot_f[r, s, SF_ARR], t)
                        if ip[P_PLAN] == 1:
                            pl_observe_ttft(ip, rep_i, rep_f, r, t - slot_f[r, s, SF_ARR], t)
                    slot_i[r, s, SI_FRESH] = 0
                    gen += 1
                    slot_i[r, s, SI_GEN] = gen
                    wk_i[r, d, WI_APT] -= np.int64(slot_i[r, s, SI_APT])
                    slot_i[r, s, SI_APT] = 0
            elif done == need:
                gen += k
                slot_i[r, s, SI_GEN] = gen
                # its last step computed context isl + gen - 1: a block more each B tokens
                if gen > np.int64(slot_i[r, s, SI_NEXTB]):
                    growth += cl_grow_to(slot_i, r, s, gen, bs)
            if done == need and gen >= np.int64(slot_i[r, s, SI_OSL]):
                n_live -= 1
                run[r, d, i] = run[r, d, n_live]
                run[r, d, n_live] = s
            else:
                i += 1
        wk_i[r, d, WI_NRUN] = n_live
        if growth > 0 and not cache_grow(pc, wk_i, rep_i, ev, fp[F_EVDELAY], t, r, d, ip[P_G], ip[P_DKV], growth):
            rep_i[r, RI_STATUS] = STATUS_OVERCAP
        # blocks grow about evenly over a pass: its held blocks are the mean of start and end
        held = np.float64(np.int64(wk_i[r, d, WI_USED]) - np.int64(wk_i[r, d, WI_FREE]))
        integrate(ip, rep_i, rep_f, r, RF_DKV, t0, t, 0.5 * (wk_f[r, d, WF_HELD0] + held))
        for j in range(n_old - 1, n_live - 1, -1):  # in the order they were found
            cl_finish(
                ip, fp, slot_i, slot_f, wk_i, pc, queue, rep_i, rep_f, heap_t, heap_c, out_f, out_i, r, key,
                np.int64(run[r, d, j]), t,
            )  # fmt: skip

    @jit_inline
    def arrive(
        ip, fp, tabs, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, s, rid,
        t,
    ):  # fmt: skip
        cl_new_request(ip, fp, tabs, slot_i, slot_f, rep_i, rep_f, r, key, s, rid, t)
        cl_route(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, s, t)

    @jit
    def simulate_replica(
        r,
        ip,
        fp,
        tabs,
        slot_i,
        slot_f,
        wk_i,
        wk_f,
        pc,
        ev,
        queue,
        run,
        heap_t,
        heap_c,
        rep_i,
        rep_f,
        out_f,
        out_i,
        cand,
    ):
        key = rng_replica_key(ip[P_SEED], ip[P_STREAM], ip[P_RBASE] + r)
        n_p = ip[P_NP]
        n_w = n_p + ip[P_ND]
        n_s = ip[P_S]
        for w in range(n_w + 1):
            for j in range(wk_i.shape[2]):
                wk_i[r, w, j] = 0
            for j in range(wk_f.shape[2]):
                wk_f[r, w, j] = 0.0
            wk_f[r, w, WF_BUSY] = INF
            wk_f[r, w, WF_WAKE] = INF
        for w in range(n_w):
            for g in range(ip[P_G]):
                for j in range(pc.shape[3]):
                    pc[r, w, g, j] = 0
        if ip[P_LINEAGE] == 1:
            for w in range(n_p):
                wk_i[r, w, WI_LINEAGE] = 1
        if tiers_on and ip[P_G2CAP] > 0:  # lower tiers on the prefill workers (kernels/tiers.py)
            for w in range(n_p):
                wk_i[r, w, WI_G2CAP] = ip[P_G2CAP]
                wk_i[r, w, WI_G3CAP] = ip[P_G3CAP]
                wk_i[r, w, WI_DECAY] = ip[P_DECAY]
                for j in range(3):
                    wk_i[r, w, WI_CR1 + j] = ip[P_CR1 + j]
                wk_i[r, w, WI_CR1 + 3] = ip[P_CR4]
                wk_i[r, w, WI_G4CAP] = ip[P_G4CAP]
        for j in range(rep_i.shape[1]):
            rep_i[r, j] = 0
        for j in range(rep_f.shape[1]):
            rep_f[r, j] = 0.0
        rep_f[r, RF_OMEGA] = fp[F_OMEGA]
        rep_f[r, RF_TAU] = fp[F_TAU]
        rep_f[r, RF_BATCH_DUE] = INF
        if ip[P_CTL] == 1:
            ctl_start(ip, fp, rep_i, rep_f, r)
        rep_i[r, RI_NPA] = n_p
        rep_i[r, RI_NDA] = ip[P_ND]
        if ip[P_PLAN] == 1:
            pl_start(ip, fp, rep_i, rep_f, r)
        for s in range(n_s):
            slot_i[r, s, SI_STATE] = ST_FREE
            slot_i[r, s, SI_CLIENT] = s
            slot_i[r, s, SI_KCOUNT] = 0
            slot_i[r, s, SI_TROW] = -1
        trace = ip[P_TRACE] if trace_on else TRACE_NONE
        if trace != TRACE_NONE:
            replay_start(ip, fp, tabs, rep_i, rep_f, r, key)
        closed = ip[P_ARRIVAL] == 0
        drain = ip[P_DRAIN] == 1
        last_arrival = ip[P_WARM] + ip[P_N]
        if closed:
            for c in range(ip[P_C]):
                heap_push(heap_t, heap_c, rep_i, r, 0.0, c)
        else:
            for i in range(n_s):
                queue[r, n_w + 1, i] = n_s - 1 - i
            rep_i[r, RI_FREE_TOP] = n_s
            if trace == TRACE_TIMES:
                rep_f[r, RF_NEXT_ARR] = replay_arrival_ms(ip, fp, tabs, rep_i, rep_f, r, np.int64(0))
            else:
                rep_f[r, RF_NEXT_ARR] = rng_exponential(key, np.int64(0), np.int64(RNG_F_GAP * 8), 1.0 / fp[F_RATE])
        while True:
            t = INF
            for w in range(n_w):
                b = wk_f[r, w, WF_BUSY]
                if b < t:
                    t = b
                if w >= n_p and b == INF and wk_f[r, w, WF_WAKE] < t:
                    t = wk_f[r, w, WF_WAKE]
            if rep_f[r, RF_BATCH_DUE] < t:
                t = rep_f[r, RF_BATCH_DUE]
            if rep_i[r, RI_PWAKE] == 1:
                # a decode worker freed the KV copy of an idle prefill worker with requests waiting
                # (cluster.admit_queue): the next event is now, so that it starts at this instant
                t = rep_f[r, RF_T]
            if closed:
                if rep_i[r, RI_HEAPN] > 0 and heap_t[r, 0] < t:
                    t = heap_t[r, 0]
            elif rep_f[r, RF_NEXT_ARR] < t:
                t = rep_f[r, RF_NEXT_ARR]
            if t == INF:
                rep_i[r, RI_STATUS] = STATUS_STALL
                break
            if ip[P_PLAN] == 1:
                pl_tick(ip, fp, wk_i, wk_f, pc, ev, rep_i, rep_f, r, t, rep_f[r, RF_T])
            rep_f[r, RF_T] = t
            for w in range(n_p):
                if wk_f[r, w, WF_BUSY] == t:
                    prefill_end(
                        ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, w,
                        t,
                    )  # fmt: skip
            for d in range(n_p, n_w):
                if wk_f[r, d, WF_BUSY] == t:
                    decode_end(
                        ip,
                        fp,
                        slot_i,
                        slot_f,
                        wk_i,
                        wk_f,
                        pc,
                        ev,
                        queue,
                        run,
                        rep_i,
                        rep_f,
                        heap_t,
                        heap_c,
                        out_f,
                        out_i,
                        r,
                        key,
                        d,
                        t,
                    )
            if rep_f[r, RF_BATCH_DUE] <= t:  # held decode decisions whose time is up
                batch_flush(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, rep_f, out_f, out_i, cand, r, t)
            if rep_i[r, RI_DONE_MEAS] >= ip[P_N]:
                break
            # arrivals due now: a closed-loop client whose wake-up time has come, or the next Poisson arrival
            while True:
                if drain and rep_i[r, RI_SEQ] >= last_arrival:
                    # a finite run, like a replay: no request after the measured ones
                    rep_f[r, RF_NEXT_ARR] = INF
                    rep_i[r, RI_HEAPN] = 0
                    break
                if closed:
                    if rep_i[r, RI_HEAPN] == 0 or heap_t[r, 0] > t:
                        break
                    s = heap_pop(heap_t, heap_c, rep_i, r)
                    kc = np.int64(slot_i[r, s, SI_KCOUNT])
                    slot_i[r, s, SI_KCOUNT] = kc + 1
                    rid = rng_client_request_id(s, kc)
                else:
                    if rep_f[r, RF_NEXT_ARR] > t:
                        break
                    top = rep_i[r, RI_FREE_TOP]
                    if top == 0:
                        rep_i[r, RI_STATUS] = STATUS_SLOTS
                        break
                    rep_i[r, RI_FREE_TOP] = top - 1
                    s = np.int64(queue[r, n_w + 1, top - 1])
                    rid = rep_i[r, RI_NOPEN]
                    rep_i[r, RI_NOPEN] = rid + 1
                arrive(
                    ip, fp, tabs, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, out_f, out_i, cand, r,
                    key, s, rid, t,
                )  # fmt: skip
                if not closed:
                    if trace == TRACE_TIMES:
                        rep_f[r, RF_NEXT_ARR] = replay_arrival_ms(ip, fp, tabs, rep_i, rep_f, r, rid + 1)
                    else:
                        rep_f[r, RF_NEXT_ARR] += rng_exponential(
                            key, rid + 1, np.int64(RNG_F_GAP * 8), 1.0 / fp[F_RATE]
                        )
            if rep_i[r, RI_STATUS] != 0:
                break
            for w in range(n_p):
                if wk_f[r, w, WF_BUSY] == INF:
                    plan_prefill(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, rep_i, out_i, r, w, t)
            rep_i[r, RI_PWAKE] = 0
            for d in range(n_p, n_w):
                if wk_f[r, d, WF_BUSY] == INF and (
                    np.int64(wk_i[r, d, WI_QN]) > 0 or np.int64(wk_i[r, d, WI_NRUN]) > 0
                ):
                    cl_plan_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, r, d, t)

            if ip[P_CHECK] == 1:
                for w in range(n_w):
                    cap = ip[P_PKV] if w < n_p else ip[P_DKV]
                    if not tiers_conserved(pc, wk_i, r, w, ip[P_G], cap):
                        rep_i[r, RI_STATUS] = STATUS_TIERS
                if rep_i[r, RI_STATUS] != 0:
                    break
            rep_i[r, RI_EVENTS] += 1
            if rep_i[r, RI_EVENTS] >= ip[P_MAXEVENTS]:
                rep_i[r, RI_STATUS] = STATUS_EVENTS
                break

    return Namespace(
        plan_prefill=plan_prefill, prefill_end=prefill_end, decode_end=decode_end, simulate_replica=simulate_replica
    )
