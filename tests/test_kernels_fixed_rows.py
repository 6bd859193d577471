"""poa_mc/kernels/fixed_rows.py: the same array, its last dimension a constant."""

import numba
import numpy as np
import pytest

from poa_mc.kernels.fixed_rows import fixed_last


@numba.njit
def _read_fixed(a, r, s):
    b = fixed_last(a, 5)
    b[r, s, 0] = -1  # the same memory: the caller sees it
    return b[r, s, 3], b.shape[2], b.strides[1]


@numba.njit
def _write_fixed(a):
    b = fixed_last(a, 4)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(4):
                b[i, j, k] = 100 * i + 10 * j + k


def test_reads_and_writes_the_same_memory():
    a = np.arange(3 * 7 * 5, dtype=np.int32).reshape(3, 7, 5)
    value, width, stride = _read_fixed(a, 2, 6)
    assert (value, width, stride) == (2 * 35 + 6 * 5 + 3, 5, 5 * 4)
    assert a[2, 6, 0] == -1
    f = np.zeros((2, 3, 4))
    _write_fixed(f)
    i, j, k = np.indices(f.shape)
    assert np.array_equal(f, 100 * i + 10 * j + k)


def test_refuses_a_width_that_is_not_a_compile_time_constant():
    @numba.njit
    def read(a, n):
        return fixed_last(a, n)[0, 0, 0]

    with pytest.raises(numba.core.errors.TypingError):
        read(np.zeros((1, 1, 2)), 2)


def test_the_host_refuses_rows_of_another_width():
    from poa_mc.kernels import cpu
    from poa_mc.kernels.layout import FIXED_WIDTH, NPC

    a = {name: np.zeros((1, 1, width)) for name, width in FIXED_WIDTH.items()}
    a["pc"] = np.zeros((1, 1, 1, NPC), dtype=np.int32)
    cpu._check_widths(a, True)
    a["slot_i"] = np.zeros((1, 1, FIXED_WIDTH["slot_i"] + 1))
    with pytest.raises(ValueError, match="slot_i has rows of"):
        cpu._check_widths(a, True)
