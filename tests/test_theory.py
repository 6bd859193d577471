"""Closed forms of docs/sources.md ("Closed forms"), checked against their published reference values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from poa_mc.stats import theory


def test_supermarket_d2_lam09() -> None:
    assert theory.supermarket_sojourn(0.9, 2) == pytest.approx(2.614, abs=5e-4)


def test_supermarket_d1_is_mm1() -> None:
    # d = 1 is random routing: independent M/M/1 queues, sojourn 1/(1-lam) service times.
    assert theory.supermarket_sojourn(0.7, 1) == pytest.approx(1 / 0.3)
    assert theory.supermarket_tail(0.7, 1, 3) == pytest.approx(0.7**3)


def test_supermarket_tail_consistent_with_sojourn() -> None:
    # Mean queue length per server is sum_i P(>= i jobs); Little's law gives sojourn = that / lam.
    lam, d = 0.8, 3
    mean_len = sum(theory.supermarket_tail(lam, d, i) for i in range(1, 60))
    assert mean_len / lam == pytest.approx(theory.supermarket_sojourn(lam, d), rel=1e-10)


def test_jsq2_exact_reference() -> None:
    assert theory.jsq2_exact(0.9) == pytest.approx(5.4749, abs=5e-5)


def test_jsq2_between_mm2_and_random() -> None:
    # JSQ is no better than a shared M/M/2 queue and no worse than random routing (M/M/1 per server).
    lam = 0.6
    jsq = theory.jsq2_exact(lam)
    mm2 = theory.mmc_wait(2 * lam, 1.0, 2) + 1.0
    assert mm2 < jsq < 1 / (1 - lam)


def test_mm1_equals_mmc_at_c1() -> None:
    for lam in (0.1, 0.5, 0.9, 0.99):
        assert theory.mmc_wait(lam, 1.0, 1) == pytest.approx(theory.mm1_wait(lam, 1.0), rel=1e-12)
        assert theory.mmc_erlang_c(1, lam) == pytest.approx(lam, rel=1e-12)


def test_erlang_c_matches_textbook_sum() -> None:
    for c, rho in ((2, 0.5), (10, 0.9), (40, 0.7)):
        a = c * rho
        top = a**c / math.factorial(c) / (1 - rho)
        direct = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
        assert theory.mmc_erlang_c(c, rho) == pytest.approx(direct, rel=1e-10)


def test_erlang_c_large_c_is_stable() -> None:
    p = theory.mmc_erlang_c(200, 0.95)
    assert 0 < p < 1 and np.isfinite(p)
    # More servers at the same utilisation pool better: waiting probability falls with c.
    assert theory.mmc_erlang_c(200, 0.95) < theory.mmc_erlang_c(100, 0.95) < theory.mmc_erlang_c(10, 0.95)


def test_mva_single_client() -> None:
    r, x, q = theory.mva_single_queue(1, 3.0, 7.0)
    assert r == pytest.approx(3.0)
    assert x == pytest.approx(1 / 10.0)
    assert q == pytest.approx(0.3)


@pytest.mark.parametrize("clients", [1, 5, 20, 200])
def test_mva_throughput_bounds(clients: int) -> None:
    s, z = 2.0, 10.0
    r, x, q = theory.mva_single_queue(clients, s, z)
    assert x <= min(1 / s, clients / (s + z)) + 1e-12
    assert r >= s and r >= clients * s - z - 1e-9  # asymptotic bound R >= C S - Z
    assert q == pytest.approx(x * r)
    # Little's law over the whole loop: every client is either thinking or at the queue.
    assert x * (r + z) == pytest.approx(clients)


def test_zipf_popularity() -> None:
    q = theory.zipf_popularity(1000, 0.8)
    assert q.sum() == pytest.approx(1.0)
    assert q[0] / q[9] == pytest.approx(10**0.8)


def test_lru_reference_and_che() -> None:
    q = theory.zipf_popularity(1000, 0.8)
    exact = theory.lru_exact_hit_ratio(q, 100)
    assert exact == pytest.approx(0.3778, abs=5e-5)
    assert theory.che_hit_ratio(q, 100) == pytest.approx(exact, abs=1e-3)


def _lru_markov_chain(q: np.ndarray, cap: int) -> float:
    """Brute-force LRU hit ratio: stationary distribution of the chain on ordered full cache contents."""
    states = list(itertools.permutations(range(q.size), cap))
    index = {s: k for k, s in enumerate(states)}
    p = np.zeros((len(states), len(states)))
    for s in states:
        for item, qi in enumerate(q):
            # Move-to-front: the requested item goes first; on a miss the last one falls out.
            rest = [x for x in s if x != item]
            p[index[s], index[tuple([item, *rest][:cap])]] += qi
    w, v = np.linalg.eig(p.T)
    pi = np.real(v[:, np.argmin(np.abs(w - 1))])
    pi /= pi.sum()
    return float(sum(pi[k] * q[list(s)].sum() for k, s in enumerate(states)))


@pytest.mark.parametrize(("n", "cap", "alpha"), [(5, 2, 0.8), (6, 3, 1.2), (4, 1, 0.5)])
def test_lru_exact_matches_markov_chain(n: int, cap: int, alpha: float) -> None:
    q = theory.zipf_popularity(n, alpha)
    assert theory.lru_exact_hit_ratio(q, cap) == pytest.approx(_lru_markov_chain(q, cap), abs=1e-9)


def test_lru_edge_cases() -> None:
    q = theory.zipf_popularity(10, 1.0)
    assert theory.lru_exact_hit_ratio(q, 10) == 1.0
    assert theory.lru_exact_hit_ratio(q, 0) == 0.0
    # Uniform popularity: every item is equally likely cached, hit ratio C/N exactly.
    assert theory.lru_exact_hit_ratio(np.ones(20), 5) == pytest.approx(0.25, abs=1e-9)


def test_poa_forms() -> None:
    assert theory.pigou_poa() == pytest.approx(4 / 3)
    assert theory.poly_poa(1) == pytest.approx(theory.PIGOU_POA)
    # Degree-d PoA grows like d / ln d; the quadratic case is (1 - 2 * 3^(-3/2))^(-1) ~ 1.626.
    assert theory.poly_poa(2) == pytest.approx(1 / (1 - 2 * 3**-1.5))
    assert theory.mm1_links_poa(0.0) == pytest.approx(1.0)
    assert theory.mm1_links_poa(0.75) == pytest.approx(1.5)
    assert theory.ATOMIC_AFFINE_POA == 2.5


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError):
        theory.mm1_wait(1.0, 1.0)
    with pytest.raises(ValueError):
        theory.mmc_wait(2.0, 1.0, 2)
    with pytest.raises(ValueError):
        theory.supermarket_sojourn(1.0, 2)
