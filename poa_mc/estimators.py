"""Price-of-Anarchy estimators and confidence intervals.

Replicas are independent; requests inside one replica are not. Every interval here therefore comes
from the spread *across replicas* (t-interval of per-replica values, delta method for ratios of
sums, percentile bootstrap over replicas for quantiles and for the counterfactual PoA), never from
order statistics inside one correlated stream.

PoA-hat (the paper's estimator), per replica, over windows of `window` consecutive routing
decisions in arrival order (a trailing partial window is dropped):

* realized cost of request r: the router's cost of the worker it chose, as recorded at its
  decision, i.e. including the load that earlier decisions of the same window put there;
* frozen cost of r on worker w: the recorded cost minus the load that the window's earlier
  decisions added to w (their uncached prompt tokens and new blocks), i.e. what r would have cost
  on w had the window started with it. Request-specific terms (r's own prompt, r's prefix overlap
  with w) are kept exactly as recorded; completions during the window are not undone, which makes
  OPT slightly optimistic: PoA-hat stays an upper-bound indicator, as in the paper;
* ACTUAL = sum of realized costs; OPT = min-cost assignment of the window's requests to workers on
  the frozen costs, each worker's column repeated `slots` times (default ceil(window / K));
* PoA-hat of a replica = sum ACTUAL / sum OPT over its windows; the cell's estimate is the ratio of
  sums over all replicas with a delta-method interval.

Cost units: `router` = Dynamo's cost  omega * tokens / block_size + blocks  (dimensionless);
`ttft` = predicted TTFT in ms: the prefill of the tokens ahead of and including the request, from the
profile (polynomial: p2 T^2 + p1 T + p0, nothing for T = 0; theory profiles: prefill_ms * T / isl),
plus the first decode step (d0, or decode_ms), so a fully cached request still costs a step;
`observed` = the paper's flavour: ACTUAL is each request's observed TTFT (ms, queueing, transfer
and decode admission included) and OPT uses the frozen `ttft` predictions, so the ratio also
grows with everything the router's cost model does not see (it explodes past saturation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
from scipy import stats

from poa_mc.spec import ProfileSpec

# ---------------------------------------------------------------------------------------------
# intervals


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float
    hi: float


def _t_quantile(n: int, level: float) -> float:
    return float(stats.t.ppf(0.5 + level / 2, n - 1))


def _too_few(x: np.ndarray) -> Estimate | None:
    """The estimate of a mean when there are too few replicas for an interval, else None."""
    if x.size == 0:
        return Estimate(math.nan, math.nan, math.nan)
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


def ratio_interval(num: np.ndarray, den: np.ndarray, level: float = 0.95) -> Estimate:
    """Ratio of sums  sum(num) / sum(den)  over replicas, with a delta-method t-interval.

    Linearisation: R = mean(num) / mean(den); Var(R) ~ Var(num - R den) / (n mean(den)^2).
    A zero denominator gives 1 when the numerator is zero too (nothing to improve) and +inf
    otherwise.
    """
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    n = num.size
    sn, sd = float(num.sum()), float(den.sum())
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan)
    if sd == 0.0:
        r = 1.0 if sn == 0.0 else math.inf
        return Estimate(r, r, r)
    r = sn / sd
    if n < 2:
        return Estimate(r, math.nan, math.nan)
    resid = num - r * den
    se = float(resid.std(ddof=1)) / math.sqrt(n) / (sd / n)
    half = _t_quantile(n, level) * se
    return Estimate(r, r - half, r + half)


def bootstrap_mean_interval(
    x: np.ndarray, rng: np.random.Generator, n_boot: int = 1000, level: float = 0.95
) -> Estimate:
    """Mean of per-replica values (e.g. per-replica P99s) with a percentile bootstrap over replicas."""
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


def counterfactual_poa(
    costs: dict[str, np.ndarray], selfish: str, rng: np.random.Generator, n_boot: int = 1000, level: float = 0.95
) -> Counterfactual:
    """Selfish policy's mean social cost over the best policy's, all on the same streams.

    `costs[policy]` holds one social cost per replica; replica i of every policy saw the same
    requests (common random numbers), so the bootstrap resamples the *same* replica indices for all
    policies (a paired interval) and re-picks the best policy inside every resample, which keeps
    the interval honest about the selection of the minimum.
    """
    names = list(costs)
    mat = np.stack([np.asarray(costs[p], dtype=np.float64) for p in names])  # (P, R)
    if mat.shape[1] == 0:
        return Counterfactual(math.nan, math.nan, math.nan, "", math.nan, math.nan)
    s = names.index(selfish)
    means = mat.mean(axis=1)
    b = int(np.argmin(means))
    poa = _safe_ratio(means[s], means[b])
    lo = hi = math.nan
    n = mat.shape[1]
    if n >= 2:
        idx = rng.integers(0, n, size=(n_boot, n))
        bm = mat[:, idx].mean(axis=2)  # (P, B)
        best = bm.min(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(best > 0, bm[s] / np.where(best > 0, best, 1.0), np.where(bm[s] > 0, np.inf, 1.0))
        lo, hi = (float(v) for v in np.quantile(ratios, [0.5 - level / 2, 0.5 + level / 2]))
    return Counterfactual(poa, lo, hi, names[b], float(means[s]), float(means[b]))


def _safe_ratio(a: float, b: float) -> float:
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return float(a / b)


def social_cost_per_replica(kind: str, ttft_ms: np.ndarray, e2e_ms: np.ndarray) -> np.ndarray:
    """One social cost per replica from (replicas, requests) latency arrays."""
    if kind == "mean_ttft":
        return ttft_ms.mean(axis=1)
    if kind == "mean_e2e":
        return e2e_ms.mean(axis=1)
    if kind == "p99_ttft":
        return per_replica_quantile(ttft_ms, 0.99)
    raise ValueError(f"unknown social cost {kind!r}")


# ---------------------------------------------------------------------------------------------
# PoA-hat


def freeze_load(values: np.ndarray, chosen: np.ndarray, added: np.ndarray, window: int) -> np.ndarray:
    """Undo, inside each window, the load that the window's earlier decisions added.

    values (R, N, K): a load-bearing quantity recorded at each decision (tokens or blocks);
    chosen (R, N): worker index chosen; added (R, N): what each decision added to its worker.
    Returns values minus, for each decision, the sum of `added` over the earlier decisions of its
    window that went to the same worker (clipped at 0). Trailing partial windows are left as they
    are (they are not used).
    """
    r, n, k = values.shape
    nw = n // window
    out = np.array(values, dtype=np.float64, copy=True)
    if nw == 0:
        return out
    m = nw * window
    onehot = np.zeros((r, m, k))
    np.put_along_axis(onehot, chosen[:, :m, None].astype(np.int64), added[:, :m, None].astype(np.float64), axis=2)
    onehot = onehot.reshape(r, nw, window, k)
    before = np.cumsum(onehot, axis=2) - onehot  # exclusive prefix sum within the window
    out[:, :m] = np.maximum(out[:, :m] - before.reshape(r, m, k), 0.0)
    return out


def router_cost(tokens: np.ndarray, blocks: np.ndarray, block_size: int, overlap_weight: float) -> np.ndarray:
    """Dynamo's KV-router cost: omega * tokens / block_size + blocks."""
    return overlap_weight * tokens / block_size + blocks


