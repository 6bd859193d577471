"""poa_mc/kernels/decode.py: the handover of a prefill_first request to its decode worker, on hand-worked
timelines, as Dynamo's mocker does it (`handover = "mocker"`) and as vLLM 0.14.1's NixlConnector
and scheduler do (`"vllm"`, docs/engine.md "The handover").

One prefill worker serving one request per 10 ms pass, one decode worker whose every step takes
4 ms, prompts of 64 tokens (4 blocks of 16), a 5 ms transfer, and reads posted at 100 descriptors
per block x 2.4 us: 0.96 ms for a request's 4 blocks."""

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
from poa_mc.model.spec_workload import Dist, WorkloadSpec


def _cell(handover: str, clients: int, osl: int, max_seqs: int = 256) -> CellSpec:
    return CellSpec(
        cluster=ClusterSpec(
            n_prefill=1, n_decode=1, flow="prefill_first", block_size=16, max_seqs=max_seqs, transfer_latency_ms=5.0,
            handover=handover, nixl_descriptors_per_block=100, nixl_post_us=2.4,
        ),
        workload=WorkloadSpec(
            isl=Dist("fixed", 64), osl=Dist("fixed", osl), concurrency=clients, prefix_ratio=0.0, prefix_groups=1
        ),
        profile=ProfileSpec(kind="deterministic", prefill_ms=10.0, decode_ms=4.0),
        policy=PolicySpec(kind="kv"),
    )  # fmt: skip


def _first_two(spec: CellSpec) -> dict[str, np.ndarray]:
    s = simulate(spec, replicas=1, requests=2, warmup=0, seed=1, stream=0, drain=True).samples
    return {k: s[k][0] for k in ("ttft_ms", "e2e_ms", "decode_wait_ms", "transfer_ms")}


def test_an_idle_decode_worker():
    """One request at a time. Mocker: reserved as the prefill ends (10), KV there at 15, admitted
    then, first token at the end of that step (19). vLLM: posting its 4 blocks' reads takes 0.96 ms
    before the wire time starts (KV at 15.96), the idle engine sees it then and admits it 1 ms
    later (16.96), whose step recomputes the prompt's last token and samples the first (20.96)."""
    mocker = _first_two(_cell("mocker", 1, 3))
    np.testing.assert_allclose(mocker["ttft_ms"], 19.0)
    np.testing.assert_allclose(mocker["e2e_ms"], 27.0)
    vllm = _first_two(_cell("vllm", 1, 3))
    np.testing.assert_allclose(vllm["ttft_ms"], 20.96)
    np.testing.assert_allclose(vllm["e2e_ms"], 28.96)
    np.testing.assert_allclose(vllm["decode_wait_ms"], 1.0)  # from the KV's arrival to the admission
    np.testing.assert_allclose(vllm["transfer_ms"], 5.0)  # from the reads' start: the wire time


def test_a_busy_decode_worker_sees_the_kv_at_a_step_boundary_and_admits_it_a_step_later():
    """Two clients, long answers. A: as above, steps from 16.96. B's prefill ends at 20; the
    boundary at 20.96 reserves its blocks and posts its reads, which delays A's next step to
    21.92; B's KV arrives at 26.92, inside A's step 25.92-29.92: seen at 29.92, admitted at the
    next boundary, 33.92 (vLLM's async scheduling had issued that step already), first token
    37.92. The mocker admits B at the first boundary after 25 (27): 35."""
    vllm = _first_two(_cell("vllm", 2, 50))
    np.testing.assert_allclose(vllm["ttft_ms"], [20.96, 37.92])
    np.testing.assert_allclose(vllm["decode_wait_ms"], [1.0, 7.0])
    # A's 49 later tokens take 4 ms each but one, which waited 0.96 ms for B's posting
    np.testing.assert_allclose(vllm["e2e_ms"][0], 20.96 + 49 * 4.0 + 0.96)
    mocker = _first_two(_cell("mocker", 2, 50))
    np.testing.assert_allclose(mocker["ttft_ms"], [19.0, 35.0])


def test_no_blocks_are_allocated_while_max_num_seqs_requests_run():
    """max_seqs = 1: B's blocks are not allocated while A runs (its prefill ends at 20, A's last
    token is at 28.96); at that boundary B reserves and posts (KV at 34.92), is seen then by the
    idle engine and admitted at 35.92: first token at 39.92."""
    vllm = _first_two(_cell("vllm", 2, 3, max_seqs=1))
    np.testing.assert_allclose(vllm["ttft_ms"], [20.96, 39.92])


def test_handover_keys_are_checked():
    with pytest.raises(SpecError, match="cluster.handover"):
        ClusterSpec(handover="nixl").validate()
    with pytest.raises(SpecError, match="cluster.handover"):
        ClusterSpec(handover="vllm", flow="aggregated", n_prefill=0).validate()
    with pytest.raises(SpecError, match="cluster.nixl_post_us"):
        ClusterSpec(nixl_post_us=-1.0).validate()
    grid = """
[run]
replicas = 2
requests = 20
[workload]
isl = 64
osl = 4
[cluster]
handover = "%s"
[grid]
topology = ["1P/1D"]
concurrency = [4]
[[policy]]
name = "kv"
kind = "kv"
"""
    assert loads_grid(grid % "vllm").cluster.handover == "vllm"
    with pytest.raises(ConfigError, match="cluster.handover"):
        loads_grid(grid % "dynamo")
