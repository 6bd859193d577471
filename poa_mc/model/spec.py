"""Resolved, validated descriptions of one simulation cell.

These frozen dataclasses are the contract between the configuration layer (TOML grids, presets)
and the engine. Every field carries its unit in its name or docstring. `validate()` raises
`SpecError` naming the offending field path before any simulation starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from poa_mc.kernels.layout import POLICY_TABLE, PROF_POLY, PROFILE_ID

FLOWS = ("prefill_first", "decode_first", "aggregated")
HANDOVERS = ("mocker", "vllm")
# cluster keys added after cells had ids: at these defaults they are left out of ids and fingerprints
LATER_DEFAULTS = {
    "handover": "mocker", "nixl_descriptors_per_block": 0, "nixl_post_us": 2.4, "gpus_per_node": 0,
    "gpus_per_worker": 1, "node_nic_gbps": 400.0,
}  # fmt: skip
DECODE_ADMISSIONS = ("fcfs", "replay")
POLICY_KINDS = tuple(name for name, _ in POLICY_TABLE)  # the one table: poa_mc/kernels/layout.py
CACHES = ("per_worker", "global")  # PolicySpec.cache
BATCH_MAX = 64  # held decode decisions a batch router assigns at once (its kernel scratch grows with it)
REGIMES = ("below", "transition", "saturated")
THRESHOLD_UNITS = ("ms", "baseline")
DIST_KINDS = ("fixed", "uniform", "lognormal", "empirical")
ARRIVALS = ("closed", "poisson")
POPULARITIES = ("uniform", "zipf")


class SpecError(ValueError):
    """A configuration that cannot run. `path` names the offending field (e.g. `workload.isl`)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class Dist:
    """A distribution of a positive integer token count.

    kind: fixed (value), uniform (low..high inclusive), lognormal (mean, sigma: the mean of the
    distribution itself and the sigma of the underlying normal; rounded, clipped to [1, cap]),
    empirical (values: sampled uniformly from the list).
    """

    kind: str = "fixed"
    value: int = 1
    low: int = 1
    high: int = 1
    mean: float = 1.0
    sigma: float = 0.0
    cap: int = 1 << 20
    values: tuple[int, ...] = ()

    def max_value(self) -> int:
        if self.kind == "fixed":
            return self.value
        if self.kind == "uniform":
            return self.high
        if self.kind == "lognormal":
            return self.cap
        return max(self.values)

    def min_value(self) -> int:
        if self.kind == "fixed":
            return self.value
        if self.kind == "uniform":
            return self.low
        if self.kind == "lognormal":
            return 1
        return min(self.values)

    def validate(self, path: str) -> None:
        if self.kind not in DIST_KINDS:
            raise SpecError(
                f"{path}.dist", f"unknown distribution {self.kind!r}; expected one of {', '.join(DIST_KINDS)}"
            )
        if self.kind == "fixed" and self.value < 1:
            raise SpecError(path, f"must be a positive token count, got {self.value}")
        if self.kind == "uniform":
            if self.low < 1:
                raise SpecError(f"{path}.low", f"must be >= 1, got {self.low}")
            if self.high < self.low:
                raise SpecError(f"{path}.high", f"must be >= low ({self.low}), got {self.high}")
        if self.kind == "lognormal":
            if not self.mean > 0:
                raise SpecError(f"{path}.mean", f"must be > 0, got {self.mean}")
            if not self.sigma >= 0:
                raise SpecError(f"{path}.sigma", f"must be >= 0, got {self.sigma}")
            if self.cap < 1:
                raise SpecError(f"{path}.cap", f"must be >= 1, got {self.cap}")
        if self.kind == "empirical":
            if not self.values:
                raise SpecError(f"{path}.values", "must be a non-empty list")
            for i, v in enumerate(self.values):
                if v < 1:
                    raise SpecError(f"{path}.values[{i}]", f"must be >= 1, got {v}")


