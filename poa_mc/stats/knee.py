"""Saturation knee of a latency-versus-load curve, with a bootstrap interval over replicas.

Definition. The knee is the breakpoint k of the continuous two-segment (hinge) regression

    latency(x) = a + b x + c max(0, x - k)

fitted to the replica-mean curve. What k estimates (and what its interval covers) is the population
value of that breakpoint: the hinge fitted, with the same weights, to the noise-free mean curve.
Where the true curve is a hinge, as for the ideal closed loop, that is where the two segments meet,
operational analysis' saturation point N* (Kleinrock): the pre-knee segment is the low-load latency
floor, the post-knee one the Little's-law asymptote C / X_max - Z of a saturated bottleneck. Where
the curve bends smoothly, as any real closed loop does, the population value is near N* but not at
it (below). The pre-knee slope b is left free, not forced to 0, because serving latency usually
creeps up before saturation (batching lengthens steps); forcing a flat floor would push that creep
into k.

The fit is exact, not a search over a grid of k. For a breakpoint inside (x_j, x_j+1), the optimum
is either the intersection of the two separate least-squares lines on either side (when it falls
inside that interval: the continuity constraint is then slack) or a breakpoint at one end of the
interval, because the profile residual there is monotone or has a single interior maximum (Hudson
1966). So the candidates are the in-interval intersections and the load points themselves, and the
best candidate is the global optimum.

Least squares is on relative residuals (weights 1 / mean latency^2), because per-replica noise is
roughly multiplicative and a curve spans orders of magnitude from floor to saturation: unweighted,
the few highest loads would decide the fit. The weights come from the full-sample mean curve and
stay fixed in the bootstrap, so that every bootstrap replicate solves the same weighted problem.

k is restricted to [x_1, x_(L-2)], so that each segment has at least two load points. A fit that
lands on either end of that range means the grid does not bracket the knee, and no knee is reported.
When the true curve is smooth (MVA, a soft maximum), the hinge is misspecified and k estimates its
population value. That value lies near the asymptote intersection but not on it, usually a little
below, because the transition points lie above both asymptotes. For exact MVA of one exponential
station (S = 1, think time 99, so N* = 100) on the paper's grid (1 to 512, tests/test_knee.py) it
is 92.67, not 100; on every integer population it is 25.38 for N* = 25 (1-100), 97.51 for N* = 100
(1-400) and 390.74 for N* = 400 (1-1600). The interval covers 92.67 (and may well exclude 100): it
is an interval for the breakpoint, not for N*. For the soft maximum of the tests (corner at 110) it
is 104.84.

Interval. Percentile bootstrap over replicas, corrected for few replicas. Replica columns are
resampled with replacement, the same columns at every load point. The reduction's replicas are
independent across load points (poa_mc.stats.reduce gives each load point its own random streams, keyed
by a hash of the point, so replica r at two loads shares nothing). Resampling whole columns is valid
then: each point's resampled mean has the distribution it would have if resampled alone, and the
covariance across points that the shared indices induce is the sample covariance, which estimates
the true one, zero. It stays valid, and is needed, for a caller whose replica r does share random
streams across load points (common random numbers): the resample then carries that correlation
into the spread of k, where resampling each point on its own would ignore it.

The plain percentile interval under-covers with few replicas: the bootstrap over R replicas sees
the plug-in variance, (R - 1) / R of the unbiased one, with normal tails where a statistic
studentised with R replicas has t_(R-1) tails. So the interval's deviations from k are stretched by
small_sample_factor, sqrt(R / (R - 1)) t_(R-1) / z (1.87 at R = 4, 1.24 at 8, 1.10 at 16, 1.02 at
64, for level 0.95): [k - f (k - q_lo), k + f (q_hi - k)] with q the bootstrap percentiles.
Measured coverage of the population value, given detection, on a hinge, the soft maximum and the
MVA curve with 5% and 20% replica noise (bench/knee_coverage.py, 400 runs a row, docs/outputs.md
"The knee's interval"): plain 0.77-0.88 at R = 4 and 0.87-0.95 at R = 8; stretched 0.91-1.00 and
0.92-1.00; both 0.91-0.99 from R = 16 (a row's Monte Carlo error is about 0.01-0.02). BCa was no
better than the plain interval at R = 4 (0.76-0.87; it corrects bias and skew, not the missing
variance), and resampling R - 1 of the R replicas with the t/z ratio was close to the stretched
interval but a little lower at R = 4. Below FEW_REPLICAS (16) replicas a detected knee's `reason`
says so, with the coverage measured there. The stretch costs nothing: the bootstrap is the same,
only its percentiles are moved.

Detection (no knee is invented). A knee is reported only when all of these hold:
* at least `min_points` load points have `min_replicas` finite replicas each;
* the normalised kink, c k / latency(k), is at least `min_kink`. This is the slope increase at the
  knee on the axes load / k and latency / latency(k). An ideal closed loop without think time
  (flat floor, asymptote C / X_max) has kink 1, and think time only raises it. A flat curve or a
  straight line (through the origin or not) has kink ~ 0;
* the increase is not noise: the lower end of c's interval at `level` (stretched as k's) is above 0;
* the grid brackets the knee: the interval of k stays strictly inside [x_1, x_(L-2)] (the point
  estimate, with one replica). An interval that reaches an end of the admissible range means the
  data cannot exclude a knee at or beyond it;
* both regimes are observed (rules below): at least one point is "below", and at least two are
  "saturated". Two saturated points need the top three loads to be collinear (any two points
  define a line), which rejects a grid that stops before the asymptote, and an open-loop curve
  that keeps steepening up to its last point;
* and the saturation is not noise (with replicas): the two saturated points must also be shown
  saturated, at one-sided confidence `sat_level` (0.9). That is, the lower bounds (stretched
  percentile, as above, at 1 - sat_level) of the top interval's slope, and of the slope of the
  interval below it minus sat_frac times the top slope, must be > 0 and >= 0. These are linear in
  the mean curve, so the stretch makes the bounds near exact. The point-estimate check alone let a
  convex curve that is still steepening at the top (true slope ratio 0.66-0.73 < sat_frac) pass on
  noise: exp(C/400) was "detected" in 21% of runs at R = 4, 39% at R = 16 and 29% at R = 64 with
  20% replica noise (35% at R = 4 with 5%). The noise-aware check is a one-sided test of "still steepening" of size
  about 1 - sat_level for a curve right at the threshold ratio, less for a more convex one: 0-7%
  on the bench's three convex curves (0-39% before). The price is detection with few replicas or
  much noise, where the top three loads cannot tell a straight line from a bend: on a hinge with
  5% noise, 0.43 at R = 4, 0.60 at R = 8, 0.88 at R = 16 and 1.0 at R = 64 (0.92-1.0 before); with
  20% noise, 0.03, 0.09, 0.22 and 0.48 (0.60-0.88 before). sat_level 0.8 found about 0.65 and 0.80
  of the 5%-noise hinges at R = 4 and 8, with up to 14% false knees; 0.6 or 0.7 trade further.
Otherwise `detected` is False, `knee` and its interval are NaN, every regime is "unknown", and
`reason` says which condition failed. The default min_kink, a quarter of the ideal closed loop's 1,
is far above what noise alone gives: on flat and straight curves with 5% replica noise, the 99th
percentile of |kink| is about 0.06 at R = 64 and 0.25 at R = 4 (where, with the other checks, none
of 200 runs per curve was detected).

Regimes (monotone in load by construction), on the replica-mean curve ybar:
* floor = the minimum, over the points below k, of the 3-point running median of ybar. The running
  median is there for the low-load artefact (on some real systems latency is slightly higher at
  C = 1 than at C = 2-8) and for noise; the minimum keeps the start of the transition from lifting
  the floor;
* below: points below k, except the run of points just under k (scanning down from k) whose ybar
  exceeds (1 + below_tol) floor, which is "transition". Scanning from the knee down, not from the
  lowest load up, keeps the low-load artefact from turning the whole floor into transition;
* saturated: points at or above k, scanning down from the highest load, as long as the slope of
  the curve over the grid interval ending at the point is at least sat_frac times the asymptotic
  slope, estimated as the slope between the two highest loads. The remaining points between k and
  that run are "transition". The labels are point estimates, each point's best guess, once the
  detection rules (the noise-aware saturation check among them) have passed. The observed slope
  is used, not the distance to the fitted asymptote, because a misspecified hinge misplaces that
  line (for the MVA curve of the tests its slope is 16% short of Little's law), while the observed
  slope tends to the true one.
Points left out for missing replicas are "unknown".

Missing replicas (NaN): a point's mean is over its finite replicas. A point with fewer than
`min_replicas` of them is left out of the fit. In a bootstrap replicate that draws none of a
point's finite replicas, the point keeps its full-sample mean. That understates the variability of
that point, but only at points with few replicas, which `min_replicas` limits.

Open-loop grids (Poisson rate) are accepted, as the load need not be an integer. But latency there
diverges at capacity instead of following a line, so k is then a descriptive elbow, not N*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from poa_mc.stats.intervals import _t_ppf

BELOW = "below"
TRANSITION = "transition"
SATURATED = "saturated"
UNKNOWN = "unknown"

# below this many replicas a detected knee's reason carries _FEW_NOTE (bench/knee_coverage.py)
FEW_REPLICAS = 16
_FEW_NOTE = (
    "the interval is stretched for few replicas; at level 0.95 it covered 0.91-1.00 of synthetic knees at 4 replicas "
    "and 0.92-1.00 at 8 (0.77-0.88 and 0.87-0.95 unstretched; bench/knee_coverage.py): treat it as approximate"
)


@dataclass(frozen=True)
class KneeResult:
    """Knee estimate, its bootstrap interval, and a regime label per input load point.

    knee, knee_lo and knee_hi are NaN unless `detected`. floor, slope_below, slope_above and kink
    describe the hinge fit to the mean curve (NaN where no fit was made). They explain why a knee
    was or was not detected, and describe a knee only when `detected`. n_points counts the load
    points used (those with enough replicas).
    """

    knee: float
    knee_lo: float
    knee_hi: float
    detected: bool
    reason: str
    regimes: list[str]
    floor: float
    slope_below: float
    slope_above: float
    kink: float
    n_points: int
    level: float


def _wls(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of every column of y (already whitened) on a whitened design: (coef, sse)."""
    # the design is tiny (n x 2 or n x 3) and shared by all columns: one pseudo-inverse, one product
    coef = np.linalg.pinv(design) @ y
    resid = y - design @ coef
    return coef, np.einsum("ij,ij->j", resid, resid)


