"""The per-replica event loop of one cluster (layout in layout.py).

One call of `simulate_replica(r, ...)` runs replica r from t = 0 until its measured requests
have all completed. Time is in milliseconds (float64). Each instant is processed in Dynamo's
mocker order: prefill passes that end now (their requests are handed to decode queues), then
decode passes that end now, then arrivals (routing), then new passes on idle prefill workers,
then on idle decode workers. What happens at each event is in prefill.py, decode.py,
placement.py and requests.py.
"""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    ARRIVAL_CONSTANT,
    F_OMEGA,
    F_STAGE_RATE,
    F_TAU,
    NCAND,
    NEV,
    NOF,
    NOI,
    NPC,
    NSF,
    NSI,
    NWF,
    P_ARRIVAL,
    P_CHECK,
    P_CLIENT,
    P_CR1,
    P_CR4,
    P_CTL,
    P_DECAY,
    P_DKV,
    P_DRAIN,
    P_G,
    P_G2CAP,
    P_G3CAP,
    P_G4CAP,
    P_LINEAGE,
    P_MAXEVENTS,
    P_N,
    P_ND,
    P_NP,
    P_PKV,
    P_PLAN,
    P_RBASE,
    P_S,
    P_SEED,
    P_STREAM,
    P_TRACE,
    P_WARM,
    RF_BATCH_DUE,
    RF_NEXT_ARR,
    RF_OMEGA,
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
    RI_STAGE,
    RI_STAGE_AT,
    RI_STATUS,
    RNG_F_GAP,
    SF_ARR,
    SF_SRV,
    SI_CLIENT,
    SI_KCOUNT,
    SI_LINK,
    SI_STATE,
    SI_TROW,
    ST_FREE,
    STATUS_TIERS,
    TRACE_NONE,
    TRACE_TIMES,
    WF_BUSY,
    WF_WAKE,
    WI_CR1,
    WI_DECAY,
    WI_G2CAP,
    WI_G3CAP,
    WI_G4CAP,
    WI_LINEAGE,
    WI_NRUN,
    WI_QN,
)

INF = math.inf
STATUS_SLOTS = 1
STATUS_EVENTS = 2
STATUS_STALL = 3
# STATUS_OVERCAP = 4 (layout.py): set by the decode planner


