"""Knee estimator (poa_mc.stats.knee) on synthetic closed-loop curves with a known knee.

Noise model: each replica's mean latency is the true curve times a lognormal factor (sd 5%), with
an optional factor shared by all load points of a replica, as common random numbers produce.
Coverage is measured over repeated trials and checked against 0.95 minus 3 Monte Carlo standard
errors of a proportion.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from poa_mc.stats.knee import (
    BELOW,
    FEW_REPLICAS,
    SATURATED,
    TRANSITION,
    UNKNOWN,
    fit_hinge,
    knee_analysis,
    small_sample_factor,
)
from poa_mc.stats.theory import mva_single_queue

# the paper's coarse concurrency grid
GRID = np.array([1, 2, 4, 8, 16, 32, 64, 80, 96, 112, 128, 144, 160, 192, 256, 384, 512], dtype=np.float64)
SD = 0.05


def softmax_curve(c: np.ndarray, k: float, p: float, floor: float = 1.0) -> np.ndarray:
    """floor * (1 + (C/k)^p)^(1/p): floor at low load, asymptote floor * C / k, which meet at C = k."""
    return floor * (1.0 + (c / k) ** p) ** (1.0 / p)


def replicas(
    curve: np.ndarray, n_rep: int, rng: np.random.Generator, shared: float = 0.0, sd: float = SD
) -> np.ndarray:
    """(L, R) per-replica means: curve times lognormal noise of sd `sd`, a fraction `shared` of whose
    variance is common to all points of a replica (as common random numbers across load points would
    give; the reduction's replicas are independent across load points, shared = 0)."""
    z = rng.standard_normal(n_rep)[None, :]
    e = rng.standard_normal((curve.size, n_rep))
    return curve[:, None] * np.exp(sd * (math.sqrt(shared) * z + math.sqrt(1.0 - shared) * e))


def population_knee(load: np.ndarray, curve: np.ndarray) -> float:
    """The estimator's target: the hinge fitted to the noise-free curve (weights as the estimator's)."""
    return float(fit_hinge(load, curve[:, None], 1.0 / curve**2)[0][0])


def coverage_floor(level: float, trials: int) -> float:
    return level - 3.0 * math.sqrt(level * (1.0 - level) / trials)


def assert_monotone(regimes: list[str]) -> None:
    order = {BELOW: 0, TRANSITION: 1, SATURATED: 2}
    ranks = [order[r] for r in regimes if r != UNKNOWN]
    assert ranks == sorted(ranks), regimes


# --- the exact fit ----------------------------------------------------------------------------------------------------
def test_fit_hinge_is_the_global_least_squares_optimum():
    rng = np.random.default_rng(11)
    x = np.sort(rng.uniform(0.0, 50.0, 12))
    y = rng.lognormal(size=(x.size, 4)).cumsum(axis=0)
    w = rng.uniform(0.5, 2.0, x.size)
    k, a, b, c, sse = fit_hinge(x, y, w)
    sw = np.sqrt(w)
    # brute force over a fine grid of breakpoints: the exact optimum can only be better, and by
    # little, and the reported coefficients must reproduce the reported residual
    best = np.full(y.shape[1], np.inf)
    for kk in np.linspace(x[1], x[-2], 4001):
        d = sw[:, None] * np.column_stack([np.ones(x.size), x, np.maximum(0.0, x - kk)])
        coef, *_ = np.linalg.lstsq(d, sw[:, None] * y, rcond=None)
        best = np.minimum(best, ((sw[:, None] * y - d @ coef) ** 2).sum(axis=0))
    assert np.all(sse <= best * (1 + 1e-9))
    assert np.all(sse >= best * (1 - 1e-3))
    fitted = a + b * x[:, None] + c * np.maximum(0.0, x[:, None] - k)
    np.testing.assert_allclose(((sw[:, None] * (y - fitted)) ** 2).sum(axis=0), sse, rtol=1e-9)
    assert np.all((k >= x[1]) & (k <= x[-2]))


def test_exact_hinge_recovered_between_grid_points():
    # max(L0, C / X) with L0 = 1, X = 1/100: floor and Little's-law asymptote meet at 100
    curve = np.maximum(1.0, GRID / 100.0)
    k, a, b, c, _ = (float(v[0]) for v in fit_hinge(GRID, curve[:, None], 1.0 / curve**2))
    assert k == pytest.approx(100.0, rel=1e-9)
    assert (a, b, c) == pytest.approx((1.0, 0.0, 0.01), abs=1e-9)


# --- coverage and width -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, curve, shared",
    [
        # correctly specified: the true knee is the asymptote intersection itself
        ("hinge", np.maximum(1.0, GRID / 110.0), 0.0),
        # smooth transition: the target is the hinge fitted to the noise-free curve
        ("softmax", softmax_curve(GRID, 110.0, 4.0), 0.5),
    ],
)
def test_interval_covers_the_knee_and_is_narrower_than_the_grid(name, curve, shared):
    trials, n_rep = 200, 64
    target = population_knee(GRID, curve)
    if name == "hinge":
        assert target == pytest.approx(110.0, rel=1e-9)
    else:
        # the transition lies above both asymptotes and pulls the breakpoint a little below 110
        assert 0.9 * 110.0 < target < 110.0
    rng = np.random.default_rng(2024)
    covered, widths = 0, []
    for _ in range(trials):
        res = knee_analysis(GRID, replicas(curve, n_rep, rng, shared), rng=rng)
        assert res.detected, res.reason
        covered += res.knee_lo <= target <= res.knee_hi
        widths.append(res.knee_hi - res.knee_lo)
    cov = covered / trials
    print(
        f"{name}: target {target:.2f}, coverage {cov:.3f}, width median {np.median(widths):.2f} max {max(widths):.2f}"
    )
    assert cov >= coverage_floor(0.95, trials)
    # every interval, not just a typical one, is finer than the grid spacing around the knee
    assert max(widths) < 32.0