def prefill_ms_cost(tokens: np.ndarray, profile: ProfileSpec, isl: np.ndarray | None = None) -> np.ndarray:
    """Predicted prefill time (ms) of `tokens` uncached tokens (no time for zero tokens)."""
    t = np.asarray(tokens, dtype=np.float64)
    if profile.kind == "polynomial":
        ms = profile.p2 * t * t + profile.p1 * t + profile.p0
    else:
        if isl is None:
            raise ValueError("theory profiles need the request's isl to count requests ahead")
        ms = profile.prefill_ms * t / np.maximum(np.asarray(isl, dtype=np.float64)[..., None], 1.0)
    return np.where(t > 0, ms, 0.0)


def predicted_ttft_ms(tokens: np.ndarray, profile: ProfileSpec, isl: np.ndarray | None = None) -> np.ndarray:
    """Predicted TTFT (ms) on a worker: the prefill of `tokens` uncached tokens plus the first decode
    step (the profile's step time at an empty cache, a lower bound). The decode step keeps a fully
    cached request's cost above zero, as its observed TTFT always is, so OPT never collapses to 0."""
    first_step = profile.d0 if profile.kind == "polynomial" else profile.decode_ms
    return prefill_ms_cost(tokens, profile, isl) + first_step


@numba.njit(cache=True)
def _assign_min(a: np.ndarray) -> float:
    """Minimum total cost of assigning every row of a (n x m, n <= m) to a distinct column.

    Shortest augmenting paths with row/column potentials (the O(n^2 m) Hungarian method): rows are
    added one at a time; each addition grows a Dijkstra-like tree over reduced costs until it
    reaches a free column, then flips the path.
    """
    n, m = a.shape
    inf = np.inf
    u = np.zeros(n + 1)
    v = np.zeros(m + 1)
    owner = np.zeros(m + 1, np.int64)  # owner[j] = row (1-based) assigned to column j, 0 = free
    prev = np.zeros(m + 1, np.int64)
    for i in range(1, n + 1):
        owner[0] = i
        j0 = 0
        minv = np.full(m + 1, inf)
        used = np.zeros(m + 1, np.bool_)
        while True:
            used[j0] = True
            i0 = owner[j0]
            delta = inf
            j1 = 0
            for j in range(1, m + 1):
                if not used[j]:
                    cur = a[i0 - 1, j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j] = cur
                        prev[j] = j0
                    if minv[j] < delta:
                        delta = minv[j]
                        j1 = j
            for j in range(m + 1):
                if used[j]:
                    u[owner[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0 != 0:
            j1 = prev[j0]
            owner[j0] = owner[j1]
            j0 = j1
    total = 0.0
    for j in range(1, m + 1):
        if owner[j] != 0:
            total += a[owner[j] - 1, j - 1]
    return total


@numba.njit(cache=True)
def _batch_assign(costs: np.ndarray, slots: int) -> np.ndarray:
    """OPT of each window: costs (W, n, K) -> (W,), every worker offered `slots` times."""
    nwin, n, k = costs.shape
    out = np.empty(nwin)
    a = np.empty((n, k * slots))
    for w in range(nwin):
        for i in range(n):
            for j in range(k):
                c = costs[w, i, j]
                for s in range(slots):
                    a[i, j * slots + s] = c
        out[w] = _assign_min(a)
    return out


def window_opt(costs: np.ndarray, slots: int) -> np.ndarray:
    """Min-cost assignment value of each window. costs (W, n, K); needs slots * K >= n."""
    costs = np.ascontiguousarray(costs, dtype=np.float64)
    _, n, k = costs.shape
    if slots * k < n:
        raise ValueError(f"{slots} slots x {k} workers cannot take {n} requests")
    return _batch_assign(costs, int(slots))


@dataclass(frozen=True)
class PoaHat:
    actual: np.ndarray  # (R,) sum of realized costs over the replica's windows
    opt: np.ndarray  # (R,) sum of OPT over the replica's windows
    windows: int  # windows per replica

    def estimate(self, level: float = 0.95) -> Estimate:
        return ratio_interval(self.actual, self.opt, level)

    def per_replica(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(
                self.opt > 0, self.actual / np.where(self.opt > 0, self.opt, 1), np.where(self.actual > 0, np.inf, 1.0)
            )


def windowed_poa(realized: np.ndarray, frozen: np.ndarray, chosen: np.ndarray, window: int, slots: int = 0) -> PoaHat:
    """PoA-hat sums from cost matrices.

    realized, frozen: (R, N, K) costs of each decision on each candidate worker; chosen: (R, N).
    ACTUAL of a window = sum of realized[r, n, chosen]; OPT = min-cost assignment on `frozen`.
    slots = 0 means ceil(window / K).
    """
    r, n, k = frozen.shape
    nw = n // window
    slots = slots or -(-window // k)
    if nw == 0:
        return PoaHat(np.zeros(r), np.zeros(r), 0)
    m = nw * window
    ch = chosen[:, :m].astype(np.int64)
    act = np.take_along_axis(realized[:, :m], ch[:, :, None], axis=2)[:, :, 0]
    actual = act.reshape(r, nw, window).sum(axis=2).sum(axis=1)
    opt = window_opt(frozen[:, :m].reshape(r * nw, window, k), slots).reshape(r, nw).sum(axis=1)
    return PoaHat(actual, opt, nw)


def poa_hat_from_candidates(
    cand_tokens: np.ndarray,
    cand_blocks: np.ndarray,
    chosen: np.ndarray,
    *,
    added_tokens: np.ndarray,
    added_blocks: np.ndarray,
    window: int,
    slots: int = 0,
    cost: str = "router",  # router | ttft | observed
    block_size: int = 64,
    overlap_weight: float = 1.0,
    profile: ProfileSpec | None = None,
    isl: np.ndarray | None = None,
    freeze: bool = True,
    ttft_ms: np.ndarray | None = None,
) -> PoaHat:
    """PoA-hat of one cell from the router's recorded view (see the module docstring).

    cand_tokens, cand_blocks: (R, N, K) as the engine records them; chosen: (R, N);
    added_tokens, added_blocks: (R, N) load each decision put on its worker (its uncached prompt
    tokens and new blocks). With freeze=False the frozen matrix is the recorded one.
    """
    if freeze:
        f_tok = freeze_load(cand_tokens, chosen, added_tokens, window)
        f_blk = freeze_load(cand_blocks, chosen, added_blocks, window)
    else:
        f_tok, f_blk = cand_tokens, cand_blocks
    if cost == "router":
        realized = router_cost(cand_tokens, cand_blocks, block_size, overlap_weight)
        frozen = router_cost(f_tok, f_blk, block_size, overlap_weight)
    elif cost == "ttft":
        profile = profile or ProfileSpec()
        realized = predicted_ttft_ms(cand_tokens, profile, isl)
        frozen = predicted_ttft_ms(f_tok, profile, isl)
    elif cost == "observed":
        if ttft_ms is None:
            raise ValueError("cost='observed' needs the observed ttft_ms (R, N)")
        profile = profile or ProfileSpec()
        realized = np.broadcast_to(np.asarray(ttft_ms, dtype=np.float64)[:, :, None], cand_tokens.shape)
        frozen = predicted_ttft_ms(f_tok, profile, isl)
    else:
        raise ValueError(f"unknown PoA-hat cost {cost!r}")
    return windowed_poa(realized, frozen, chosen, window, slots)
