"""Lower KV tiers of a prefill worker, G2 (host DRAM) and G3 (local SSD) below its G1
(poa_mc/kernels/cache.py), and G4 (remote storage) shared by every prefill worker of the replica.

The tiers are exclusive (a block lives in one tier of a worker) and keep the prefix-chain shape
of G1: chain g's first `pc[.., g, 0]` blocks are in G1, the next `PC_N2` in G2, the next `PC_N3`
in G3. That shape is kept because every move is at a chain's boundary between two tiers:
- **Demotion.** G1 evicts the tail of a chain (cache.make_room): those blocks become the head of
  the chain's G2 segment, which takes their G1 stamp (`PC_S2`). G1's anonymous runs (unique
  blocks nobody else can hit) go to G2's own ring of anonymous runs (ring rows, PC_R2N/PC_R2S).
  G2 evicts the oldest stamp first, a chain's tail first; a chain's blocks go on to G3 only if the
  chain's frequency is at least 2, anonymous runs never (their frequency is 1). G3 evicts the
  oldest chain segment; its blocks go to G4 if the replica has one (else they are dropped).
- **G4** holds, for each chain, one segment of its blocks (PC_B4, PC_N4 in worker 0's rows: the
  replica's, not a worker's). What any worker's G3 lets go of joins it: merged when it touches or
  overlaps what G4 holds of the chain, else the segment nearer the chain's head is kept (a prefix
  match must reach a block to use it). G4 is a store, not a tier of a worker: a hit copies its
  blocks to the worker's G1 and G4 keeps them (another worker may need them), so a block can be
  in a worker's G1 and in G4. G4 evicts its oldest segment (stamp PC_S4, refreshed by each hit),
  tail first.
- **Promotion.** A prompt that continues past a chain's G1 blocks hits its G2 then G3 segment
  (cache.acquire): those blocks move to G1, and the prefill pass that computes the rest waits
  for their copy (replica.plan_prefill).
- Each lower segment knows where it starts in its chain (PC_B2, PC_B3): once a move has settled
  they are the blocks above it (B2 = G1's count, B3 = B2 + N2), and they stay exact in between,
  while a demotion or promotion is half done, which is when G3 may offload to G4.
- A block whose predecessor left every tier can never be hit again (a prefix match stops at the
  first missing block): a chain's segment below a dropped one is dropped with it, at once, rather
  than left to age out. This is where the model departs from a block-by-block LRU: those blocks
  would otherwise still take room (and could come back into use if the missing blocks were
  recomputed).

Frequency (Dynamo's KVBM rule, docs/tiers.md): a chain starts at 1 when a worker stores it while
holding none of it, doubles on each hit in any tier and loses 1 per `P_DECAY` ms (never below 1);
it is one number per chain and worker, not per block (cache.acquire keeps it).

An exclusive G1 + G2 with no G3 is one LRU over the summed capacity when each group has one prefix
length (tests/test_kernels_tiers.py checks it request by request): G2 only ever holds what G1
evicted, oldest first, so its oldest block is the hierarchy's. With variable prefixes they part:
pinning a chain for a shorter prefix frees its tail with G1 alone but demotes it with tiers
(cache.acquire).
"""

import numpy as np

from ._ns import Namespace
from .layout import (
    NPC,
    PC_B2,
    PC_B3,
    PC_B4,
    PC_EPOCH,
    PC_FREQ,
    PC_N2,
    PC_N3,
    PC_N4,
    PC_R2N,
    PC_R2S,
    PC_S2,
    PC_S3,
    PC_S4,
    RI_MERGES,
    WI_A2H,
    WI_A2N,
    WI_DECAY,
    WI_G2CAP,
    WI_G2U,
    WI_G3CAP,
    WI_G3U,
    WI_G4CAP,
    WI_G4U,
    WI_LINEAGE,
    WI_USED,
)

_FREQ_MAX = 1 << 20