def fit_hinge(
    x: np.ndarray, y: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Exact weighted least-squares hinge a + b x + c max(0, x - k) of every column of y.

    x: (n,) strictly increasing, n >= 4; y: (n, m); w: (n,) positive weights. k is restricted to
    [x[1], x[n-2]] so that both segments hold two points. Returns (k, a, b, c, sse), each (m,).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.size
    if n < 4:
        raise ValueError(f"a hinge needs at least 4 points, got {n}")
    sw = np.sqrt(np.asarray(w, dtype=np.float64))
    yw = sw[:, None] * y
    ks, as_, bs, cs, sses = [], [], [], [], []

    # breakpoints at the load points x_1 .. x_(n-2): the optimum of an interval whose two-line
    # intersection falls outside it lies at one of its ends
    for j in range(1, n - 1):
        design = sw[:, None] * np.column_stack([np.ones(n), x, np.maximum(0.0, x - x[j])])
        coef, sse = _wls(design, yw)
        ks.append(np.full(y.shape[1], x[j]))
        as_.append(coef[0])
        bs.append(coef[1])
        cs.append(coef[2])
        sses.append(sse)

    # breakpoints strictly inside (x_j, x_(j+1)), two points a side: separate lines on each side,
    # admissible only where they meet inside the interval
    for j in range(1, n - 2):
        left, right = slice(0, j + 1), slice(j + 1, n)
        dl = sw[left, None] * np.column_stack([np.ones(j + 1), x[left]])
        dr = sw[right, None] * np.column_stack([np.ones(n - j - 1), x[right]])
        cl, sl = _wls(dl, yw[left])
        cr, sr = _wls(dr, yw[right])
        with np.errstate(divide="ignore", invalid="ignore"):
            k = (cr[0] - cl[0]) / (cl[1] - cr[1])
        ok = np.isfinite(k) & (k > x[j]) & (k < x[j + 1])
        ks.append(np.where(ok, k, np.nan))
        as_.append(cl[0])
        bs.append(cl[1])
        cs.append(cr[1] - cl[1])
        sses.append(np.where(ok, sl + sr, np.inf))

    sse_all = np.array(sses)
    best = np.argmin(sse_all, axis=0)
    cols = np.arange(y.shape[1])

    def pick(v: list[np.ndarray]) -> np.ndarray:
        return np.array(v)[best, cols]

    return pick(ks), pick(as_), pick(bs), pick(cs), sse_all[best, cols]


def _robust_floor(x: np.ndarray, ybar: np.ndarray, k: float) -> float:
    """Minimum, over the load points below k, of the 3-point running median of the mean curve."""
    return float(running_median3(ybar[x < k]).min())


def running_median3(y: np.ndarray) -> np.ndarray:
    """3-point running median, each end's point repeated beyond it (scipy.ndimage.median_filter
    with size=3, mode="nearest", which is what this replaces: importing scipy.ndimage took 150 ms
    of every run's summarising for a few load points, bench/NOTES.md)."""
    p = np.concatenate([y[:1], y, y[-1:]])
    a, b, c = p[:-2], p[1:-1], p[2:]
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def _regimes(x: np.ndarray, ybar: np.ndarray, k: float, floor: float, below_tol: float, sat_frac: float) -> list[str]:
    lab = [TRANSITION] * x.size
    under = np.flatnonzero(x < k)
    # scan down from the knee: the run that has left the floor is the transition, the rest is below
    i = under.size - 1
    while i >= 0 and ybar[under[i]] > (1.0 + below_tol) * floor:
        i -= 1
    for j in under[: i + 1]:
        lab[j] = BELOW
    # slope of the interval ending at each point; the last one estimates the asymptotic slope
    slope = np.diff(ybar) / np.diff(x)
    asymptotic = slope[-1]
    over = np.flatnonzero(x >= k)
    i = over.size - 1
    while i >= 0 and over[i] > 0 and asymptotic > 0 and slope[over[i] - 1] >= sat_frac * asymptotic:
        lab[over[i]] = SATURATED
        i -= 1
    return lab


def small_sample_factor(n_rep: int, alpha: float) -> float:
    """Stretch of the percentile bootstrap's deviations from the estimate, for n_rep replicas and a
    one-sided tail alpha: sqrt(R / (R - 1)) t_(R-1)(1 - alpha) / z(1 - alpha). The bootstrap over R
    replicas sees the plug-in variance, (R - 1) / R of the unbiased one, and normal tails where a
    statistic studentised with R replicas has Student-t tails with R - 1 degrees of freedom. Both
    corrections are exact for a mean of normal replicas; 1.87 at R = 4, 1.24 at R = 8, 1.02 at R = 64
    (alpha 0.025). NaN for fewer than 2 replicas."""
    if n_rep < 2:
        return float("nan")
    return math.sqrt(n_rep / (n_rep - 1)) * _t_ppf(1.0 - alpha, n_rep - 1) / NormalDist().inv_cdf(1.0 - alpha)


def _lower(est: np.ndarray, boot: np.ndarray, alpha: float, widen: float) -> np.ndarray:
    """Lower end of the corrected percentile interval, per row: est - widen (est - q_alpha(boot))."""
    return est - widen * (est - np.quantile(boot, alpha, axis=-1))


def _saturated_top(x: np.ndarray, y: np.ndarray, k: float, alpha: float, widen: float, sat_frac: float) -> int:
    """Noise-aware length of the saturated run at the top: the number of points at or above k,
    scanning down from the highest load, whose interval slope minus sat_frac times the asymptotic
    slope has a lower corrected-percentile bound >= 0, the asymptotic slope's own lower bound being
    > 0. y: (n, 1 + B), the mean curve then its bootstrap replicates."""
    slope = np.diff(y, axis=0) / np.diff(x)[:, None]
    if not _lower(slope[-1, :1], slope[-1, 1:], alpha, widen)[0] > 0:
        return 0
    contrast = slope - sat_frac * slope[-1]
    ok = _lower(contrast[:, 0], contrast[:, 1:], alpha, widen) >= 0
    over = np.flatnonzero(x >= k)
    i = over.size - 1
    while i >= 0 and over[i] > 0 and ok[over[i] - 1]:
        i -= 1
    return over.size - 1 - i


def knee_analysis(
    load: np.ndarray,
    latency: np.ndarray,
    *,
    rng: np.random.Generator,
    level: float = 0.95,
    n_boot: int = 1000,
    min_points: int = 5,
    min_replicas: int = 2,
    min_kink: float = 0.25,
    below_tol: float = 0.10,
    sat_frac: float = 0.80,
    sat_level: float = 0.90,
) -> KneeResult:
    """Knee of mean latency versus load, with a bootstrap interval over replicas (see the module doc).

    load: (L,) strictly increasing load values (concurrency or rate; they need not be integers).
    latency: (L, R) per-replica mean latencies, row = load point, column = replica (whole columns
    are resampled, whether or not a replica's random streams are shared across load points); NaN
    marks a missing replica. A 1-D array is one replica: the knee then comes without an interval or
    any significance check. Mean latencies must be positive, as the fit is on relative residuals.
    sat_level: the one-sided confidence at which the top of the curve must be shown saturated for a
    knee to be reported (module doc, "Detection"); lower finds more knees, true and false.
    """
    x_all = np.asarray(load, dtype=np.float64)
    lat = np.asarray(latency, dtype=np.float64)
    if lat.ndim == 1:
        lat = lat[:, None]
    if x_all.ndim != 1 or lat.ndim != 2 or lat.shape[0] != x_all.size:
        raise ValueError(f"need load (L,) and latency (L, R), got {x_all.shape} and {lat.shape}")
    if not np.all(np.isfinite(x_all)) or np.any(np.diff(x_all) <= 0):
        raise ValueError("load must be finite and strictly increasing")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if not 0.5 < sat_level < 1.0:
        raise ValueError(f"sat_level must be in (0.5, 1), got {sat_level}")
    n_all, n_rep = lat.shape
    finite = np.isfinite(lat)
    counts = finite.sum(axis=1)
    # with a single replica, min_replicas = 2 would drop every point
    keep = (counts >= min(min_replicas, n_rep)) & (counts > 0)
    n = int(keep.sum())
    nan = float("nan")
    need = max(min_points, 4)

    def rejected(reason: str, **diag: float) -> KneeResult:
        fields = dict(floor=nan, slope_below=nan, slope_above=nan, kink=nan) | diag
        return KneeResult(
            knee=nan,
            knee_lo=nan,
            knee_hi=nan,
            detected=False,
            reason=reason,
            regimes=[UNKNOWN] * n_all,
            n_points=n,
            level=level,
            **fields,
        )

    if n < need:
        return rejected(f"too few load points: {n} with enough replicas, need {need}")

    x = x_all[keep]
    vals = np.where(finite, lat, 0.0)[keep]
    fin = finite[keep]
    ybar = vals.sum(axis=1) / fin.sum(axis=1)
    if np.any(ybar <= 0):
        raise ValueError("mean latencies must be positive (the fit is on relative residuals)")
    w = 1.0 / ybar**2

    boot = n_rep >= 2 and n_boot > 0
    if boot:
        # whole replica columns are resampled, the same at every load point (module doc), as the
        # count of each column in each resample, so the resampled means are one matrix product
        draw = rng.integers(0, n_rep, size=(n_boot, n_rep)) + n_rep * np.arange(n_boot)[:, None]
        mult = np.bincount(draw.ravel(), minlength=n_boot * n_rep).reshape(n_boot, n_rep).T.astype(np.float64)
        s = vals @ mult
        m = fin.astype(np.float64) @ mult
        yb = np.where(m > 0, s / np.maximum(m, 1.0), ybar[:, None])
        y = np.column_stack([ybar, yb])
    else:
        y = ybar[:, None]
    k_all, a_all, b_all, c_all, _ = fit_hinge(x, y, w)
    k, a, b, c = (float(v[0]) for v in (k_all, a_all, b_all, c_all))

    y_k = a + b * k
    floor = _robust_floor(x, ybar, k)
    diag = dict(floor=floor, slope_below=b, slope_above=b + c)
    if not y_k > 0:
        return rejected(f"fitted latency at the breakpoint is not positive ({y_k:.4g})", **diag)
    kink = c * k / y_k
    diag["kink"] = kink
    if kink < min_kink:
        return rejected(f"no knee: normalised slope increase {kink:.3g} < min_kink {min_kink:g}", **diag)
    alpha = (1.0 - level) / 2.0
    widen = small_sample_factor(n_rep, alpha)
    if boot:
        c_lo = float(_lower(np.float64(c), c_all[1:], alpha, widen))
        if not c_lo > 0:
            return rejected(f"no knee: slope increase not significant (lower {level:g} bound {c_lo:.3g})", **diag)
        q_lo, q_hi = (float(q) for q in np.quantile(k_all[1:], [alpha, 1.0 - alpha]))
        lo, hi = k - widen * (k - q_lo), k + widen * (q_hi - k)
    else:
        lo = hi = k
    # a breakpoint on (or, within the interval, reaching) an end of the admissible range may be an
    # optimum clipped by the range: the grid does not bracket the knee
    eps = 1e-12 * float(np.abs(x).max())
    if lo <= x[1] + eps or hi >= x[-2] - eps:
        where = "lowest" if lo <= x[1] + eps else "highest"
        return rejected(
            f"knee not bracketed: the interval [{lo:g}, {hi:g}] reaches the {where} admissible load", **diag
        )
    regimes = _regimes(x, ybar, k, floor, below_tol, sat_frac)
    # a floor needs one point on it; the asymptote needs three collinear points (two intervals),
    # since any two points define a line, so at least two saturated points
    if BELOW not in regimes:
        return rejected(f"no point below the knee lies within {below_tol:g} of the floor", **diag)
    if regimes.count(SATURATED) < 2:
        return rejected("no saturated regime: the slope is still rising at the highest loads", **diag)
    if boot and _saturated_top(x, y, k, 1.0 - sat_level, small_sample_factor(n_rep, 1.0 - sat_level), sat_frac) < 2:
        return rejected(
            "no saturated regime shown: the slope at the highest loads may still be rising (noise-aware check)", **diag
        )
    note = ""
    if not boot:
        lo = hi = nan
        note = " (one replica: no interval, no significance check)"
    elif n_rep < FEW_REPLICAS:
        note = f" ({n_rep} replicas, under {FEW_REPLICAS}: {_FEW_NOTE})"
    labels = [UNKNOWN] * n_all
    for j, lab in zip(np.flatnonzero(keep), regimes):
        labels[j] = lab
    return KneeResult(
        knee=k,
        knee_lo=lo,
        knee_hi=hi,
        detected=True,
        reason="knee detected" + note,
        regimes=labels,
        n_points=n,
        level=level,
        floor=floor,
        slope_below=b,
        slope_above=b + c,
        kink=kink,
    )
