"""A binary min-heap of (time, client) per replica, ordered by time then client id so that
clients waking at the same instant arrive in a deterministic order on every target."""

import numpy as np

from ._ns import Namespace
from .layout import RI_HEAPN


def build(jit):

    @jit
    def _less(heap_t, heap_c, r, i, j):
        return heap_t[r, i] < heap_t[r, j] or (
            heap_t[r, i] == heap_t[r, j] and np.int64(heap_c[r, i]) < np.int64(heap_c[r, j])
        )

    @jit
    def _swap(heap_t, heap_c, r, i, j):
        t = heap_t[r, i]
        heap_t[r, i] = heap_t[r, j]
        heap_t[r, j] = t
        c = np.int64(heap_c[r, i])
        heap_c[r, i] = np.int64(heap_c[r, j])
        heap_c[r, j] = c

    @jit
    def push(heap_t, heap_c, rep_i, r, t, client):
        i = rep_i[r, RI_HEAPN]
        rep_i[r, RI_HEAPN] = i + 1
        heap_t[r, i] = t
        heap_c[r, i] = client
        while i > 0:
            p = (i - 1) // 2
            if not _less(heap_t, heap_c, r, i, p):
                break
            _swap(heap_t, heap_c, r, i, p)
            i = p

    @jit
    def pop(heap_t, heap_c, rep_i, r):
        """Remove the earliest entry and return its client id."""
        client = np.int64(heap_c[r, 0])
        n = rep_i[r, RI_HEAPN] - 1
        rep_i[r, RI_HEAPN] = n
        heap_t[r, 0] = heap_t[r, n]
        heap_c[r, 0] = np.int64(heap_c[r, n])
        i = 0
        while True:
            a = 2 * i + 1
            b = a + 1
            m = i
            if a < n and _less(heap_t, heap_c, r, a, m):
                m = a
            if b < n and _less(heap_t, heap_c, r, b, m):
                m = b
            if m == i:
                break
            _swap(heap_t, heap_c, r, i, m)
            i = m
        return client

    return Namespace(push=push, pop=pop)