@dataclass(frozen=True)
class TraceReplay:
    """A trace replayed as it happened (`[workload] kind = "trace"`, poa_mc/model/replay.py). `file` as the
    grid names it, pinned by `sha256`; `path` is the file read (not part of a cell's identity)."""

    file: str
    format: str
    sha256: str
    replay: str = "closed"
    sample: str = "offset"
    trace_block_size: int = 512
    rows: int = 0
    sessions: int = 0
    rate_rps: float = 0.0  # the trace's own mean rate (timestamps replay)
    kept_share: float = 1.0  # share of its reusable prefix blocks the engine's chains keep
    path: str = ""


@dataclass(frozen=True)
class ClientSpec:
    """The load generator (`[client]`, poa_mc/kernels/client.py): a pool of `max_connections` connections
    (0: one per request, unlimited) that requests wait for first come first served, and
    `overhead_ms` from a request's connection to its arrival at the frontend. TTFT and E2E are then
    measured from the client's creation of the request, as a benchmark client measures them."""

    max_connections: int = 0
    overhead_ms: float = 0.0

    def validate(self, path: str = "client") -> None:
        if self.max_connections < 0:
            raise SpecError(f"{path}.max_connections", f"must be >= 0 (0: unlimited), got {self.max_connections}")
        if not (self.overhead_ms >= 0 and math.isfinite(self.overhead_ms)):
            raise SpecError(f"{path}.overhead_ms", f"must be a finite number >= 0, got {self.overhead_ms}")


@dataclass(frozen=True)
class WorkloadSpec:
    """The request stream. Lengths in tokens, times in milliseconds, rates in requests/second."""

    isl: Dist = field(default_factory=lambda: Dist("fixed", 4096))
    osl: Dist = field(default_factory=lambda: Dist("fixed", 256))
    prefix_groups: int = 16
    prefix_ratio: float = 0.5
    popularity: str = "uniform"
    zipf_alpha: float = 1.0
    arrival: str = "closed"
    concurrency: int = 64
    rate_rps: float = 0.0
    think_ms: float = 0.0
    trace: TraceReplay | None = None
    client: ClientSpec | None = None  # None: requests reach the frontend as they are created

    def validate(self, path: str = "workload") -> None:
        if self.client is not None:
            self.client.validate("client")
        self.isl.validate(f"{path}.isl")
        self.osl.validate(f"{path}.osl")
        if self.prefix_groups < 1:
            raise SpecError(f"{path}.prefix_groups", f"must be >= 1, got {self.prefix_groups}")
        if not 0.0 <= self.prefix_ratio <= 1.0:
            raise SpecError(f"{path}.prefix_ratio", f"must be within [0, 1], got {self.prefix_ratio}")
        if self.popularity not in POPULARITIES:
            raise SpecError(f"{path}.popularity", f"must be one of {', '.join(POPULARITIES)}, got {self.popularity!r}")
        if self.popularity == "zipf" and not self.zipf_alpha >= 0:
            raise SpecError(f"{path}.zipf_alpha", f"must be >= 0, got {self.zipf_alpha}")
        if self.arrival not in ARRIVALS:
            raise SpecError(f"{path}.arrival", f"must be one of {', '.join(ARRIVALS)}, got {self.arrival!r}")
        if self.arrival == "closed" and self.concurrency < 1:
            raise SpecError(f"{path}.concurrency", f"must be >= 1 for a closed loop, got {self.concurrency}")
        if self.arrival == "poisson" and not self.rate_rps > 0:
            raise SpecError(f"{path}.rate", f"must be > 0 req/s for Poisson arrivals, got {self.rate_rps}")
        if not self.think_ms >= 0:
            raise SpecError(f"{path}.think_ms", f"must be >= 0, got {self.think_ms}")


