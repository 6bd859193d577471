"""Requests: their attributes drawn at arrival (lengths, prefix group, service time; or a replayed
trace's row) and their completion (outputs recorded, blocks released, the client woken)."""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    DIST_FIXED,
    DIST_LOGNORMAL,
    DIST_UNIFORM,
    F_ISL_MU,
    F_ISL_SIG,
    F_OSL_MU,
    F_OSL_SIG,
    F_PTOK,
    F_RATIO,
    F_SVC,
    F_THINK,
    FLOW_PREFILL_FIRST,
    OF_ARR,
    OF_CWAIT,
    OF_DWAIT,
    OF_E2E,
    OF_ITL,
    OF_ONB,
    OF_PWAIT,
    OF_TTFT,
    OF_XFER,
    OI_CACHED,
    OI_DONE,
    OI_DW,
    OI_GRP,
    OI_H2,
    OI_H3,
    OI_H4,
    OI_ISL,
    OI_OSL,
    OI_PBLK,
    OI_PW,
    OI_SEQ,
    P_ARRIVAL,
    P_B,
    P_CLIENT,
    P_FLOW,
    P_G,
    P_ISL_A,
    P_ISL_B,
    P_ISL_KIND,
    P_N,
    P_ND,
    P_NP,
    P_OSL_A,
    P_OSL_B,
    P_OSL_KIND,
    P_PLAN,
    P_POP,
    P_PROF,
    P_TG,
    P_TRACE,
    P_WARM,
    PROF_DET,
    PROF_EXP,
    RESV_ADMIT,
    RF_FIRST_ARR,
    RF_LAST_DONE,
    RI_CACT,
    RI_DONE_MEAS,
    RI_FREE_TOP,
    RI_SEQ,
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
    SF_SRV,
    SF_SVC,
    SF_TPF,
    SF_TWAIT,
    SF_XFER,
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
    SI_GHOST,
    SI_GRP,
    SI_H2,
    SI_H3,
    SI_H4,
    SI_ISL,
    SI_KCOUNT,
    SI_MEAS,
    SI_NEED,
    SI_OSL,
    SI_PFX,
    SI_PW,
    SI_RECOMP,
    SI_RESERVE,
    SI_RESV,
    SI_SEQ,
    SI_STATE,
    ST_FREE,
    TB_GRP,
    TB_ISL,
    TB_OSL,
    TB_PFX,
    TRACE_CLOSED,
    TRACE_NONE,
)


def build(jit, rng, cache, router, heap, planner, replay, meters, blocks, client, schedule, jit_inline=None):
    jit_inline = jit_inline or jit
    park = schedule.park
    staged_on = schedule.enabled  # a compile-time constant: False in the lean build (source.build)
    client_release = client.release
    cache_release = cache.release
    count_in_flight = meters.count_in_flight
    heap_push = heap.push
    kept_blocks = blocks.kept_blocks
    ceil_blocks = blocks.ceil_blocks
    full_blocks = blocks.full_blocks
    pl_observe_itl = planner.observe_itl
    replay_take_row = replay.take_row
    rng_below = rng.below
    rng_client_request_id = rng.client_request_id
    rng_exponential = rng.exponential
    rng_normal = rng.normal
    router_unbook_active = router.unbook_active
    trace_on = replay.enabled  # a compile-time constant: False in the lean build (source.build)
    uniform = rng.uniform

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
    def new_request(ip, fp, tabs, slot_i, slot_f, rep_i, rep_f, r, key, s, rid, t):
        pfx = np.int64(-1)
        if trace_on and ip[P_TRACE] != TRACE_NONE:  # a replayed trace's row (poa_mc/kernels/replay.py)
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
            # a share of the prompt, or with a fixed-length prefix (a system prompt) share 1 capped at
            # its length (F_PTOK: the host packs 1e300 for no cap), one expression with no branch
            pfx = full_blocks(ip, np.int64(math.floor(min(fp[F_RATIO] * isl, fp[F_PTOK]))))
        seq = rep_i[r, RI_SEQ]
        if ip[P_CLIENT] == 0:  # a modelled client counted it when it created it (poa_mc/kernels/client.py)
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
        slot_f[r, s, SF_XFER] = 0.0
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
    def finish(ip, fp, slot_i, slot_f, wk_i, pc, queue, rep_i, rep_f, heap_t, heap_c, out_f, out_i, r, key, s, t):
        """Request s emitted its last token at t: record it, free its blocks, wake its client."""
        bs = ip[P_B]
        d = np.int64(slot_i[r, s, SI_DW])
        g = np.int64(slot_i[r, s, SI_GRP])
        isl = np.int64(slot_i[r, s, SI_ISL])
        osl = np.int64(slot_i[r, s, SI_OSL])
        pblk = ceil_blocks(ip, isl)
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
            # with a client, TTFT and E2E run from the client's creation of the request; the
            # server's part starts at its arrival at the frontend
            srv = slot_f[r, s, SF_SRV] if ip[P_CLIENT] == 1 else arr
            out_f[r, meas, OF_CWAIT] = srv - arr
            out_f[r, meas, OF_XFER] = slot_f[r, s, SF_XFER]
            # a fully cached prompt is never scheduled in a prefill pass: it waited for no prefill
            tpf = slot_f[r, s, SF_TPF]
            out_f[r, meas, OF_PWAIT] = tpf - srv if tpf >= 0.0 else 0.0
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
        if ip[P_CLIENT] == 1:
            client_release(ip, fp, slot_f, queue, rep_i, r, t)
        if ip[P_ARRIVAL] == 0:
            c = np.int64(slot_i[r, s, SI_CLIENT])
            wake = t
            if trace_on and ip[P_TRACE] == TRACE_CLOSED:
                wake = t + slot_f[r, s, SF_TWAIT]  # its session's next turn, or a new session now
            elif fp[F_THINK] > 0.0:
                rid = rng_client_request_id(c, np.int64(slot_i[r, s, SI_KCOUNT]))
                wake = t + rng_exponential(key, rid, np.int64(RNG_F_THINK * 8), fp[F_THINK])
            if not staged_on or c < rep_i[r, RI_CACT]:
                heap_push(heap_t, heap_c, rep_i, r, wake, c)
            else:  # a schedule's stage with fewer clients (poa_mc/kernels/schedule.py)
                park(queue, rep_i, r, ip[P_NP] + ip[P_ND] + 1, c)
        else:
            n_w = ip[P_NP] + ip[P_ND]
            top = rep_i[r, RI_FREE_TOP]
            queue[r, n_w + 1, top] = s
            rep_i[r, RI_FREE_TOP] = top + 1

    return Namespace(draw_len=draw_len, draw_group=draw_group, new_request=new_request, finish=finish)
