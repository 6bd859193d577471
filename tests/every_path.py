"""Small cells that between them run every path of the kernels: each flow and policy, KV pressure
(preemption), the transfer handshake, a sampled decode choice, the controller, the planner, the
batch router, a global cache, an aiconfigurator table, lower tiers (G2, G3 and a shared G4),
replayed traces, a modelled client, vLLM's handover and shared links. Shared by the tests that run the kernels
under another target or check
(tests/test_engine.py: the CUDA simulator; tests/test_kernels_cpu.py: NUMBA_BOUNDSCHECK)."""

from __future__ import annotations

from poa_mc.model.config import loads_grid
from poa_mc.model.profiles import resolve_profile
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_planner import PlannerSpec
from poa_mc.model.spec_policy import ControllerSpec, PolicySpec
from poa_mc.model.spec_workload import ClientSpec, Dist, Stage, WorkloadSpec

# (flow, policy, event delay, decode kv blocks, temperature, transfer ms, osl): the decode kv
# blocks of 30 and 60 put decode workers under KV pressure (preemption), the temperature samples
# the decode choice, the transfer runs the handshake
CASES = [
    ("prefill_first", "kv", 0.0, 16384, 0.0, 0.0, 12),
    ("decode_first", "kv", 0.0, 16384, 0.0, 0.0, 12),
    ("prefill_first", "power_of_d", 0.0, 16384, 0.0, 0.0, 12),
    ("decode_first", "kv", 30.0, 16384, 0.0, 0.0, 12),
    ("prefill_first", "kv", 0.0, 30, 0.7, 3.0, 60),
    ("aggregated", "kv", 0.0, 30, 0.0, 0.0, 60),
    ("prefill_first", "oracle", 0.0, 60, 0.0, 1.0, 30),
    ("prefill_first", "adaptive", 0.0, 60, 0.0, 0.0, 30),
    ("prefill_first", "kv-decode-overlap", 0.0, 16384, 0.5, 0.0, 12),
    ("prefill_first", "batch", 0.0, 60, 0.0, 1.0, 30),
    ("prefill_first", "hash", 0.0, 60, 0.0, 1.0, 30),
    ("prefill_first", "global", 20.0, 60, 0.0, 0.0, 30),
    ("prefill_first", "planner", 0.0, 60, 0.0, 1.0, 30),
    ("prefill_first", "aic", 0.0, 60, 0.0, 1.0, 30),
    ("aggregated", "aic", 0.0, 30, 0.0, 0.0, 60),
    ("prefill_first", "tiers", 10.0, 60, 0.5, 1.0, 30),
    ("prefill_first", "tiers+g4", 10.0, 60, 0.5, 1.0, 30),
    ("aggregated", "kv-dynamo", 0.0, 16384, 0.0, 0.0, 30),
    ("prefill_first", "kv-dynamo", 0.0, 16384, 0.5, 1.0, 30),
    ("prefill_first", "global+tiers", 10.0, 60, 0.0, 1.0, 30),
    ("prefill_first", "kv-client", 0.0, 60, 0.0, 1.0, 30),
    ("prefill_first", "kv-vllm", 0.0, 60, 0.0, 1.0, 30),
    ("prefill_first", "kv-links", 0.0, 60, 0.0, 1.0, 30),
]
# a controller that switches within the run; a decode router that chases overlap
_POLICY = {
    "adaptive": dict(controller=ControllerSpec(theta1=40.0, theta2=400.0, period_ms=25.0, min_dwell_ms=0.0, window=8)),
    "kv-decode-overlap": dict(kind="kv", decode_overlap_weight=0.5),
    "batch": dict(batch_size=3, batch_ms=2.0),
    "global": dict(kind="kv", cache="global"),
    "planner": dict(kind="kv"),
    "aic": dict(kind="kv"),
    "tiers": dict(kind="kv"),
    "tiers+g4": dict(kind="round_robin"),
    "kv-dynamo": dict(kind="kv"),
    "global+tiers": dict(kind="kv", cache="global"),
    "kv-client": dict(kind="kv"),
    "kv-vllm": dict(kind="kv"),
    "kv-links": dict(kind="round_robin"),
}
# G1 + G2 + G3 on the prefill workers, small enough that blocks move down and back up
_TIERS = dict(prefill_kv_blocks=40, g2_blocks=10, g3_blocks=60, kv_bytes_per_token=2e5, tier_decay_ms=40.0)
# and a G4 shared by both prefill workers, fed by a G3 small enough to spill into it
_TIERS4 = {**_TIERS, "g3_blocks": 4, "g4_blocks": 80, "g4_gbps": 2.0, "tier_decay_ms": 0.0}
# vLLM's handover: reads posted at 160 descriptors a block, under KV pressure (preemption)
_VLLM = {"handover": "vllm", "nixl_descriptors_per_block": 160, "max_seqs": 4}
# two nodes (the prefill workers on one, the decode workers on the other) and a slow shared link
_LINKS = {"gpus_per_node": 4, "gpus_per_worker": 2, "kv_bytes_per_token": 2e5, "node_nic_gbps": 2.0}
_CLUSTER = {
    "kv-vllm": _VLLM, "kv-links": _LINKS, "tiers": _TIERS, "tiers+g4": _TIERS4, "global+tiers": _TIERS,
    "kv-dynamo": {"router_blocks": "dynamo"},
}  # fmt: skip