@dataclass(frozen=True)
class ProfileSpec:
    """A timing model reduced to what the kernels evaluate.

    kind "polynomial" (dynamo-mocker and roofline resolve to this):
      prefill pass of T uncached tokens: p2*T^2 + p1*T + p0 ms (no time when T == 0);
      decode step: d2*u^2 + d1*u + d0 ms, u = min(1, context tokens / (kv_blocks * block_size)).
    kind "exponential" / "deterministic": one request per prefill pass, taking an exponential
      (or fixed) time of mean prefill_ms; each decode step takes decode_ms (0 allowed).
    kind "aic": pass and step times interpolated in a timing table (poa_mc.model.timing_tables), named
      by `table` (a shipped table or a file) and pinned by its digest `table_sha`.
    """

    name: str = "dynamo-mocker"
    kind: str = "polynomial"
    p2: float = 4.209989e-7
    p1: float = 1.518344e-2
    p0: float = 16.50142
    d2: float = -25.74
    d1: float = 54.01
    d0: float = 5.74
    d_min: float = 1.0
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    prefill_host_pass_ms: float = 0.0
    prefill_host_request_ms: float = 0.0
    source: str = "Dynamo 1.6.1 mocker default polynomial timing (docs/sources.md)"
    table: str = ""
    table_sha: str = ""

    def pass_timed(self) -> bool:
        """Priced per pass and step (the polynomial, a table), not a theory kind's service times."""
        return PROFILE_ID[self.kind] == PROF_POLY

    def validate(self, path: str = "profile") -> None:
        if self.kind not in PROFILE_ID:
            raise SpecError(f"{path}.kind", f"unknown profile kind {self.kind!r}")
        if self.kind == "polynomial":
            # The closed-form decode jump needs the quadratic itself (not the d_min clamp) on [0, 1].
            lo = min(self.d0, self.d2 + self.d1 + self.d0)
            if self.d2 > 0:
                u = -self.d1 / (2 * self.d2)
                if 0 < u < 1:
                    lo = min(lo, self.d2 * u * u + self.d1 * u + self.d0)
            if lo < self.d_min:
                raise SpecError(
                    f"{path}.d0", f"decode step polynomial falls below d_min={self.d_min} ms on u in [0, 1]"
                )
            # PoA-hat >= 1 under slot pricing (poa_mc.stats.poa_hat) needs every cost non-decreasing in
            # the load. The decode step's variable is u = min(1, context / capacity) in [0, 1] (context
            # >= 0): the quadratic is non-decreasing there iff its slope d1 + 2 d2 u is >= 0 at both ends.
            if not self.d1 >= 0:
                raise SpecError(
                    f"{path}.d1", f"must be >= 0 (the decode step may not fall as u grows from 0), got {self.d1}"
                )
            if not self.d1 + 2 * self.d2 >= 0:
                raise SpecError(
                    f"{path}.d2",
                    f"d1 + 2*d2 must be >= 0 (the decode step may not fall as u nears 1), got {self.d1 + 2 * self.d2}",
                )
            # The prefill pass over T >= 0 tokens (0 ms at T = 0): non-decreasing when every
            # coefficient is >= 0, which the ttft cost relies on as well.
            for name in ("p0", "p1", "p2"):
                if not getattr(self, name) >= 0:
                    raise SpecError(f"{path}.{name}", f"must be >= 0, got {getattr(self, name)}")
        for name in ("prefill_host_pass_ms", "prefill_host_request_ms"):
            if not getattr(self, name) >= 0:
                raise SpecError(f"{path}.{name}", f"must be >= 0 ms, got {getattr(self, name)}")
        if self.kind == "aic":
            if not self.table or not self.table_sha:
                raise SpecError(f"{path}.table", "an aic profile needs its table")
        elif self.kind != "polynomial":
            if not self.prefill_ms > 0:
                raise SpecError(f"{path}.prefill_ms", f"must be > 0 ms, got {self.prefill_ms}")
            if not self.decode_ms >= 0:
                raise SpecError(f"{path}.decode_ms", f"must be >= 0 ms, got {self.decode_ms}")


