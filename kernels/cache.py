"""Per-worker prefix KV cache: LRU at block granularity over shared prefix chains.

A worker caches, for each prefix group g, the leading `pc[r, w, g, 0]` blocks of g's shared
prefix. Every block of one chain is touched together, so one LRU stamp per chain
(`pc[.., 1]`) orders blocks exactly, and evicting "the least recently used block" means cutting
the tail of the chain with the oldest stamp: tail-first eviction, so partial hits happen as in
Dynamo's block manager. A chain used by an in-flight request is pinned (`pc[.., 2]` counts its
users) and cannot be evicted. Blocks unique to one request can never hit again, so they are
held while the request needs them and freed when it releases them rather than kept in the LRU
(a documented simplification: under cache pressure Dynamo would let them push older prefixes out).
`wk_i[r, w, WI_USED]` counts every block in use on the worker: chains plus held blocks.

The router learns of chain changes through events (Dynamo's KV store/evict events): with a delay
d > 0 each change is queued in the ring `ev` and applied to the router's copy `pc[.., 3]` d ms
later (`deliver`); with d = 0 the copy is updated at once. If the ring is full, its oldest event
is delivered early (the ring holds 4 events per request slot, more than a replica produces within
any realistic delay).
"""

import numpy as np

from ._ns import Namespace
from .layout import RI_EVH, RI_EVN, RI_STAMP, WI_USED


def build(jit):

    @jit
    def overlap(pc, r, w, g, pfx):
        """Leading prompt blocks worker w really holds."""
        n = np.int64(pc[r, w, g, 0])
        return n if n < pfx else pfx

    @jit
    def seen_overlap(pc, r, w, g, pfx):
        """Leading prompt blocks the router believes worker w holds."""
        n = np.int64(pc[r, w, g, 3])
        return n if n < pfx else pfx

    @jit
    def deliver(pc, rep_i, ev, r, now):
        """Apply every queued cache event due at or before `now` to the router's view."""
        cap = ev.shape[1]
        while rep_i[r, RI_EVN] > 0:
            h = rep_i[r, RI_EVH]
            if ev[r, h, 0] > now:
                break
            pc[r, np.int64(ev[r, h, 1]), np.int64(ev[r, h, 2]), 3] = np.int64(ev[r, h, 3])
            rep_i[r, RI_EVH] = (h + 1) % cap
            rep_i[r, RI_EVN] -= 1

    @jit
    def publish(pc, rep_i, ev, delay, r, w, g, now):
        """Chain (w, g) changed at `now`: tell the router, at once or `delay` ms later."""
        if delay <= 0.0:
            pc[r, w, g, 3] = pc[r, w, g, 0]
            return
        cap = ev.shape[1]
        if rep_i[r, RI_EVN] == cap:
            deliver(pc, rep_i, ev, r, ev[r, rep_i[r, RI_EVH], 0])
        i = (rep_i[r, RI_EVH] + rep_i[r, RI_EVN]) % cap
        ev[r, i, 0] = now + delay
        ev[r, i, 1] = w
        ev[r, i, 2] = g
        ev[r, i, 3] = pc[r, w, g, 0]
        rep_i[r, RI_EVN] += 1

    @jit
    def make_room(pc, wk_i, rep_i, ev, delay, now, r, w, n_groups, capacity, need):
        """Evict unpinned chain tails, oldest first, until `need` more blocks fit. True if they do;
        False, with nothing evicted, if they cannot fit even with every unpinned chain gone."""
        short = np.int64(wk_i[r, w, WI_USED]) + need - capacity
        if short <= 0:
            return True
        evictable = np.int64(0)
        for g in range(n_groups):
            if np.int64(pc[r, w, g, 2]) == 0:
                evictable += np.int64(pc[r, w, g, 0])
        if evictable < short:
            return False
        while np.int64(wk_i[r, w, WI_USED]) + need > capacity:
            best = -1
            best_stamp = np.int64(0)
            for g in range(n_groups):
                if np.int64(pc[r, w, g, 0]) > 0 and np.int64(pc[r, w, g, 2]) == 0:
                    if best < 0 or np.int64(pc[r, w, g, 1]) < best_stamp:
                        best = g
                        best_stamp = np.int64(pc[r, w, g, 1])
            if best < 0:
                return False
            short = np.int64(wk_i[r, w, WI_USED]) + need - capacity
            cut = np.int64(pc[r, w, best, 0])
            if cut > short:
                cut = short
            pc[r, w, best, 0] -= cut
            wk_i[r, w, WI_USED] -= cut
            publish(pc, rep_i, ev, delay, r, w, best, now)
        return True

    @jit
    def acquire(pc, wk_i, rep_i, ev, delay, now, r, w, g, pfx, held, n_groups, capacity):
        """Look up the request's prefix, extend its chain to `pfx` blocks and hold `held` more blocks.

        Returns the number of prefix blocks that were already cached, or -1 if the blocks do not
        fit even after evicting every unpinned chain (nothing is changed then).
        """
        hit = overlap(pc, r, w, g, pfx)
        grow = pfx - np.int64(pc[r, w, g, 0])
        if grow < 0:
            grow = 0
        if pfx > 0:
            pc[r, w, g, 2] += 1
        if not make_room(pc, wk_i, rep_i, ev, delay, now, r, w, n_groups, capacity, grow + held):
            if pfx > 0:
                pc[r, w, g, 2] -= 1
            return -1
        # the eviction above may not touch this pinned chain, so `hit` still holds
        if pfx > 0:
            pc[r, w, g, 0] += grow
            rep_i[r, RI_STAMP] += 1
            pc[r, w, g, 1] = rep_i[r, RI_STAMP]
            if grow > 0:
                publish(pc, rep_i, ev, delay, r, w, g, now)
        wk_i[r, w, WI_USED] += grow + held
        return hit

    @jit
    def release(pc, wk_i, r, w, g, pfx, held):
        """The request no longer needs its blocks: unpin its chain (it stays cached), free the rest."""
        if pfx > 0:
            pc[r, w, g, 2] -= 1
        wk_i[r, w, WI_USED] -= held

    return Namespace(
        overlap=overlap,
        seen_overlap=seen_overlap,
        deliver=deliver,
        publish=publish,
        make_room=make_room,
        acquire=acquire,
        release=release,
    )
