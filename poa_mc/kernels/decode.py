"""Decode workers (vLLM's scheduler as Dynamo's replay runs it; docs/engine.md, "Decode workers").

A transfer's blocks are reserved at a pass boundary and the request admitted when its KV has
arrived; the running requests' next step is served first, preempting the newest when it cannot
get its blocks; waiting requests are admitted in `cluster.decode_admission` order.

Decode runs in segments: with a fixed running set of n sequences whose summed context is X0 at
the segment's first step, step j sees context X0 + n*j, so the time of k steps is a sum of a
quadratic in j with a closed form (poa_mc/kernels/timing.py: `decode_span`, which also sums an aic
table's piecewise-linear steps). A segment lasts until the next completion;
a request that becomes ready on a busy decode worker cuts the segment at the first step boundary
at or after its ready time (a binary search over k), so it joins the next pass, exactly as step-
by-step simulation would. Block growth bounds a segment too: it ends before the first step that
cannot get its blocks. With ip[P_NAIVE] = 1 every segment is one step, timed step by step, and
every pass scans its whole running set instead of taking the sums decode_end left (WI_AGG_*): the
reference the closed form and those sums are tested against.

One file, over 500 lines, because it is one state machine: `build` returns the decode worker's
functions as closures over the same compiled dependencies (blocks, queues, timing, links), and
every one of them reads and writes the same rows of a worker's state; split, each part would need
the others' closures passed in, and the order of a pass (settle, admit, plan the next segment)
would no longer read in one place.
"""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    DADMIT_REPLAY,
    F_EVDELAY,
    F_KV_BYTES,
    F_NIXL_POST,
    F_XFER_LAT,
    F_XFER_TOK,
    FLOW_AGGREGATED,
    FLOW_PREFILL_FIRST,
    GHOST_NONE,
    HANDOVER_VLLM,
    P_B,
    P_BUDGET,
    P_CLIENT,
    P_CTL,
    P_DADMIT,
    P_DKV,
    P_FLOW,
    P_G,
    P_HANDOVER,
    P_LINKS,
    P_MAXSEQ,
    P_NAIVE,
    P_ND,
    P_NP,
    P_PLAN,
    P_PROF,
    P_PSHARE,
    P_Q,
    PROF_POLY,
    RESV_ADMIT,
    RESV_HELD,
    RESV_PENDING,
    RESV_SEEN,
    RF_DBATCH,
    RF_DBUSY,
    RF_DKV,
    RI_ADMSEQ,
    RI_PREEMPT,
    RI_PWAKE,
    RI_STATUS,
    SF_ADM,
    SF_ARR,
    SF_FIRST,
    SF_KV,
    SF_READY,
    SF_SRV,
    SF_SVC,
    SF_TPF,
    SF_XFER,
    SI_ADMSEQ,
    SI_APT,
    SI_CACHED,
    SI_CHUNK,
    SI_DONE,
    SI_DW,
    SI_FRESH,
    SI_GEN,
    SI_GHOST,
    SI_GRP,
    SI_ISL,
    SI_LINK,
    SI_NEED,
    SI_NEXTB,
    SI_OSL,
    SI_PFX,
    SI_PW,
    SI_RECOMP,
    SI_RESERVE,
    SI_RESV,
    SI_STATE,
    ST_DECODE_Q,
    ST_RUNNING,
    STATUS_OVERCAP,
    VLLM_POLL_MS,
    WF_BUSY,
    WF_HELD0,
    WF_T0,
    WF_WAKE,
    WI_AGG,
    WI_AGG_M,
    WI_AGG_N,
    WI_AGG_W,
    WI_AGG_X,
    WI_APT,
    WI_FREE,
    WI_MIXED,
    WI_NRUN,
    WI_QH,
    WI_QN,
    WI_SEG_M,
    WI_SEG_N,
    WI_SEG_X0,
    WI_USED,
)

