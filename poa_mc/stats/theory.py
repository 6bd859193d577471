"""Closed forms and exact small-case results the engine must reproduce in limiting configurations.

See docs/sources.md, "Closed forms". Everything here is host-side (Python, numpy, scipy) and deterministic: these are
the yardsticks engine tests compare simulated estimates against. Times are in the units of the inputs
(rates in 1/time, so mean waits come out in time); the power-of-d and JSQ results are in mean
service times (unit service rate).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from scipy.optimize import brentq
from scipy.sparse.linalg import spsolve

PIGOU_POA = 4.0 / 3.0  # nonatomic routing, affine latencies (Roughgarden-Tardos)
ATOMIC_AFFINE_POA = 5.0 / 2.0  # atomic congestion games, affine latencies (Christodoulou-Koutsoupias)


# --- M/M/1, M/M/c --------------------------------------------------------------------------------------------------
def mm1_wait(lam: float, mu: float) -> float:
    """Mean waiting time in queue (excluding service) of M/M/1: rho / (mu - lam)."""
    if not 0 <= lam < mu:
        raise ValueError(f"M/M/1 needs 0 <= lam < mu, got lam={lam}, mu={mu}")
    return (lam / mu) / (mu - lam)


def mmc_erlang_c(c: int, rho: float) -> float:
    """Erlang C: probability an arrival waits in M/M/c at per-server utilisation rho.

    Computed from the Erlang B recursion B(k) = a B(k-1) / (k + a B(k-1)), a = c rho, and
    C = B / (1 - rho (1 - B)): no factorials or powers, so it stays exact-to-rounding for c in the
    hundreds where the textbook sum overflows.
    """
    if c < 1:
        raise ValueError(f"need c >= 1 servers, got {c}")
    if not 0 <= rho < 1:
        raise ValueError(f"M/M/c needs 0 <= rho < 1, got {rho}")
    a = c * rho
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return b / (1.0 - rho * (1.0 - b))


def mmc_wait(lam: float, mu: float, c: int) -> float:
    """Mean waiting time in queue of M/M/c: ErlangC(c, lam/(c mu)) / (c mu - lam)."""
    if not 0 <= lam < c * mu:
        raise ValueError(f"M/M/c needs 0 <= lam < c*mu, got lam={lam}, mu={mu}, c={c}")
    return mmc_erlang_c(c, lam / (c * mu)) / (c * mu - lam)


# --- Closed network: Mean Value Analysis ---------------------------------------------------------------------------
def mva_single_queue(C: int, S: float, Z: float) -> tuple[float, float, float]:
    """Exact MVA for C clients cycling through think time Z and one exponential FCFS queue of mean service S.

    Returns (R, X, Q) at population C: response time at the queue (wait + service), throughput, mean
    number at the queue. Recursion R(n) = S (1 + Q(n-1)), X(n) = n / (R(n) + Z), Q(n) = X(n) R(n).
    """
    if C < 1:
        raise ValueError(f"need C >= 1 clients, got {C}")
    if not S > 0 or not Z >= 0:
        raise ValueError(f"need S > 0 and Z >= 0, got S={S}, Z={Z}")
    q = 0.0
    r = x = 0.0
    for n in range(1, C + 1):
        r = S * (1.0 + q)
        x = n / (r + Z)
        q = x * r
    return r, x, q


# --- Power-of-d (supermarket model), n -> infinity -------------------------------------------------------------------
def supermarket_tail(lam: float, d: int, i: int) -> float:
    """Fraction of servers with at least i jobs under power-of-d routing: lam^((d^i - 1)/(d - 1))."""
    if i <= 0:
        return 1.0
    if d == 1:  # the d -> 1 limit of the exponent is i: independent M/M/1 queues
        return lam**i
    return lam ** ((d**i - 1) / (d - 1))


def supermarket_sojourn(lam: float, d: int, tol: float = 1e-12) -> float:
    """Mean sojourn (in service times) under power-of-d routing, n -> infinity: sum_{i>=1} lam^((d^i - d)/(d - 1))."""
    if not 0 <= lam < 1:
        raise ValueError(f"need 0 <= lam < 1, got {lam}")
    if d < 1:
        raise ValueError(f"need d >= 1, got {d}")
    if d == 1:
        return 1.0 / (1.0 - lam)
    total, i = 0.0, 1
    while True:
        # Exponent grows like d^i, so the series converges doubly exponentially; the guard only
        # stops the exponent itself from overflowing for lam close to 1.
        term = lam ** ((d**i - d) / (d - 1))
        total += term
        if term < tol or i > 200:
            return total
        i += 1


# --- Join-shortest-queue over 2 servers, exact -----------------------------------------------------------------------
def jsq2_exact(lam: float, cap: int | None = None) -> float:
    """Mean sojourn (in service times) of JSQ over 2 exponential unit-rate servers, arrival rate lam per server.

    Solves the CTMC on (q1, q2) (jobs at each server, in service included) numerically; ties go to
    either server with probability 1/2. The state space is truncated at `cap` jobs per queue (arrivals
    that would exceed it are dropped); the default makes the dropped mass negligible (about lam^(2 cap),
    below 1e-13) because JSQ keeps the queues balanced and the total decays like lam^n. Little's law on
    the accepted rate.
    """
    if not 0 < lam < 1:
        raise ValueError(f"need 0 < lam < 1, got {lam}")
    if cap is None:
        cap = math.ceil(-15.0 / math.log(lam)) + 20
    n = cap + 1
    idx = np.arange(n * n).reshape(n, n)
    rows, cols, vals = [], [], []

    def add(src: np.ndarray, dst: np.ndarray, rate: np.ndarray | float) -> None:
        rate = np.broadcast_to(np.asarray(rate, dtype=np.float64), src.shape)
        rows.append(src.ravel())
        cols.append(dst.ravel())
        vals.append(rate.ravel())

    q1, q2 = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    a = 2.0 * lam
    # Arrivals: to the shorter queue, split evenly on ties, blocked at the truncation cap.
    to1 = np.where(q1 < q2, a, np.where(q1 == q2, a / 2, 0.0)) * (q1 < cap)
    to2 = np.where(q2 < q1, a, np.where(q1 == q2, a / 2, 0.0)) * (q2 < cap)
    m = to1 > 0
    add(idx[m], idx[np.minimum(q1 + 1, cap), q2][m], to1[m])
    m = to2 > 0
    add(idx[m], idx[q1, np.minimum(q2 + 1, cap)][m], to2[m])
    m = q1 > 0
    add(idx[m], idx[np.maximum(q1 - 1, 0), q2][m], 1.0)
    m = q2 > 0
    add(idx[m], idx[q1, np.maximum(q2 - 1, 0)][m], 1.0)
    r, c, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    size = n * n
    out_rate = np.bincount(r, weights=v, minlength=size)
    Q = sp.csr_matrix((v, (r, c)), shape=(size, size)) - sp.diags(out_rate)
    # pi Q = 0 with sum(pi) = 1: replace one balance equation by the normalisation.
    A = Q.T.tolil()
    A[0, :] = np.ones(size)
    rhs = np.zeros(size)
    rhs[0] = 1.0
    pi = spsolve(A.tocsr(), rhs)
    pi = np.maximum(pi, 0.0)
    pi /= pi.sum()
    mean_jobs = float(pi @ (q1 + q2).ravel())
    accepted = float(pi @ (to1 + to2).ravel())
    return mean_jobs / accepted


# --- LRU under the independent reference model -----------------------------------------------------------------------
def zipf_popularity(n: int, alpha: float) -> np.ndarray:
    """Normalised Zipf popularities q_k proportional to k^-alpha, k = 1..n (most popular first)."""
    if n < 1:
        raise ValueError(f"need n >= 1, got {n}")
    q = np.arange(1, n + 1, dtype=np.float64) ** (-float(alpha))
    return q / q.sum()


def _as_popularity(popularities: np.ndarray) -> np.ndarray:
    q = np.asarray(popularities, dtype=np.float64)
    if q.ndim != 1 or q.size == 0 or np.any(q < 0) or not q.sum() > 0:
        raise ValueError("popularities must be a non-empty 1-d array of non-negative weights")
    return q / q.sum()


def che_characteristic_time(popularities: np.ndarray, cache_size: float) -> float:
    """Che's characteristic time t_C solving sum_k (1 - exp(-q_k t)) = cache_size (requests as time unit)."""
    q = _as_popularity(popularities)
    n_pos = int(np.count_nonzero(q))
    if not 0 < cache_size < n_pos:
        raise ValueError(f"cache_size must lie in (0, {n_pos}) items, got {cache_size}")

    def f(t: float) -> float:
        return float(-np.expm1(-q * t).sum()) - cache_size

    hi = 1.0 / q.max()
    while f(hi) < 0:
        hi *= 2.0
    return brentq(f, 0.0, hi, xtol=1e-14 * hi, rtol=1e-15, maxiter=500)


