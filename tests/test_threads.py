"""poa_mc.kernels.threads: contiguous ranges on the host's threads."""

from __future__ import annotations

import threading

import numba
import numpy as np
import pytest

from poa_mc.kernels import threads


def test_every_index_is_covered_once_in_contiguous_ranges() -> None:
    seen = np.zeros(1001, dtype=np.int64)
    ranges: list[tuple[int, int]] = []
    lock = threading.Lock()

    def mark(lo: int, hi: int, out: np.ndarray) -> None:
        out[lo:hi] += 1
        with lock:
            ranges.append((lo, hi))

    threads.over_ranges(mark, seen.size, seen)
    assert (seen == 1).all()
    ranges.sort()
    assert ranges[0][0] == 0 and ranges[-1][1] == seen.size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert len(ranges) == threads.count(seen.size)


def test_the_result_does_not_depend_on_the_thread_count() -> None:
    from poa_mc.stats.assignment import _batch_assign

    costs = np.random.default_rng(3).random((300, 4, 3))
    many = _batch_assign(costs, 2)
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        one = _batch_assign(costs, 2)
    finally:
        numba.set_num_threads(before)
    assert np.array_equal(many, one)


def test_an_error_in_any_range_reaches_the_caller() -> None:
    def fail_late(lo: int, hi: int) -> None:
        if hi == 50:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        threads.over_ranges(fail_late, 50)


def test_fewer_items_than_threads_use_one_thread_each() -> None:
    assert threads.count(1) == 1
    assert threads.count(0) == 1
    assert threads.count(10**6) == numba.get_num_threads()
