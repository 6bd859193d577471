"""The batch router: decode decisions of prefill_first held and assigned jointly.

A request whose prefill ends joins the held list (queue row W, the shared queue, unused in
prefill_first otherwise). The list is assigned when it holds `batch_size` requests, or
`batch_ms` after its first one arrived, whichever comes first (RF_BATCH_DUE). The assignment
minimises the router's own cost summed over the batch, each request priced as a sequential
router would see it: on worker w, a request pays AB_w plus the blocks of the batch's requests
placed there before it plus its own. For the requests r_1..r_m placed on w in that order the sum
is m AB_w + sum_l (m - l + 1) pblk(r_l), so the cost of request i in the p-th position from the
end of w is AB_w + p pblk(i): a linear assignment of requests to (worker, position) columns,
solved exactly by shortest augmenting paths (the Hungarian method, rows added one at a time over
reduced costs with row and column potentials). Positions cost more the further they are from
the end, so an optimal assignment fills each worker's positions from 1 without gaps. Ties go to
the lowest column (deterministic).

Its work arrays live after the controller's region of rep_f (poa_mc/kernels/layout.py), X = NRF + 2 CW
+ 3 CS, n = batch_size, m = decode workers x n: u at X (n + 1), then v, owner, prev, minv, used
(m + 1 each), as floats.
"""

import math

import numpy as np

from ._ns import Namespace
from .layout import (
    F_BATCH_MS,
    NRF,
    OF_DDEC,
    OI_DADD_B,
    OI_DADD_T,
    P_B,
    P_BATCH_N,
    P_CTL_LOG,
    P_CTL_WIN,
    P_ND,
    P_NP,
    P_Q,
    RESV_PENDING,
    RF_BATCH_DUE,
    SI_ISL,
    SI_MEAS,
    WI_AB,
    WI_QN,
)

INF = math.inf


