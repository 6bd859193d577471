"""Price-of-Anarchy estimators and confidence intervals.

Replicas are independent; requests inside one replica are not. Every interval here therefore comes
from the spread *across replicas* of per-replica values, never from order statistics inside one
correlated stream:

* means: Student-t interval of the per-replica values (`t_interval`); the percentile bootstrap
  (`bootstrap_mean_interval`, kept for callers) under-covers badly with few replicas (about 50% at
  2 replicas, 80% at 5). `quantile_interval` is the same t-interval over per-replica quantiles: it
  covers the mean of "the quantile of one run", not the steady-state quantile, which the summary
  takes from the pooled histograms (poa_mc.stats.quantiles); shares use poa_mc.stats.proportions;
* ratios of sums (PoA-hat, throughput, token-weighted ITL): delta method on the log scale
  (`ratio_interval`), so the bounds of a positive ratio stay positive; a zero denominator leaves the
  interval undefined (NaN bounds);
* counterfactual PoA: paired log-ratio intervals of the selfish policy against every other policy,
  Bonferroni-adjusted, combined into an interval for max(1, max_p mean_s / mean_p)
  (`counterfactual_poa`; the method and its caveats are in its docstring).

PoA-hat (the paper's estimator), per replica, over windows of `window` consecutive routing
decisions in arrival order (a trailing partial window is dropped):

* realized cost of request r: the router's cost of the worker it chose, as recorded at its
  decision, i.e. including the load that earlier decisions of the same window put there;
  ACTUAL of a window = sum of its realized costs;
* OPT of a window = min-cost assignment of the window's requests to (worker, slot) columns;
  `pricing` says what a request pays in a slot:

  - `slot` (default): the j-th request (j = 1, 2, ...) that OPT puts on worker w pays the load of
    the j - 1 before it, as ACTUAL does. Exact prices would depend on *which* requests precede
    (no longer a linear assignment), so each earlier request is charged a_w, the smallest load
    (tokens and blocks separately) that any of the window's requests the router sent to w added
    there (if it sent none, the smallest over all the window's requests). Request i in slot j of w
    pays cost(max(f_tok + (j-1) a_w_tok, 0), max(f_blk + (j-1) a_w_blk, 0)), where f = recorded
    value minus the load the window's earlier decisions added to w, *not* clipped (the clip comes
    after the slot term, so the price stays <= the recorded cost even where a completion during
    the window left rec below that load). Every worker has `window` slots (the default), so
    whatever the router did is a feasible assignment, and for its j-th request on w the price is
    <= the recorded cost (the j - 1 before added at least (j-1) a_w). Hence, for every cost
    nondecreasing in tokens and blocks, OPT <= ACTUAL in every window and PoA-hat >= 1 by
    construction; with identical requests the prices are exact, so a router that was optimal
    scores exactly 1. What it measures: how much the router's assignment costs over the best
    re-assignment (and re-ordering) of the same requests, seen from the window's starting state,
    when each co-located request is charged the smallest load seen on that worker; a relaxation
    (OPT is optimistic where the real requests would add more), so PoA-hat leans high, never
    below 1.
  - `frozen` (the paper's): the frozen cost of r on w is the recorded cost minus the load the
    window's earlier decisions added to w (their uncached prompt tokens and new blocks), clipped
    at 0, i.e. what r would have cost on w had the window started with it, and every slot of w
    charges it (each worker's column repeated `slots` times, default ceil(window / K)). OPT
    ignores the congestion it creates itself and the slot cap can make the router's own
    assignment infeasible, so the ratio may fall below 1 (four requests all sent to a worker
    that costs 1 for each, against 3 elsewhere, give 4 / 8 = 0.5), as the paper observed.

  In both, request-specific terms (r's own prompt, r's prefix overlap with w) are kept exactly as
  recorded. Completions during the window: given each decision's time and when the load it booked
  leaves its worker (`decided_ms`, `released_tokens_ms`, `released_blocks_ms`; reduce passes them),
  only the earlier load still there at a decision is taken off, and under slot pricing the j-th
  request on w is charged max(j - 1 - T_w, 0) earlier loads, T_w being the router's requests on w
  whose load was gone by the window's last decision (its j-th request on w still saw at least
  that many), which keeps OPT <= ACTUAL. Without the times every earlier load counts as present:
  at low load, where requests finish inside a window, OPT then undoes load that had already left
  and PoA-hat inflates (5.3 at C = 1 on a 1P/4D dynamo-mocker cell before reduce passed them).
* PoA-hat of a replica = sum ACTUAL / sum OPT over its windows; the cell's estimate is the ratio of
  sums over all replicas with the log-delta interval. With a single candidate worker (K = 1) there
  is no choice, hence no game: PoA-hat is undefined (`PoaHat.defined` False, NaN estimate).

Cost units (`cost`): `router` = Dynamo's cost  omega * tokens / block_size + blocks
(dimensionless); `ttft` = predicted TTFT in ms: the prefill of the tokens ahead of and including
the request, from the profile (polynomial: p2 T^2 + p1 T + p0, nothing for T = 0; theory profiles:
prefill_ms * T / isl), plus the first decode step (d0, or decode_ms), so a fully cached request
still costs a step. Both are nondecreasing in tokens and blocks (omega >= 0; the profile's p0, p1,
p2 are >= 0), so under slot pricing their PoA-hat is >= 1 by construction. `observed` = the paper's flavour: ACTUAL
is each request's observed TTFT (ms, queueing, transfer and decode admission included) and OPT
uses the `ttft` predictions, so the ratio also grows with everything the router's cost model does
not see (it explodes past saturation); ACTUAL and OPT are then in different models and there is
no PoA-hat >= 1 guarantee under either pricing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np

from poa_mc.kernels import threads
from poa_mc.model.profiles import decode_ms, prefill_ms
from poa_mc.model.spec import ProfileSpec
from poa_mc.stats.quantiles import pooled_quantile

# poa_mc.kernels.cpu is imported where it is called: importing it builds the CPU kernels' dispatchers.

# ---------------------------------------------------------------------------------------------
# intervals


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float
    hi: float


_NAN_ESTIMATE = Estimate(math.nan, math.nan, math.nan)


def _t_ppf(p: float, df: int) -> float:
    """Student t's inverse CDF: scipy.special's, which scipy.stats.t.ppf calls (the same numbers;
    tested), imported here and not scipy.stats, which takes 0.7 s to import against 0.2 s."""
    from scipy import special

    return float(special.stdtrit(df, p))


def _t_quantile(n: int, level: float) -> float:
    return _t_ppf(0.5 + level / 2, n - 1)


def _too_few(x: np.ndarray) -> Estimate | None:
    """The estimate of a mean when there are too few replicas for an interval, else None."""
    if x.size == 0:
        return _NAN_ESTIMATE
    if x.size < 2:
        return Estimate(float(x.mean()), math.nan, math.nan)
    return None


def t_interval(x: np.ndarray, level: float = 0.95) -> Estimate:
    """Mean of per-replica values with a Student-t interval (NaN bounds for fewer than 2)."""
    x = np.asarray(x, dtype=np.float64)
    if (few := _too_few(x)) is not None:
        return few
    n = x.size
    m = float(x.mean())
    half = _t_quantile(n, level) * float(x.std(ddof=1)) / math.sqrt(n)
    return Estimate(m, m - half, m + half)


def quantile_interval(x_per_replica_quantiles: np.ndarray, level: float = 0.95) -> Estimate:
    """Mean of per-replica quantiles (e.g. each replica's P99) with a Student-t interval.

    Each replica's quantile is one independent draw, so their mean is a mean of i.i.d. values and
    the t-interval applies as for means; unlike a percentile bootstrap it keeps its level with
    2-8 replicas (the bootstrap's resamples of n values cannot spread wider than those n values).
    """
    return t_interval(x_per_replica_quantiles, level)


def _exp_or_inf(x: float) -> float:
    # math.exp raises instead of overflowing to inf; a bound that large is simply unbounded.
    return math.exp(x) if x < 700.0 else math.inf


def ratio_interval(num: np.ndarray, den: np.ndarray, level: float = 0.95) -> Estimate:
    """Ratio of sums  sum(num) / sum(den)  over replicas, with a delta-method t-interval.

    For a positive ratio R the interval is built on log R, whose delta-method standard error is
    sd(num - R den) / (sqrt(n) |mean(num)|), then mapped back: [R e^-h, R e^h]. Its bounds stay
    positive (the linear-scale interval R -+ h goes below 0 for skewed, few-replica data) and it
    follows the right skew of a ratio. Ratios <= 0 (zero numerators, signed data) fall back to the
    linear scale. A zero sum of denominators makes the ratio's interval undefined: the value is 1
    when the numerator is zero too (nothing to improve), +inf otherwise, and the bounds are NaN.
    """
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    n = num.size
    sn, sd = float(num.sum()), float(den.sum())
    if n == 0:
        return _NAN_ESTIMATE
    if sd == 0.0:
        return Estimate(1.0 if sn == 0.0 else math.inf, math.nan, math.nan)
    r = sn / sd
    if n < 2:
        return Estimate(r, math.nan, math.nan)
    spread = float((num - r * den).std(ddof=1)) / math.sqrt(n)
    t = _t_quantile(n, level)
    if r > 0:
        half = t * spread / abs(sn / n)
        return Estimate(r, r * math.exp(-half), r * _exp_or_inf(half))
    half = t * spread / abs(sd / n)
    return Estimate(r, r - half, r + half)


def bootstrap_mean_interval(
    x: np.ndarray, rng: np.random.Generator, n_boot: int = 1000, level: float = 0.95
) -> Estimate:
    """Mean of per-replica values with a percentile bootstrap over replicas.

    Kept for callers; prefer `quantile_interval` / `t_interval`. With few replicas the bootstrap
    under-covers (95% nominal gives about 50% at 2 replicas, 80% at 5, 87% at 8): resampling n
    values never spreads wider than those n values.
    """
    x = np.asarray(x, dtype=np.float64)
    if (few := _too_few(x)) is not None:
        return few
    n = x.size
    m = float(x.mean())
    idx = rng.integers(0, n, size=(n_boot, n))
    boots = x[idx].mean(axis=1)
    lo, hi = np.quantile(boots, [0.5 - level / 2, 0.5 + level / 2])
    return Estimate(m, float(lo), float(hi))


def per_replica_quantile(x: np.ndarray, q: float) -> np.ndarray:
    """Nearest-rank quantile (the classic definition, as Dynamo's mocker reports) of each row."""
    return np.quantile(np.asarray(x, dtype=np.float64), q, axis=-1, method="inverted_cdf")


# ---------------------------------------------------------------------------------------------
# counterfactual PoA


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


# ---------------------------------------------------------------------------------------------
# PoA-hat


def _load_before(
    chosen: np.ndarray,
    added: np.ndarray,
    window: int,
    k: int,
    decided: np.ndarray | None = None,
    released: np.ndarray | None = None,
) -> np.ndarray:
    """(R, nw, window, K): the load the window's earlier decisions added to each worker and that
    is still there at each decision: all of it, or with decision and release times (R, N) only
    that of the earlier decisions whose load is released after the decision at hand."""
    r = chosen.shape[0]
    m = (chosen.shape[1] // window) * window
    onehot = np.zeros((r, m, k))
    np.put_along_axis(onehot, chosen[:, :m, None].astype(np.int64), added[:, :m, None].astype(np.float64), axis=2)
    onehot = onehot.reshape(r, m // window, window, k)
    if decided is None or released is None:
        return np.cumsum(onehot, axis=2) - onehot  # exclusive prefix sum within the window
    shape = (r, m // window, window)
    t = np.asarray(decided, dtype=np.float64)[:, :m].reshape(shape)
    out = np.asarray(released, dtype=np.float64)[:, :m].reshape(shape)
    earlier = np.tril(np.ones((window, window), dtype=bool), -1)  # [i, e]: e before i
    present = earlier & (out[:, :, None, :] > t[:, :, :, None])  # e's load still there at i
    # a batched (window x window) @ (window x K) product: matmul runs it ~10x faster than einsum's
    # loops, with the same sums (whole numbers of tokens or blocks: exact in float64)
    return np.matmul(present.astype(np.float64), onehot)


def _transient(
    chosen: np.ndarray, window: int, k: int, decided: np.ndarray | None, released: np.ndarray | None
) -> np.ndarray:
    """(R, nw, K): per window and worker, the router's requests there whose load was released by
    the window's last decision (0 without times). The j-th request on a worker has at least
    j - 1 - T_w earlier ones whose load it still saw, which keeps slot pricing a relaxation when
    requests complete inside a window (at low load all of them do)."""
    r = chosen.shape[0]
    nw = chosen.shape[1] // window
    if decided is None or released is None or nw == 0:
        return np.zeros((r, nw, k))
    shape = (r, nw, window)
    t_last = np.asarray(decided, dtype=np.float64)[:, : nw * window].reshape(shape).max(axis=2, keepdims=True)
    gone = np.asarray(released, dtype=np.float64)[:, : nw * window].reshape(shape) <= t_last
    ch = chosen[:, : nw * window].reshape(shape)[..., None].astype(np.int64) == np.arange(k)
    return (ch & gone[..., None]).sum(axis=2).astype(np.float64)


def freeze_load(
    values: np.ndarray,
    chosen: np.ndarray,
    added: np.ndarray,
    window: int,
    decided: np.ndarray | None = None,
    released: np.ndarray | None = None,
) -> np.ndarray:
    """Undo, inside each window, the load that the window's earlier decisions added.

    values (R, N, K): a load-bearing quantity recorded at each decision (tokens or blocks);
    chosen (R, N): worker index chosen; added (R, N): what each decision added to its worker.
    Returns values minus, for each decision, the sum of `added` over the earlier decisions of its
    window that went to the same worker (clipped at 0); with decision and release times, only the
    load still there at each decision. Trailing partial windows are left as they are (unused).
    """
    r, n, k = values.shape
    nw = n // window
    out = np.array(values, dtype=np.float64, copy=True)
    if nw == 0:
        return out
    m = nw * window
    before = _load_before(chosen, added, window, k, decided, released)
    out[:, :m] = np.maximum(out[:, :m] - before.reshape(r, m, k), 0.0)
    return out


def _min_added(chosen: np.ndarray, added: np.ndarray, window: int, k: int) -> np.ndarray:
    """(R, nw, K): per window and worker, the smallest load added by a request the router sent
    there, or the smallest over all the window's requests where it sent none (slot pricing's a_w).
    """
    r = chosen.shape[0]
    nw = chosen.shape[1] // window
    ch = chosen[:, : nw * window].reshape(r, nw, window, 1).astype(np.int64)
    ad = np.asarray(added, dtype=np.float64)[:, : nw * window].reshape(r, nw, window, 1)
    sent = ch == np.arange(k)
    least = np.where(sent, ad, np.inf).min(axis=2)
    return np.where(sent.any(axis=2), least, ad.min(axis=2))


def _bad_entry(x: np.ndarray, nonneg: bool) -> tuple[int, ...] | None:
    """Index of x's first entry that is not finite (or, with nonneg, below 0); None when all are.
    Two reductions in the common case (min and max carry a NaN through); the search on failure only."""
    a = np.asarray(x)
    if a.size == 0:
        return None
    if a.dtype.kind in "biu":
        if not nonneg or a.min() >= 0:
            return None
        bad = a < 0
    else:
        lo, hi = a.min(), a.max()
        if (lo >= 0 if nonneg else lo > -np.inf) and hi < np.inf:
            return None
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(a) | (a < 0) if nonneg else ~np.isfinite(a)
    return tuple(int(v) for v in np.argwhere(bad)[0])


def _window_name(w: int, windows_per_replica: int = 0) -> str:
    """`window w`, with the replica and its window there when windows_per_replica is known."""
    where = f"window {w}"
    if windows_per_replica:
        where += f" (replica {w // windows_per_replica}, window {w % windows_per_replica} of the replica)"
    return where


def _require_recorded(
    arrays: tuple[tuple[str, np.ndarray | None, bool], ...], window: int, order: np.ndarray | None = None
) -> None:
    """Raise ValueError naming the array, the replica and decision (its window and row, in decision
    order, and the candidate worker) of the first recorded cost input that is not finite, or below 0
    where `nonneg`: arrays of (name, (R, N) or (R, N, K) array or None, nonneg). Pricing would take
    it silently (the ttft cost prices NaN tokens as a 0 ms prefill; the slot clip turns -inf into 0)."""
    for name, x, nonneg in arrays:
        at = None if x is None else _bad_entry(x, nonneg)
        if at is None:
            continue
        r, e = at[0], at[1]
        n = np.shape(x)[1]
        nw = n // window if window > 0 else 0
        pos = e if order is None else int(np.flatnonzero(np.asarray(order)[r] == e)[0])
        where = f"replica {r}, decision {e}" + (f", candidate worker {at[2]}" if len(at) > 2 else "")
        if pos < nw * window:
            wi, i = divmod(pos, window)
            where += f": {_window_name(r * nw + wi, nw)}, row {i}"
        else:
            where += " (after the replica's last full window)"
        need = "finite and >= 0" if nonneg else "finite"
        raise ValueError(f"PoA-hat input {name} is {np.asarray(x)[at]} at {where}; it must be {need}")


def router_cost(tokens: np.ndarray, blocks: np.ndarray, block_size: int, overlap_weight: float) -> np.ndarray:
    """Dynamo's KV-router cost: omega * tokens / block_size + blocks."""
    return overlap_weight * tokens / block_size + blocks


def prefill_ms_cost(tokens: np.ndarray, profile: ProfileSpec, isl: np.ndarray | None = None) -> np.ndarray:
    """Predicted prefill time (ms) of `tokens` uncached tokens (no time for zero tokens): the
    profile's pass time (poa_mc.model.profiles.prefill_ms, the kernels' formula) for a polynomial or aic
    profile; for a theory profile, whose pass serves one request, the share tokens / isl of one
    request's service."""

    t = np.asarray(tokens, dtype=np.float64)
    at = _bad_entry(t, False)
    if at is not None:  # the profile's pass would price NaN tokens as no pass at all (0 ms)
        raise ValueError(f"prefill_ms_cost: tokens at {at} is {t[at]}; token counts must be finite")
    if profile.kind in ("polynomial", "aic"):
        return np.asarray(prefill_ms(profile, t), dtype=np.float64)
    if isl is None:
        raise ValueError("theory profiles need the request's isl to count requests ahead")
    ms = profile.prefill_ms * t / np.maximum(np.asarray(isl, dtype=np.float64)[..., None], 1.0)
    return np.where(t > 0, ms, 0.0)


def recomputed_tokens(isl: np.ndarray, block_size: int) -> np.ndarray:
    """Tokens a fully cached prompt still computes where vLLM caps a prefix hit below the prompt's
    last token (cluster.recompute_last_block): its last block, isl - ((isl - 1) // B) B."""
    n = np.asarray(isl, dtype=np.int64)
    return n - ((n - 1) // block_size) * block_size


def predicted_ttft_ms(
    tokens: np.ndarray,
    profile: ProfileSpec,
    isl: np.ndarray | None = None,
    *,
    block_size: int = 64,
    recompute_last_block: bool = False,
) -> np.ndarray:
    """Predicted TTFT (ms) on a worker: the prefill of `tokens` uncached tokens plus the first decode
    step (the profile's step time at an empty cache, a lower bound). With recompute_last_block (and
    `isl`), a worker is never priced below the last block the engine recomputes for a fully cached
    prompt, as the engine charges it (a prefill pass, then the step); without it a fully cached
    request costs the step alone."""
    t = np.asarray(tokens, dtype=np.float64)
    if recompute_last_block and isl is not None:
        floor = recomputed_tokens(isl, block_size).astype(np.float64)
        t = np.maximum(t, floor[..., None] if floor.ndim and floor.ndim < t.ndim else floor)

    first_step = decode_ms(profile, 0.0, 16384, 64)  # at an empty cache the capacity does not matter
    return prefill_ms_cost(t, profile, isl) + first_step


def predicted_step_ms(blocks: np.ndarray, profile: ProfileSpec, kv_blocks: int, block_size: int) -> np.ndarray:
    """Predicted time (ms) of a request's first decode step on a decode worker holding `blocks`
    active blocks, its own included (the prefill_first decode decision's ttft flavour: the
    prefill is done, what is left is a step over the worker's context). Non-decreasing in blocks."""

    b = np.asarray(blocks, dtype=np.float64)
    return np.asarray(decode_ms(profile, np.maximum(b, 0.0) * block_size, kv_blocks, block_size), dtype=np.float64)


def _batch_assign(costs: np.ndarray, slots: int) -> np.ndarray:
    """OPT of each window: costs (W, n, K) -> (W,), every worker offered `slots` times. Windows
    are independent: solved in parallel by the kernels' solver (poa_mc/kernels/poa_hat.py)."""
    from poa_mc.kernels.cpu import batch_assign

    return batch_assign(costs, slots)


def _batch_assign_priced(prices: np.ndarray, k: int) -> np.ndarray:
    """OPT of each window from full price matrices: prices (W, n, slots * k) -> (W,), columns
    slot-major over k workers, in parallel."""
    from poa_mc.kernels.cpu import batch_assign_priced

    return batch_assign_priced(prices, k)


def _require_finite(costs: np.ndarray, first_window: int = 0, windows_per_replica: int = 0) -> None:
    """Raise ValueError naming the first window and row with a NaN or infinite cost.

    The Hungarian loop never terminates on a row without a finite entry and silently returns a
    number for a partly NaN row, so bad input must be stopped before numba sees it.
    """
    if np.isfinite(costs).all():  # one pass in the common case; locate the culprit only on failure
        return
    bad = ~np.isfinite(costs.reshape(costs.shape[0], costs.shape[1], -1)).all(axis=2)
    w, i = (int(v) for v in np.argwhere(bad)[0])
    w += first_window
    where = _window_name(w, windows_per_replica)
    row = costs[w - first_window, i].ravel()
    raise ValueError(
        f"PoA-hat cost matrix of {where} has non-finite costs in row {i} (request {i} of the window): "
        f"{row[:8].tolist()}{' ...' if row.size > 8 else ''}; the assignment needs finite costs"
    )


def window_opt(costs: np.ndarray, slots: int, *, windows_per_replica: int = 0) -> np.ndarray:
    """Min-cost assignment value of each window. costs (W, n, K); needs slots * K >= n.

    Raises ValueError for a NaN or infinite cost (naming the window and row; with
    windows_per_replica also the replica).
    """
    costs = np.ascontiguousarray(costs, dtype=np.float64)
    _, n, k = costs.shape
    if slots * k < n:
        raise ValueError(f"{slots} slots x {k} workers cannot take {n} requests")
    _require_finite(costs, 0, windows_per_replica)
    return _batch_assign(costs, int(slots))


Pricer = Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray]


def _slot_router_opt(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots, omega, block_size):
    """slot_priced_opt for Dynamo's router cost, priced and solved window by window by the kernels'
    solver (poa_mc/kernels/poa_hat.py): the same matrices as the generic path, built in place. NaN for a
    non-finite price."""
    from poa_mc.kernels.cpu import slot_router_opt

    return slot_router_opt(f_tok, f_blk, a_tok, a_blk, t_tok, t_blk, slots, omega, block_size)


def _slot_sums(tok, blk, chosen, add_t, add_b, dec, rel_t, rel_b, order, window, slots, omega, block_size, step, seen):
    """PoA-hat under slot pricing with the load frozen by decision and release times, straight from
    the recorded arrays, in compiled code: tok, blk (R, N, K) (any strides), chosen, add_*, dec,
    rel_* (R, N); order (R, N) the decisions in window order (each replica's row a permutation of
    range(N)). The price is the router cost, or with `step` (not empty) the tabulated step
    (poa_mc/kernels/poa_hat.py: window_opt); the realized cost of a decision is its price on the recorded view, or with
    `seen` (R, N) (not empty) the observed one. Returns (OPT of each window (R, nw), the realized
    cost of each windowed decision (R, nw * window)). Each window's load before each decision
    (_load_before), smallest loads (_min_added) and requests gone by its last decision
    (_transient) are worked out window by window with the numpy functions' arithmetic (sums of
    whole numbers: exact in any order), so the numbers are those of the generic path to the bit;
    that path builds (W, n, n) and (W, n, K) temporaries and gathers every array into decision
    order first (bench/RESULTS.md). An OPT or realized cost is NaN where a price is not finite, a
    load negative or a block count off the table (the caller then takes the generic path)."""
    from poa_mc.kernels.cpu import slot_sums

    args = (tok, blk, chosen, add_t, add_b, dec, rel_t, rel_b, order, window, slots, omega, block_size, step, seen)
    return slot_sums(*args)


def slot_priced_opt(
    f_tok: np.ndarray,
    f_blk: np.ndarray,
    a_tok: np.ndarray,
    a_blk: np.ndarray,
    price: Pricer,
    slots: int,
    isl: np.ndarray | None = None,
    *,
    windows_per_replica: int = 0,
    transient_tok: np.ndarray | None = None,
    transient_blk: np.ndarray | None = None,
    router: tuple[float, float] | None = None,
) -> np.ndarray:
    """OPT of each window under slot pricing (see the module docstring).

    f_tok, f_blk (W, n, K): recorded tokens / blocks minus the window's earlier load, unclipped;
    a_tok, a_blk (W, K): the load charged per earlier request on each worker; price(tok, blk, isl)
    the cost function, applied to (c, n, slots, K) arrays with isl (c, n, 1) (or None);
    isl (W, n); transient_tok, transient_blk (W, K): requests per worker whose load was gone by the
    window's end (slot j then charges max(j - 1 - T_w, 0) earlier loads). router = (overlap
    weight, block size), when given, says `price` is router_cost with these (solved compiled).
    Returns (W,). ValueError naming the array, window, row and worker of an input that is not
    finite (f, a, T, isl), or below 0 (a, T, isl): the clip at 0 would price -inf as no load.
    """
    nwin, n, k = f_tok.shape
    if slots * k < n:
        raise ValueError(f"{slots} slots x {k} workers cannot take {n} requests")
    zero = np.zeros((nwin, k))
    t_tok = zero if transient_tok is None else transient_tok
    t_blk = zero if transient_blk is None else transient_blk
    inputs = (
        ("f_tok", f_tok, False), ("f_blk", f_blk, False), ("a_tok", a_tok, True), ("a_blk", a_blk, True),
        ("transient_tok", t_tok, True), ("transient_blk", t_blk, True), ("isl", isl, True),
    )  # fmt: skip
    for name, x, nonneg in inputs:
        at = None if x is None else _bad_entry(x, nonneg)
        if at is not None:
            rows = ("row", "worker") if np.ndim(x) == 3 or name == "isl" else ("worker",)
            where = ", ".join(f"{label} {v}" for label, v in zip(rows, at[1:]))
            need = "finite and >= 0" if nonneg else "finite"
            raise ValueError(
                f"slot pricing input {name} is {np.asarray(x)[at]} in {_window_name(at[0], windows_per_replica)}, "
                f"{where}; it must be {need}"
            )
    if router is not None:  # the router cost: the compiled path (same numbers, far faster)
        args = (f_tok, f_blk, a_tok, a_blk, t_tok, t_blk)
        arrays = (np.ascontiguousarray(x, dtype=np.float64) for x in args)
        out = _slot_router_opt(*arrays, int(slots), float(router[0]), float(router[1]))
        if not np.isnan(out).any():
            return out
    # (j - 1) for slot j, on the axis between requests and workers: a window's matrix is then
    # (n, slots * K) in one reshape, columns grouped by slot (their order is irrelevant to OPT).
    steps = np.arange(slots, dtype=np.float64)[None, None, :, None]
    # Chunks of windows keep the (c, n, slots, K) temporaries near 2 MB each: bounded memory, and
    # near-cache-sized arrays price faster than one big pass; enough windows to share out among threads.
    chunk = max(1, (1 << 18) // (n * slots * k))
    out = np.empty(nwin)
    for s in range(0, nwin, chunk):
        e = min(s + chunk, nwin)
        st_tok = np.maximum(steps - t_tok[s:e, None, None, :], 0.0)
        st_blk = np.maximum(steps - t_blk[s:e, None, None, :], 0.0)
        tok = np.maximum(f_tok[s:e, :, None, :] + st_tok * a_tok[s:e, None, None, :], 0.0)
        blk = np.maximum(f_blk[s:e, :, None, :] + st_blk * a_blk[s:e, None, None, :], 0.0)
        p = price(tok, blk, None if isl is None else isl[s:e, :, None])
        p = np.ascontiguousarray(np.broadcast_to(p, tok.shape), dtype=np.float64).reshape(e - s, n, slots * k)
        _require_finite(p, s, windows_per_replica)
        out[s:e] = _batch_assign_priced(p, k)
    return out


@dataclass(frozen=True)
class PoaHat:
    actual: np.ndarray  # (R,) sum of realized costs over the replica's windows
    opt: np.ndarray  # (R,) sum of OPT over the replica's windows
    windows: int  # windows per replica (0 when undefined)
    defined: bool = True  # False when there is no choice to assess (a single candidate worker)

    @staticmethod
    def undefined(replicas: int) -> PoaHat:
        """PoA-hat of a cell whose decisions had one candidate: no game, no number."""
        nan = np.full(replicas, math.nan)
        return PoaHat(nan, nan.copy(), 0, defined=False)

    def estimate(self, level: float = 0.95) -> Estimate:
        """Ratio of sums with its log-delta interval; NaN when undefined or without windows."""
        if not self.defined or self.windows == 0:
            return _NAN_ESTIMATE
        return ratio_interval(self.actual, self.opt, level)

    def per_replica(self) -> np.ndarray:
        if not self.defined:
            return np.full(self.actual.shape, math.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(
                self.opt > 0, self.actual / np.where(self.opt > 0, self.opt, 1), np.where(self.actual > 0, np.inf, 1.0)
            )


def _actual(realized: np.ndarray, chosen: np.ndarray, window: int) -> np.ndarray:
    """(R,) sum over each replica's full windows of the chosen workers' realized costs."""
    r, n, _ = realized.shape
    m = (n // window) * window
    ch = chosen[:, :m].astype(np.int64)
    return np.take_along_axis(realized[:, :m], ch[:, :, None], axis=2)[:, :, 0].sum(axis=1)


def windowed_poa(realized: np.ndarray, frozen: np.ndarray, chosen: np.ndarray, window: int, slots: int = 0) -> PoaHat:
    """PoA-hat sums from cost matrices (frozen pricing: one price per worker, every slot).

    realized, frozen: (R, N, K) costs of each decision on each candidate worker; chosen: (R, N).
    ACTUAL of a window = sum of realized[r, n, chosen]; OPT = min-cost assignment on `frozen`.
    slots = 0 means ceil(window / K). K = 1 gives an undefined PoaHat.
    """
    r, n, k = frozen.shape
    if k == 1:
        return PoaHat.undefined(r)
    nw = n // window
    slots = slots or -(-window // k)
    if nw == 0:
        return PoaHat(np.zeros(r), np.zeros(r), 0)
    m = nw * window
    _require_recorded((("realized cost", np.asarray(realized)[:, :m], False),), window)
    opt = window_opt(frozen[:, :m].reshape(r * nw, window, k), slots, windows_per_replica=nw)
    return PoaHat(_actual(realized, chosen, window), opt.reshape(r, nw).sum(axis=1), nw)


def _pricer(
    cost: str,
    block_size: int,
    overlap_weight: float,
    profile: ProfileSpec | None,
    kv_blocks: int = 16384,
    recompute_last_block: bool = False,
) -> Pricer:
    """The cost of (tokens, blocks) on a worker, for the `router` and the predicted-TTFT flavours
    (`decode_step` / `observed_step`: the prefill_first decode decision, priced by its first step)."""
    if cost == "router":
        return lambda tok, blk, isl: router_cost(tok, blk, block_size, overlap_weight)
    prof = profile or ProfileSpec()
    if cost in ("ttft", "observed"):
        return lambda tok, blk, isl: predicted_ttft_ms(
            tok, prof, isl, block_size=block_size, recompute_last_block=recompute_last_block
        )
    if cost in ("decode_step", "observed_step"):
        return lambda tok, blk, isl: predicted_step_ms(blk, prof, kv_blocks, block_size)
    raise ValueError(f"unknown PoA-hat cost {cost!r}")


def _step_table(
    cost: str,
    blocks: np.ndarray,
    added: np.ndarray,
    slots: int,
    profile: ProfileSpec | None,
    kv_blocks: int,
    block_size: int,
) -> np.ndarray | None:
    """predicted_step_ms of 0, 1, 2, ... blocks, up to the most any slot of a window can price
    (the largest recorded count plus slots - 1 of the largest load), for the step flavours
    (decode_step, observed_step): their prices are a function of a whole number of blocks, so one
    table per call replaces the step times of every slot of every window. None for the other
    flavours, or when the counts are not finite or too many to tabulate."""
    if cost not in ("decode_step", "observed_step") or not np.size(blocks):
        return None
    top = float(np.nanmax(blocks)) if np.isfinite(blocks).any() else math.nan
    most = max(top, 0.0) + (slots - 1) * max(float(np.max(added)), 0.0) if np.size(added) else top
    if not math.isfinite(most) or most >= 1 << 22:
        return None
    prof = profile or ProfileSpec()
    return predicted_step_ms(np.arange(int(most) + 1, dtype=np.float64), prof, kv_blocks, block_size)


def take_rows(x: np.ndarray, order: np.ndarray) -> np.ndarray:
    """np.take_along_axis(x, order, axis=1) for x (R, N) or (R, N, K) and order (R, N), in
    parallel over replicas (numpy's gather was a third of PoA-hat's host time)."""
    x = np.asarray(x)
    x3 = x if x.ndim == 3 else x[:, :, None]
    out = np.empty(x3.shape, dtype=x.dtype)
    threads.over_ranges(_take_rows_in, x.shape[0], x3, np.asarray(order), out)
    return out.reshape(x.shape)


@numba.njit(cache=True, nogil=True)
def _take_rows_in(lo: int, hi: int, x: np.ndarray, order: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    for r in range(lo, hi):
        for i in range(order.shape[1]):
            out[r, i] = x[r, order[r, i]]


def poa_hat_from_candidates(
    cand_tokens: np.ndarray,
    cand_blocks: np.ndarray,
    chosen: np.ndarray,
    *,
    added_tokens: np.ndarray,
    added_blocks: np.ndarray,
    window: int,
    slots: int = 0,
    cost: str = "router",  # router | ttft | observed | decode_step | observed_step
    block_size: int = 64,
    overlap_weight: float = 1.0,
    profile: ProfileSpec | None = None,
    isl: np.ndarray | None = None,
    freeze: bool = True,
    ttft_ms: np.ndarray | None = None,
    pricing: str = "slot",  # slot | frozen
    decode_kv_blocks: int = 16384,
    decided_ms: np.ndarray | None = None,
    released_tokens_ms: np.ndarray | None = None,
    released_blocks_ms: np.ndarray | None = None,
    recompute_last_block: bool = False,
    order: np.ndarray | None = None,
) -> PoaHat:
    """PoA-hat of one cell from the router's recorded view (see the module docstring).

    cand_tokens, cand_blocks: (R, N, K) as the engine records them; chosen: (R, N);
    added_tokens, added_blocks: (R, N) load each decision put on its worker (its uncached prompt
    tokens and new blocks, >= 0). pricing: `slot` (default; OPT <= ACTUAL for the router and ttft
    costs) or `frozen` (the paper's). slots = 0 means `window` under slot pricing (every assignment
    the router could make stays feasible; fewer slots void the OPT <= ACTUAL guarantee) and
    ceil(window / K) under frozen pricing. freeze=False turns all load accounting off: every slot
    of a worker is priced at the recorded cost. K = 1 gives an undefined PoaHat.
    recompute_last_block (the cluster's): the ttft flavours price a prompt the router sees fully
    cached at the last block the engine recomputes (predicted_ttft_ms). order (R, N), when given,
    is the order of the decisions (each row a permutation of range(N)): windows follow it instead
    of the arrays' order.
    """
    if pricing not in ("slot", "frozen"):
        raise ValueError(f"unknown PoA-hat pricing {pricing!r} (slot or frozen)")
    price = _pricer(cost, block_size, overlap_weight, profile, decode_kv_blocks, recompute_last_block)
    observed = cost in ("observed", "observed_step")
    if observed and ttft_ms is None:
        raise ValueError("cost='observed' needs the observed ttft_ms (R, N)")
    r, n, k = cand_tokens.shape
    if k == 1:
        return PoaHat.undefined(r)
    # every recorded input a price or a realized cost is made of, checked before anything is priced
    ttft_flavour = cost in ("ttft", "observed")
    _require_recorded(
        (
            # finite only: the router's view can read below 0 (the every-path cells record
            # -1,092 tokens on some worker), and pricing clips what it charges at 0
            ("cand_tokens", cand_tokens, False),
            ("cand_blocks", cand_blocks, False),
            ("added_tokens", added_tokens, True),
            ("added_blocks", added_blocks, True),
            ("ttft_ms", ttft_ms if observed else None, False),
            ("isl", isl if ttft_flavour else None, True),
        ),
        window,
        order,
    )
    times = (decided_ms, released_tokens_ms, released_blocks_ms)
    nw = n // window
    slots_n = slots or window
    compiled = pricing == "slot" and freeze and nw and slots_n * k >= window and all(x is not None for x in times)
    step = (
        _step_table(cost, cand_blocks, added_blocks, slots_n, profile, decode_kv_blocks, block_size)
        if compiled
        else None
    )
    if compiled and (cost == "router" or step is not None):
        # the default flavour and the step ones, in compiled code from the recorded arrays (the
        # same numbers)
        rows = np.ascontiguousarray(np.broadcast_to(np.arange(n), (r, n)) if order is None else order, dtype=np.int64)
        seen = np.ascontiguousarray(ttft_ms, dtype=np.float64) if cost == "observed_step" else np.empty((0, 0))
        opt, real = _slot_sums(
            np.asarray(cand_tokens, dtype=np.float64), np.asarray(cand_blocks, dtype=np.float64),
            *(np.ascontiguousarray(x, dtype=np.int64) for x in (chosen, added_tokens, added_blocks)),
            *(np.ascontiguousarray(x, dtype=np.float64) for x in times),
            rows, int(window), int(slots_n), float(overlap_weight), float(block_size),
            np.empty(0) if step is None else step, seen,
        )  # fmt: skip
        if not np.isnan(opt).any():
            return PoaHat(real.sum(axis=1), opt.sum(axis=1), nw)
    if order is not None:  # the generic path takes every array in decision order
        cand_tokens, cand_blocks, chosen, added_tokens, added_blocks, isl, ttft_ms, *times = (
            None if x is None else take_rows(x, order)
            for x in (cand_tokens, cand_blocks, chosen, added_tokens, added_blocks, isl, ttft_ms, *times)
        )
        decided_ms, released_tokens_ms, released_blocks_ms = times

    if observed:
        realized = np.broadcast_to(np.asarray(ttft_ms, dtype=np.float64)[:, :, None], cand_tokens.shape)
    else:
        realized = price(cand_tokens, cand_blocks, isl)

    if pricing == "frozen":
        if freeze:
            f_tok = freeze_load(cand_tokens, chosen, added_tokens, window, decided_ms, released_tokens_ms)
            f_blk = freeze_load(cand_blocks, chosen, added_blocks, window, decided_ms, released_blocks_ms)
        else:
            f_tok, f_blk = cand_tokens, cand_blocks
        return windowed_poa(realized, price(f_tok, f_blk, isl), chosen, window, slots)

    slots = slots or window
    if nw == 0:
        return PoaHat(np.zeros(r), np.zeros(r), 0)
    m = nw * window
    actual = _actual(realized, chosen, window)
    if not freeze:
        recorded = realized if not observed else price(cand_tokens, cand_blocks, isl)
        opt = window_opt(recorded[:, :m].reshape(r * nw, window, k), slots, windows_per_replica=nw)
        return PoaHat(actual, opt.reshape(r, nw).sum(axis=1), nw)

    if (np.asarray(added_tokens)[:, :m] < 0).any() or (np.asarray(added_blocks)[:, :m] < 0).any():
        raise ValueError("slot pricing needs added_tokens and added_blocks >= 0 (load a decision put on a worker)")
    shape = (r * nw, window, k)
    tok = np.asarray(cand_tokens, dtype=np.float64)[:, :m].reshape(shape)
    blk = np.asarray(cand_blocks, dtype=np.float64)[:, :m].reshape(shape)
    f_tok = tok - _load_before(chosen, added_tokens, window, k, decided_ms, released_tokens_ms).reshape(shape)
    f_blk = blk - _load_before(chosen, added_blocks, window, k, decided_ms, released_blocks_ms).reshape(shape)
    a_tok = _min_added(chosen, added_tokens, window, k).reshape(r * nw, k)
    a_blk = _min_added(chosen, added_blocks, window, k).reshape(r * nw, k)
    isl_w = None if isl is None else np.asarray(isl, dtype=np.float64)[:, :m].reshape(r * nw, window)
    opt = slot_priced_opt(
        f_tok,
        f_blk,
        a_tok,
        a_blk,
        price,
        slots,
        isl_w,
        windows_per_replica=nw,
        transient_tok=_transient(chosen, window, k, decided_ms, released_tokens_ms).reshape(r * nw, k),
        transient_blk=_transient(chosen, window, k, decided_ms, released_blocks_ms).reshape(r * nw, k),
        router=(overlap_weight, block_size) if cost == "router" else None,
    )
    return PoaHat(actual, opt.reshape(r, nw).sum(axis=1), nw)
