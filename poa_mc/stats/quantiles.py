"""Latency quantiles of a cell: the pooled nearest-rank quantile of all its replicas' requests, with
an interval that treats replicas as clusters.

Why pooled. A replica's own P99 over N requests estimates "the P99 of an N-request run", which
is below the steady-state P99 whenever requests inside a run are positively correlated (queues):
the mean over replicas of per-replica P99s of M/M/1 at load 0.8 with 400 requests a replica reads
29% low, and its t-interval is tight around that lower number (bench/quantile_coverage.py). The
histograms of a cell's replicas add (poa_mc.stats.sketch), so the quantile of the pooled histogram is the
quantile of every measured request of the cell: consistent for the steady-state quantile as
replicas grow, whatever the run length (given a sufficient warm-up).

Interval (Woodruff 1952, with a cluster-robust variance). Requests within a replica are
correlated, replicas are independent: the clusters are the replicas. At the estimate, the pooled
CDF is F = sum_r c_r / N (c_r: replica r's requests below the quantile, n_r its requests,
N = sum n_r), and the ratio estimator's variance across clusters is

    se(F)^2 = R / (R - 1) * sum_r (c_r - F n_r)^2 / N^2;

the interval for the q-quantile is the pooled quantiles at q -+ t se(F), t the Student t quantile
with R - 1 degrees of freedom. On log-binned histograms both steps interpolate inside a bin: c_r
counts a replica's share of the bin holding the quantile in proportion to its requests there, and
the bounds invert the pooled CDF log-linearly inside their bins (at saturation a cell's TTFTs can
fill a handful of 1% bins, and the nearest rank alone would report [Q, Q]), and they reach at
least the binning's RESOLUTION (0.5%) either side of the reported value. The interval is
asymmetric where the distribution is, needs no density estimate, and stays inside the data's
range; bounds are NaN with fewer than 2 replicas. A bootstrap-t pivot on the CDF scale was tried
and dropped: on M/M/1's P99 it was wider and covered no better (bench/NOTES.md). Measured
coverage, and where it falls short (tail quantiles of slow queues with few replicas, whose
exceedances come in a few busy periods): docs/outputs.md, "What the intervals cover".

Pseudo-values. A paired comparison of policies on common random numbers (the counterfactual PoA
with `social_cost = "p99_ttft"`) needs one number per replica whose mean is the pooled quantile
and whose spread carries its sampling error: the linearisation z_r = Q - s (u_r - mean u) / n_bar,
u_r = c_r - F n_r, with s = dQ/dF over -+ 2 se(F). The mean of z is Q exactly and its t standard
error is s se(F).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from poa_mc.stats import sketch


@dataclass(frozen=True)
class PooledQuantile:
    value: float
    lo: float
    hi: float
    pseudo: np.ndarray  # (R,) per-replica linearised values; their mean is `value`


def _t(level: float, df: int) -> float:
    from scipy import special

    return float(special.stdtrit(df, 0.5 + level / 2.0))


def _invert(cum: np.ndarray, pooled: np.ndarray, total: float, p: float, first: int) -> float:
    """The pooled CDF (cumulative counts `cum` of the bins from `first` on) inverted at p,
    log-linearly inside the bin that holds p * total; before clipping to the data's range."""
    target = min(max(p, 0.0), 1.0) * total
    j = min(int(np.searchsorted(cum, target - 1e-9 * total, side="left")), len(cum) - 1)
    mass = float(pooled[j])
    frac = min(max((target - (float(cum[j]) - mass)) / mass, 0.0), 1.0) if mass > 0 else 1.0
    b = first + j
    return sketch.LO_MS * sketch.GAMMA ** (b - 1 + frac) if b > 0 else 0.0


