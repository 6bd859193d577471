"""The cluster of a cell (`ClusterSpec`): workers, flow, KV blocks, transfers, the lower KV tiers,
the handover, nodes and links, with their validation; and what keeps the ids of cells written
before a cluster key existed (`LATER_DEFAULTS`, `TIER_KEYS`, `drop_tier_keys`).

Part of the cell's spec (poa_mc/model/spec.py assembles the parts into a `CellSpec`). Sizes are in
blocks of `block_size` tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_policy import TIER_CREDIT

FLOWS = ("prefill_first", "decode_first", "aggregated")
HANDOVERS = ("mocker", "vllm")
# cluster keys added after cells had ids: at these defaults they are left out of ids and fingerprints
LATER_DEFAULTS = {
    "handover": "mocker", "nixl_descriptors_per_block": 0, "nixl_post_us": 2.4, "gpus_per_node": 0,
    "gpus_per_worker": 1, "node_nic_gbps": 400.0,
}  # fmt: skip
DECODE_ADMISSIONS = ("fcfs", "replay")
TIER_EVICTIONS = ("lru", "lineage")
ROUTER_BLOCKS = ("per_request", "dynamo")


@dataclass(frozen=True)
class ClusterSpec:
    """Topology and worker parameters. Sizes in blocks of `block_size` tokens."""

    n_prefill: int = 1
    n_decode: int = 2
    flow: str = "prefill_first"
    block_size: int = 64
    prefill_kv_blocks: int = 16384
    decode_kv_blocks: int = 16384
    token_budget: int = 8192
    max_seqs: int = 256
    max_local_prefill: int = 1000
    kv_bytes_per_token: float = 0.0
    transfer_gbps: float = 0.0
    transfer_latency_ms: float = 0.0
    kv_event_delay_ms: float = 0.0
    decode_admission: str = "fcfs"
    recompute_last_block: bool = True
    # the router's active blocks (docs/engine.md, "The router's active blocks"): "dynamo" (the
    # default since 0.3.0) follows Dynamo 1.x: a disaggregated prefill router tracks none, a
    # disaggregated decode router assumes no KV reuse, and a router over aggregated workers counts a
    # block held by several in-flight requests once (a group's prefix once per worker);
    # "per_request" (the default before) charges every decision its blocks less the prefix the
    # worker caches
    router_blocks: str = "dynamo"
    max_inflight: int = 4096
    # lower KV tiers of each prefill worker (poa_mc/kernels/tiers.py, docs/tiers.md); 0 blocks: absent
    g2_blocks: int = 0
    g2_gbps: float = 14.0
    g3_blocks: int = 0
    g3_gbps: float = 7.0
    g4_blocks: int = 0
    g4_gbps: float = 1.0  # each prefill worker's link to the remote store
    tier_decay_ms: float = 0.0
    tier_eviction: str = "lru"  # inside each tier of a prefill worker: LRU, or the lineage rule
    # how a prefill_first decode worker takes over a request's KV (poa_mc/kernels/decode.py, docs/engine.md
    # "The handover"): "mocker" as Dynamo's mocker and replay, "vllm" as vLLM 0.14.1's NixlConnector
    handover: str = "mocker"
    nixl_descriptors_per_block: int = 0  # "vllm": reads posted per KV block (2 x layers; 0: no posting time)
    nixl_post_us: float = 2.4  # "vllm": CPU time to post one descriptor, microseconds
    # nodes and links (poa_mc/kernels/links.py, docs/engine.md "Nodes and links"): with gpus_per_node > 0
    # the workers are packed onto nodes in order (prefill first), gpus_per_worker GPUs each; a
    # prefill_first transfer inside a node runs at transfer_gbps, one across nodes shares its
    # prefill node's link of node_nic_gbps fairly with the others in flight on it
    gpus_per_node: int = 0
    gpus_per_worker: int = 1
    node_nic_gbps: float = 400.0  # HGX B200: 8 x 400 Gb/s ConnectX-7

    def has_tiers(self) -> bool:
        return self.g2_blocks > 0 or self.g3_blocks > 0 or self.g4_blocks > 0

    def tier_copy_ms(self, gbps: float) -> float:
        """Milliseconds to copy one block over a link of `gbps` GB/s (1e6 bytes per ms); 0 when
        kv_bytes_per_token is 0, as for the P->D transfer."""
        if self.kv_bytes_per_token <= 0:
            return 0.0
        return self.kv_bytes_per_token * self.block_size / (gbps * 1e6)

    def nodes(self) -> tuple[int, ...]:
        """Each worker's node (prefill workers first), packed in order: a worker takes
        gpus_per_worker GPUs of the current node, or starts the next one if they do not fit. Empty
        without nodes (gpus_per_node = 0)."""
        if self.gpus_per_node <= 0:
            return ()
        out, node, used = [], 0, 0
        for _ in range(self.n_workers()):
            if used + self.gpus_per_worker > self.gpus_per_node:
                node, used = node + 1, 0
            out.append(node)
            used += self.gpus_per_worker
        return tuple(out)

    def n_workers(self) -> int:
        return (0 if self.flow == "aggregated" else self.n_prefill) + self.n_decode

    def decisions(self) -> dict[str, tuple[int, int]]:
        """The routing decisions of a request: stage -> (first worker, candidates). prefill_first
        chooses a prefill worker, then a decode worker; the other flows choose a decode worker
        (a decode_first prefill worker pulls from a shared queue: no routing decision)."""
        n_p = 0 if self.flow == "aggregated" else self.n_prefill
        out = {"prefill": (0, n_p)} if self.flow == "prefill_first" else {}
        out["decode"] = (n_p, self.n_decode)
        return out

    def poa_stage(self, stage: str = "auto") -> tuple[str, int, int]:
        """(stage, first worker, candidates) PoA-hat is taken over. auto: the decision with more
        than one candidate, decode when both have; with neither, decode (one candidate: no game)."""
        d = self.decisions()
        if stage == "auto":
            stage = "decode" if d["decode"][1] > 1 or "prefill" not in d or d["prefill"][1] < 2 else "prefill"
        if stage not in d:
            raise SpecError("poa.stage", f"flow {self.flow} makes no {stage} routing decision")
        return (stage, *d[stage])

    def validate(self, path: str = "cluster") -> None:
        if self.flow not in FLOWS:
            raise SpecError(f"{path}.flow", f"must be one of {', '.join(FLOWS)}, got {self.flow!r}")
        if self.decode_admission not in DECODE_ADMISSIONS:
            raise SpecError(
                f"{path}.decode_admission",
                f"must be one of {', '.join(DECODE_ADMISSIONS)}, got {self.decode_admission!r}",
            )
        if self.handover not in HANDOVERS:
            raise SpecError(f"{path}.handover", f"must be one of {', '.join(HANDOVERS)}, got {self.handover!r}")
        if self.handover != "mocker" and self.flow != "prefill_first":
            raise SpecError(f"{path}.handover", f"is a prefill_first decode worker's; flow {self.flow} has none")
        if self.nixl_descriptors_per_block < 0:
            raise SpecError(
                f"{path}.nixl_descriptors_per_block", f"must be >= 0, got {self.nixl_descriptors_per_block}"
            )
        if not (self.nixl_post_us >= 0 and math.isfinite(self.nixl_post_us)):
            raise SpecError(f"{path}.nixl_post_us", f"must be a finite number >= 0, got {self.nixl_post_us}")
        if self.gpus_per_node < 0:
            raise SpecError(f"{path}.gpus_per_node", f"must be >= 0 (0: no nodes), got {self.gpus_per_node}")
        if self.gpus_per_node > 0:
            if self.flow != "prefill_first":
                raise SpecError(f"{path}.gpus_per_node", f"nodes and links are prefill_first's; flow is {self.flow}")
            if not 1 <= self.gpus_per_worker <= self.gpus_per_node:
                raise SpecError(
                    f"{path}.gpus_per_worker",
                    f"must be between 1 and gpus_per_node ({self.gpus_per_node}), got {self.gpus_per_worker}",
                )
            if not (self.node_nic_gbps > 0 and math.isfinite(self.node_nic_gbps)):
                raise SpecError(f"{path}.node_nic_gbps", f"must be a finite number > 0, got {self.node_nic_gbps}")
            if self.kv_bytes_per_token <= 0:
                raise SpecError(f"{path}.kv_bytes_per_token", "nodes and links need the bytes a transfer moves (> 0)")
        if self.flow != "aggregated" and self.n_prefill < 1:
            raise SpecError(f"{path}.n_prefill", f"needs at least one prefill worker, got {self.n_prefill}")
        if self.n_decode < 1:
            raise SpecError(f"{path}.n_decode", f"needs at least one decode worker, got {self.n_decode}")
        for name in ("block_size", "prefill_kv_blocks", "decode_kv_blocks", "token_budget", "max_seqs", "max_inflight"):
            if getattr(self, name) < 1:
                raise SpecError(f"{path}.{name}", f"must be >= 1, got {getattr(self, name)}")
        for name in (
            "max_local_prefill",
            "kv_bytes_per_token",
            "transfer_gbps",
            "transfer_latency_ms",
            "kv_event_delay_ms",
        ):
            if not getattr(self, name) >= 0:
                raise SpecError(f"{path}.{name}", f"must be >= 0, got {getattr(self, name)}")
        self._validate_tiers(path)

    def _validate_tiers(self, path: str) -> None:
        for name in ("g2_blocks", "g3_blocks", "g4_blocks", "tier_decay_ms"):
            if not getattr(self, name) >= 0:
                raise SpecError(f"{path}.{name}", f"must be >= 0, got {getattr(self, name)}")
        for tier in ("g2", "g3", "g4"):
            if getattr(self, f"{tier}_blocks") > 0 and not getattr(self, f"{tier}_gbps") > 0:
                raise SpecError(f"{path}.{tier}_gbps", f"must be > 0 GB/s, got {getattr(self, f'{tier}_gbps')}")
        if self.g4_blocks > 0 and self.g3_blocks == 0:
            raise SpecError(f"{path}.g4_blocks", "G4 is fed by G3's evictions: it needs g3_blocks > 0")
        if self.g3_blocks > 0 and self.g2_blocks == 0:
            raise SpecError(f"{path}.g3_blocks", "G3 is fed by G2's evictions: it needs g2_blocks > 0")
        if self.has_tiers() and self.flow != "prefill_first":
            raise SpecError(
                f"{path}.g2_blocks", "lower tiers are modelled on the prefill workers of flow = prefill_first"
            )
        if self.router_blocks not in ROUTER_BLOCKS:
            raise SpecError(
                f"{path}.router_blocks", f"must be one of {', '.join(ROUTER_BLOCKS)}, got {self.router_blocks!r}"
            )
        if self.tier_eviction not in TIER_EVICTIONS:
            raise SpecError(
                f"{path}.tier_eviction", f"must be one of {', '.join(TIER_EVICTIONS)}, got {self.tier_eviction!r}"
            )
        if self.tier_eviction == "lineage" and self.flow != "prefill_first":
            raise SpecError(f"{path}.tier_eviction", "the lineage rule is modelled on prefill_first's prefill workers")
        if 0 < self.tier_decay_ms < 1:
            raise SpecError(f"{path}.tier_decay_ms", f"must be 0 (no decay) or >= 1 ms, got {self.tier_decay_ms}")


TIER_KEYS = ("g2_blocks", "g2_gbps", "g3_blocks", "g3_gbps", "g4_blocks", "g4_gbps", "tier_decay_ms")


def drop_tier_keys(cluster: dict, policies: list[dict]) -> None:
    """Remove the tier keys from a cluster's and its policies' dicts when the cluster has no lower
    tiers (and the credits are the defaults): grids written before tiers existed keep their cell
    ids and fingerprints, also with the tier keys written out as 0. The router's block counting is
    kept out at "per_request", its default before 0.3.0: a cell that asks for it keeps the id it
    had, and a cell at today's default ("dynamo", a different simulation) gets a new one."""
    if cluster.get("router_blocks", "per_request") == "per_request":
        cluster.pop("router_blocks", None)
    if cluster.get("tier_eviction", "lru") == "lru":
        cluster.pop("tier_eviction", None)
    for k, default in LATER_DEFAULTS.items():  # keys added later, at their defaults
        if cluster.get(k, default) == default:
            cluster.pop(k, None)
    if any(cluster.get(k, 0) for k in ("g2_blocks", "g3_blocks", "g4_blocks")):
        return
    for k in TIER_KEYS:
        cluster.pop(k, None)
    for p in policies:
        if tuple(p.get("tier_credit", TIER_CREDIT)) == TIER_CREDIT:
            p.pop("tier_credit", None)
