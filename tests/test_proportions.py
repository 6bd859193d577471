"""poa_mc.stats.proportions: shares with cluster Clopper-Pearson intervals, rates with a Poisson bound at zero."""

import math

import numpy as np
import pytest

from poa_mc.stats.intervals import t_interval
from poa_mc.stats.proportions import clip_share, clopper_pearson, proportion_interval, rate_interval


def test_clopper_pearson_matches_its_textbook_values():
    lo, hi = clopper_pearson(30.0, 100.0, 0.95)
    # 30 of 100: the exact interval [0.2124, 0.3998]; 0 of 50: [0, 1 - 0.025^(1/50)]
    assert lo == pytest.approx(0.2124, abs=1e-4) and hi == pytest.approx(0.3998, abs=1e-4)
    assert clopper_pearson(0.0, 50.0, 0.95) == (0.0, pytest.approx(1 - 0.025 ** (1 / 50)))
    assert clopper_pearson(50.0, 50.0, 0.95)[1] == 1.0


def test_all_zero_and_all_one_are_never_zero_width():
    zero = proportion_interval(np.zeros(8), np.full(8, 100.0))
    assert zero.value == 0.0 and zero.lo == 0.0 and zero.hi > 0.0
    one = proportion_interval(np.full(8, 100.0), np.full(8, 100.0))
    assert one.value == 1.0 and one.hi == 1.0 and one.lo < 1.0
    rate = rate_interval(np.zeros(8), np.full(8, 500.0))
    assert rate.lo == 0.0 and rate.hi == pytest.approx(-math.log(0.025) / 4000.0)


def test_shares_are_clipped_where_a_t_interval_leaves_the_unit_interval():
    # replicas at 1.00 and 0.98: a t-interval of two values reaches [0.863, 1.117]
    raw = t_interval(np.array([1.0, 0.98]))
    assert raw.hi > 1.0
    clipped = clip_share(raw)
    assert clipped.hi == 1.0 and clipped.lo == raw.lo
    wil = proportion_interval(np.array([100.0, 98.0]), np.array([100.0, 100.0]))
    assert 0.0 <= wil.lo <= wil.value <= wil.hi <= 1.0


@pytest.mark.parametrize("p,replicas", [(0.3, 8), (0.3, 32), (0.9, 4), (0.02, 32)])
def test_cluster_wilson_covers_a_clustered_share_at_its_nominal_rate(p, replicas):
    """Replicas whose own shares vary (beta-distributed around p: trials inside a replica are
    correlated, an intra-cluster correlation of 0.05), 200 trials each: the interval covers p in
    at least 93% of 2,000 cells (nominal 95%; the binomial standard error of the rate is 0.005;
    measured 0.95-0.96). Where replicas see few events the coverage falls short: the module doc
    gives the figures."""
    rng = np.random.default_rng(7)
    cells, n, icc = 2000, 200, 0.05
    a = p * (1 - icc) / icc
    b = (1 - p) * (1 - icc) / icc
    p_r = rng.beta(a, b, size=(cells, replicas))
    events = rng.binomial(n, p_r).astype(float)
    trials = np.full(replicas, float(n))
    covered = 0
    for c in range(cells):
        est = proportion_interval(events[c], trials)
        covered += est.lo <= p <= est.hi
    assert covered / cells >= 0.93, covered / cells
