"""Unit tests of poa_mc/kernels/heap.py, called through the CPU build."""

import numpy as np

from poa_mc.kernels import cpu
from poa_mc.kernels.layout import NRI, RI_HEAPN

K = cpu._K


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