def test_common_random_numbers_are_resampled_by_column():
    # a factor shared by all points of a replica rescales its whole curve and leaves k unchanged; the
    # bootstrap sees that only if it resamples whole columns, so the interval must shrink with it
    curve = softmax_curve(GRID, 110.0, 4.0)
    widths = {}
    for shared in (0.0, 0.9):
        rng = np.random.default_rng(7)
        w = [
            (r.knee_hi - r.knee_lo)
            for r in (knee_analysis(GRID, replicas(curve, 64, rng, shared), rng=rng, n_boot=400) for _ in range(30))
        ]
        widths[shared] = float(np.median(w))
    # the independent part has sd sqrt(0.1) of the total, so widths ~ 0.32x; a per-point bootstrap
    # would see the same marginal noise and give ~1x
    assert widths[0.9] < 0.6 * widths[0.0], widths


def test_small_sample_factor():
    # sqrt(R / (R - 1)) t_(R-1) / z, at the 0.975 quantile: t_3 = 3.1824, t_7 = 2.3646, z = 1.95996
    assert small_sample_factor(4, 0.025) == pytest.approx(math.sqrt(4 / 3) * 3.182446 / 1.959964, rel=1e-6)
    assert small_sample_factor(8, 0.025) == pytest.approx(math.sqrt(8 / 7) * 2.364624 / 1.959964, rel=1e-6)
    assert 1.0 < small_sample_factor(64, 0.025) < 1.03
    assert math.isnan(small_sample_factor(1, 0.025))


def test_interval_covers_with_four_replicas():
    """With R = 4 the plain percentile bootstrap (before issue 46) covered the knee 0.795 of the time
    in this very test (the resampled spread is (R - 1) / R of the variance, with normal tails where
    t_3's are due); the interval stretched by small_sample_factor covers about 0.95 (0.947 and 0.953
    in 1,000 runs at n_boot 300 and 1000; 0.938 here). 2% noise keeps most runs detected (0.93), so
    coverage is not conditioned away; the under-coverage is scale-free, k being nearly linear in
    small noise."""
    curve = np.maximum(1.0, GRID / 110.0)
    rng = np.random.default_rng(46)
    trials, detected, covered, notes = 400, 0, 0, 0
    for _ in range(trials):
        res = knee_analysis(GRID, replicas(curve, 4, rng, sd=0.02), rng=rng, n_boot=300)
        if res.detected:
            detected += 1
            covered += res.knee_lo <= 110.0 <= res.knee_hi
            notes += f"4 replicas, under {FEW_REPLICAS}" in res.reason
    assert detected >= 0.8 * trials
    assert notes == detected
    cov = covered / detected
    print(f"R = 4: detected {detected / trials:.3f}, coverage {cov:.3f}")
    # 0.9 is 4 standard errors below 0.95 for ~360 detected runs, and 6 above the plain percentile's 0.76
    assert cov >= 0.90


