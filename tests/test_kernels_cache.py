"""Unit tests of poa_mc/kernels/cache.py, called through the CPU build (vLLM's block-pool LRU)."""

import numpy as np

from poa_mc.kernels import cpu
from poa_mc.kernels.layout import NRI, NWI, RI_EVN, RI_MERGES, WI_AN, WI_FREE, WI_USED

K = cpu._K
G = 4  # prefix groups in these tests


def _cache_arrays(workers=1, groups=G, ring=8):
    pc = np.zeros((1, workers, groups + ring, 4), dtype=np.int32)
    wk_i = np.zeros((1, workers + 1, NWI), dtype=np.int32)
    rep_i = np.zeros((1, NRI), dtype=np.int64)
    ev = np.zeros((1, 8, 4))
    return pc, wk_i, rep_i, ev


def _acq(a, g, pfx, held, cap):
    pc, wk_i, rep_i, ev = a
    return K.cache.acquire(pc, wk_i, rep_i, ev, 0.0, 0.0, 0, 0, g, pfx, held, G, cap)


def _rel(a, g, pfx, held, keep=0, owner=-1):
    pc, wk_i, rep_i, _ = a
    return K.cache.release(pc, wk_i, rep_i, 0, 0, g, pfx, held, keep, owner, G)


def test_lru_follows_release_order_and_evicts_tails_first():
    a = _cache_arrays()
    pc, wk_i = a[0], a[1]
    # capacity 10: chains of groups 0 and 1 (4 blocks each); group 0 is released last, so group 1
    # (released first) is the older one although group 0 was looked up first
    assert _acq(a, 0, 4, 0, 10) == 0
    assert _acq(a, 1, 4, 0, 10) == 0
    _rel(a, 1, 4, 0)
    _rel(a, 0, 4, 0)
    assert wk_i[0, 0, WI_FREE] == 8
    # group 2 needs 4 blocks: 2 free, so the 2 tail blocks of group 1 go
    assert _acq(a, 2, 4, 0, 10) == 0
    assert list(pc[0, 0, :3, 0]) == [4, 2, 4]
    assert wk_i[0, 0, WI_USED] == 10
    assert K.cache.overlap(pc, 0, 0, 1, 4) == 2  # a partial hit: group 1's remaining head
    # a pinned chain is never evicted: with group 2 held, group 3 cannot take 8 blocks
    assert _acq(a, 3, 0, 8, 10) == -1
    assert wk_i[0, 0, WI_USED] == 10 and list(pc[0, 0, :3, 0]) == [4, 2, 4]  # nothing changed


def test_released_unique_blocks_stay_cached_and_push_older_prefixes_out():
    # prompts of 4 blocks: a 2-block group prefix and 2 unique full blocks; capacity 8.
    # Requests of groups 0, 1, 2, 0 one after another (docs/sources.md, "KV blocks": every full block a
    # finished request held stays cached as evictable).
    a = _cache_arrays()
    pc, wk_i = a[0], a[1]
    for g in (0, 1):
        assert _acq(a, g, 2, 2, 8) == 0
        _rel(a, g, 2, 2, keep=2)
    assert wk_i[0, 0, WI_USED] == 8 and wk_i[0, 0, WI_FREE] == 8
    # group 2 needs 4: the oldest are request 0's unique run, then group 0's chain (its tail first)
    assert _acq(a, 2, 2, 2, 8) == 0
    assert pc[0, 0, 0, 0] == 0  # group 0's prefix is gone, pushed out by unique blocks
    _rel(a, 2, 2, 2, keep=2)
    # so the fourth request misses, where freeing unique blocks on release would have kept it
    assert _acq(a, 0, 2, 2, 8) == 0
    assert wk_i[0, 0, WI_USED] <= 8


def test_partial_blocks_are_freed_and_capacity_counts_evictable_blocks():
    a = _cache_arrays()
    wk_i = a[1]
    assert _acq(a, 0, 0, 5, 6) == 0
    _rel(a, 0, 0, 5, keep=4)  # the fifth block was partial: freed outright
    assert wk_i[0, 0, WI_USED] == 4 and wk_i[0, 0, WI_FREE] == 4
    assert K.cache.fits(wk_i, 0, 0, 6, 6) and not K.cache.fits(wk_i, 0, 0, 6, 7)
    assert _acq(a, 1, 0, 6, 6) == 0  # evicts the whole run
    assert wk_i[0, 0, WI_USED] == 6 and wk_i[0, 0, WI_FREE] == 0 and wk_i[0, 0, WI_AN] == 0


def test_a_preempted_request_reclaims_what_is_left_of_its_own_run():
    a = _cache_arrays()
    pc, wk_i = a[0], a[1]
    assert _acq(a, 0, 0, 4, 6) == 0
    pos = _rel(a, 0, 0, 4, keep=4, owner=7)
    assert _acq(a, 1, 0, 3, 6) == 0  # takes 3 blocks: 1 of the run's tail is evicted
    assert pc[0, 0, G + pos, 0] == 3
    assert K.cache.reclaim(pc, wk_i, 0, 0, G, pos, 5, True) == 0  # not its run
    assert K.cache.reclaim(pc, wk_i, 0, 0, G, pos, 7, True) == 3
    assert wk_i[0, 0, WI_FREE] == 0 and wk_i[0, 0, WI_USED] == 6
    assert K.cache.reclaim(pc, wk_i, 0, 0, G, pos, 7, True) == 0  # only once


def test_a_full_ring_merges_its_two_oldest_runs():
    a = _cache_arrays(ring=2)
    pc, wk_i, rep_i = a[0], a[1], a[2]
    for g in range(3):
        assert _acq(a, g, 0, 1, 100) == 0
        _rel(a, g, 0, 1, keep=1)
    assert rep_i[0, RI_MERGES] == 1 and wk_i[0, 0, WI_AN] == 2
    assert wk_i[0, 0, WI_USED] == 3 and wk_i[0, 0, WI_FREE] == 3
    assert sorted(pc[0, 0, G:, 0]) == [1, 2]


def test_router_sees_cache_events_after_the_delay():
    pc, wk_i, rep_i, ev = _cache_arrays()
    K.cache.acquire(pc, wk_i, rep_i, ev, 50.0, 100.0, 0, 0, 1, 3, 0, G, 10)
    assert K.cache.overlap(pc, 0, 0, 1, 3) == 3 and K.cache.seen_overlap(pc, 0, 0, 1, 3) == 0
    assert rep_i[0, RI_EVN] == 1
    K.cache.deliver(pc, rep_i, ev, 0, 149.0)
    assert K.cache.seen_overlap(pc, 0, 0, 1, 3) == 0
    K.cache.deliver(pc, rep_i, ev, 0, 150.0)
    assert K.cache.seen_overlap(pc, 0, 0, 1, 3) == 3 and rep_i[0, RI_EVN] == 0
