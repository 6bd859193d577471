"""Prefill workers: a pass's plan (queue order, the prefix looked up at admission, the token
budget's chunks, lower-tier copies) and its end (the decode choice of prefill_first, the handoff
to the decode worker)."""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    F_DOMEGA,
    F_EVDELAY,
    F_G2_MS,
    F_G3_MS,
    F_G4_MS,
    F_OVH_PASS,
    F_OVH_REQ,
    F_XFER_LAT,
    F_XFER_TOK,
    FLOW_PREFILL_FIRST,
    OF_DDEC,
    OI_CHOSEN,
    OI_DADD_B,
    OI_DADD_T,
    P_B,
    P_BUDGET,
    P_CTL,
    P_FLOW,
    P_G,
    P_G2CAP,
    P_MAXSEQ,
    P_ND,
    P_NP,
    P_PKV,
    P_POLICY,
    P_PROF,
    P_Q,
    POL_BATCH,
    POL_KV,
    POL_ORACLE,
    POL_PULL,
    POL_ROUND_ROBIN,
    PROF_POLY,
    RESV_ADMIT,
    RESV_PENDING,
    RF_PBUSY,
    RF_TAU,
    RI_NDA,
    SF_ONB,
    SF_SVC,
    SF_TPF,
    SI_ADMIT,
    SI_APT,
    SI_CACHED,
    SI_CHUNK,
    SI_DONE,
    SI_DW,
    SI_GRP,
    SI_H2,
    SI_H3,
    SI_H4,
    SI_ISL,
    SI_MEAS,
    SI_NEED,
    SI_PFX,
    SI_PW,
    WF_BUSY,
    WF_T0,
    WI_APT,
    WI_LH2,
    WI_LH3,
    WI_LH4,
    WI_PASS_K,
    WI_QN,
)

INF = math.inf


def build(
    jit, tiers, cache, router, controller, timing, meters, queues, blocks, decode, placement, batch, jit_inline=None
):
    jit_inline = jit_inline or jit
    tiers_on = tiers.enabled  # a compile-time constant: False in the lean build (source.build)
    batch_hold = batch.hold
    cache_acquire = cache.acquire
    cache_release = cache.release
    cache_seen_overlap = cache.seen_overlap
    cache_row = blocks.cache_row
    ceil_blocks = blocks.ceil_blocks
    hand_to_decode = decode.hand_to_decode
    oracle_decode = placement.oracle_decode
    q_at = queues.q_at
    q_pop = queues.q_pop
    q_push = queues.q_push
    record_candidates = placement.record_candidates_call
    usable_hit = blocks.usable_hit
    ctl_tick = controller.tick
    integrate = meters.integrate
    pass_prefill_ms = timing.pass_prefill_ms
    router_book_active = router.book_active
    router_decode_choice = router.decode_choice
    router_fewest_blocks = router.fewest_blocks
    router_round_robin_decode = router.round_robin_decode
    router_sample_blocks = router.sample_blocks
    router_unbook_active = router.unbook_active

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
                s = q_at(queue, wk_i, r, w, n, qcap)
            elif pull and np.int64(wk_i[r, shared, WI_QN]) > 0:
                s = q_at(queue, wk_i, r, shared, np.int64(0), qcap)
                from_shared = True
            else:
                break
            if np.int64(slot_i[r, s, SI_ADMIT]) == 0:
                isl = np.int64(slot_i[r, s, SI_ISL])
                pblk = ceil_blocks(ip, isl)
                g = np.int64(slot_i[r, s, SI_GRP])
                if prefill_first:
                    pfx = np.int64(slot_i[r, s, SI_PFX])
                    hit = cache_acquire(
                        pc, wk_i, rep_i, ev, fp[F_EVDELAY], t, r, cache_row(ip, w), g, pfx, pblk - pfx, ip[P_G],
                        ip[P_PKV],
                    )  # fmt: skip
                    if hit < 0:
                        break
                    usable = usable_hit(ip, hit, isl)
                    if tiers_on and ip[P_G2CAP] > 0:
                        cw = cache_row(ip, w)
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
                    q_pop(queue, wk_i, r, shared, qcap)
                    q_push(queue, wk_i, r, w, s, qcap)
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
                s = q_at(queue, wk_i, r, w, np.int64(i), qcap)
                if np.int64(slot_i[r, s, SI_CHUNK]) > 0:
                    slot_f[r, s, SF_ONB] += onb
        wk_f[r, w, WF_T0] = t
        wk_f[r, w, WF_BUSY] = t + dur

    @jit_inline
    def prefill_done(
        ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, s, w, t
    ):
        bs = ip[P_B]
        g = np.int64(slot_i[r, s, SI_GRP])
        isl = np.int64(slot_i[r, s, SI_ISL])
        pblk = ceil_blocks(ip, isl)
        if ip[P_FLOW] == FLOW_PREFILL_FIRST:
            # the prefill worker keeps the KV until the decode worker has it (plan_decode frees it)
            wk_i[r, w, WI_APT] -= np.int64(slot_i[r, s, SI_APT])
            router_unbook_active(wk_i, slot_i, r, s, w, np.int64(-1))
            if ip[P_POLICY] == POL_BATCH:
                batch_hold(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, rep_f, out_f, out_i, cand, r, s, t)
                return
            omega_d = fp[F_DOMEGA]
            nd = rep_i[r, RI_NDA]  # the decode workers the router may choose
            record_candidates(ip, slot_i, wk_i, pc, cand, r, s, ip[P_NP], nd, omega_d > 0.0)
            pfx = np.int64(slot_i[r, s, SI_PFX])
            if ip[P_POLICY] == POL_ORACLE:
                d = oracle_decode(ip, fp, slot_i, wk_i, wk_f, pc, queue, run, rep_i, r, key, s, ip[P_NP], nd, t)
            elif ip[P_POLICY] == POL_ROUND_ROBIN:
                d = router_round_robin_decode(rep_i, r, ip[P_NP], nd)
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
            hand_to_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, queue, r, s, d, t, np.int64(RESV_PENDING))
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
        hand_to_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, queue, r, s, d, t + xfer, np.int64(RESV_ADMIT))

    @jit_inline
    def prefill_end(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, w, t):
        qcap = ip[P_Q]
        integrate(ip, rep_i, rep_f, r, RF_PBUSY, wk_f[r, w, WF_T0], t, 1.0)
        for i in range(np.int64(wk_i[r, w, WI_PASS_K])):
            s = q_at(queue, wk_i, r, w, i, qcap)
            slot_i[r, s, SI_DONE] += np.int64(slot_i[r, s, SI_CHUNK])
            slot_i[r, s, SI_CHUNK] = 0
        wk_i[r, w, WI_PASS_K] = 0
        wk_f[r, w, WF_BUSY] = INF
        while np.int64(wk_i[r, w, WI_QN]) > 0:
            s = q_at(queue, wk_i, r, w, np.int64(0), qcap)
            if np.int64(slot_i[r, s, SI_ADMIT]) == 0 or np.int64(slot_i[r, s, SI_DONE]) < np.int64(
                slot_i[r, s, SI_NEED]
            ):
                break
            q_pop(queue, wk_i, r, w, qcap)
            prefill_done(
                ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, s, w, t
            )

    return Namespace(plan_prefill=plan_prefill, prefill_done=prefill_done, prefill_end=prefill_end)
