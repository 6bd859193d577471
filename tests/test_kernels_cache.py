"""Unit tests of kernels/cache.py, called through the CPU build."""

import numpy as np
from poa_mc.kernels import cpu
from poa_mc.kernels.layout import NRI, NWI, RI_EVN, WI_USED

K = cpu._K


def _cache_arrays(workers=1, groups=4):
    pc = np.zeros((1, workers, groups, 4), dtype=np.int32)
    wk_i = np.zeros((1, workers + 1, NWI), dtype=np.int32)
    rep_i = np.zeros((1, NRI), dtype=np.int64)
    ev = np.zeros((1, 8, 4))
    return pc, wk_i, rep_i, ev


def test_cache_lru_evicts_the_tail_of_the_oldest_unpinned_chain():
    pc, wk_i, rep_i, ev = _cache_arrays()
    acq, rel = K.cache.acquire, K.cache.release
    # capacity 10: chains of groups 0 (4 blocks) and 1 (4 blocks), both released
    assert acq(pc, wk_i, rep_i, ev, 0.0, 0.0, 0, 0, 0, 4, 0, 4, 10) == 0
    rel(pc, wk_i, 0, 0, 0, 4, 0)
    assert acq(pc, wk_i, rep_i, ev, 0.0, 0.0, 0, 0, 1, 4, 0, 4, 10) == 0
    rel(pc, wk_i, 0, 0, 1, 4, 0)
    # group 0 again hits all 4 blocks and becomes the most recent
    assert acq(pc, wk_i, rep_i, ev, 0.0, 0.0, 0, 0, 0, 4, 0, 4, 10) == 4
    rel(pc, wk_i, 0, 0, 0, 4, 0)
    # group 2 needs 4 blocks: 2 free, so the 2 tail blocks of group 1 (the oldest) go
    assert acq(pc, wk_i, rep_i, ev, 0.0, 0.0, 0, 0, 2, 4, 0, 4, 10) == 0
    assert list(pc[0, 0, :3, 0]) == [4, 2, 4]
    assert wk_i[0, 0, WI_USED] == 10
    # a partial hit: group 1's remaining head
    assert K.cache.overlap(pc, 0, 0, 1, 4) == 2
    # a pinned chain is never evicted: with group 2 still held, group 3 cannot take 8 blocks
    assert acq(pc, wk_i, rep_i, ev, 0.0, 0.0, 0, 0, 3, 0, 8, 4, 10) == -1
    assert wk_i[0, 0, WI_USED] == 10  # nothing changed


def test_router_sees_cache_events_after_the_delay():
    pc, wk_i, rep_i, ev = _cache_arrays()
    K.cache.acquire(pc, wk_i, rep_i, ev, 50.0, 100.0, 0, 0, 1, 3, 0, 4, 10)
    assert K.cache.overlap(pc, 0, 0, 1, 3) == 3 and K.cache.seen_overlap(pc, 0, 0, 1, 3) == 0
    assert rep_i[0, RI_EVN] == 1
    K.cache.deliver(pc, rep_i, ev, 0, 149.0)
    assert K.cache.seen_overlap(pc, 0, 0, 1, 3) == 0
    K.cache.deliver(pc, rep_i, ev, 0, 150.0)
    assert K.cache.seen_overlap(pc, 0, 0, 1, 3) == 3 and rep_i[0, RI_EVN] == 0
