"""Unit tests of the kernel building blocks (rng, cache, heap), called through the CPU build."""

import numpy as np
from poa_mc.kernels import cpu
from poa_mc.kernels.layout import NRI, NWI, RI_EVN, RI_HEAPN, WI_USED
from scipy import stats

K = cpu._K


def test_uniform_is_deterministic_uniform_and_keyed():
    key = K.rng.replica_key(1, 2, 3)
    u = np.array([K.rng.uniform(key, i, 5) for i in range(20000)])
    assert ((u > 0) & (u < 1)).all()
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    again = np.array([K.rng.uniform(key, i, 5) for i in range(200)])
    np.testing.assert_array_equal(u[:200], again)
    other = np.array([K.rng.uniform(K.rng.replica_key(1, 2, 4), i, 5) for i in range(200)])
    assert abs(np.corrcoef(u[:200], other)[0, 1]) < 0.3
    # a different field of the same request is a different number
    assert K.rng.uniform(key, 7, 5) != K.rng.uniform(key, 7, 6)


def test_exponential_mean_and_bounded_integers():
    key = K.rng.replica_key(9, 0, 0)
    x = np.array([K.rng.exponential(key, i, 1, 2.5) for i in range(40000)])
    assert abs(x.mean() - 2.5) < 4 * 2.5 / np.sqrt(x.size)
    b = np.array([K.rng.below(key, i, 3, 7) for i in range(7000)])
    assert b.min() == 0 and b.max() == 6
    assert stats.chisquare(np.bincount(b, minlength=7)).pvalue > 1e-3


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


def test_heap_pops_in_time_then_client_order():
    rng = np.random.default_rng(3)
    times = rng.integers(0, 20, size=200).astype(float)
    heap_t = np.zeros((1, 200))
    heap_c = np.zeros((1, 200), dtype=np.int32)
    rep_i = np.zeros((1, NRI), dtype=np.int64)
    for c, t in enumerate(times):
        K.heap.push(heap_t, heap_c, rep_i, 0, t, c)
    order = [K.heap.pop(heap_t, heap_c, rep_i, 0) for _ in range(200)]
    assert rep_i[0, RI_HEAPN] == 0
    assert order == sorted(range(200), key=lambda c: (times[c], c))


def test_decode_span_is_the_sum_of_step_times():
    fp = np.zeros(32)
    from poa_mc.kernels.layout import F_D0, F_D1, F_D2

    fp[F_D2], fp[F_D1], fp[F_D0] = -25.74, 54.01, 5.74
    cap = 16384.0 * 64
    for x0, n, k in [(4096, 1, 1), (123_456, 13, 97), (500_000, 64, 256)]:
        naive = sum(K.cluster.step_ms(fp, float(x0 + n * j), cap) for j in range(k))
        assert abs(K.cluster.decode_span(fp, x0, n, k, cap) - naive) <= 1e-9 * naive