@dataclass(frozen=True)
class ControllerSpec:
    """The adaptive controller of `kind = "adaptive"` policies (poa_mc/kernels/controller.py).

    Every `period_ms` it takes the nearest-rank TTFT P99 over the `window` most recent first
    tokens, updates an EWMA (weight `ewma_alpha` on the newest value) and picks the regime: below
    saturation under theta1, transition from theta1, saturated from theta2 (in ms, or multiples of
    the cell's unloaded TTFT when threshold_unit = "baseline"). Leaving a regime needs the threshold
    crossed by the relative `hysteresis` margin, and `min_dwell_ms` since the last switch. Each
    regime applies its (temperature, overlap_weight) row; defaults are the paper's table.
    """

    period_ms: float = 500.0
    window: int = 128
    ewma_alpha: float = 0.3
    threshold_unit: str = "ms"
    theta1: float = 1000.0
    theta2: float = 10000.0
    hysteresis: float = 0.1
    min_dwell_ms: float = 2000.0
    temperature: tuple[float, float, float] = (0.0, 0.7, 0.8)
    overlap_weight: tuple[float, float, float] = (1.0, 1.0, 0.1)
    log_switches: int = 64

    def validate(self, path: str = "controller") -> None:
        if not self.period_ms >= 1.0:  # control steps are taken one by one: a tinier period never ends
            raise SpecError(f"{path}.period_ms", f"must be >= 1 ms, got {self.period_ms}")
        if self.window < 1:
            raise SpecError(f"{path}.window", f"must be >= 1 first tokens, got {self.window}")
        if not 0 < self.ewma_alpha <= 1:
            raise SpecError(f"{path}.ewma_alpha", f"must be within (0, 1], got {self.ewma_alpha}")
        if self.threshold_unit not in THRESHOLD_UNITS:
            raise SpecError(
                f"{path}.threshold_unit", f"must be one of {', '.join(THRESHOLD_UNITS)}, got {self.threshold_unit!r}"
            )
        if not self.theta1 > 0:
            raise SpecError(f"{path}.theta1", f"must be > 0, got {self.theta1}")
        if not self.theta2 > self.theta1:
            raise SpecError(f"{path}.theta2", f"must be > theta1 ({self.theta1}), got {self.theta2}")
        if not 0 <= self.hysteresis < 1:
            raise SpecError(f"{path}.hysteresis", f"must be within [0, 1), got {self.hysteresis}")
        if not self.min_dwell_ms >= 0:
            raise SpecError(f"{path}.min_dwell_ms", f"must be >= 0 ms, got {self.min_dwell_ms}")
        for i, regime in enumerate(REGIMES):
            if not self.temperature[i] >= 0:
                raise SpecError(f"{path}.{regime}.temperature", f"must be >= 0, got {self.temperature[i]}")
            if not self.overlap_weight[i] >= 0:
                raise SpecError(f"{path}.{regime}.overlap_weight", f"must be >= 0, got {self.overlap_weight[i]}")
        if self.log_switches < 0:
            raise SpecError(f"{path}.log_switches", f"must be >= 0, got {self.log_switches}")


TIER_EVICTIONS = ("lru", "lineage")
ROUTER_BLOCKS = ("per_request", "dynamo")
TIER_CREDIT = (1.0, 0.75, 0.25, 0.1)  # Dynamo's credit for a G1..G4 hit (docs/tiers.md)


