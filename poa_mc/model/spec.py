"""Resolved, validated descriptions of one simulation cell: `CellSpec` and its cross-checks.

These frozen dataclasses are the contract between the configuration layer (TOML grids, presets)
and the engine. Every field carries its unit in its name or docstring. `validate()` raises
`SpecError` naming the offending field path before any simulation starts.

A cell's spec is assembled from parts, one module each: the workload (spec_workload.py), the timing
profile (spec_profile.py), the routing policy and its controller (spec_policy.py), the cluster
(spec_cluster.py) and the planner (spec_planner.py); `SpecError` lives below them all
(spec_error.py). This module holds the whole cell and the checks that span its parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_planner import PlannerSpec
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.model.spec_workload import WorkloadSpec


@dataclass(frozen=True)
class CellSpec:
    """One point of a grid: a cluster, a workload at one load, a timing profile and a policy."""

    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    profile: ProfileSpec = field(default_factory=ProfileSpec)
    policy: PolicySpec = field(default_factory=PolicySpec)
    planner: PlannerSpec | None = None

    def validate(self) -> None:
        self.cluster.validate("cluster")
        self.workload.validate("workload")
        self.profile.validate("profile")
        self.policy.validate("policy")
        c, w = self.cluster, self.workload
        bs = c.block_size
        need = -(-(w.isl.max_value() + w.osl.max_value()) // bs)
        if need > c.decode_kv_blocks:
            raise SpecError(
                "workload.isl" if w.isl.max_value() >= w.osl.max_value() else "workload.osl",
                f"a request of up to {w.isl.max_value()}+{w.osl.max_value()} tokens needs {need} blocks, "
                f"more than a decode worker's kv_blocks ({c.decode_kv_blocks})",
            )
        if c.flow != "aggregated":
            need_p = -(-w.isl.max_value() // bs)
            if need_p > c.prefill_kv_blocks:
                raise SpecError(
                    "workload.isl",
                    f"a prompt of up to {w.isl.max_value()} tokens needs {need_p} blocks, "
                    f"more than a prefill worker's kv_blocks ({c.prefill_kv_blocks})",
                )
        if c.transfer_gbps > 0 and c.kv_bytes_per_token > 0:
            # GB/s = 1e6 bytes per ms; a transfer must end within the simulated horizon
            ms = c.kv_bytes_per_token * w.isl.max_value() / (c.transfer_gbps * 1e6) + c.transfer_latency_ms
            if not ms < 1e12:
                raise SpecError(
                    "cluster.transfer_gbps",
                    f"a prompt of {w.isl.max_value()} tokens at {c.kv_bytes_per_token:g} bytes/token over "
                    f"{c.transfer_gbps:g} GB/s takes {ms:.3g} ms to transfer: not a finite time",
                )
        if self.policy.kind == "pull" and c.flow != "prefill_first":
            raise SpecError(
                "policy.kind",
                "pull routes to prefill workers: it needs cluster.flow = prefill_first "
                "(decode_first prefill workers always pull)",
            )
        if self.policy.kind in ("oracle", "batch") and c.flow != "prefill_first":
            raise SpecError(
                "policy.kind", f"{self.policy.kind} models the prefill_first path: it needs flow = prefill_first"
            )
        if c.has_tiers() and self.planner is not None:
            raise SpecError("planner", "lower tiers are not modelled with a moving split yet: use g2_blocks = 0")
        if self.policy.cache == "global" and c.flow != "prefill_first":
            raise SpecError(
                "policy.cache", "global pools the prefill workers' caches: it needs cluster.flow = prefill_first"
            )
        if self.planner is not None:
            self._validate_planner()
        if self.policy.kind == "power_of_d" and self.policy.d > self._n_candidates():
            raise SpecError("policy.d", f"d={self.policy.d} exceeds the {self._n_candidates()} candidate workers")
        if w.arrival == "closed" and w.concurrency > c.max_inflight:
            raise SpecError("workload.concurrency", f"exceeds cluster.max_inflight ({c.max_inflight})")

    def _validate_planner(self) -> None:
        pl, c = self.planner, self.cluster
        pl.validate("planner")
        if c.flow != "prefill_first":
            raise SpecError("planner", "moves the split of Dynamo 0.9's path: it needs cluster.flow = prefill_first")
        if self.policy.kind in ("pull", "batch"):
            raise SpecError("policy.kind", f"{self.policy.kind} cannot follow the planner's moving pools")
        if self.policy.cache == "global":
            raise SpecError("policy.cache", "a pooled prefill cache cannot follow the planner's moving pools")
        if (c.n_prefill, c.n_decode) not in pl.splits():
            raise SpecError("cluster.n_prefill", f"{c.n_prefill}P/{c.n_decode}D is not a split of the planner's budget")

    def _n_candidates(self) -> int:
        return self.cluster.n_prefill if self.cluster.flow == "prefill_first" else self.cluster.n_decode
