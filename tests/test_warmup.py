"""poa_mc.stats.warmup: the warm-up check on queues that start empty and on queues already in steady state.

M/M/1 by Lindley's recursion, 16 replicas: started empty, the first requests wait less than in
steady state (the transient the warm-up is there to drop); started from the stationary law,
there is nothing to drop and the check must stay quiet.
"""

import numpy as np
import pytest

from poa_mc.stats.warmup import batch_sizes, check, relaxation_requests

B = 16


def mm1_sojourn(rng, replicas: int, n: int, lam: float, mu: float, stationary: bool, skip: int = 0) -> np.ndarray:
    """(replicas, n) sojourn times (ms) after `skip` requests dropped, from empty or stationary."""
    rho = lam / mu
    wait = (
        np.where(rng.random(replicas) < rho, rng.exponential(1.0 / (mu - lam), replicas), 0.0)
        if stationary
        else np.zeros(replicas)
    )
    out = np.empty((replicas, n))
    for i in range(skip + n):
        service = rng.exponential(1.0 / mu, replicas)
        if i >= skip:
            out[:, i - skip] = wait + service
        wait = np.maximum(0.0, wait + service - rng.exponential(1.0 / lam, replicas))
    return out * 1000.0


def batch_sums(x: np.ndarray) -> np.ndarray:
    """The kernels' batch_ttft of these rows: row i in batch i * B // n (poa_mc/kernels/tally.py)."""
    n = x.shape[1]
    b = (np.arange(n) * B) // n
    return np.stack([x[:, b == k].sum(axis=1) for k in range(B)], axis=1)


def test_batch_sizes_follow_the_kernels_rule():
    assert batch_sizes(400, 16).tolist() == [25.0] * 16
    assert batch_sizes(100, 16).sum() == 100 and set(batch_sizes(100, 16)) == {6.0, 7.0}


def test_relaxation_rule_asks_for_three_relaxation_times_of_the_measured_utilisation():
    assert relaxation_requests(0.9) == pytest.approx(341.8, abs=0.1)
    got = check(np.ones((16, B)), 400, 100, utilisation=0.9)
    assert got.transient and got.suggested == 1100  # 3 x 341.8, rounded up to two digits
    assert not check(np.ones((16, B)), 400, 100, utilisation=0.6).transient  # 3 x 11.9 < 100
    # four prefill workers each see a quarter of the arrivals: four times the warm-up
    assert check(np.ones((16, B)), 400, 100, utilisation=0.9, workers=4).suggested == 4200
    # beyond rho = 0.98 no warm-up is a remedy: the rule stays silent rather than ask for millions
    assert not check(np.ones((16, B)), 400, 100, utilisation=0.995).transient
    assert check(None, 400, 100, utilisation=0.9).suggested == 1100  # no batch sums (an older run)


def test_a_queue_started_empty_drifts_and_the_drift_test_sees_it_with_enough_replicas():
    """Load 0.95 from empty, 100 warm-up requests, 64 replicas x 400: mean TTFT climbs through
    the measured requests; the drift test fires (no utilisation given) and suggests more."""
    x = mm1_sojourn(np.random.default_rng(1), 64, 400, 95.0, 100.0, stationary=False, skip=100)
    got = check(batch_sums(x), 400, 100)
    assert got.transient and got.drift > 0.02 and got.suggested > 100


@pytest.mark.parametrize("rho", [0.6, 0.9])
def test_a_queue_in_steady_state_raises_few_false_alarms(rho):
    """From the stationary law there is no transient: over 200 cells of 16 replicas x 400, the
    drift test fires in at most 4% of them (a 1% test)."""
    rng = np.random.default_rng(2)
    alarms = 0
    cells = 200
    for _ in range(cells):
        x = mm1_sojourn(rng, 16, 400, rho * 100.0, 100.0, stationary=True)
        alarms += check(batch_sums(x), 400, 100).transient
    assert alarms / cells <= 0.04, alarms / cells


def test_the_suggested_warmup_restores_the_mean_at_load_09():
    """M/M/1 at load 0.9 from empty, the defaults' shape (64 replicas x 1,000 requests): with
    100 warm-up requests mean TTFT reads low and its t-interval misses the closed form 1 / (mu -
    lam) = 100 ms in many of 40 cells; with the relaxation rule's 1,100 its mean over cells is within
    3 Monte Carlo standard errors of it and it covers in at least 34 of 40 (nominal 38)."""
    from poa_mc.stats.intervals import t_interval

    rng = np.random.default_rng(3)
    true = 100.0
    suggested = check(np.ones((2, B)), 1000, 100, utilisation=0.9).suggested
    assert suggested == 1100
    for warm, bias_ok in ((100, False), (suggested, True)):
        means, covered = [], 0
        for _ in range(40):
            x = mm1_sojourn(rng, 64, 1000, 90.0, 100.0, stationary=False, skip=warm)
            est = t_interval(x.mean(axis=1))
            means.append(est.value)
            covered += est.lo <= true <= est.hi
        err = np.mean(means) - true
        se = np.std(means, ddof=1) / np.sqrt(len(means))  # the Monte Carlo error of the mean over cells
        if bias_ok:
            assert abs(err) < 3 * se and covered >= 34, (err, se, covered)
        else:
            assert err < -3 * se and covered < 34, (err, se, covered)