@dataclass(frozen=True)
class PolicySpec:
    """How the router decides: the prefill worker in prefill_first (then the decode worker by load,
    as Dynamo does, with `decode_overlap_weight`), the decode worker in decode_first and
    aggregated. `adaptive` is the kv router retuned by `controller` during the run; `batch` holds
    the decode decisions of prefill_first (up to batch_size, or batch_ms after the first) and
    assigns them jointly; `hash` sends each prefix group to its one owner worker (rendezvous
    hashing: no prefix is cached twice). `cache = "global"` makes the prefill workers of
    prefill_first share one LRU over their pooled blocks (the coordinated cache of the caching
    game, docs/games.md) instead of each keeping its own."""

    name: str = "dynamo-default"
    kind: str = "kv"
    overlap_weight: float = 1.0
    temperature: float = 0.0
    d: int = 2
    decode_overlap_weight: float = 0.0
    controller: ControllerSpec = field(default_factory=ControllerSpec)
    batch_size: int = 8
    batch_ms: float = 5.0
    cache: str = "per_worker"
    # the kv router's credit for a cached block in G1, G2, G3, G4 (used only with lower tiers)
    tier_credit: tuple[float, ...] = TIER_CREDIT

    def validate(self, path: str = "policy") -> None:
        if self.kind not in POLICY_KINDS:
            raise SpecError(f"{path}.kind", f"must be one of {', '.join(POLICY_KINDS)}, got {self.kind!r}")
        if self.cache not in CACHES:
            raise SpecError(f"{path}.cache", f"must be one of {', '.join(CACHES)}, got {self.cache!r}")
        if not self.overlap_weight >= 0:
            raise SpecError(f"{path}.overlap_weight", f"must be >= 0, got {self.overlap_weight}")
        if not self.temperature >= 0:
            raise SpecError(f"{path}.temperature", f"must be >= 0, got {self.temperature}")
        if not self.decode_overlap_weight >= 0:
            raise SpecError(f"{path}.decode_overlap_weight", f"must be >= 0, got {self.decode_overlap_weight}")
        if self.kind == "adaptive":
            self.controller.validate("controller")
        if self.kind == "batch":
            if not 1 <= self.batch_size <= BATCH_MAX:
                raise SpecError(f"{path}.batch_size", f"must be within [1, {BATCH_MAX}], got {self.batch_size}")
            if not self.batch_ms >= 0:
                raise SpecError(f"{path}.batch_ms", f"must be >= 0 ms, got {self.batch_ms}")
        if self.kind == "power_of_d" and self.d < 1:
            raise SpecError(f"{path}.d", f"must be >= 1, got {self.d}")
        tc = self.tier_credit
        if len(tc) != 4 or not all(isinstance(x, (int, float)) and 0 <= x <= 1 for x in tc):
            raise SpecError(f"{path}.tier_credit", f"must be 4 numbers within [0, 1] (G1..G4), got {list(tc)}")


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


def budget_splits(budget: int, prefill_gpus: int, decode_gpus: int) -> list[tuple[int, int]]:
    """Every (nP, nD) with nP, nD >= 1 that uses a GPU budget as fully as whole workers allow:
    for nP = 1, 2, ... the most decode workers the rest holds (poa_mc/kernels/planner.py walks the same
    path)."""
    out = []
    n_p = 1
    while n_p * prefill_gpus + decode_gpus <= budget:
        out.append((n_p, (budget - n_p * prefill_gpus) // decode_gpus))
        n_p += 1
    return out


@dataclass(frozen=True)
class PlannerSpec:
    """Dynamo's Planner moving the prefill/decode split of a GPU budget during the run
    (poa_mc/kernels/planner.py): every `interval_ms` it compares the interval's mean TTFT and ITL with
    their targets and moves one worker's GPUs to the pool further over its target. The cluster's
    n_prefill / n_decode are the split it starts at; the splits are Game 1's
    (poa_mc.stats.games.splits). A new worker starts `startup_ms` after the GPUs it needs are free."""

    gpu_budget: int
    prefill_gpus: int = 1
    decode_gpus: int = 1
    interval_ms: float = 30_000.0
    startup_ms: float = 0.0
    ttft_ms: float = 0.0  # TTFT target
    itl_ms: float = 0.0  # ITL target
    log_moves: int = 256

    def splits(self) -> list[tuple[int, int]]:
        return budget_splits(self.gpu_budget, self.prefill_gpus, self.decode_gpus)

    def validate(self, path: str = "planner") -> None:
        for name in ("gpu_budget", "prefill_gpus", "decode_gpus"):
            if getattr(self, name) < 1:
                raise SpecError(f"{path}.{name}", f"must be >= 1, got {getattr(self, name)}")
        if len(self.splits()) < 2:
            raise SpecError(f"{path}.gpu_budget", "makes fewer than 2 splits: the planner has nowhere to move")
        if not self.interval_ms >= 1.0:
            raise SpecError(f"{path}.interval_ms", f"must be >= 1 ms, got {self.interval_ms}")
        if not self.startup_ms >= 0:
            raise SpecError(f"{path}.startup_ms", f"must be >= 0 ms, got {self.startup_ms}")
        for name in ("ttft_ms", "itl_ms"):
            if not getattr(self, name) > 0:
                raise SpecError(f"{path}.{name}", f"must be > 0 ms (the planner's target), got {getattr(self, name)}")
        if self.log_moves < 0:
            raise SpecError(f"{path}.log_moves", f"must be >= 0, got {self.log_moves}")


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