def build(jit, router, queues, decode, placement):
    q_at = queues.q_at
    q_pop = queues.q_pop
    q_push = queues.q_push
    hand_to_decode = decode.hand_to_decode
    record_candidates = placement.record_candidates_call
    book_active = router.book_active

    @jit
    def cost(ip, slot_i, wk_i, queue, r, held, n, lo, i, j):
        """Row i (1-based held request), column j (1-based: worker lo + (j-1) // n, position
        (j-1) % n + 1 from the end)."""
        s = q_at(queue, wk_i, r, held, i - 1, ip[P_Q])
        bs = ip[P_B]
        pblk = (np.int64(slot_i[r, s, SI_ISL]) + bs - 1) // bs
        w = lo + (j - 1) // n
        p = (j - 1) % n + 1
        return np.float64(np.int64(wk_i[r, w, WI_AB]) + p * pblk)

    @jit
    def assign(ip, slot_i, wk_i, queue, rep_f, r, held, rows):
        """Solve the assignment of the `rows` held requests; afterwards rep_f[PR + i] holds the
        worker of row i (1-based)."""
        n = ip[P_BATCH_N]
        lo = ip[P_NP]
        m = ip[P_ND] * n
        u0 = NRF + 2 * ip[P_CTL_WIN] + 3 * ip[P_CTL_LOG]
        v0 = u0 + n + 1
        ow = v0 + m + 1
        pr = ow + m + 1
        mv = pr + m + 1
        us = mv + m + 1
        for i in range(n + 1):
            rep_f[r, u0 + i] = 0.0
        for j in range(m + 1):
            rep_f[r, v0 + j] = 0.0
            rep_f[r, ow + j] = 0.0
        for i in range(1, rows + 1):
            rep_f[r, ow] = i
            j0 = 0
            for j in range(m + 1):
                rep_f[r, mv + j] = INF
                rep_f[r, us + j] = 0.0
            while True:
                rep_f[r, us + j0] = 1.0
                i0 = np.int64(rep_f[r, ow + j0])
                delta = INF
                j1 = 0
                for j in range(1, m + 1):
                    if rep_f[r, us + j] == 0.0:
                        cur = (
                            cost(ip, slot_i, wk_i, queue, r, held, n, lo, i0, j) - rep_f[r, u0 + i0] - rep_f[r, v0 + j]
                        )
                        if cur < rep_f[r, mv + j]:
                            rep_f[r, mv + j] = cur
                            rep_f[r, pr + j] = j0
                        if rep_f[r, mv + j] < delta:
                            delta = rep_f[r, mv + j]
                            j1 = j
                for j in range(m + 1):
                    if rep_f[r, us + j] != 0.0:
                        rep_f[r, u0 + np.int64(rep_f[r, ow + j])] += delta
                        rep_f[r, v0 + j] -= delta
                    else:
                        rep_f[r, mv + j] -= delta
                j0 = j1
                if rep_f[r, ow + j0] == 0.0:
                    break
            while j0 != 0:
                j1 = np.int64(rep_f[r, pr + j0])
                rep_f[r, ow + j0] = rep_f[r, ow + j1]
                j0 = j1
        for j in range(1, m + 1):
            i = np.int64(rep_f[r, ow + j])
            if i != 0:
                rep_f[r, pr + i] = lo + (j - 1) // n

    @jit
    def flush(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, rep_f, out_f, out_i, cand, r, t):
        """Assign every held request at t, then book and hand each to its decode worker."""
        held = ip[P_NP] + ip[P_ND]
        rows = np.int64(wk_i[r, held, WI_QN])
        rep_f[r, RF_BATCH_DUE] = INF
        if rows == 0:
            return
        for i in range(rows):  # the router's view of the joint decision, before any booking
            s = q_at(queue, wk_i, r, held, i, ip[P_Q])
            record_candidates(ip, slot_i, wk_i, pc, cand, r, s, ip[P_NP], ip[P_ND], False)
        assign(ip, slot_i, wk_i, queue, rep_f, r, held, rows)
        pr = NRF + 2 * ip[P_CTL_WIN] + 3 * ip[P_CTL_LOG] + ip[P_BATCH_N] + 1 + 2 * (ip[P_ND] * ip[P_BATCH_N] + 1)
        bs = ip[P_B]
        for i in range(1, rows + 1):
            s = q_pop(queue, wk_i, r, held, ip[P_Q])
            d = np.int64(rep_f[r, pr + i])
            pblk = (np.int64(slot_i[r, s, SI_ISL]) + bs - 1) // bs
            # a disaggregated decode router assumes no KV reuse (-1: no group counted, router.py)
            added = book_active(wk_i, slot_i, r, s, d, np.int64(-1), np.int64(0), pblk, np.int64(0))
            meas = np.int64(slot_i[r, s, SI_MEAS])
            if meas >= 0:
                out_i[r, meas, OI_DADD_T] = 0
                out_i[r, meas, OI_DADD_B] = added
                out_f[r, meas, OF_DDEC] = t
            hand_to_decode(ip, fp, slot_i, slot_f, wk_i, wk_f, queue, r, s, d, t, np.int64(RESV_PENDING))

    @jit
    def hold(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, rep_f, out_f, out_i, cand, r, s, t):
        """Request s's prefill ended: hold its decode decision; assign the batch when it is full."""
        held = ip[P_NP] + ip[P_ND]
        q_push(queue, wk_i, r, held, s, ip[P_Q])
        n = np.int64(wk_i[r, held, WI_QN])
        if n == 1:
            rep_f[r, RF_BATCH_DUE] = t + fp[F_BATCH_MS]
        if n >= ip[P_BATCH_N]:
            flush(ip, fp, slot_i, slot_f, wk_i, wk_f, pc, queue, rep_f, out_f, out_i, cand, r, t)

    return Namespace(cost=cost, assign=assign, flush=flush, hold=hold)
