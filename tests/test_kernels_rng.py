"""Unit tests of poa_mc/kernels/rng.py, called through the CPU build."""

import numpy as np
from scipy import stats

from poa_mc.kernels import cpu

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
