"""Per-worker prefix KV cache: vLLM's block pool, LRU over every full block a request released.

Blocks live in two kinds of runs, both in the `pc` array (layout.py):
- **Prefix chains** (rows 0..G-1): for each prefix group g the leading `pc[r, w, g, 0]` blocks of
  g's shared prefix. A chain used by an in-flight request is pinned (`pc[.., 2]` counts its users);
  when its last user releases it, it becomes evictable with a fresh LRU stamp (`pc[.., 1]`).
- **Released runs** (rows G..G+A-1, a FIFO ring): the full blocks unique to one request, kept as
  evictable cached blocks when it releases them (vLLM hashes every full block, shared or not, and
  frees a request's blocks into its free queue; docs/sources.md, "KV blocks"). Synthetic unique content can
  never be hit by another request, so such a run only takes room, with the LRU stamp of its
  release, until it is evicted; the one exception is a run tagged with its owner slot
  (`pc[.., 2] >= 0`), left by a preempted request, which that request can hit again when it is
  readmitted (`reclaim`).

Eviction takes the oldest stamp first (or, with the lineage rule, WI_LINEAGE, every released run
before any chain: the leaves before the prefixes they extend), the tail of a run first (vLLM frees a request's blocks in
reverse order, so its unique tail goes before its prefix): one release stamps its unique run
before its chain. So partial hits happen, as in Dynamo's block manager. An anonymous run older
than every evictable chain is freed whole when eviction reaches it, and so are the anonymous ones
after it while they are older too: nothing can hit them and all that becomes evictable later is
newer, so no result changes, and the next allocations find free blocks without evicting again.
If the ring is full, its two oldest runs merge into one with the newer stamp (the older blocks
then outlive a few chains they would have preceded);
`rep_i[r, RI_MERGES]` counts merges. With fixed lengths the host sizes the ring for every run a
worker's blocks can hold plus one per request slot, up to 1,024 runs (poa_mc.engine.memory.ring_runs). Ring rows
are not initialised by the kernel: the buffers are allocated zeroed and WI_AH/WI_AN say which rows
are live.
"""

import numpy as np

from ._ns import Namespace
from .layout import (
    PC_S4,
    RI_EVH,
    RI_EVN,
    RI_MERGES,
    RI_STAMP,
    WI_AH,
    WI_AN,
    WI_FREE,
    WI_LH2,
    WI_LH3,
    WI_LH4,
    WI_LINEAGE,
    WI_OLDG,
    WI_USED,
)