@pytest.mark.parametrize("n_rep, bound", [(4, 0.05), (64, 0.10)])
def test_few_false_knees_on_a_convex_curve_with_20pct_noise(n_rep, bound):
    """exp(C / 400) is still steepening at the top of the grid: the slope over (256, 384) is 0.73 of
    that over (384, 512), below sat_frac 0.8, so the noise-free curve has no knee. With 20% replica
    noise the point-estimate saturation check (before issue 46) found one in 21% of runs at R = 4 and
    32% at R = 64 in this very test (0.21 and 0.29 in bench/knee_coverage.py's 400). The noise-aware
    check is a one-sided test at sat_level 0.9: its size is about 0.1 for a curve right at the
    threshold ratio, less below it. Measured: 0.010 and 0.020 here, 0.003 and 0.040 in the bench; at
    R = 4 the stretched intervals reject too. The bounds sit 4 or more binomial standard errors
    above those rates (200 runs), and far below the old ones."""
    curve = np.exp(GRID / 400.0)
    assert not knee_analysis(GRID, np.tile(curve[:, None], 4), rng=np.random.default_rng(0)).detected
    rng = np.random.default_rng(400 + n_rep)
    trials = 200
    false = sum(
        knee_analysis(GRID, replicas(curve, n_rep, rng, sd=0.2), rng=rng, n_boot=300).detected for _ in range(trials)
    )
    print(f"R = {n_rep}: false detection {false / trials:.3f}")
    assert false / trials <= bound


def test_sat_level_trades_detection_for_false_knees():
    # a lower sat_level asks for less evidence of saturation: more knees found, true and false
    hinge, convex = np.maximum(1.0, GRID / 110.0), np.exp(GRID / 400.0)
    found = {}
    for sat_level in (0.6, 0.9, 0.99):
        rng = np.random.default_rng(2)
        found[sat_level] = [
            sum(
                knee_analysis(GRID, replicas(c, 8, rng), rng=rng, n_boot=300, sat_level=sat_level).detected
                for _ in range(60)
            )
            for c in (hinge, convex)
        ]
    assert found[0.6][0] > found[0.9][0] > found[0.99][0], found
    assert found[0.6][1] >= found[0.9][1] >= found[0.99][1], found
    with pytest.raises(ValueError, match="sat_level"):
        knee_analysis(GRID, np.ones((GRID.size, 4)), rng=np.random.default_rng(0), sat_level=0.5)


# --- regimes ----------------------------------------------------------------------------------------------------------
def test_regimes_are_ordered_and_right_far_from_the_knee():
    curve = softmax_curve(GRID, 110.0, 4.0)
    rng = np.random.default_rng(3)
    for _ in range(20):
        res = knee_analysis(GRID, replicas(curve, 64, rng), rng=rng, n_boot=300)
        assert res.detected, res.reason
        assert_monotone(res.regimes)
        # noise-free, C <= 64 is within 3% of the floor (below_tol 10%, noise 0.6%), and from C = 256
        # on the slope is >= 0.96 of the asymptotic one (sat_frac 0.8, noise in the ratio ~5%)
        assert all(r == BELOW for x, r in zip(GRID, res.regimes) if x <= 64), res.regimes
        assert all(r == SATURATED for x, r in zip(GRID, res.regimes) if x >= 256), res.regimes
        assert res.floor == pytest.approx(1.0, abs=0.02)


def test_regime_rule_and_its_thresholds():
    curve = softmax_curve(GRID, 110.0, 4.0)
    # on a noise-free increasing curve the scans reduce to: below iff x < k and y <= (1 + below_tol)
    # floor; saturated iff x >= k and the slope of every interval from the one ending at x up to the
    # top is >= sat_frac times the slope of the top interval
    for below_tol, sat_frac in [(0.03, 0.95), (0.10, 0.80), (0.30, 0.60)]:
        ex = knee_analysis(
            GRID, np.tile(curve[:, None], 4), rng=np.random.default_rng(1), below_tol=below_tol, sat_frac=sat_frac
        )
        assert ex.detected, ex.reason
        assert ex.floor == pytest.approx(curve[0])
        slope = np.diff(curve) / np.diff(GRID)
        ok = np.r_[False, slope >= sat_frac * slope[-1]]
        for i, (x, y, r) in enumerate(zip(GRID, curve, ex.regimes)):
            assert (r == BELOW) == (x < ex.knee and y <= (1 + below_tol) * ex.floor), (below_tol, x, r)
            assert (r == SATURATED) == (x >= ex.knee and bool(ok[i:].all())), (sat_frac, x, r)
    # with noise (256 replicas, so 0.3% per point), looser thresholds widen both end regimes
    lat = replicas(curve, 256, np.random.default_rng(5))
    loose = knee_analysis(GRID, lat, rng=np.random.default_rng(1), below_tol=0.3, sat_frac=0.6).regimes
    tight = knee_analysis(GRID, lat, rng=np.random.default_rng(1), below_tol=0.03, sat_frac=0.9).regimes
    assert loose.count(BELOW) > tight.count(BELOW)
    assert loose.count(SATURATED) > tight.count(SATURATED)
    assert loose.count(TRANSITION) < tight.count(TRANSITION)