def build(
    jit,
    rng,
    tiers,
    heap,
    controller,
    planner,
    replay,
    client,
    schedule,
    requests,
    decode,
    placement,
    batch,
    prefill,
    jit_inline=None,
    fixed=None,
):
    # `fixed`: poa_mc/kernels/fixed_rows.fixed_last on the CPU, None on CUDA (whose views are strided, so
    # a constant width would not help); the branch on it is pruned before typing
    fixed_rows = fixed is not None
    jit_inline = jit_inline or jit
    tiers_on = tiers.enabled  # compile-time constants: False in the lean build (source.build)
    batch_flush = batch.flush
    client_create = client.create
    client_next_due = client.next_due
    client_pop_due = client.pop_due
    new_request = requests.new_request
    plan_decode = decode.plan_decode
    route = placement.route
    ctl_start = controller.start
    decode_end = decode.decode_end
    heap_pop = heap.pop
    pl_start = planner.start
    pl_tick = planner.tick
    plan_prefill = prefill.plan_prefill
    prefill_end = prefill.prefill_end
    replay_arrival_ms = replay.arrival_ms
    replay_start = replay.start
    rng_client_request_id = rng.client_request_id
    rng_exponential = rng.exponential
    rng_replica_key = rng.replica_key
    tiers_conserved = tiers.conserved
    schedule_start = schedule.start
    next_stage = schedule.next_stage
    staged_on = schedule.enabled  # a compile-time constant: False in the lean build (source.build)
    trace_on = replay.enabled  # a compile-time constant: False in the lean build (source.build)

    @jit_inline
    def arrive(
        ip, fp, tabs, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, s, rid,
        t,
    ):  # fmt: skip
        new_request(ip, fp, tabs, slot_i, slot_f, rep_i, rep_f, r, key, s, rid, t)
        route(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, out_f, out_i, cand, r, key, s, t)

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
        if fixed_rows:  # the CPU builds: rows of constant width (poa_mc/kernels/fixed_rows.py)
            slot_i = fixed(slot_i, NSI)
            slot_f = fixed(slot_f, NSF)
            wk_f = fixed(wk_f, NWF)
            ev = fixed(ev, NEV)
            out_f = fixed(out_f, NOF)
            out_i = fixed(out_i, NOI)
            cand = fixed(cand, NCAND)
            if not tiers_on:
                pc = fixed(pc, NPC)
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
        if tiers_on and ip[P_G2CAP] > 0:  # lower tiers on the prefill workers (poa_mc/kernels/tiers.py)
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
            slot_i[r, s, SI_LINK] = 0
        trace = ip[P_TRACE] if trace_on else TRACE_NONE
        if trace != TRACE_NONE:
            replay_start(ip, fp, tabs, rep_i, rep_f, r, key)
        closed = ip[P_ARRIVAL] == 0
        drain = ip[P_DRAIN] == 1
        client_on = ip[P_CLIENT] == 1
        last_arrival = ip[P_WARM] + ip[P_N]
        schedule_start(ip, queue, heap_t, heap_c, rep_i, r, n_w + 1)  # a closed loop's clients too
        if not closed:
            for i in range(n_s):
                queue[r, n_w + 1, i] = n_s - 1 - i
            rep_i[r, RI_FREE_TOP] = n_s
            if trace == TRACE_TIMES:
                rep_f[r, RF_NEXT_ARR] = replay_arrival_ms(ip, fp, tabs, rep_i, rep_f, r, np.int64(0))
            else:
                gap = 1.0 / fp[F_STAGE_RATE]
                if ip[P_ARRIVAL] != ARRIVAL_CONSTANT:
                    gap = rng_exponential(key, np.int64(0), np.int64(RNG_F_GAP * 8), gap)
                rep_f[r, RF_NEXT_ARR] = gap
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
            if client_on and client_next_due(ip, slot_f, queue, rep_i, r) < t:
                t = client_next_due(ip, slot_f, queue, rep_i, r)
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
                    if staged_on and rep_i[r, RI_NOPEN] == rep_i[r, RI_STAGE_AT]:  # a schedule's next stage
                        next_stage(ip, queue, heap_t, heap_c, rep_i, r, n_w + 1, t)
                    if rep_i[r, RI_HEAPN] == 0 or heap_t[r, 0] > t:
                        break
                    s = heap_pop(heap_t, heap_c, rep_i, r)
                    if staged_on:  # a closed loop counts its creations for its schedule only
                        rep_i[r, RI_NOPEN] += 1
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
                if client_on:  # the client sends it: poa_mc/kernels/client.py, its arrival below
                    client_create(ip, fp, slot_f, queue, rep_i, rep_f, r, s, t)
                else:
                    arrive(
                        ip, fp, tabs, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, out_f, out_i, cand,
                        r, key, s, rid, t,
                    )  # fmt: skip
                if not closed:
                    if trace == TRACE_TIMES:
                        rep_f[r, RF_NEXT_ARR] = replay_arrival_ms(ip, fp, tabs, rep_i, rep_f, r, rid + 1)
                    else:
                        stage = np.int64(0)
                        if staged_on:
                            if rid + 1 == rep_i[r, RI_STAGE_AT]:  # a schedule's next stage begins
                                next_stage(ip, queue, heap_t, heap_c, rep_i, r, n_w + 1, t)
                            stage = rep_i[r, RI_STAGE]
                        gap = 1.0 / fp[F_STAGE_RATE + stage]
                        if ip[P_ARRIVAL] != ARRIVAL_CONSTANT:  # Poisson: an exponential gap of that mean
                            gap = rng_exponential(key, rid + 1, np.int64(RNG_F_GAP * 8), gap)
                        rep_f[r, RF_NEXT_ARR] += gap
            # requests a modelled client sent that reach the frontend now, in the order they were
            # created: the n-th to arrive is the n-th created, and keeps that request's draws
            while client_on and rep_i[r, RI_STATUS] == 0 and client_next_due(ip, slot_f, queue, rep_i, r) <= t:
                s = client_pop_due(ip, queue, rep_i, r)
                if closed:
                    rid = rng_client_request_id(s, np.int64(slot_i[r, s, SI_KCOUNT]) - 1)
                else:
                    rid = rep_i[r, RI_SEQ]
                created = slot_f[r, s, SF_ARR]
                arrive(
                    ip, fp, tabs, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, out_f, out_i, cand, r,
                    key, s, rid, t,
                )  # fmt: skip
                slot_f[r, s, SF_SRV] = t
                slot_f[r, s, SF_ARR] = created
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
                    plan_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, r, d, t)

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

    return Namespace(arrive=arrive, simulate_replica=simulate_replica)