def che_hit_ratio(popularities: np.ndarray, cache_size: float) -> float:
    """Che's approximation of the LRU hit ratio: sum_k q_k (1 - exp(-q_k t_C))."""
    q = _as_popularity(popularities)
    if cache_size >= np.count_nonzero(q):
        return 1.0
    if cache_size <= 0:
        return 0.0
    t = che_characteristic_time(q, cache_size)
    return float((q * -np.expm1(-q * t)).sum())


def _poisson_binomial_below(p: np.ndarray, cap: int) -> float:
    """P(sum of independent Bernoulli(p_j) < cap), by the truncated convolution (positive terms only)."""
    dist = np.zeros(cap)
    dist[0] = 1.0
    for pj in p:
        nxt = dist * (1.0 - pj)
        nxt[1:] += dist[:-1] * pj
        dist = nxt
    return float(dist.sum())


def lru_exact_hit_ratio(popularities: np.ndarray, cache_size: int, *, nodes: int = 12, ratio: float = 1.2) -> float:
    """Exact LRU hit ratio under the independent reference model (Flajolet-Gardy-Thimonier integral).

    Embed the i.i.d. request sequence in independent Poisson processes of rates q_k (LRU depends only
    on request order, so this is exact). A request for item i hits iff fewer than `cache_size` distinct
    other items were requested since i's previous request; that gap is Exp(q_i), and the number of
    distinct others requested within time t is Poisson-binomial with p_j = 1 - exp(-q_j t). So

        hit = sum_i q_i * integral_0^inf q_i e^(-q_i t) P(N_{-i}(t) < cache_size) dt.

    P(N_{-i} < C) comes from prefix and suffix Poisson-binomial distributions truncated at C (all
    additions of positive terms: no cancellation). The integral is composite Gauss-Legendre on
    geometrically growing segments of t, which resolves both the popular items' short gaps and the
    characteristic time; `nodes` per segment and the segment `ratio` control accuracy (the defaults
    give about 1e-10). Cost O(N * C * segments * nodes): under a second for N = 1000, C = 100.
    """
    q = _as_popularity(popularities)
    q = q[q > 0]
    n, cap = q.size, int(cache_size)
    if cap >= n:
        return 1.0
    if cap <= 0:
        return 0.0
    # Integration range: F_i(t) = P(N_{-i}(t) < C) decreases in t and is largest for the item with the
    # largest q (removing it leaves the stochastically smallest count), so extending t until that
    # worst case is below 1e-30 bounds the neglected tail of every item's integral.
    others = np.delete(q, np.argmax(q))
    t_hi = che_characteristic_time(q, cap)
    while _poisson_binomial_below(-np.expm1(-others * t_hi), cap) > 1e-30:
        t_hi *= 1.5
    t_lo = 1e-3 / q.max()
    edges = np.concatenate(([0.0], t_lo * ratio ** np.arange(math.ceil(math.log(t_hi / t_lo, ratio)) + 1)))
    x, w = np.polynomial.legendre.leggauss(nodes)
    a, b = edges[:-1, None], edges[1:, None]
    t = ((b - a) / 2 * x + (b + a) / 2).ravel()
    wt = ((b - a) / 2 * w).ravel()
    hit = 0.0
    # Process quadrature points in chunks to bound the (n+1, chunk, C) suffix table.
    for s in range(0, t.size, 64):
        tt, ww = t[s : s + 64], wt[s : s + 64]
        pj = -np.expm1(-np.outer(q, tt))  # (n, m): item j requested at least once within t
        m = tt.size
        suffix_cdf = np.empty((n + 1, m, cap))
        dist = np.zeros((m, cap))
        dist[:, 0] = 1.0
        suffix_cdf[n] = np.cumsum(dist, axis=1)
        for j in range(n - 1, -1, -1):
            pjj = pj[j][:, None]
            nxt = dist * (1 - pjj)
            nxt[:, 1:] += dist[:, :-1] * pjj
            dist = nxt
            suffix_cdf[j] = np.cumsum(dist, axis=1)
        prefix = np.zeros((m, cap))
        prefix[:, 0] = 1.0
        for i in range(n):
            # P(N_{-i} <= C-1) = sum_k P(prefix = k) P(suffix <= C-1-k)
            f_i = (prefix * suffix_cdf[i + 1][:, ::-1]).sum(axis=1)
            hit += q[i] * float((ww * q[i] * np.exp(-q[i] * tt) * f_i).sum())
            pii = pj[i][:, None]
            nxt = prefix * (1 - pii)
            nxt[:, 1:] += prefix[:, :-1] * pii
            prefix = nxt
    # The tail beyond t_hi carries less than 1e-30 of any item's mass: nothing to add.
    return hit


# --- Nonatomic routing Price of Anarchy -------------------------------------------------------------------------------
def pigou_poa() -> float:
    """PoA of nonatomic selfish routing with affine latencies: 4/3."""
    return PIGOU_POA


def poly_poa(d: float) -> float:
    """PoA of nonatomic routing with polynomial latencies of degree d: (1 - d (d+1)^(-(d+1)/d))^(-1)."""
    if not d > 0:
        raise ValueError(f"need degree d > 0, got {d}")
    return 1.0 / (1.0 - d * (d + 1.0) ** (-(d + 1.0) / d))


def mm1_links_poa(beta: float) -> float:
    """PoA of nonatomic routing over parallel M/M/1 links at maximum utilisation beta: (1 + 1/sqrt(1-beta))/2."""
    if not 0 <= beta < 1:
        raise ValueError(f"need 0 <= beta < 1, got {beta}")
    return (1.0 + 1.0 / math.sqrt(1.0 - beta)) / 2.0