def test_low_load_artefact_changes_neither_floor_nor_labels():
    # latency 10% higher at C = 1 than on the rest of the floor, as on some real systems
    curve = softmax_curve(GRID, 110.0, 4.0)
    bumped = curve.copy()
    bumped[0] *= 1.10
    assert population_knee(GRID, bumped) == pytest.approx(population_knee(GRID, curve), rel=0.02)
    rng = np.random.default_rng(9)
    res = knee_analysis(GRID, replicas(bumped, 64, rng), rng=rng)
    assert res.detected
    assert res.regimes[0] == BELOW
    assert res.floor == pytest.approx(1.0, abs=0.02)


# --- no knee --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "curve",
    [
        np.ones(GRID.size),  # flat: never saturates
        GRID / 100.0,  # line through the origin: saturated from C = 1
        1.0 + GRID / 100.0,  # line with an offset
    ],
    ids=["flat", "line0", "line"],
)
def test_no_knee_on_flat_or_straight_curves(curve):
    rng = np.random.default_rng(13)
    for lat in [np.tile(curve[:, None], 8)] + [replicas(curve, 64, rng) for _ in range(20)]:
        res = knee_analysis(GRID, lat, rng=rng, n_boot=300)
        assert not res.detected
        assert math.isnan(res.knee) and math.isnan(res.knee_lo) and math.isnan(res.knee_hi)
        assert res.regimes == [UNKNOWN] * GRID.size
        assert res.reason.startswith("no knee")
        assert abs(res.kink) < 0.1


@pytest.mark.parametrize("k_true, p", [(450.0, 20.0), (450.0, 4.0), (2000.0, 4.0)])
def test_no_knee_when_the_grid_stops_before_saturation(k_true, p):
    # the true knee lies beyond the last admissible breakpoint (384) or beyond the grid
    rng = np.random.default_rng(17)
    res = knee_analysis(GRID, replicas(softmax_curve(GRID, k_true, p), 64, rng), rng=rng)
    assert not res.detected, res
    assert res.regimes == [UNKNOWN] * GRID.size


def test_too_few_points():
    rng = np.random.default_rng(0)
    x = np.array([1.0, 10.0, 100.0, 1000.0])
    res = knee_analysis(x, replicas(np.maximum(1.0, x / 50.0), 16, rng), rng=rng)
    assert not res.detected and res.reason.startswith("too few")
    assert res.regimes == [UNKNOWN] * 4 and res.n_points == 4


# --- closed network, exact MVA --------------------------------------------------------------------------------------
def test_mva_single_station_knee_is_within_sqrt_nstar_of_kleinrock():
    """One exponential station (S = 1) and think time Z: N* = (S + Z) / S. The exact R(N) bends
    over a range of populations of order sqrt(N*) around N* (the number queued at N = N* is of that
    order), so the best-fitting breakpoint of the smooth curve is expected within sqrt(N*) of N*.
    """
    for n_star, grid in [
        (100, GRID.astype(int)),
        (25, np.arange(1, 101)),
        (100, np.arange(1, 401)),
        (400, np.arange(1, 1601)),
    ]:
        r = np.array([mva_single_queue(int(n), 1.0, n_star - 1.0)[0] for n in grid])
        res = knee_analysis(grid.astype(np.float64), r, rng=np.random.default_rng(0))
        assert res.detected, res.reason
        assert abs(res.knee - n_star) <= math.sqrt(n_star), (n_star, res.knee)
        assert res.floor == pytest.approx(1.0, rel=1e-6)  # R(1) = S

    # with replica noise, on the paper's grid: the whole interval within sqrt(N*), and the labels
    # agree with the station's utilisation X S from MVA
    rng = np.random.default_rng(21)
    r = np.array([mva_single_queue(int(n), 1.0, 99.0)[0] for n in GRID])
    util = np.array([mva_single_queue(int(n), 1.0, 99.0)[1] for n in GRID])
    res = knee_analysis(GRID, replicas(r, 64, rng), rng=rng)
    assert res.detected
    assert 90.0 <= res.knee_lo <= res.knee <= res.knee_hi <= 110.0
    assert_monotone(res.regimes)
    for reg, u in zip(res.regimes, util):
        if reg == SATURATED:
            assert u > 0.95
        if reg == BELOW:
            assert u < 0.1


