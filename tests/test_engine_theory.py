"""The engine against queueing theory in limiting configurations.

Every check compares a Monte Carlo mean with a closed form at 4 standard errors, the standard
error taken across independent replicas (requests inside one replica are correlated). With
exponential prefill (`kind = "exponential"`), osl = 1 and decode_ms = 0, a prefill pool is a
textbook queue: prefill_wait is the queueing delay and TTFT the sojourn time.
"""

from math import factorial

import numpy as np
import pytest

from poa_mc.engine.engine import simulate
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.model.spec_workload import Dist, WorkloadSpec

Z = 4.0


def queue_cell(
    n_prefill: int,
    *,
    policy: str = "kv",
    rate_rps: float = 0.0,
    clients: int = 1,
    think_ms: float = 0.0,
    d: int = 2,
    service_ms: float = 1.0,
) -> CellSpec:
    workload = WorkloadSpec(
        isl=Dist("fixed", 64),
        osl=Dist("fixed", 1),
        prefix_groups=1,
        prefix_ratio=0.0,
        arrival="poisson" if rate_rps else "closed",
        rate_rps=rate_rps,
        concurrency=clients,
        think_ms=think_ms,
    )
    return CellSpec(
        cluster=ClusterSpec(n_prefill=n_prefill, n_decode=1),
        workload=workload,
        profile=ProfileSpec(name="exp", kind="exponential", prefill_ms=service_ms, decode_ms=0.0),
        policy=PolicySpec(kind=policy, d=d),
    )


def erlang_c_wait(c: int, lam: float, mu: float) -> float:
    a = lam / mu
    rho = a / c
    top = a**c / factorial(c) / (1 - rho)
    p_wait = top / (sum(a**k / factorial(k) for k in range(c)) + top)
    return p_wait / (c * mu - lam)


def per_replica_mean(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=1)


def test_mm1_mean_wait(se_check):
    lam, mu = 0.6, 1.0  # per ms
    res = simulate(queue_cell(1, rate_rps=lam * 1000), replicas=48, requests=4000, warmup=400, seed=11, stream=0)
    se_check(per_replica_mean(res.samples["prefill_wait_ms"]), (lam / mu) / (mu - lam), Z)


def test_mmc_erlang_c_with_pull(se_check):
    c, lam = 3, 2.4
    res = simulate(
        queue_cell(c, policy="pull", rate_rps=lam * 1000), replicas=48, requests=4000, warmup=400, seed=12, stream=0
    )
    se_check(per_replica_mean(res.samples["prefill_wait_ms"]), erlang_c_wait(c, lam, 1.0), Z)


def test_mmc_pull_matches_mm1_when_c_is_one(se_check):
    res = simulate(
        queue_cell(1, policy="pull", rate_rps=500.0), replicas=32, requests=3000, warmup=300, seed=13, stream=0
    )
    se_check(per_replica_mean(res.samples["prefill_wait_ms"]), erlang_c_wait(1, 0.5, 1.0), Z)


def mva_response(clients: int, service: float, think: float) -> float:
    q = 0.0
    r = service
    for n in range(1, clients + 1):
        r = service * (1 + q)
        x = n / (r + think)
        q = x * r
    return r


@pytest.mark.parametrize("clients,think", [(1, 0.0), (4, 2.0), (8, 5.0)])
def test_closed_loop_mean_value_analysis(se_check, clients, think):
    res = simulate(
        queue_cell(1, clients=clients, think_ms=think), replicas=48, requests=2000, warmup=200, seed=14, stream=clients
    )
    se_check(per_replica_mean(res.samples["ttft_ms"]), mva_response(clients, 1.0, think), Z)


def supermarket_sojourn(lam: float, d: int) -> float:
    return sum(lam ** ((d**i - d) / (d - 1)) for i in range(1, 60))


def test_power_of_two_choices_supermarket_limit(se_check):
    # docs/sources.md, "Closed forms": 2.614 service times as n -> infinity, about 3.6/n higher at finite n
    n, lam = 100, 0.9
    expected = supermarket_sojourn(lam, 2) + 3.6 / n
    res = simulate(
        queue_cell(n, policy="power_of_d", rate_rps=lam * n * 1000),
        replicas=16,
        requests=12000,
        warmup=3000,
        seed=15,
        stream=0,
    )
    se_check(per_replica_mean(res.samples["ttft_ms"]), expected, Z)


def test_supermarket_formula_matches_reference_value():
    assert abs(supermarket_sojourn(0.9, 2) - 2.614) < 5e-4


def che_hit_ratio(q: np.ndarray, size: int) -> float:
    from scipy.optimize import brentq

    t = brentq(lambda x: np.sum(1 - np.exp(-q * x)) - size, 1e-9, 1e12)
    return float(np.sum(q * (1 - np.exp(-q * t))))


def test_lru_prefix_cache_hit_ratio_against_che(se_check):
    # one prompt = one shared block; N groups with Zipf popularity; a prefill cache of `size` blocks.
    # One client, so requests reach the cache one at a time: the independent reference model. The
    # cache's own hit ratio is measured, so the whole prompt may hit (vLLM's recompute of the last
    # block, the default, would make a one-block prompt always miss).
    groups, alpha, size = 1000, 0.8, 100
    workload = WorkloadSpec(
        isl=Dist("fixed", 64),
        osl=Dist("fixed", 1),
        prefix_groups=groups,
        prefix_ratio=1.0,
        popularity="zipf",
        zipf_alpha=alpha,
        arrival="closed",
        concurrency=1,
    )
    spec = CellSpec(
        cluster=ClusterSpec(n_prefill=1, n_decode=1, prefill_kv_blocks=size, recompute_last_block=False),
        workload=workload,
        profile=ProfileSpec(name="exp", kind="exponential", prefill_ms=1.0, decode_ms=0.0),
    )
    res = simulate(spec, replicas=32, requests=6000, warmup=3000, seed=16, stream=0)
    q = np.arange(1, groups + 1, dtype=float) ** -alpha
    q /= q.sum()
    che = che_hit_ratio(q, size)
    assert abs(che - 0.3778) < 0.001  # docs/sources.md: exact LRU 0.3778, Che within 0.001 at this size
    hits = res.samples["cached_blocks"].mean(axis=1)
    m, se = se_check(hits, 0.3778, Z)
    assert se < 0.004  # the check has teeth
