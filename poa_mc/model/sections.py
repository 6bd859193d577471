"""The grid file's sections once parsed: run settings, PoA-hat's and the SLO's settings, the games,
a topology, a replayed trace's reference, and the choices each key accepts. Parsed from TOML by
poa_mc.model.config; the whole grid is poa_mc.model.grid.GridConfig."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_planner import PlannerSpec, budget_splits

BACKENDS = ("auto", "cpu", "cuda")
SOCIAL_COSTS = ("mean_ttft", "mean_e2e", "p99_ttft")
PLANNER_SUFFIX = " planner"  # the topology label of a split the Planner starts at
POA_COSTS = ("router", "ttft", "observed")
POA_STAGES = ("auto", "prefill", "decode")
POA_PRICINGS = ("slot", "frozen")
POA_OBSERVED_FROM = ("decision", "client")
SECTIONS = (
    "run",
    "profile",
    "workload",
    "client",
    "cluster",
    "grid",
    "policy",
    "controller",
    "poa",
    "slo",
    "games",
    "schedule",
)
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_BOOTSTRAP = 100_000
TOPOLOGY_RE = re.compile(r"^(\d+)P/(\d+)D$")
# [games.pd]'s costs: lower is better, but for BENEFITS (the cost is then 1 / value)
POOL_COSTS = (
    "ttft_mean_ms",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "itl_mean_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "e2e_mean_ms",
    "e2e_p99_ms",
    "goodput_rps",
    "slo_attainment",
    "throughput_rps",
)
BENEFITS = ("goodput_rps", "slo_attainment", "throughput_rps")  # higher is better: the cost is 1 / value


class ConfigError(SpecError):
    """A grid file that cannot run; `path` is the key path (`grid.topology[1]`)."""


@dataclass(frozen=True)
class RunSection:
    """[run]: Monte Carlo sizes and where results go."""

    name: str = "run"
    seed: int = 1
    replicas: int = 64
    requests: int = 1000
    warmup: int = 100
    backend: str = "auto"
    out: str = ""
    samples: str | int = "all"  # per-request samples written: "all", "none", or the first N per replica
    # a finite run, as a benchmark with a fixed request count (AIPerf) or Dynamo's replay: no request
    # arrives after the measured ones, so the load falls away at the end (default: it stays on
    # until the last measured request ends)
    drain: bool = False
    # a closed loop's warm-up grows with its load: each cell warms up max(warmup, this x concurrency)
    # requests per replica, so a grid can add higher loads later (--resume) without a new warm-up
    # for the cells already run (0: every cell the same `warmup`)
    warmup_per_client: int = 0

    def warmup_for(self, concurrency: int | None) -> int:
        """The warm-up requests per replica of a cell at this concurrency (None: an open loop)."""
        if concurrency is None or not self.warmup_per_client:
            return self.warmup
        return max(self.warmup, self.warmup_per_client * int(concurrency))

    def keep(self) -> int | None:
        """Measured requests of each replica the samples keep (None: all)."""
        if self.samples == "all":
            return None
        return 0 if self.samples == "none" else min(int(self.samples), self.requests)


@dataclass(frozen=True)
class PoaSection:
    """[poa]: how the Price of Anarchy is estimated (see poa_mc.stats.poa_hat and poa_mc.stats.counterfactual)."""

    selfish: str = ""
    social_cost: str = "mean_ttft"
    window: int = 8
    cost: str = "router"
    slots: int = 0  # 0: the pricing's default (slot: window; frozen: ceil(window / K))
    overlap_weight: float = 1.0
    freeze: bool = True
    bootstrap: int = 1000
    stage: str = "auto"  # which routing decision PoA-hat is over (auto, prefill, decode)
    pricing: str = "slot"  # how OPT prices a worker's j-th request of a window (slot, frozen)
    # the `observed` cost of a prefill_first decode decision: the latency from the decision on, or
    # the request's whole TTFT as its client saw it (with [client]: from its creation)
    observed_from: str = "decision"

    def slots_for(self, k: int) -> int:
        """Columns each of k workers gets in a window's assignment."""
        if self.slots:
            return self.slots
        return self.window if self.pricing == "slot" else -(-self.window // k)


@dataclass(frozen=True)
class SloSection:
    """[slo]: per-request latency bounds for goodput and SLO attainment (0: no bound)."""

    ttft_ms: float = 0.0
    itl_ms: float = 0.0

    def is_set(self) -> bool:
        return self.ttft_ms > 0 or self.itl_ms > 0


@dataclass(frozen=True)
class PdGame:
    """[games.pd]: the prefill/decode split game over a GPU budget (poa_mc.stats.games)."""

    gpu_budget: int
    prefill_gpus: int = 1
    decode_gpus: int = 1
    prefill_cost: str = "ttft_mean_ms"
    decode_cost: str = "itl_mean_ms"
    social_cost: str = "e2e_mean_ms"
    policy: str = ""  # whose cells play the game; default [poa].selfish
    planner: PlannerSpec | None = None  # [games.pd.planner]: the Planner moving the split in one run
    planner_starts: tuple[str, ...] = ()  # the splits its runs start at (labels)

    def splits(self) -> list[tuple[int, int]]:
        return budget_splits(self.gpu_budget, self.prefill_gpus, self.decode_gpus)


@dataclass(frozen=True)
class CacheGame:
    """[games.cache]: selfish against coordinated caching over cache capacity x popularity skew
    (poa_mc.stats.games). Every topology of the grid is simulated at every (capacity, skew) pair."""

    prefill_kv_blocks: tuple[int, ...]  # per prefill worker: the capacity axis
    zipf_alpha: tuple[float, ...] = (0.0,)  # prefix-group popularity ~ rank^-alpha: the skew axis
    selfish: str = ""  # the policy whose workers cache selfishly; default [poa].selfish
    coordinated: tuple[str, ...] = ()  # the coordinated placements; default every other policy
    social_cost: str = "mean_ttft"  # one of SOCIAL_COSTS


@dataclass(frozen=True)
class Topology:
    """xP/yD; a caching-game variant also sets the prefill workers' capacity and the skew."""

    label: str
    n_prefill: int
    n_decode: int
    prefill_kv_blocks: int = 0  # 0: cluster.prefill_kv_blocks
    zipf_alpha: float = -1.0  # < 0: the workload's popularity
    planner: bool = False  # the split the Planner starts at ([games.pd.planner]), labelled "xP/yD planner"
    tiers: str = ""  # a [grid] tiers variant (parse_axes.TIER_VARIANTS): the KV tiers it keeps of [cluster]'s


@dataclass(frozen=True)
class TraceRef:
    """Where a `dist = "trace"` length came from (`key`: workload.isl or workload.osl)."""

    key: str
    file: str  # as written in the grid (a path relative to the grid file, or a sample name)
    format: str
    column: str  # isl or osl
    max: int  # 0 = no cap
    sha256: str
    count: int


def jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x
