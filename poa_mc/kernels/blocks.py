"""A request's KV blocks: which worker's prefix cache a worker reads, how much of a prefix hit a
prefill can use, and a decode sequence's blocks as its output grows (reserved at admission, one
more each block_size tokens, the full ones kept cached when it is released)."""

import numpy as np

from ._ns import Namespace
from .layout import (
    P_B,
    P_BSHIFT,
    P_DKV,
    P_NP,
    P_PSHARE,
    P_RECLAST,
    SI_DONE,
    SI_GEN,
    SI_ISL,
    SI_NEED,
    SI_NEXTB,
    SI_PFX,
    SI_RECOMP,
    SI_RESERVE,
    WI_FREE,
    WI_USED,
)


def build(jit, jit_inline=None):
    jit_inline = jit_inline or jit

    @jit_inline
    def ceil_blocks(ip, tokens):
        """Blocks that hold `tokens` tokens, ceil(tokens / B): a shift when B is a power of two
        (P_BSHIFT), where // is an integer division, about ten a request."""
        sh = ip[P_BSHIFT]
        if sh > 0:
            return (tokens + ip[P_B] - 1) >> (sh - 1)
        return (tokens + ip[P_B] - 1) // ip[P_B]

    @jit_inline
    def full_blocks(ip, tokens):
        """Whole blocks in `tokens` tokens, floor(tokens / B) (an arithmetic shift floors too)."""
        sh = ip[P_BSHIFT]
        if sh > 0:
            return tokens >> (sh - 1)
        return tokens // ip[P_B]

    @jit_inline
    def cache_row(ip, w):
        """The worker whose prefix cache worker w uses: its own, or worker 0's when the prefill
        workers share one (P_PSHARE: the global LRU of the caching game)."""
        if ip[P_PSHARE] == 1 and w < ip[P_NP]:
            return np.int64(0)
        return w

    @jit_inline
    def usable_hit(ip, hit, length):
        """Cached blocks a prefill can use: vLLM (and Dynamo's simulator) caps a prefix hit at
        length - 1 tokens in whole blocks, so a fully cached prompt still computes its last block
        (cluster.recompute_last_block; off, the whole cached prefix counts)."""
        if ip[P_RECLAST] == 1:
            top = full_blocks(ip, length - 1)
            if hit > top:
                return top
        return hit

    @jit_inline
    def set_reserve(slot_i, r, s, own, bs):
        """Request s holds `own` blocks of its own on its decode worker (besides its prefix chain);
        SI_NEXTB caches the output length they reach, so that a pass end finds who grows by a
        compare rather than a division per sequence."""
        slot_i[r, s, SI_RESERVE] = own
        slot_i[r, s, SI_NEXTB] = (np.int64(slot_i[r, s, SI_PFX]) + own) * bs - np.int64(slot_i[r, s, SI_ISL]) + 1

    @jit_inline
    def grow_to(slot_i, r, s, gen, bs):
        """Blocks request s adds so that its steps up to output token `gen` (context isl + gen - 1)
        have them: a block each B tokens past SI_NEXTB. Returns how many."""
        nextb = np.int64(slot_i[r, s, SI_NEXTB])
        if gen <= nextb:
            return np.int64(0)
        more = np.int64(0)
        while gen > nextb:
            nextb += bs
            more += 1
        slot_i[r, s, SI_RESERVE] += more
        slot_i[r, s, SI_NEXTB] = nextb
        return more

    @jit_inline
    def held_blocks(slot_i, r, s):
        """Blocks request s holds on its decode worker: its share of its group's prefix chain
        (every flow shares it: Dynamo's replay pins a transfer's resident prefix blocks when it
        reserves) and its own blocks."""
        return np.int64(slot_i[r, s, SI_PFX]) + np.int64(slot_i[r, s, SI_RESERVE])

    @jit_inline
    def step_extra(ip, slot_i, run, r, d, nrun, bs, j):
        """Blocks the decoding sequences of d add by their j-th next step (0: the next one): step
        k of a request computes context isl + k - 1, so it needs ceil((isl + gen + j) / B) blocks."""
        extra = np.int64(0)
        for i in range(nrun):
            s = np.int64(run[r, d, i])
            if np.int64(slot_i[r, s, SI_DONE]) == np.int64(slot_i[r, s, SI_NEED]):
                ctx = np.int64(slot_i[r, s, SI_ISL]) + np.int64(slot_i[r, s, SI_GEN]) + j
                held = held_blocks(slot_i, r, s)
                if ctx > held * bs:
                    extra += ceil_blocks(ip, ctx) - held
        return extra

    @jit_inline
    def fits_with_spare(ip, slot_i, wk_i, run, r, d, need, nspare):
        """`need` more blocks fit on d while the next step of its first `nspare` running requests
        still gets its blocks. Each of those adds at most one block per step, so the exact sum
        (a scan of the running set) is only needed between the two bounds."""
        avail = ip[P_DKV] - np.int64(wk_i[r, d, WI_USED]) + np.int64(wk_i[r, d, WI_FREE])
        if need + nspare <= avail:
            return True
        if need > avail:
            return False
        return need + step_extra(ip, slot_i, run, r, d, nspare, ip[P_B], np.int64(0)) <= avail

    @jit_inline
    def computed_tokens(slot_i, r, s):
        """Tokens whose KV request s has computed on its worker (the last sampled token is not)."""
        if np.int64(slot_i[r, s, SI_DONE]) < np.int64(slot_i[r, s, SI_NEED]):
            return (
                np.int64(slot_i[r, s, SI_ISL])
                + np.int64(slot_i[r, s, SI_RECOMP])
                - np.int64(slot_i[r, s, SI_NEED])
                + np.int64(slot_i[r, s, SI_DONE])
            )
        gen = np.int64(slot_i[r, s, SI_GEN])
        return np.int64(slot_i[r, s, SI_ISL]) + (gen - 1 if gen > 1 else 0)

    @jit_inline
    def kept_blocks(ip, slot_i, r, s, computed, bs):
        """Of a request's own blocks, the full computed ones that stay cached when it lets go."""
        keep = full_blocks(ip, computed) - np.int64(slot_i[r, s, SI_PFX])
        if keep < 0:
            keep = 0
        if keep > np.int64(slot_i[r, s, SI_RESERVE]):
            keep = np.int64(slot_i[r, s, SI_RESERVE])
        return keep

    return Namespace(
        ceil_blocks=ceil_blocks,
        full_blocks=full_blocks,
        cache_row=cache_row,
        usable_hit=usable_hit,
        set_reserve=set_reserve,
        grow_to=grow_to,
        held_blocks=held_blocks,
        step_extra=step_extra,
        fits_with_spare=fits_with_spare,
        computed_tokens=computed_tokens,
        kept_blocks=kept_blocks,
    )