INF = math.inf
NONE_LEFT = np.int64(1) << np.int64(40)  # a pass's fewest tokens left while no sequence decodes


def build(jit, cache, controller, planner, timing, meters, queues, blocks, requests, links, jit_inline=None):
    jit_inline = jit_inline or jit
    cache_acquire = cache.acquire
    cache_acquire_need = cache.acquire_need
    cache_fits = cache.fits
    cache_grow = cache.grow
    cache_overlap = cache.overlap
    cache_reclaim = cache.reclaim
    cache_release = cache.release
    cache_row = blocks.cache_row
    link_join = links.join
    link_project = links.project
    link_done = links.done
    node_of = links.node_of
    ceil_blocks = blocks.ceil_blocks
    full_blocks = blocks.full_blocks
    finish = requests.finish
    grow_to = blocks.grow_to
    computed_tokens = blocks.computed_tokens
    ctl_observe = controller.observe
    ctl_tick = controller.tick
    fits_with_spare = blocks.fits_with_spare
    integrate = meters.integrate
    kept_blocks = blocks.kept_blocks
    pass_prefill_ms = timing.pass_prefill_ms
    pl_observe_ttft = planner.observe_ttft
    q_at = queues.q_at
    q_push = queues.q_push
    q_remove = queues.q_remove
    q_wrap = queues.wrap
    set_reserve = blocks.set_reserve
    step_extra = blocks.step_extra
    step_ms = timing.step_ms
    steps_until = timing.steps_until
    segment = timing.segment
    span = timing.span
    first_step = timing.first_step
    usable_hit = blocks.usable_hit

    @jit_inline
    def first_token(ip, fp, slot_f, rep_i, rep_f, r, s, at, t):
        """Request s emits its first token at `at` (decided at t <= at): its TTFT goes to the
        controller and the planner, when they run."""
        slot_f[r, s, SF_FIRST] = at
        if ip[P_CTL] == 1:
            ctl_tick(ip, fp, rep_i, rep_f, r, t)
            ctl_observe(ip, rep_i, rep_f, r, at - slot_f[r, s, SF_ARR], at)
        if ip[P_PLAN] == 1:  # Dynamo's planner reads the frontend's TTFT: from the arrival there
            pl_observe_ttft(ip, rep_i, rep_f, r, at - slot_f[r, s, SF_SRV if ip[P_CLIENT] == 1 else SF_ARR], at)

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
        seg = segment(fp, x0, n)
        lo = steps_until(fp, seg, t0, x0, n, np.int64(wk_i[r, d, WI_SEG_M]), cap, t_ready)
        wk_i[r, d, WI_SEG_M] = lo
        wk_f[r, d, WF_BUSY] = t0 + span(fp, seg, x0, n, lo, cap)

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
        h = q_wrap(np.int64(wk_i[r, d, WI_QH]) + qcap - 1, qcap)
        queue[r, d, h] = s
        wk_i[r, d, WI_QH] = h
        wk_i[r, d, WI_QN] += 1
        rep_i[r, RI_PREEMPT] += 1

    @jit_inline
    def reserve(ip, fp, slot_i, slot_f, wk_i, pc, ev, queue, run, rep_i, rep_f, r, d, t, nspare):
        """prefill_first, at a pass boundary of decode worker d: reserve the prompt blocks of the
        oldest transfer waiting for them (its resident prefix shared), if they fit in the free and
        evictable blocks (with room for the next step of the first `nspare` running requests) and
        fewer than max_seqs requests run; its KV transfer
        starts now. As in
        Dynamo's replay, one reservation per boundary, except that a reservation whose transfer
        takes no time is activated at once, which lets the next one reserve at the same instant.
        With HANDOVER_VLLM (vLLM's scheduler, docs/engine.md "The handover"), every waiting
        transfer that fits reserves at this boundary, and each posts its reads before the pass's
        forward: the pass starts `post` ms later, a transfer's wire time starts when its own reads
        are posted.
        Returns (earliest ready time among those reserved, 1 if a later transfer still waits for
        a boundary to reserve at, 0 otherwise, ms of posting)."""
        qcap = ip[P_Q]
        bs = ip[P_B]
        vllm = ip[P_HANDOVER] == HANDOVER_VLLM
        first_ready = INF
        post = 0.0
        joined = np.int64(0)  # HANDOVER_VLLM with links: the links this boundary's transfers joined
        for i in range(np.int64(wk_i[r, d, WI_QN])):
            s = q_at(queue, wk_i, r, d, np.int64(i), qcap)
            if np.int64(slot_i[r, s, SI_RESV]) != RESV_PENDING:
                continue
            if not vllm and first_ready < INF and first_ready > t:
                return first_ready, np.int64(1), post
            if np.int64(wk_i[r, d, WI_NRUN]) >= ip[P_MAXSEQ]:
                break
            isl = np.int64(slot_i[r, s, SI_ISL])
            pfx = np.int64(slot_i[r, s, SI_PFX])
            pblk = ceil_blocks(ip, isl)
            g = np.int64(slot_i[r, s, SI_GRP])
            if not fits_with_spare(
                ip, slot_i, wk_i, run, r, d, cache_acquire_need(pc, r, d, g, pfx, pblk - pfx), nspare
            ):
                break
            hit = cache_acquire(pc, wk_i, rep_i, ev, fp[F_EVDELAY], t, r, d, g, pfx, pblk - pfx, ip[P_G], ip[P_DKV])
            if hit < 0:
                break
            set_reserve(slot_i, r, s, pblk - pfx, bs)
            slot_i[r, s, SI_RESV] = RESV_HELD
            if vllm:  # it reads the blocks it does not hold, one descriptor per block and layer region
                top = full_blocks(ip, isl - 1)  # a local hit stops short of the prompt's last token
                post += fp[F_NIXL_POST] * (pblk - (hit if hit < top else top))
            ready = t + post
            slot_f[r, s, SF_XFER] = t + post  # the transfer's start (its time once the KV arrived)
            pw = np.int64(slot_i[r, s, SI_PW])
            if ip[P_LINKS] == 1 and node_of(ip, pw) != node_of(ip, d):  # over the prefill node's link
                link = node_of(ip, pw)
                link_join(ip, fp, slot_i, slot_f, rep_i, rep_f, r, s, link, t, fp[F_KV_BYTES] * isl)
                if not vllm:  # one a boundary: its ready time says whether the next one reserves now
                    link_project(ip, fp, slot_i, slot_f, rep_f, r, link)
                    ready = slot_f[r, s, SF_READY]
                else:  # the link is worked out once, after this boundary's reservations
                    joined |= np.int64(1) << link
                    continue
            elif fp[F_XFER_TOK] > 0.0 or fp[F_XFER_LAT] > 0.0:
                ready = t + post + fp[F_XFER_LAT] + fp[F_XFER_TOK] * isl
            slot_f[r, s, SF_READY] = ready
            if ready < first_ready:
                first_ready = ready
        if joined != 0:
            for link in range(63):
                if (joined >> link) & 1:
                    link_project(ip, fp, slot_i, slot_f, rep_f, r, np.int64(link))
            for i in range(np.int64(wk_i[r, d, WI_QN])):  # the arrival times the links now say
                s = q_at(queue, wk_i, r, d, np.int64(i), qcap)
                ready = slot_f[r, s, SF_READY]
                if np.int64(slot_i[r, s, SI_LINK]) > 0 and t < ready < first_ready:
                    first_ready = ready
        return first_ready, np.int64(0), post

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
        total = ceil_blocks(ip, length)
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
            top = full_blocks(ip, length - 1)  # vLLM recomputes at least the last token
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
    def admit_queue(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, r, d, t, nspare):
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
        With HANDOVER_VLLM an arrived transfer is first seen (the worker's poll at this boundary:
        the prefill worker lets go of its copy) and admitted at the first boundary VLLM_POLL_MS
        later (RESV_SEEN; vLLM's async scheduling issued the next step before it learnt of it).
        Returns the earliest time a queued request becomes ready (INF if none)."""
        qcap = ip[P_Q]
        replay = ip[P_DADMIT] == DADMIT_REPLAY
        vllm = ip[P_HANDOVER] == HANDOVER_VLLM
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
                if resv == RESV_HELD or resv == RESV_SEEN:
                    i += 1
                    continue
                break  # decode_first: its transfer runs; FCFS
            if resv == RESV_SEEN:
                slot_i[r, s, SI_RESV] = RESV_ADMIT  # seen a step ago: its copy is gone already
                slot_f[r, s, SF_READY] = slot_f[r, s, SF_KV]  # decode_wait_ms runs from the KV's arrival
            elif resv == RESV_HELD:
                if blocked and replay:
                    break
                if ip[P_LINKS] == 1:
                    link_done(ip, fp, slot_i, slot_f, rep_i, rep_f, r, s, t)
                slot_f[r, s, SF_XFER] = slot_f[r, s, SF_READY] - slot_f[r, s, SF_XFER]
                # the KV has arrived: the prefill worker lets go of its copy
                pw = cache_row(ip, np.int64(slot_i[r, s, SI_PW]))
                isl = np.int64(slot_i[r, s, SI_ISL])
                pfx = np.int64(slot_i[r, s, SI_PFX])
                cache_release(
                    pc, wk_i, rep_i, r, pw, np.int64(slot_i[r, s, SI_GRP]), pfx, ceil_blocks(ip, isl) - pfx,
                    full_blocks(ip, isl) - pfx, np.int64(-1), ip[P_G],
                )  # fmt: skip
                if ip[P_PSHARE] == 1 or (
                    wk_f[r, pw, WF_BUSY] == INF
                    and (np.int64(wk_i[r, pw, WI_QN]) > 0 or np.int64(wk_i[r, ip[P_NP] + ip[P_ND], WI_QN]) > 0)
                ):
                    rep_i[r, RI_PWAKE] = 1  # it may have been waiting for these blocks
                slot_i[r, s, SI_RESV] = RESV_ADMIT
                if vllm:
                    slot_i[r, s, SI_RESV] = RESV_SEEN
                    slot_f[r, s, SF_KV] = slot_f[r, s, SF_READY]
                    slot_f[r, s, SF_READY] = t + VLLM_POLL_MS
                    if t + VLLM_POLL_MS < next_ready:
                        next_ready = t + VLLM_POLL_MS
                    i += 1
                    continue
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
        seg = segment(fp, x0, n)
        # steps started: the largest j in [1, M] whose step j - 1 starts at or before t
        lo = np.int64(1)
        hi = np.int64(wk_i[r, d, WI_SEG_M])
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if t0 + span(fp, seg, x0, n, mid - 1, cap) <= t:
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
    def running_sums(slot_i, run, r, d, lo, hi, n_dec, n_wait, x0, m):
        """The sums a pass is planned with, run[lo:hi] of worker d added: sequences decoding (their
        prompt computed), their summed context isl + output so far, the fewest output tokens any
        of them has left, and the sequences still (re)computing a prompt."""
        for i in range(lo, hi):
            s = np.int64(run[r, d, i])
            if np.int64(slot_i[r, s, SI_DONE]) == np.int64(slot_i[r, s, SI_NEED]):
                n_dec += 1
                x0 += np.int64(slot_i[r, s, SI_ISL]) + np.int64(slot_i[r, s, SI_GEN])
                left = np.int64(slot_i[r, s, SI_OSL]) - np.int64(slot_i[r, s, SI_GEN])
                if left < m:
                    m = left
            else:
                n_wait += 1
        return n_dec, n_wait, x0, m

    @jit_inline
    def plan_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, r, d, t):
        bs = ip[P_B]
        prefill_first = ip[P_FLOW] == FLOW_PREFILL_FIRST
        kv_cap = ip[P_DKV]
        wk_f[r, d, WF_WAKE] = INF
        # decode_end left the running set's sums (step-by-step runs scan it whole: the check of both)
        summed = np.int64(wk_i[r, d, WI_AGG]) == 1 and ip[P_NAIVE] == 0
        wk_i[r, d, WI_AGG] = 0
        replay = ip[P_DADMIT] == DADMIT_REPLAY
        first_ready = INF
        more = np.int64(0)
        post = 0.0  # HANDOVER_VLLM: the pass starts once the reads reserved at this boundary are posted
        if prefill_first and replay:
            # the replay's pass boundary first hands blocks to a waiting transfer, keeping no room
            # for the running requests' growth (they may be preempted for it)
            first_ready, more, post = reserve(
                ip, fp, slot_i, slot_f, wk_i, pc, ev, queue, run, rep_i, rep_f, r, d, t, np.int64(0)
            )
        # running requests next: the next step must get its blocks, else the newest is preempted
        # (each adds at most a block per step, so with that much room nothing is scanned)
        preempted = False
        nrun = np.int64(wk_i[r, d, WI_NRUN])
        avail = kv_cap - np.int64(wk_i[r, d, WI_USED]) + np.int64(wk_i[r, d, WI_FREE])
        if nrun > avail:
            preempted = fit_next_step(ip, slot_i, wk_i, pc, queue, run, rep_i, r, d)
            nrun = np.int64(wk_i[r, d, WI_NRUN])
        admitted_from = nrun
        if (
            prefill_first
            and not replay
            and not (preempted and ip[P_HANDOVER] == HANDOVER_VLLM)  # vLLM: no new request in a step that preempted
            and not waiting_for_blocks(ip, slot_i, wk_i, queue, r, d)
        ):
            # vLLM: blocks go to the waiting (preempted) requests first, then to a transfer,
            # leaving room for the running requests' next step
            first_ready, more, post = reserve(
                ip, fp, slot_i, slot_f, wk_i, pc, ev, queue, run, rep_i, rep_f, r, d, t, nrun
            )
        if not preempted:
            nxt = admit_queue(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, ev, queue, run, rep_i, rep_f, r, d, t, nrun)
            if nxt < first_ready:
                first_ready = nxt
        if np.int64(wk_i[r, d, WI_USED]) > kv_cap:
            rep_i[r, RI_STATUS] = STATUS_OVERCAP
        nrun = np.int64(wk_i[r, d, WI_NRUN])
        if nrun == 0:
            wk_f[r, d, WF_WAKE] = first_ready
            return
        n_dec = np.int64(0)
        n_wait = np.int64(0)
        x0 = np.int64(0)
        m = NONE_LEFT
        scan_from = np.int64(0)
        if summed and not preempted:
            # only the requests admitted since decode_end are new to the sums it left
            n_dec = np.int64(wk_i[r, d, WI_AGG_N])
            n_wait = np.int64(wk_i[r, d, WI_AGG_W])
            x0 = np.int64(wk_i[r, d, WI_AGG_X])
            if n_dec > 0:
                m = np.int64(wk_i[r, d, WI_AGG_M])
            scan_from = admitted_from
        n_dec, n_wait, x0, m = running_sums(slot_i, run, r, d, scan_from, nrun, n_dec, n_wait, x0, m)
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
        t0 = t + post
        wk_f[r, d, WF_T0] = t0
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
            first = t0 + dur
        else:
            wk_i[r, d, WI_MIXED] = 0
            if ip[P_NAIVE] == 1 or preempted or more == 1:
                m = 1  # the next boundary admits (none in a pass that preempted) or reserves
            # blocks bound the segment too: it ends before the first step that cannot get its
            # blocks (there the newest request is preempted), a cheap bound first
            avail = kv_cap - np.int64(wk_i[r, d, WI_USED]) + np.int64(wk_i[r, d, WI_FREE])
            if m > 1 and n_dec * (full_blocks(ip, m) + 2) > avail:
                m = steps_that_fit(ip, slot_i, run, r, d, nrun, m, avail)
            seg = segment(fp, x0, np.int64(n_dec))
            step = first_step(fp, seg, x0, np.int64(n_dec), cap)
            dur = step if m == 1 else span(fp, seg, x0, np.int64(n_dec), m, cap)
            wk_i[r, d, WI_SEG_M] = m
            first = t0 + step
        # only requests admitted by this call can still wait for their first decode step: a local
        # prefill gets its first token at the end of the pass that completes it (decode_end)
        for i in range(admitted_from, nrun):
            s = np.int64(run[r, d, i])
            if np.int64(slot_i[r, s, SI_FRESH]) == 1 and np.int64(slot_i[r, s, SI_DONE]) == np.int64(
                slot_i[r, s, SI_NEED]
            ):
                slot_i[r, s, SI_FRESH] = 0
                first_token(ip, fp, slot_f, rep_i, rep_f, r, s, first, t)
        wk_f[r, d, WF_BUSY] = t0 + dur
        if first_ready > t and first_ready < INF:
            truncate(ip, fp, wk_i, wk_f, r, d, first_ready)

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
        # what the next plan_decode needs of the requests that keep running (WI_AGG_*)
        a_n = np.int64(0)
        a_w = np.int64(0)
        a_x = np.int64(0)
        a_m = NONE_LEFT
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
                        first_token(ip, fp, slot_f, rep_i, rep_f, r, s, t, t)
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
                    growth += grow_to(slot_i, r, s, gen, bs)
            if done == need:
                left = np.int64(slot_i[r, s, SI_OSL]) - gen
                if left <= 0:
                    n_live -= 1
                    run[r, d, i] = run[r, d, n_live]
                    run[r, d, n_live] = s
                    continue
                a_n += 1
                a_x += np.int64(slot_i[r, s, SI_ISL]) + gen
                if left < a_m:
                    a_m = left
            else:
                a_w += 1
            i += 1
        wk_i[r, d, WI_NRUN] = n_live
        wk_i[r, d, WI_AGG] = 1
        wk_i[r, d, WI_AGG_N] = a_n
        wk_i[r, d, WI_AGG_W] = a_w
        wk_i[r, d, WI_AGG_X] = a_x
        wk_i[r, d, WI_AGG_M] = a_m if a_n > 0 else 0
        if growth > 0 and not cache_grow(pc, wk_i, rep_i, ev, fp[F_EVDELAY], t, r, d, ip[P_G], ip[P_DKV], growth):
            rep_i[r, RI_STATUS] = STATUS_OVERCAP
        # blocks grow about evenly over a pass: its held blocks are the mean of start and end
        held = np.float64(np.int64(wk_i[r, d, WI_USED]) - np.int64(wk_i[r, d, WI_FREE]))
        integrate(ip, rep_i, rep_f, r, RF_DKV, t0, t, 0.5 * (wk_f[r, d, WF_HELD0] + held))
        for j in range(n_old - 1, n_live - 1, -1):  # in the order they were found
            finish(
                ip, fp, slot_i, slot_f, wk_i, pc, queue, rep_i, rep_f, heap_t, heap_c, out_f, out_i, r, key,
                np.int64(run[r, d, j]), t,
            )  # fmt: skip

    return Namespace(
        truncate=truncate,
        hand_to_decode=hand_to_decode,
        fit_next_step=fit_next_step,
        preempt=preempt,
        reserve=reserve,
        admit=admit,
        start_running=start_running,
        admit_queue=admit_queue,
        settle=settle,
        waiting_for_blocks=waiting_for_blocks,
        steps_that_fit=steps_that_fit,
        running_sums=running_sums,
        plan_decode=plan_decode,
        decode_end=decode_end,
    )
