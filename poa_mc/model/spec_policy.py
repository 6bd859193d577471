"""How the router decides: the routing policy (`PolicySpec`) and the adaptive controller that
retunes it during the run (`ControllerSpec`), with their choices (policy kinds, caches, regimes).

Part of the cell's spec (poa_mc/model/spec.py assembles the parts into a `CellSpec`). The policy
kinds come from the one table in poa_mc/kernels/layout.py; `TIER_CREDIT`, the kv router's credit
per KV tier, lives here with the policy that carries it (spec_cluster reads it to keep old cell ids).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from poa_mc.kernels.layout import POLICY_TABLE
from poa_mc.model.spec_error import SpecError

POLICY_KINDS = tuple(name for name, _ in POLICY_TABLE)  # the one table: poa_mc/kernels/layout.py
CACHES = ("per_worker", "global")  # PolicySpec.cache
BATCH_MAX = 64  # held decode decisions a batch router assigns at once (its kernel scratch grows with it)
REGIMES = ("below", "transition", "saturated")
THRESHOLD_UNITS = ("ms", "baseline")
TIER_CREDIT = (1.0, 0.75, 0.25, 0.1)  # Dynamo's credit for a G1..G4 hit (docs/tiers.md)
# Keys of the llmd and sglang policies with their defaults: llm-d's default scheduling profile
# (queue 2, KV-cache utilisation 2, prefix cache 3) and sgl-router's launch defaults (docs/sources.md).
# A policy's id leaves them out at these values, so cells written before they existed keep theirs.
POLICY_LATER_DEFAULTS = {
    "prefix_weight": 3.0,
    "kv_util_weight": 2.0,
    "queue_weight": 2.0,
    "cache_threshold": 0.3,
    "balance_abs_threshold": 64,
    "balance_rel_threshold": 1.5,
    "picker": "max_score",
}
PICKERS = ("max_score", "random", "weighted_random")  # llm-d's pickers; layout.py's LLMD_PICK_* in order


def drop_policy_defaults(policy: dict) -> None:
    """Remove from a policy's dict the keys added later that are at their defaults."""
    for k, default in POLICY_LATER_DEFAULTS.items():
        if policy.get(k, default) == default:
            policy.pop(k, None)


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


@dataclass(frozen=True)
class PolicySpec:
    """How the router decides: the prefill worker in prefill_first (then the decode worker by load,
    as Dynamo does, with `decode_overlap_weight`), the decode worker in decode_first and
    aggregated. `adaptive` is the kv router retuned by `controller` during the run; `batch` holds
    the decode decisions of prefill_first (up to batch_size, or batch_ms after the first) and
    assigns them jointly; `hash` sends each prefix group to its one owner worker (rendezvous
    hashing: no prefix is cached twice). `cache = "global"` makes the prefill workers of
    prefill_first share one LRU over their pooled blocks (the coordinated cache of the caching
    game, docs/games.md) instead of each keeping its own. `llmd` is llm-d's endpoint picker (the
    weighted prefix, KV-utilisation and queue scores, then `picker`'s choice), `sglang` SGLang's
    cache-aware router (shortest queue when imbalanced, else the best prefix match above
    cache_threshold, else the emptiest cache); docs/engine.md, "Other routers"."""

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
    # llmd: the scorers' weights
    prefix_weight: float = 3.0
    kv_util_weight: float = 2.0
    queue_weight: float = 2.0
    # sglang: the match rate for cache affinity, and the load imbalance thresholds
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    # llmd: the picker after the scorers (max-score-picker, random-picker, weighted-random-picker)
    picker: str = "max_score"

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
        for key in ("prefix_weight", "kv_util_weight", "queue_weight"):
            if not getattr(self, key) >= 0:
                raise SpecError(f"{path}.{key}", f"must be >= 0, got {getattr(self, key)}")
        if self.picker not in PICKERS:
            raise SpecError(f"{path}.picker", f"must be one of {', '.join(PICKERS)}, got {self.picker!r}")
        if not 0 <= self.cache_threshold <= 1:
            raise SpecError(f"{path}.cache_threshold", f"must be within [0, 1], got {self.cache_threshold}")
        if self.balance_abs_threshold < 0:
            raise SpecError(f"{path}.balance_abs_threshold", f"must be >= 0 requests, got {self.balance_abs_threshold}")
        if not self.balance_rel_threshold >= 1:
            raise SpecError(f"{path}.balance_rel_threshold", f"must be >= 1, got {self.balance_rel_threshold}")
        tc = self.tier_credit
        if len(tc) != 4 or not all(isinstance(x, (int, float)) and 0 <= x <= 1 for x in tc):
            raise SpecError(f"{path}.tier_credit", f"must be 4 numbers within [0, 1] (G1..G4), got {list(tc)}")