def _below(hist: np.ndarray, cs: np.ndarray, cum: np.ndarray, pooled: np.ndarray, total: float, q: float):
    """Each replica's count of requests below the pooled q-quantile (R,): its requests in the bins
    under the quantile's, plus its share of that bin in proportion to the pooled count there."""
    target = q * total
    j = min(int(np.searchsorted(cum, target - 1e-9 * total, side="left")), len(cum) - 1)
    mass = float(pooled[j])
    frac = min(max((target - (float(cum[j]) - mass)) / mass, 0.0), 1.0) if mass > 0 else 1.0
    return cs[:, j] - (1.0 - frac) * hist[:, j]


def pooled_quantiles(
    hist: np.ndarray,
    qs: tuple[float, ...],
    lo: np.ndarray,
    hi: np.ndarray,
    first: np.ndarray | int = 0,
    level: float = 0.95,
) -> list[PooledQuantile]:
    """The nearest-rank quantiles qs of all rows' requests together, with their cluster intervals.

    hist: (R, W) counts (whole histograms, or spans starting at bin `first`, per row or one for
    all); lo, hi: (R,) each row's exact minimum and maximum (the first and the last rank report
    them, as in poa_mc.stats.sketch.quantile). NaN without requests.
    """
    hist = np.asarray(hist)
    r = hist.shape[0]
    first_arr = np.asarray(first, dtype=np.int64)
    if first_arr.ndim and first_arr.size and not (first_arr == first_arr[0]).all():
        f, hist = sketch.respan([first_arr], [hist])
        first_arr = f
    a = int(first_arr.flat[0]) if first_arr.ndim and first_arr.size else int(first_arr)
    hist = hist.astype(np.float64)
    n_r = hist.sum(axis=1)
    total = float(n_r.sum())
    if total == 0:
        return [PooledQuantile(math.nan, math.nan, math.nan, np.full(r, math.nan)) for _ in qs]
    lo_all = float(np.min(np.where(n_r > 0, lo, np.inf)))
    hi_all = float(np.max(np.where(n_r > 0, hi, -np.inf)))
    pooled = hist.sum(axis=0)
    cum = np.cumsum(pooled)
    cs = np.cumsum(hist, axis=1)
    t = _t(level, r - 1) if r >= 2 else math.nan
    out = []
    for q in qs:
        k = max(math.ceil(q * total - 1e-9 * total), 1)
        if k <= 1:
            value = lo_all
        elif k >= total:
            value = hi_all
        else:
            j = int(np.searchsorted(cum, k, side="left"))
            value = min(max(float(sketch.bin_value(np.array(min(a + j, sketch.NBINS - 1)))), lo_all), hi_all)
        if r < 2:
            out.append(PooledQuantile(value, math.nan, math.nan, np.full(r, value)))
            continue
        c = _below(hist, cs, cum, pooled, total, q)
        f_hat = float(c.sum()) / total
        u = c - f_hat * n_r
        se = math.sqrt(r / (r - 1.0) * float(u @ u)) / total
        # F(x) = q at the true quantile x, and F_hat(x) is within t se of it
        v_lo = _invert(cum, pooled, total, q - t * se, a)
        v_hi = _invert(cum, pooled, total, q + t * se, a)
        d = max(2.0 * se, 1.0 / total)
        slope = (_invert(cum, pooled, total, q + d, a) - _invert(cum, pooled, total, q - d, a)) / (
            min(q + d, 1.0) - max(q - d, 0.0)
        )
        pseudo = value - slope * (u - u.mean()) / (total / r)
        # the reported value is the bin's middle, within RESOLUTION of the exact rank: the interval
        # reaches at least that far either side (inside the data's range)
        lo_b = max(min(v_lo, value / (1.0 + sketch.RESOLUTION)), min(lo_all, value))
        hi_b = min(max(v_hi, value * (1.0 + sketch.RESOLUTION)), max(hi_all, value))
        out.append(PooledQuantile(value, float(lo_b), float(hi_b), pseudo))
    return out


def pooled_quantile(
    hist: np.ndarray,
    q: float,
    lo: np.ndarray,
    hi: np.ndarray,
    first: np.ndarray | int = 0,
    level: float = 0.95,
) -> PooledQuantile:
    """pooled_quantiles of one q."""
    return pooled_quantiles(hist, (q,), lo, hi, first, level)[0]
