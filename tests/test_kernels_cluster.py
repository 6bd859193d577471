"""Unit tests of kernels/cluster.py, called through the CPU build."""

import numpy as np
from poa_mc.kernels import cpu

K = cpu._K


def test_decode_span_is_the_sum_of_step_times():
    fp = np.zeros(32)
    from poa_mc.kernels.layout import F_D0, F_D1, F_D2

    fp[F_D2], fp[F_D1], fp[F_D0] = -25.74, 54.01, 5.74
    cap = 16384.0 * 64
    for x0, n, k in [(4096, 1, 1), (123_456, 13, 97), (500_000, 64, 256)]:
        naive = sum(K.cluster.step_ms(fp, float(x0 + n * j), cap) for j in range(k))
        assert abs(K.cluster.decode_span(fp, x0, n, k, cap) - naive) <= 1e-9 * naive
