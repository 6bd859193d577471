"""The counterfactual PoA: the selfish policy's social cost over the best policy's, on common streams.

Every policy of a point ran on the same requests (common random numbers), so replica i of each
policy is paired with replica i of the others. Paired log-ratio intervals of the selfish policy
against every other policy, Bonferroni-adjusted, are combined into an interval for
max(1, max_p mean_s / mean_p) (`counterfactual_poa`, built on `ratio_to_best`; the method and its
caveats are in their docstrings); the PD game reuses the same construction over independent
splits (poa_mc.stats.games). The social costs it compares, one per replica, come from the
accumulators (`social_cost_per_replica`). Unlike PoA-hat (poa_mc.stats.poa_hat), which re-assigns
one router's own decisions, this compares whole policies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from poa_mc.stats.intervals import _exp_or_inf, _t_ppf
from poa_mc.stats.quantiles import pooled_quantile


@dataclass(frozen=True)
class Counterfactual:
    poa: float
    lo: float
    hi: float
    best_policy: str
    cost_selfish: float
    cost_best: float


def ratio_to_best(
    selfish: np.ndarray, rivals: dict[str, np.ndarray], level: float = 0.95
) -> tuple[float, float, float, str]:
    """(rho, lo, hi, best): rho = mean(selfish) / min_p mean(rivals[p]) on common streams.

    Replica i of every array saw the same requests. rho = max_p rho_p, rho_p = mu_s / mu_p. For
    each rival a paired delta-method t-interval for log rho_p (standard error from the per-replica
    residuals x_s,i / mean_s - x_p,i / mean_p, so the common streams cancel), each at level
    1 - (1 - level) / m for m rivals (Bonferroni); rho is increasing in every rho_p, so
    [max_p L_p, max_p U_p] covers it with probability >= `level` (up to the delta approximation),
    whichever rival is best and however close the ties. Not clamped: rho < 1 when a rival is
    worse than the selfish policy. Bounds are NaN with fewer than 2 replicas, non-finite costs or
    non-positive means; all four are NaN/"" without rivals or replicas.
    """
    names = list(rivals)
    s = np.asarray(selfish, dtype=np.float64)
    if not names or s.size == 0:
        return math.nan, math.nan, math.nan, ""
    mat = np.stack([np.asarray(rivals[p], dtype=np.float64) for p in names])  # (P, R)
    mean_s, means = float(s.mean()), mat.mean(axis=1)
    b = int(np.argmin(means))
    rho = _safe_ratio(mean_s, float(means[b]))
    n = s.size
    if n < 2 or not (np.isfinite(mat).all() and np.isfinite(s).all()) or mean_s <= 0 or not (means > 0).all():
        return rho, math.nan, math.nan, names[b]
    t = _t_ppf(1.0 - (1.0 - level) / len(names) / 2.0, n - 1)
    log_ratio = math.log(mean_s) - np.log(means)
    se = (s / mean_s - mat / means[:, None]).std(axis=1, ddof=1) / math.sqrt(n)
    lo = _exp_or_inf(float(np.max(log_ratio - t * se)))
    hi = _exp_or_inf(float(np.max(log_ratio + t * se)))
    return rho, lo, hi, names[b]


def counterfactual_poa(
    costs: dict[str, np.ndarray],
    selfish: str,
    rng: np.random.Generator | None = None,
    n_boot: int = 1000,
    level: float = 0.95,
) -> Counterfactual:
    """Selfish policy's mean social cost over the best policy's, all on the same streams.

    `costs[policy]` holds one social cost per replica; replica i of every policy saw the same
    requests (common random numbers). The target is  theta = mu_s / min_p mu_p = max(1, max_p
    rho_p),  rho_p = mu_s / mu_p over the other policies p (the minimum includes the selfish policy
    itself, so theta >= 1).

    Point estimate: the plug-in mean_s / min_p mean_p. It is >= 1 by definition and biased upward
    when policies are near-tied (the smallest of several noisy means is too small on average).

    Interval: ratio_to_best's simultaneous interval for max_p rho_p, mapped through max(1, .):
    [max(1, max_p L_p), max(1, max_p U_p)] covers theta with probability >= `level`, whichever
    policy is best and however close the ties; it always contains the point estimate. It is
    conservative near ties (by design: re-picking the minimum inside a bootstrap copied the
    selection bias and covered 68% there).

    Bounds are NaN with fewer than 2 replicas, non-finite costs or non-positive means. `rng` and
    `n_boot` are accepted for compatibility and unused (the interval is analytic).
    """
    del rng, n_boot
    names = list(costs)
    mat = np.stack([np.asarray(costs[p], dtype=np.float64) for p in names])  # (P, R)
    if mat.shape[1] == 0:
        return Counterfactual(math.nan, math.nan, math.nan, "", math.nan, math.nan)
    s = names.index(selfish)
    means = mat.mean(axis=1)
    b = int(np.argmin(means))
    poa = _safe_ratio(means[s], means[b])
    rivals = {p: mat[i] for i, p in enumerate(names) if i != s}
    if not rivals:
        lo = hi = 1.0  # the selfish policy is the only one: theta = 1 exactly
    else:
        _, lo, hi, _ = ratio_to_best(mat[s], rivals, level)
        if math.isfinite(lo):
            lo, hi = max(1.0, lo), max(1.0, hi)
    return Counterfactual(poa, lo, hi, names[b], float(means[s]), float(means[b]))


def rate_gain_to_best(
    selfish: tuple[np.ndarray, np.ndarray], rivals: dict[str, tuple[np.ndarray, np.ndarray]], level: float = 0.95
) -> Counterfactual:
    """The counterfactual PoA of a rate, where more is better (goodput): the best policy's rate over
    the selfish one's, max(1, max_p G_p / G_s), each rate a ratio of sums across replicas,
    G = sum(num) / sum(den) (as poa_mc.stats.cell_stats reports goodput_rps).

    Replica i of every policy saw the same requests. For each rival a paired delta-method
    t-interval for log(G_p / G_s), from the per-replica influence num_p/mean(num_p) - den_p/mean(den_p)
    - num_s/mean(num_s) + den_s/mean(den_s) (the common streams cancel in it), each at level
    1 - (1 - level) / m for m rivals (Bonferroni); the maximum is increasing in every ratio, so
    [max(1, max_p L_p), max(1, max_p U_p)] covers it with probability >= `level`, as
    counterfactual_poa's interval does for costs. `cost_selfish` and `cost_best` hold the two rates.
    NaN bounds with fewer than 2 replicas or non-positive sums."""
    num_s, den_s = (np.asarray(x, dtype=np.float64) for x in selfish)
    names = list(rivals)
    n = num_s.size
    if n == 0 or not names:
        g = _safe_ratio(float(num_s.sum()), float(den_s.sum())) if n else math.nan
        return Counterfactual(1.0 if n else math.nan, 1.0 if n else math.nan, 1.0 if n else math.nan, "", g, g)
    gs = _safe_ratio(float(num_s.sum()), float(den_s.sum()))
    rates = {p: _safe_ratio(float(np.sum(a)), float(np.sum(d))) for p, (a, d) in rivals.items()}
    best = max(rates, key=lambda p: rates[p])
    if rates[best] <= gs:
        best, g_best = "", gs  # the selfish policy is the best
    else:
        g_best = rates[best]
    poa = max(1.0, _safe_ratio(g_best, gs))
    sums = [num_s.sum(), den_s.sum(), *(np.sum(x) for ab in rivals.values() for x in ab)]
    if n < 2 or not all(np.isfinite(s) and s > 0 for s in sums):
        return Counterfactual(poa, math.nan, math.nan, best, gs, g_best)
    t = _t_ppf(1.0 - (1.0 - level) / len(names) / 2.0, n - 1)
    base = num_s / num_s.mean() - den_s / den_s.mean()
    los, his = [], []
    for p, (a, d) in rivals.items():
        a, d = np.asarray(a, dtype=np.float64), np.asarray(d, dtype=np.float64)
        influence = a / a.mean() - d / d.mean() - base
        se = influence.std(ddof=1) / math.sqrt(n)
        log_ratio = math.log(rates[p] / gs)
        los.append(log_ratio - t * se)
        his.append(log_ratio + t * se)
    lo, hi = _exp_or_inf(max(los)), _exp_or_inf(max(his))
    return Counterfactual(poa, max(1.0, lo), max(1.0, hi), best, gs, g_best)


def _safe_ratio(a: float, b: float) -> float:
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return float(a / b)


SOCIAL_COSTS = ("mean_ttft", "mean_e2e", "p99_ttft")


def social_cost_per_replica(kind: str, acc: dict[str, np.ndarray]) -> np.ndarray:
    """One social cost per replica from its accumulator row (poa_mc.stats.accumulate): mean TTFT or
    mean e2e latency, or for TTFT P99 each replica's pseudo-value of the cell's pooled P99
    (poa_mc.stats.quantiles: their mean is the P99 of all the cell's requests, their spread its
    sampling error; a replica's own P99 would estimate the P99 of a run of its length, low)."""
    if kind == "mean_ttft":
        return acc["sum_ttft_ms"] / acc["n"]
    if kind == "mean_e2e":
        return acc["sum_e2e_ms"] / acc["n"]
    if kind == "p99_ttft":
        lo = acc.get("hist_ttft_lo", 0)
        return pooled_quantile(acc["hist_ttft"], 0.99, acc["min_ttft"], acc["max_ttft"], lo).pseudo
    raise ValueError(f"unknown social cost {kind!r}")
