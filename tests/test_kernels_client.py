"""poa_mc/kernels/client.py: the load generator's connection pool and overhead, on hand-worked timelines.

One prefill worker serving one request per pass in exactly 10 ms (the deterministic profile), a
decode step of 0 ms and one output token: a request's server time is its wait for the prefill
worker plus 10 ms, and the cluster completes one request every 10 ms."""

from __future__ import annotations

import numpy as np
import pytest

from poa_mc.engine.engine import simulate
from poa_mc.model.config import loads_grid
from poa_mc.model.sections import ConfigError
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.model.spec_workload import ClientSpec, Dist, WorkloadSpec


def _cell(client: ClientSpec | None, concurrency: int = 4, **wl) -> CellSpec:
    return CellSpec(
        cluster=ClusterSpec(n_prefill=1, n_decode=1, flow="prefill_first"),
        workload=WorkloadSpec(
            **{
                "isl": Dist("fixed", 64),
                "osl": Dist("fixed", 1),
                "concurrency": concurrency,
                "prefix_ratio": 0.0,
                "client": client,
                **wl,
            }
        ),  # fmt: skip
        profile=ProfileSpec(kind="deterministic", prefill_ms=10.0, decode_ms=0.0),
        policy=PolicySpec(kind="kv"),
    )


def _run(spec: CellSpec, **kw):
    return simulate(spec, replicas=2, requests=20, warmup=10, seed=1, stream=0, **kw).samples


def test_a_pool_of_two_with_four_clients_counts_the_fifo_wait_in_client_ttft():
    """4 clients, 2 connections: 2 requests on the server (10 and 20 ms there), 2 waiting for a
    connection. Each waits 20 ms for one (two completions, 10 ms apart) then 20 ms on the server:
    the client sees 40 ms (Little: 4 clients / 100 req/s), the server 20, its prefill queue 10."""
    s = _run(_cell(ClientSpec(max_connections=2)))
    np.testing.assert_array_equal(s["ttft_ms"], 40.0)
    np.testing.assert_array_equal(s["client_wait_ms"], 20.0)
    np.testing.assert_array_equal(s["prefill_wait_ms"], 10.0)  # from the arrival at the frontend
    # requests reach the server in the order they were created: one every 10 ms
    np.testing.assert_array_equal(np.diff(s["arrival_ms"], axis=1), 10.0)


def test_without_a_pool_the_server_queues_what_the_pool_held():
    """No client, or an unlimited pool with no overhead: the same requests, all their wait on the
    server (prefill queue 30 ms), bit for bit."""
    none = _run(_cell(None))
    unlimited = _run(_cell(ClientSpec()))
    np.testing.assert_array_equal(none["ttft_ms"], 40.0)
    np.testing.assert_array_equal(none["prefill_wait_ms"], 30.0)
    for k in ("ttft_ms", "e2e_ms", "arrival_ms", "prefill_wait_ms", "isl", "seq"):
        np.testing.assert_array_equal(none[k], unlimited[k])
    np.testing.assert_array_equal(unlimited["client_wait_ms"], 0.0)


def test_the_overhead_delays_the_arrival_at_the_frontend():
    """5 ms from the connection to the frontend: the server is now idle 5 ms out of every 10 ms
    cycle with one connection (C = 1: 15 ms a request, all of it the client's TTFT), and with a
    pool of 2 of 4 the prefill worker stays the bottleneck: client TTFT 40, of which 25 before the
    frontend (20 pool, 5 overhead)."""
    one = _run(_cell(ClientSpec(max_connections=1, overhead_ms=5.0), concurrency=1))
    np.testing.assert_array_equal(one["ttft_ms"], 15.0)
    np.testing.assert_array_equal(one["client_wait_ms"], 5.0)
    two = _run(_cell(ClientSpec(max_connections=2, overhead_ms=5.0)))
    np.testing.assert_array_equal(two["ttft_ms"], 40.0)
    np.testing.assert_array_equal(two["client_wait_ms"], 25.0)


def test_open_loop_requests_keep_their_draws_through_the_pool():
    """Poisson arrivals: request n has the same lengths with or without a client (its draws
    follow its creation index), and a pool of 1 only adds waiting."""
    kw = dict(arrival="poisson", rate_rps=50.0, isl=Dist("uniform", low=16, high=200))
    free = simulate(_cell(None, **kw), replicas=2, requests=200, warmup=50, seed=4, stream=0).samples
    pooled = simulate(_cell(ClientSpec(max_connections=1), **kw), replicas=2, requests=200, warmup=50, seed=4,
                      stream=0).samples  # fmt: skip
    np.testing.assert_array_equal(free["isl"], pooled["isl"])
    np.testing.assert_array_equal(free["arrival_ms"], pooled["arrival_ms"])  # created at the same times
    assert (pooled["client_wait_ms"] >= 0).all() and pooled["client_wait_ms"].max() > 0
    assert (pooled["ttft_ms"] >= free["ttft_ms"] - 1e-9).mean() > 0.99


@pytest.mark.parametrize(
    "client,key",
    [(ClientSpec(max_connections=-1), "client.max_connections"), (ClientSpec(overhead_ms=-1.0), "client.overhead_ms")],
)
def test_bad_client_values_name_their_key(client, key):
    with pytest.raises(SpecError, match=key):
        _cell(client).validate()


def test_client_table_in_a_grid():
    base = """
[run]
replicas = 2
requests = 20
[workload]
isl = 64
osl = 4
[grid]
topology = ["1P/1D"]
concurrency = [4]
[[policy]]
name = "kv"
kind = "kv"
"""
    g = loads_grid(base + "[client]\nmax_connections = 100\noverhead_ms = 1.5\n")
    assert g.workload.client == ClientSpec(max_connections=100, overhead_ms=1.5)
    assert loads_grid(base).workload.client is None
    with pytest.raises(ConfigError, match="client.max_connections"):
        loads_grid(base + "[client]\nmax_connections = -3\n")
    with pytest.raises(ConfigError, match="client.pool"):
        loads_grid(base + "[client]\npool = 3\n")