def build(jit, jit_inline=None, enabled=True):
    """enabled=False: a build for cells without lower tiers, where `tiered` is False at compile
    time, so that every tier branch is compiled out of the callers (source.build, lean)."""
    jit_inline = jit_inline or jit

    if enabled:

        @jit_inline
        def tiered(pc, wk_i, r, w):
            # the cache's width first: a run without tiers never reads the worker's row for this
            return pc.shape[3] > NPC and np.int64(wk_i[r, w, WI_G2CAP]) > 0

    else:

        @jit_inline
        def tiered(pc, wk_i, r, w):
            return False

    @jit_inline
    def decay_step(wk_i, r, w, now):
        d = np.int64(wk_i[r, w, WI_DECAY])
        return np.int64(now // d) if d > 0 else np.int64(0)

    @jit_inline
    def frequency(pc, r, w, g, step):
        """Chain g's frequency at decay step `step` (0 before the worker first stored it)."""
        f = np.int64(pc[r, w, g, PC_FREQ])
        if f <= 0:
            return np.int64(0)
        f -= step - np.int64(pc[r, w, g, PC_EPOCH])
        return f if f > 1 else np.int64(1)

    @jit_inline
    def set_frequency(pc, r, w, g, f, step):
        pc[r, w, g, PC_FREQ] = f if f < _FREQ_MAX else _FREQ_MAX
        pc[r, w, g, PC_EPOCH] = step

    @jit_inline
    def oldest_segment(pc, r, w, n_groups, n_col, s_col):
        """The chain whose segment in one lower tier (its block count in column n_col, its stamp in
        s_col) is the oldest, or -1 if that tier holds no chain segment."""
        best = -1
        best_s = np.int64(0)
        for g in range(n_groups):
            if np.int64(pc[r, w, g, n_col]) > 0 and (best < 0 or np.int64(pc[r, w, g, s_col]) < best_s):
                best = g
                best_s = np.int64(pc[r, w, g, s_col])
        return best

    @jit
    def g4_fit(pc, wk_i, r, n_groups):
        """Evict G4's oldest chain segments, tail first, until it holds no more than its capacity."""
        short = np.int64(wk_i[r, 0, WI_G4U]) - np.int64(wk_i[r, 0, WI_G4CAP])
        while short > 0:
            best = oldest_segment(pc, r, 0, n_groups, PC_N4, PC_S4)
            cut = np.int64(pc[r, 0, best, PC_N4])
            if cut > short:
                cut = short
            pc[r, 0, best, PC_N4] -= cut
            wk_i[r, 0, WI_G4U] -= cut
            short -= cut

    @jit
    def g4_put(pc, wk_i, r, w, n_groups, g, first, n, stamp):
        """Blocks first..first+n-1 of chain g left worker w's G3: the replica's G4 keeps them, if it
        has one (merged with what it holds of the chain, or instead of it when nearer the chain's
        head, or not at all when beyond a gap), then evicts down to its capacity."""
        if n <= 0 or np.int64(wk_i[r, w, WI_G4CAP]) <= 0:
            return
        lo = np.int64(pc[r, 0, g, PC_B4])
        held = np.int64(pc[r, 0, g, PC_N4])
        hi = lo + held
        end = first + n
        if held > 0 and first <= hi and end >= lo:
            if first < lo:
                lo = first
            if end > hi:
                hi = end
            if stamp > np.int64(pc[r, 0, g, PC_S4]):
                pc[r, 0, g, PC_S4] = stamp
        elif held > 0 and first > hi:
            return
        else:
            lo = first
            hi = end
            pc[r, 0, g, PC_S4] = stamp
        pc[r, 0, g, PC_B4] = lo
        pc[r, 0, g, PC_N4] = hi - lo
        wk_i[r, 0, WI_G4U] += hi - lo - held
        g4_fit(pc, wk_i, r, n_groups)

    @jit_inline
    def g4_reach(pc, wk_i, r, w, g, end, pfx):
        """Blocks of a `pfx`-block prefix G4 holds from block `end` on (where worker w's own tiers
        stop), 0 if it holds none of them or the replica has no G4."""
        if end >= pfx or np.int64(wk_i[r, w, WI_G4CAP]) <= 0:
            return np.int64(0)
        lo = np.int64(pc[r, 0, g, PC_B4])
        hi = lo + np.int64(pc[r, 0, g, PC_N4])
        if lo > end or hi <= end:
            return np.int64(0)
        return (hi if hi < pfx else pfx) - end

    @jit
    def drop_g3(pc, wk_i, r, w, g, n_groups):
        """Chain g's G3 segment can no longer be reached from G1: it leaves G3 (for G4, if any)."""
        n = np.int64(pc[r, w, g, PC_N3])
        pc[r, w, g, PC_N3] = 0
        wk_i[r, w, WI_G3U] -= n
        g4_put(pc, wk_i, r, w, n_groups, g, np.int64(pc[r, w, g, PC_B3]), n, np.int64(pc[r, w, g, PC_S3]))

    @jit
    def drop_below_g1(pc, wk_i, r, w, g, n_groups):
        """Chain g lost its G1 tail for good: what it had in G2 and G3 cannot be reached any more."""
        n = np.int64(pc[r, w, g, PC_N2])
        pc[r, w, g, PC_N2] = 0
        wk_i[r, w, WI_G2U] -= n
        drop_g3(pc, wk_i, r, w, g, n_groups)

    @jit
    def g3_room(pc, wk_i, r, w, n_groups, need):
        """Evict G3's oldest chain segments, tail first, until `need` more blocks fit (need <=
        capacity): to G4 if the replica has one, else they are dropped."""
        short = np.int64(wk_i[r, w, WI_G3U]) + need - np.int64(wk_i[r, w, WI_G3CAP])
        while short > 0:
            best = oldest_segment(pc, r, w, n_groups, PC_N3, PC_S3)
            cut = np.int64(pc[r, w, best, PC_N3])
            if cut > short:
                cut = short
            pc[r, w, best, PC_N3] -= cut
            wk_i[r, w, WI_G3U] -= cut
            short -= cut
            first = np.int64(pc[r, w, best, PC_B3]) + np.int64(pc[r, w, best, PC_N3])
            g4_put(pc, wk_i, r, w, n_groups, best, first, cut, np.int64(pc[r, w, best, PC_S3]))

    @jit_inline
    def ring2_head(pc, wk_i, r, w, n_groups):
        """Row of G2's oldest anonymous run still holding blocks, or -1."""
        ring = pc.shape[2] - n_groups
        while np.int64(wk_i[r, w, WI_A2N]) > 0:
            row = n_groups + np.int64(wk_i[r, w, WI_A2H])
            if np.int64(pc[r, w, row, PC_R2N]) > 0:
                return row
            wk_i[r, w, WI_A2H] = (np.int64(wk_i[r, w, WI_A2H]) + 1) % ring
            wk_i[r, w, WI_A2N] -= 1
        return -1

    @jit
    def g2_room(pc, wk_i, r, w, n_groups, need, step):
        """Evict G2's oldest blocks until `need` more fit (need <= capacity): an anonymous run's are
        dropped, a chain's go on to G3 if its frequency is at least 2 (and G3 exists), else they
        are dropped with its G3 segment."""
        short = np.int64(wk_i[r, w, WI_G2U]) + need - np.int64(wk_i[r, w, WI_G2CAP])
        while short > 0:
            best = oldest_segment(pc, r, w, n_groups, PC_N2, PC_S2)
            row = ring2_head(pc, wk_i, r, w, n_groups)
            if row >= 0 and (
                best < 0
                or np.int64(pc[r, w, row, PC_R2S]) < np.int64(pc[r, w, best, PC_S2])
                or np.int64(wk_i[r, w, WI_LINEAGE]) == 1
            ):
                cut = np.int64(pc[r, w, row, PC_R2N])
                if cut > short:
                    cut = short
                pc[r, w, row, PC_R2N] -= cut
                wk_i[r, w, WI_G2U] -= cut
                short -= cut
                continue
            g = best
            cut = np.int64(pc[r, w, g, PC_N2])
            if cut > short:
                cut = short
            pc[r, w, g, PC_N2] -= cut
            wk_i[r, w, WI_G2U] -= cut
            short -= cut
            cap3 = np.int64(wk_i[r, w, WI_G3CAP])
            if cap3 > 0 and frequency(pc, r, w, g, step) >= 2:
                move = cut
                if move > cap3:  # the deeper part of the cut cannot follow: G3's old segment is cut off
                    drop_g3(pc, wk_i, r, w, g, n_groups)
                    move = cap3
                g3_room(pc, wk_i, r, w, n_groups, move)
                pc[r, w, g, PC_N3] += move
                pc[r, w, g, PC_S3] = pc[r, w, g, PC_S2]
                pc[r, w, g, PC_B3] = np.int64(pc[r, w, g, PC_B2]) + np.int64(pc[r, w, g, PC_N2])
                wk_i[r, w, WI_G3U] += move
            else:
                drop_g3(pc, wk_i, r, w, g, n_groups)

    @jit
    def demote_chain(pc, wk_i, r, w, g, n, stamp, n_groups, step):
        """G1 evicted the last `n` of chain g's G1 blocks (stamped `stamp`): they head its G2 segment."""
        cap2 = np.int64(wk_i[r, w, WI_G2CAP])
        move = n if n < cap2 else cap2
        if move < n:  # blocks of the cut are dropped: what the chain had deeper is cut off
            drop_below_g1(pc, wk_i, r, w, g, n_groups)
        if move > 0:
            g2_room(pc, wk_i, r, w, n_groups, move, step)
            pc[r, w, g, PC_N2] += move
            pc[r, w, g, PC_S2] = stamp
            pc[r, w, g, PC_B2] = pc[r, w, g, 0]  # G1 has let go of them already
            wk_i[r, w, WI_G2U] += move

    @jit
    def demote_run(pc, wk_i, rep_i, r, w, n, stamp, n_groups, step):
        """G1 evicted `n` blocks of an anonymous run stamped `stamp`: they join G2's ring."""
        cap2 = np.int64(wk_i[r, w, WI_G2CAP])
        move = n if n < cap2 else cap2
        if move <= 0:
            return
        g2_room(pc, wk_i, r, w, n_groups, move, step)
        ring = pc.shape[2] - n_groups
        ring2_head(pc, wk_i, r, w, n_groups)
        last = (np.int64(wk_i[r, w, WI_A2H]) + np.int64(wk_i[r, w, WI_A2N]) - 1) % ring
        if np.int64(wk_i[r, w, WI_A2N]) > 0 and np.int64(pc[r, w, n_groups + last, PC_R2S]) == stamp:
            pc[r, w, n_groups + last, PC_R2N] += move  # more of the run the ring's newest entry holds
        else:
            if np.int64(wk_i[r, w, WI_A2N]) == ring:
                # full: merge its two oldest runs into the second (the newer stamp)
                h = np.int64(wk_i[r, w, WI_A2H])
                h2 = (h + 1) % ring
                pc[r, w, n_groups + h2, PC_R2N] += pc[r, w, n_groups + h, PC_R2N]
                pc[r, w, n_groups + h, PC_R2N] = 0
                wk_i[r, w, WI_A2H] = h2
                wk_i[r, w, WI_A2N] -= 1
                rep_i[r, RI_MERGES] += 1
            pos = (np.int64(wk_i[r, w, WI_A2H]) + np.int64(wk_i[r, w, WI_A2N])) % ring
            pc[r, w, n_groups + pos, PC_R2N] = move
            pc[r, w, n_groups + pos, PC_R2S] = stamp
            wk_i[r, w, WI_A2N] += 1
        wk_i[r, w, WI_G2U] += move

    @jit_inline
    def lower_hits(pc, wk_i, r, w, g, pfx):
        """(G2, G3, G4) blocks a prompt with `pfx` prefix blocks of chain g would hit past G1."""
        n1 = np.int64(pc[r, w, g, 0])
        h2 = np.int64(0)
        h3 = np.int64(0)
        h4 = np.int64(0)
        if pfx > n1:
            n2 = np.int64(pc[r, w, g, PC_N2])
            h2 = pfx - n1 if pfx - n1 < n2 else n2
            if h2 == n2:
                n3 = np.int64(pc[r, w, g, PC_N3])
                h3 = pfx - n1 - n2 if pfx - n1 - n2 < n3 else n3
                if h3 == n3:
                    h4 = g4_reach(pc, wk_i, r, w, g, n1 + n2 + n3, pfx)
        return h2, h3, h4

    @jit_inline
    def lower_beyond(pc, wk_i, r, w, g, pfx, seen):
        """(G2, G3, G4) blocks of a `pfx`-block prefix past the first `seen` (the router's view of
        G1): the part of each lower segment that lies beyond it."""
        n1 = np.int64(pc[r, w, g, 0])
        e2 = n1 + np.int64(pc[r, w, g, PC_N2])
        e3 = e2 + np.int64(pc[r, w, g, PC_N3])
        lo2 = n1 if n1 > seen else seen
        hi2 = e2 if e2 < pfx else pfx
        lo3 = e2 if e2 > seen else seen
        hi3 = e3 if e3 < pfx else pfx
        lo4 = e3 if e3 > seen else seen
        hi4 = e3 + g4_reach(pc, wk_i, r, w, g, e3, pfx)
        return (
            (hi2 - lo2 if hi2 > lo2 else np.int64(0)),
            (hi3 - lo3 if hi3 > lo3 else np.int64(0)),
            (hi4 - lo4 if hi4 > lo4 else np.int64(0)),
        )

    @jit_inline
    def take(pc, wk_i, r, w, g, h2, h3):
        """Promotion: h2 and h3 blocks leave the heads of G2 and G3 (the caller grows the chain in
        G1); negative counts put them back."""
        pc[r, w, g, PC_N2] -= h2
        pc[r, w, g, PC_B2] += h2
        wk_i[r, w, WI_G2U] -= h2
        pc[r, w, g, PC_N3] -= h3
        pc[r, w, g, PC_B3] += h3
        wk_i[r, w, WI_G3U] -= h3

    @jit
    def conserved(pc, wk_i, r, w, n_groups, capacity):
        """True if worker w's tiers hold what their counters say and no capacity is exceeded."""
        if np.int64(wk_i[r, w, WI_USED]) > capacity:
            return False
        if not tiered(pc, wk_i, r, w):
            return True
        s2 = np.int64(0)
        s3 = np.int64(0)
        for g in range(n_groups):
            n1 = np.int64(pc[r, w, g, 0])
            n2 = np.int64(pc[r, w, g, PC_N2])
            n3 = np.int64(pc[r, w, g, PC_N3])
            if n2 < 0 or n3 < 0 or n1 < 0:
                return False
            if (n2 > 0 or n3 > 0) and np.int64(pc[r, w, g, PC_FREQ]) <= 0:
                return False
            # each segment starts where the one above it ends
            if n2 > 0 and np.int64(pc[r, w, g, PC_B2]) != n1:
                return False
            if n3 > 0 and np.int64(pc[r, w, g, PC_B3]) != n1 + n2:
                return False
            s2 += n2
            s3 += n3
        ring = pc.shape[2] - n_groups
        for j in range(np.int64(wk_i[r, w, WI_A2N])):
            n = np.int64(pc[r, w, n_groups + (np.int64(wk_i[r, w, WI_A2H]) + j) % ring, PC_R2N])
            if n < 0:
                return False
            s2 += n
        if w == 0 and np.int64(wk_i[r, 0, WI_G4CAP]) > 0:  # the replica's G4
            s4 = np.int64(0)
            for g in range(n_groups):
                n4 = np.int64(pc[r, 0, g, PC_N4])
                if n4 < 0 or np.int64(pc[r, 0, g, PC_B4]) < 0:
                    return False
                s4 += n4
            if s4 != np.int64(wk_i[r, 0, WI_G4U]) or s4 > np.int64(wk_i[r, 0, WI_G4CAP]):
                return False
        return (
            s2 == np.int64(wk_i[r, w, WI_G2U])
            and s3 == np.int64(wk_i[r, w, WI_G3U])
            and s2 <= np.int64(wk_i[r, w, WI_G2CAP])
            and s3 <= np.int64(wk_i[r, w, WI_G3CAP])
        )

    return Namespace(
        enabled=enabled,
        tiered=tiered,
        decay_step=decay_step,
        frequency=frequency,
        set_frequency=set_frequency,
        drop_g3=drop_g3,
        drop_below_g1=drop_below_g1,
        g4_fit=g4_fit,
        g4_put=g4_put,
        g4_reach=g4_reach,
        oldest_segment=oldest_segment,
        g3_room=g3_room,
        ring2_head=ring2_head,
        g2_room=g2_room,
        demote_chain=demote_chain,
        demote_run=demote_run,
        lower_hits=lower_hits,
        lower_beyond=lower_beyond,
        take=take,
        conserved=conserved,
    )