def build(jit, tiers, jit_inline=None):
    jit_inline = jit_inline or jit
    tiered = tiers.tiered
    decay_step = tiers.decay_step
    demote_chain = tiers.demote_chain
    demote_run = tiers.demote_run
    lower_hits = tiers.lower_hits
    tier_take = tiers.take
    frequency = tiers.frequency
    set_frequency = tiers.set_frequency
    g4_reach = tiers.g4_reach

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
            w = np.int64(ev[r, h, 1])
            if w >= 0:  # -1: the worker restarted since (poa_mc/kernels/planner.py), its news are void
                pc[r, w, np.int64(ev[r, h, 2]), 3] = np.int64(ev[r, h, 3])
            rep_i[r, RI_EVH] = h + 1 if h + 1 < cap else 0  # a ring: no division
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
        i = rep_i[r, RI_EVH] + rep_i[r, RI_EVN]
        if i >= cap:  # head plus length, below 2 cap: no division
            i -= cap
        ev[r, i, 0] = now + delay
        ev[r, i, 1] = w
        ev[r, i, 2] = g
        ev[r, i, 3] = pc[r, w, g, 0]
        rep_i[r, RI_EVN] += 1

    @jit_inline
    def stamp(rep_i, r):
        s = rep_i[r, RI_STAMP] + 1
        rep_i[r, RI_STAMP] = s
        return s

    @jit_inline
    def oldest_chain(pc, wk_i, r, w, n_groups):
        """The evictable chain with the oldest stamp, or -1. Remembered in WI_OLDG: a chain that
        becomes evictable is the newest, so the oldest only changes when it is pinned or emptied
        (then forgotten, and found again by a scan)."""
        known = np.int64(wk_i[r, w, WI_OLDG])
        if known > 0:
            return known - 2
        best = -1
        best_stamp = np.int64(0)
        for g in range(n_groups):
            if np.int64(pc[r, w, g, 0]) > 0 and np.int64(pc[r, w, g, 2]) == 0:
                if best < 0 or np.int64(pc[r, w, g, 1]) < best_stamp:
                    best = g
                    best_stamp = np.int64(pc[r, w, g, 1])
        wk_i[r, w, WI_OLDG] = best + 2
        return best

    @jit_inline
    def ring_head(pc, wk_i, r, w, n_groups):
        """Row of the oldest released run still holding blocks (emptied runs are dropped), or -1."""
        ring = pc.shape[2] - n_groups
        while np.int64(wk_i[r, w, WI_AN]) > 0:
            row = n_groups + np.int64(wk_i[r, w, WI_AH])
            if np.int64(pc[r, w, row, 0]) > 0:
                return row
            nxt = np.int64(wk_i[r, w, WI_AH]) + 1
            wk_i[r, w, WI_AH] = nxt if nxt < ring else 0
            wk_i[r, w, WI_AN] -= 1
        return -1

    @jit
    def make_room(pc, wk_i, rep_i, ev, delay, now, r, w, n_groups, capacity, need):
        """Evict the oldest evictable blocks, tail first, until `need` more blocks fit. True if they
        do; False, with nothing evicted, if they cannot fit even with every evictable block gone.
        A worker with lower tiers demotes what it evicts (poa_mc/kernels/tiers.py)."""
        short = np.int64(wk_i[r, w, WI_USED]) + need - capacity
        if short <= 0:
            return True
        if np.int64(wk_i[r, w, WI_FREE]) < short:
            return False
        lower = tiered(pc, wk_i, r, w)
        step = decay_step(wk_i, r, w, now) if lower else np.int64(0)
        g = oldest_chain(pc, wk_i, r, w, n_groups)
        while True:
            row = ring_head(pc, wk_i, r, w, n_groups)
            take_ring = row >= 0 and (
                g < 0 or np.int64(pc[r, w, row, 1]) < np.int64(pc[r, w, g, 1]) or np.int64(wk_i[r, w, WI_LINEAGE]) == 1
            )
            if short <= 0 and (lower or not (take_ring and np.int64(pc[r, w, row, 2]) < 0)):
                break
            if take_ring:
                # An anonymous run older than every evictable chain goes whole, and so do the ones
                # after it while they are older too (a sweep, once `need` fits): nothing can hit
                # them and every block that becomes evictable later is newer, so freeing them now
                # is indistinguishable from evicting them block by block later, and the next
                # allocations find free blocks without calling here. A preempted request's own
                # run (owner >= 0) may still be hit: only what is needed of it goes, tail first.
                # With lower tiers there is no sweep: what G1 evicts takes room in G2.
                cut = np.int64(pc[r, w, row, 0])
                if cut > short and (lower or np.int64(pc[r, w, row, 2]) >= 0):
                    cut = short
                pc[r, w, row, 0] -= cut
                if lower:
                    demote_run(pc, wk_i, rep_i, r, w, cut, np.int64(pc[r, w, row, 1]), n_groups, step)
                if np.int64(pc[r, w, row, 0]) == 0:
                    ring_head(pc, wk_i, r, w, n_groups)  # drops it
            else:
                cut = np.int64(pc[r, w, g, 0])
                if cut > short:
                    cut = short
                pc[r, w, g, 0] -= cut
                if lower:
                    demote_chain(pc, wk_i, r, w, g, cut, np.int64(pc[r, w, g, 1]), n_groups, step)
                publish(pc, rep_i, ev, delay, r, w, g, now)
                if np.int64(pc[r, w, g, 0]) == 0:
                    wk_i[r, w, WI_OLDG] = 0
                    g = oldest_chain(pc, wk_i, r, w, n_groups)
            wk_i[r, w, WI_USED] -= cut
            wk_i[r, w, WI_FREE] -= cut
            short -= cut
        return True

    @jit_inline
    def fits(wk_i, r, w, capacity, need):
        return np.int64(wk_i[r, w, WI_USED]) - np.int64(wk_i[r, w, WI_FREE]) + need <= capacity

    @jit_inline
    def acquire_need(pc, r, w, g, pfx, held):
        """Blocks that `acquire` takes out of the free and evictable ones: the request's held
        blocks and its chain's growth, plus the chain itself if nobody pins it yet."""
        n = np.int64(pc[r, w, g, 0])
        if pfx <= 0:
            return held
        if np.int64(pc[r, w, g, 2]) > 0:
            return held + (pfx - n if pfx > n else 0)
        return held + pfx

    @jit
    def acquire(pc, wk_i, rep_i, ev, delay, now, r, w, g, pfx, held, n_groups, capacity):
        """Look up the request's prefix, extend its chain to `pfx` blocks and hold `held` more blocks.

        Returns the number of prefix blocks that were already cached, or -1 if the blocks do not
        fit even after evicting every evictable block (nothing is changed then). With lower tiers
        the count includes the blocks promoted from G2 and G3 and those copied from G4, which it
        leaves in WI_LH2, WI_LH3, WI_LH4.
        """
        hit = overlap(pc, r, w, g, pfx)
        lower = tiered(pc, wk_i, r, w)
        h2 = np.int64(0)
        h3 = np.int64(0)
        h4 = np.int64(0)
        step = np.int64(0)
        f = np.int64(0)
        if lower:
            step = decay_step(wk_i, r, w, now)
            h2, h3, h4 = lower_hits(pc, wk_i, r, w, g, pfx)
            f = frequency(pc, r, w, g, step)
            if np.int64(pc[r, w, g, 0]) == 0 and h2 == 0 and h3 == 0:
                f = np.int64(0)  # the worker holds none of it: stored anew, its frequency starts again
        grow = pfx - np.int64(pc[r, w, g, 0])
        if grow < 0:
            grow = 0
        if pfx > 0:
            if np.int64(pc[r, w, g, 2]) == 0:
                # a chain is one LRU unit: pinned for a shorter prefix, its longer tail is freed
                # (so what a request takes never depends on how long an evictable chain is), or
                # demoted with lower tiers
                tail = np.int64(pc[r, w, g, 0]) - pfx
                if tail > 0:
                    pc[r, w, g, 0] = pfx
                    wk_i[r, w, WI_USED] -= tail
                    wk_i[r, w, WI_FREE] -= tail
                    if lower:
                        demote_chain(pc, wk_i, r, w, g, tail, np.int64(pc[r, w, g, 1]), n_groups, step)
                    publish(pc, rep_i, ev, delay, r, w, g, now)
                wk_i[r, w, WI_FREE] -= pc[r, w, g, 0]
                if np.int64(wk_i[r, w, WI_OLDG]) == g + 2:
                    wk_i[r, w, WI_OLDG] = 0
            pc[r, w, g, 2] += 1
        if lower:
            # the promoted blocks leave G2 and G3 first, so that G1's evictions (demoting into
            # G2) cannot evict them meanwhile
            tier_take(pc, wk_i, r, w, g, h2, h3)
        if np.int64(wk_i[r, w, WI_USED]) + grow + held > capacity and not make_room(
            pc, wk_i, rep_i, ev, delay, now, r, w, n_groups, capacity, grow + held
        ):
            if lower:  # make_room evicted nothing: put them back
                tier_take(pc, wk_i, r, w, g, -h2, -h3)
            if pfx > 0:
                pc[r, w, g, 2] -= 1
                if np.int64(pc[r, w, g, 2]) == 0:
                    wk_i[r, w, WI_FREE] += pc[r, w, g, 0]
                    wk_i[r, w, WI_OLDG] = 0
            return -1
        # the eviction above may not touch this pinned chain, so `hit` still holds
        if lower and pfx > 0:
            if f == 0:
                set_frequency(pc, r, w, g, np.int64(1), step)
            else:  # a hit (a chain the worker holds any of is hit from its first block)
                set_frequency(pc, r, w, g, 2 * f, step)
        if lower:
            if h4 > 0:
                # G4's blocks are copied, not moved: it keeps them, and the hit makes them its newest.
                # Its evictions above (what G3 offloaded) may have cut them: only what is left counts
                h4 = g4_reach(pc, wk_i, r, w, g, hit + h2 + h3, pfx)
                if h4 > 0:
                    pc[r, 0, g, PC_S4] = stamp(rep_i, r)
            wk_i[r, w, WI_LH2] = h2
            wk_i[r, w, WI_LH3] = h3
            wk_i[r, w, WI_LH4] = h4
        if grow > 0:
            pc[r, w, g, 0] += grow
            publish(pc, rep_i, ev, delay, r, w, g, now)
        wk_i[r, w, WI_USED] += grow + held
        return hit + h2 + h3 + h4

    @jit_inline
    def grow(pc, wk_i, rep_i, ev, delay, now, r, w, n_groups, capacity, blocks):
        """Hold `blocks` more blocks (a running sequence crossing block boundaries). True if they fit.
        The call to make_room is skipped when free blocks suffice (the common case: it costs as
        much as the rest of a decode pass end)."""
        if np.int64(wk_i[r, w, WI_USED]) + blocks > capacity and not make_room(
            pc, wk_i, rep_i, ev, delay, now, r, w, n_groups, capacity, blocks
        ):
            return False
        wk_i[r, w, WI_USED] += blocks
        return True

    @jit
    def merge_oldest(pc, wk_i, rep_i, r, w, n_groups):
        """The ring is full: merge its two oldest runs into the second (it has the newer stamp)."""
        ring = pc.shape[2] - n_groups
        h = np.int64(wk_i[r, w, WI_AH])
        h2 = h + 1 if h + 1 < ring else 0
        pc[r, w, n_groups + h2, 0] += pc[r, w, n_groups + h, 0]
        pc[r, w, n_groups + h2, 2] = -1
        pc[r, w, n_groups + h, 0] = 0
        wk_i[r, w, WI_AH] = h2
        wk_i[r, w, WI_AN] -= 1
        rep_i[r, RI_MERGES] += 1

    @jit_inline
    def release(pc, wk_i, rep_i, r, w, g, pfx, held, keep, owner, n_groups):
        """The request no longer needs its blocks: `keep` of its `held` unique blocks stay cached as
        one released run (tagged with `owner` >= 0 if the request may come back for them), the rest
        are freed, and its chain is unpinned (it stays cached). Returns the run's ring index, or -1."""
        pos = np.int64(-1)
        if keep > 0:
            ring = pc.shape[2] - n_groups
            ring_head(pc, wk_i, r, w, n_groups)  # drop runs emptied by reclaims first
            if np.int64(wk_i[r, w, WI_AN]) == ring:
                merge_oldest(pc, wk_i, rep_i, r, w, n_groups)
            pos = np.int64(wk_i[r, w, WI_AH]) + np.int64(wk_i[r, w, WI_AN])
            if pos >= ring:  # head plus length, below 2 ring: no division
                pos -= ring
            row = n_groups + pos
            pc[r, w, row, 0] = keep
            pc[r, w, row, 1] = stamp(rep_i, r)
            pc[r, w, row, 2] = owner
            wk_i[r, w, WI_AN] += 1
            wk_i[r, w, WI_FREE] += keep
        wk_i[r, w, WI_USED] -= held - keep
        if pfx > 0:
            pc[r, w, g, 2] -= 1
            if np.int64(pc[r, w, g, 2]) == 0:
                wk_i[r, w, WI_FREE] += pc[r, w, g, 0]
                pc[r, w, g, 1] = stamp(rep_i, r)
                if np.int64(wk_i[r, w, WI_OLDG]) == 1 and np.int64(pc[r, w, g, 0]) > 0:
                    wk_i[r, w, WI_OLDG] = g + 2  # the only evictable chain
        return pos

    @jit
    def reclaim(pc, wk_i, r, w, n_groups, pos, owner, usable):
        """A preempted request is readmitted: the blocks of its released run `pos` still cached.
        With `usable` they are held again (hits that continue its prefix); otherwise the run stays
        evictable and loses its tag. Returns the blocks reclaimed."""
        if pos < 0:
            return np.int64(0)
        row = n_groups + pos
        if np.int64(pc[r, w, row, 2]) != owner:
            return np.int64(0)
        pc[r, w, row, 2] = -1
        n = np.int64(pc[r, w, row, 0])
        if not usable or n == 0:
            return np.int64(0)
        pc[r, w, row, 0] = 0
        wk_i[r, w, WI_FREE] -= n
        return n

    return Namespace(
        overlap=overlap,
        seen_overlap=seen_overlap,
        deliver=deliver,
        publish=publish,
        stamp=stamp,
        oldest_chain=oldest_chain,
        ring_head=ring_head,
        make_room=make_room,
        fits=fits,
        acquire_need=acquire_need,
        acquire=acquire,
        grow=grow,
        merge_oldest=merge_oldest,
        release=release,
        reclaim=reclaim,
    )
