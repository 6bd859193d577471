"""Routing decisions: a request's prefill worker at arrival (and, on the other flows, its decode
worker), the oracle's look-ahead choices, and the router's candidate costs recorded for PoA-hat.
The policies themselves are router.py's."""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    F_EVDELAY,
    F_OVH_PASS,
    F_OVH_REQ,
    FLOW_AGGREGATED,
    FLOW_PREFILL_FIRST,
    OF_DDEC,
    OI_CHOSEN,
    OI_DADD_B,
    OI_DADD_T,
    OI_PADD_B,
    OI_PADD_T,
    P_B,
    P_CTL,
    P_D,
    P_DEDUP,
    P_DKV,
    P_FLOW,
    P_MAXLOCAL,
    P_ND,
    P_NP,
    P_PLAN,
    P_POLICY,
    P_PSHARE,
    P_Q,
    P_RECORD,
    POL_BATCH,
    POL_KV,
    POL_ORACLE,
    POL_PULL,
    RESV_ADMIT,
    RF_OMEGA,
    RF_TAU,
    RI_DECIDE,
    RI_NDA,
    RI_NPA,
    SI_ABP,
    SI_APT,
    SI_CACHED,
    SI_DONE,
    SI_DW,
    SI_GRP,
    SI_ISL,
    SI_MEAS,
    SI_NEED,
    SI_PFX,
    SI_PW,
    SI_STATE,
    ST_PREFILL,
    WF_BUSY,
    WI_APT,
    WI_FREE,
    WI_NRUN,
    WI_PASS_K,
    WI_QN,
    WI_USED,
)

INF = math.inf
NAN = math.nan
_ORACLE_B0 = 200  # random sub-stream of the oracle's tie-breaks (router.py uses 100 + i)


def build(jit, rng, cache, router, controller, timing, queues, blocks, decode, jit_inline=None):
    jit_inline = jit_inline or jit
    cache_deliver = cache.deliver
    cache_overlap = cache.overlap
    cache_row = blocks.cache_row
    ceil_blocks = blocks.ceil_blocks
    cache_seen_overlap = cache.seen_overlap
    computed_tokens = blocks.computed_tokens
    ctl_tick = controller.tick
    hand_to_decode = decode.hand_to_decode
    prefill_span = timing.prefill_span
    q_at = queues.q_at
    q_push = queues.q_push
    router_book_active = router.book_active
    router_cand_costs = router.cand_costs
    router_choose = router.choose
    settle = decode.settle
    step_ms = timing.step_ms
    uniform = rng.uniform
    usable_hit = blocks.usable_hit

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
        pblk = ceil_blocks(ip, isl)
        for w in range(lo, lo + k):
            cw = cache_row(ip, w)
            cand[r, meas, w, 0], cand[r, meas, w, 1] = router_cand_costs(
                wk_i, pc, r, w, cw, g, pfx, apfx, isl, pblk, ip[P_B]
            )

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
        pblk = ceil_blocks(ip, isl)
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
        pblk = ceil_blocks(ip, isl)
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
                rep_f[r, RF_TAU], ip[P_D], by_tokens, ip, fp,
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

    return Namespace(
        record_candidates=record_candidates,
        pick_least=pick_least,
        oracle_prefill=oracle_prefill,
        oracle_decode=oracle_decode,
        route=route,
        record_candidates_call=record_candidates_call,
    )