def cells() -> list[tuple[str, str, int, CellSpec]]:
    """(flow, policy, decode kv blocks, spec) for each of CASES, on 2P/2D (or 2 aggregated workers)."""
    aic = resolve_profile({"name": "aic-b200-llama70b-fp8-tp4-vllm"})  # a table the kernels interpolate
    out = []
    for flow, pol, delay, dkv, tau, xfer, osl in CASES:
        planner = None
        if pol == "planner":  # both targets missed: it moves every 20 ms interval
            planner = PlannerSpec(gpu_budget=4, interval_ms=20.0, startup_ms=5.0, ttft_ms=5.0, itl_ms=1.0)
        spec = CellSpec(
            cluster=ClusterSpec(
                n_prefill=2, n_decode=2, flow=flow, kv_event_delay_ms=delay, decode_kv_blocks=dkv,
                transfer_latency_ms=xfer, **_CLUSTER.get(pol, {}),
            ),
            workload=WorkloadSpec(
                isl=Dist("uniform", low=64, high=1500), osl=Dist("fixed", osl),
                prefix_groups=6 if "tiers" in pol else 3, concurrency=6,
                # a load generator with fewer connections than clients, and an overhead
                client=ClientSpec(max_connections=3, overhead_ms=0.5) if pol == "kv-client" else None,
            ),
            policy=PolicySpec(**{"kind": pol, "temperature": tau, **_POLICY.get(pol, {})}),
            planner=planner,
            **({"profile": aic} if pol == "aic" else {}),
        )  # fmt: skip
        out.append((flow, pol, dkv, spec))
    return out


def trace_cells() -> list[tuple[str, CellSpec]]:
    """The agentic sample's sessions replayed closed, the Mooncake sample's timestamps, with G2."""
    out = []
    for path, replay, load in (
        ("agentic_sample", "closed", "concurrency = [5]"),
        ("mooncake_sample", "timestamps", "rate = [3.0]"),
    ):
        text = (
            f'[workload]\nkind = "trace"\nformat = "mooncake"\npath = "{path}"\nreplay = "{replay}"\n'
            f"[cluster]\nprefill_kv_blocks = 600\ng2_blocks = 300\n"
            f'[grid]\ntopology = ["2P/2D"]\n{load}\n[[policy]]\nname = "kv"\n'
        )
        out.append((path, loads_grid(text).cells()[0].spec))
    return out


def schedule_cells(requests: int) -> list[tuple[str, CellSpec]]:
    """A load schedule (poa_mc/kernels/schedule.py) of `requests` measured requests in three stages:
    rate stages (up and down), and concurrency stages (up, then down, with think time and a client
    pool, so that clients park from the heap, from a completion and from a pending connection)."""
    n1, n2 = requests // 3, requests // 3
    counts = (n1, n2, requests - n1 - n2)
    out = []
    for name, arrival, loads in (("open", "poisson", (400.0, 1500.0, 300.0)), ("closed", "closed", (2, 6, 3))):
        stages = tuple(Stage(float(load), n) for load, n in zip(loads, counts))
        workload = WorkloadSpec(
            isl=Dist("uniform", low=64, high=1500), osl=Dist("fixed", 12), prefix_groups=3, arrival=arrival,
            concurrency=6, rate_rps=loads[0] if arrival == "poisson" else 0.0, schedule=stages,
            think_ms=2.0 if arrival == "closed" else 0.0,
            client=ClientSpec(max_connections=4, overhead_ms=0.5) if arrival == "closed" else None,
        )  # fmt: skip
        spec = CellSpec(cluster=ClusterSpec(n_prefill=2, n_decode=2), workload=workload, policy=PolicySpec(kind="kv"))
        out.append((name, spec))
    return out