# --- inputs -----------------------------------------------------------------------------------------------------------
def test_equivariant_in_load_and_latency_units():
    # a Poisson-rate grid is a rescaled concurrency grid: the knee rescales, the labels do not
    curve = softmax_curve(GRID, 110.0, 4.0)
    lat = replicas(curve, 32, np.random.default_rng(4))
    base = knee_analysis(GRID, lat, rng=np.random.default_rng(8))
    scaled = knee_analysis(GRID * 0.37, lat * 1000.0, rng=np.random.default_rng(8))
    assert base.detected and scaled.detected
    for f in ("knee", "knee_lo", "knee_hi"):
        assert getattr(scaled, f) == pytest.approx(0.37 * getattr(base, f), rel=1e-9)
    assert scaled.regimes == base.regimes
    assert scaled.kink == pytest.approx(base.kink, rel=1e-9)


def test_missing_replicas():
    curve = softmax_curve(GRID, 110.0, 4.0)
    lat = replicas(curve, 64, np.random.default_rng(6))
    # a point with a single finite replica is left out: the result is exactly that of the grid without it
    holed = lat.copy()
    holed[7, 1:] = np.nan
    with_hole = knee_analysis(GRID, holed, rng=np.random.default_rng(3))
    without = knee_analysis(np.delete(GRID, 7), np.delete(lat, 7, axis=0), rng=np.random.default_rng(3))
    assert with_hole.regimes[7] == UNKNOWN and with_hole.n_points == GRID.size - 1
    assert (with_hole.knee, with_hole.knee_lo, with_hole.knee_hi) == (without.knee, without.knee_lo, without.knee_hi)
    assert np.delete(with_hole.regimes, 7).tolist() == without.regimes
    # scattered missing replicas (20%) leave a knee inside the interval of the complete data
    full = knee_analysis(GRID, lat, rng=np.random.default_rng(3))
    sparse = lat.copy()
    sparse[np.random.default_rng(1).random(lat.shape) < 0.2] = np.nan
    res = knee_analysis(GRID, sparse, rng=np.random.default_rng(3))
    assert res.detected and full.knee_lo <= res.knee <= full.knee_hi
    assert all(np.isfinite([res.knee_lo, res.knee_hi]))


def test_one_replica_gives_a_knee_without_interval():
    curve = np.maximum(1.0, GRID / 100.0)
    res = knee_analysis(GRID, curve, rng=np.random.default_rng(0))
    assert res.detected and res.knee == pytest.approx(100.0)
    assert math.isnan(res.knee_lo) and math.isnan(res.knee_hi)
    assert "one replica" in res.reason
    # the ideal closed loop without think time: flat floor, asymptote C / X_max, normalised kink 1
    assert (res.floor, res.slope_below, res.slope_above, res.kink) == pytest.approx((1.0, 0.0, 0.01, 1.0), abs=1e-9)


def test_bad_inputs():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="increasing"):
        knee_analysis(GRID[::-1], np.ones((GRID.size, 4)), rng=rng)
    with pytest.raises(ValueError, match="need load"):
        knee_analysis(GRID, np.ones((GRID.size - 1, 4)), rng=rng)
    with pytest.raises(ValueError, match="positive"):
        knee_analysis(GRID, -np.ones((GRID.size, 4)), rng=rng)


def test_running_median_is_scipys_median_filter_of_size_3_nearest():
    """The knee's floor uses a 3-point running median written in numpy (importing scipy.ndimage
    for it took 150 ms of every summary): scipy's answer to the bit, ties and lengths 1 and 2
    included."""
    from scipy.ndimage import median_filter

    from poa_mc.stats.knee import running_median3

    rng = np.random.default_rng(3)
    for n in range(1, 30):
        for y in (rng.normal(size=n), rng.integers(0, 3, n).astype(np.float64), rng.lognormal(5, 1, n)):
            np.testing.assert_array_equal(running_median3(y), median_filter(y, size=3, mode="nearest"))
