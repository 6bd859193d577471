"""A load schedule (`[schedule]`): stages of constant load run back to back in one replica, its
caches, queues and requests in flight carried from one stage into the next, as a benchmark's
sweep runs them (docs/schedules.md).

Stage k holds the measured requests whose index (in creation order, after the warm-up) is below
ip[P_STAGE_END + k] and at or above the previous stage's end; the warm-up runs at the first
stage's load. RI_STAGE is the stage of the next request to be created and RI_STAGE_AT the
creation index where the stage after it begins (-1: none), so the event loop's only cost per
arrival is one comparison. An open loop draws request j's gap before it at its own stage's rate,
fp[F_STAGE_RATE + stage] (a cell without a schedule has its one rate there), as the previous
stage's last request arrives: the arrivals of a stage are a Poisson stream of its rate, the first
one included (an exponential gap has no memory, so a gap drawn at the new rate from the previous
arrival on is the new stream). A closed loop's stage begins when its first request is about to be
sent, the moment the previous stage's last one was (the clients it adds start then).

A closed loop has clients 0 .. C_max - 1; those at or above the current stage's concurrency
(RI_CACT) are parked (queue row W + 1, a stack whose top is RI_FREE_TOP: the open loop's free
slots, unused by a closed one): at t = 0, when a stage lowers the concurrency (those waiting in
the heap), or when they complete a request. A stage that raises the concurrency wakes the parked
ones below it at its first arrival. A client whose request is in flight when the concurrency drops
finishes it (a benchmark client does not cancel requests it sent) and parks then. The arrival
loop's heap is untouched by all this: it only ever holds active clients.
"""

import numpy as np

from ._ns import Namespace
from .layout import (
    P_ARRIVAL,
    P_C,
    P_NSTAGE,
    P_STAGE_C,
    P_STAGE_END,
    P_WARM,
    RI_CACT,
    RI_FREE_TOP,
    RI_HEAPN,
    RI_STAGE,
    RI_STAGE_AT,
)


def build(jit, heap, enabled=True):
    """enabled=False: a build for cells without a schedule (source.build, lean): the event loop's
    stage comparisons and the creation count compile out."""
    heap_push = heap.push

    @jit
    def park(queue, rep_i, r, row, c):
        top = rep_i[r, RI_FREE_TOP]
        queue[r, row, top] = c
        rep_i[r, RI_FREE_TOP] = top + 1

    @jit
    def start(ip, queue, heap_t, heap_c, rep_i, r, row):
        """A replica's first stage, and where its second begins; a closed loop's clients of the
        first stage due at t = 0, the others parked."""
        rep_i[r, RI_STAGE] = 0
        rep_i[r, RI_STAGE_AT] = ip[P_WARM] + ip[P_STAGE_END] if ip[P_NSTAGE] > 1 else -1
        active = ip[P_STAGE_C] if ip[P_NSTAGE] > 0 else ip[P_C]
        rep_i[r, RI_CACT] = active
        if ip[P_ARRIVAL] == 0:
            for c in range(active):
                heap_push(heap_t, heap_c, rep_i, r, 0.0, c)
            for c in range(active, ip[P_C]):
                park(queue, rep_i, r, row, c)

    @jit
    def next_stage(ip, queue, heap_t, heap_c, rep_i, r, row, t):
        """The next request to be created begins the next stage (called at t, when it becomes the
        next: in an open loop as its gap is about to be drawn, at its stage's rate; in a closed one
        before a client is taken from the heap). A closed loop's concurrency changes. Raised, the
        parked clients below it wake at t; lowered, the waiting clients at or above it leave the
        heap and park (the heap is rebuilt from the others: its order, by time then client, is the
        same)."""
        k = rep_i[r, RI_STAGE] + 1
        rep_i[r, RI_STAGE] = k
        rep_i[r, RI_STAGE_AT] = ip[P_WARM] + ip[P_STAGE_END + k] if k < ip[P_NSTAGE] - 1 else -1
        if ip[P_ARRIVAL] != 0:
            return
        target = ip[P_STAGE_C + k]
        if target < rep_i[r, RI_CACT]:
            n = rep_i[r, RI_HEAPN]
            rep_i[r, RI_HEAPN] = 0
            for i in range(n):
                c = np.int64(heap_c[r, i])
                if c >= target:
                    park(queue, rep_i, r, row, c)
                else:  # pushed back below i: heap_push only writes positions up to the count pushed
                    heap_push(heap_t, heap_c, rep_i, r, heap_t[r, i], c)
        else:
            top = rep_i[r, RI_FREE_TOP]
            kept = 0
            for i in range(top):
                c = np.int64(queue[r, row, i])
                if c < target:
                    heap_push(heap_t, heap_c, rep_i, r, t, c)
                else:
                    queue[r, row, kept] = c
                    kept += 1
            rep_i[r, RI_FREE_TOP] = kept
        rep_i[r, RI_CACT] = target

    return Namespace(enabled=enabled, park=park, start=start, next_stage=next_stage)
