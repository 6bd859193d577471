"""The request stream of a cell: its length distributions (`Dist`), a replayed trace
(`TraceReplay`), the load generator (`ClientSpec`) and the stream itself (`WorkloadSpec`).

Part of the cell's spec (poa_mc/model/spec.py assembles the parts into a `CellSpec`): frozen
dataclasses whose `validate()` raises `SpecError` naming the offending field path. Kept apart from
the cluster, profile and policy parts, which know nothing of the workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from poa_mc.kernels.layout import MAX_STAGES  # the kernels' parameter rows hold this many stages
from poa_mc.model.spec_error import SpecError

DIST_KINDS = ("fixed", "uniform", "lognormal", "empirical")
ARRIVALS = ("closed", "poisson", "constant")
POPULARITIES = ("uniform", "zipf")


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
class Stage:
    """One stage of a load schedule (`[schedule]`, poa_mc/kernels/schedule.py): `load` is its rate
    (req/s, open loop) or its concurrency (closed loop), `requests` the measured requests it sends."""

    load: float
    requests: int


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
    # a shared prefix of this many tokens (capped by the prompt) instead of prefix_ratio of each
    # prompt: a system prompt of fixed length, as deployments describe it (0: prefix_ratio)
    prefix_tokens: int = 0
    # a load schedule: stages run back to back in one simulation (empty: concurrency / rate_rps for
    # the whole run). The closed loop's `concurrency` is then the largest stage's, rate_rps the first's
    schedule: tuple[Stage, ...] = ()

    def prefix_of(self, isl: float) -> float:
        """Tokens of a prompt of `isl` tokens that its prefix group shares (the kernels take whole
        blocks of it: poa_mc/kernels/requests.py)."""
        if self.prefix_tokens > 0:
            return float(min(self.prefix_tokens, isl))
        return self.prefix_ratio * isl

    def validate(self, path: str = "workload") -> None:
        if self.client is not None:
            self.client.validate("client")
        self.isl.validate(f"{path}.isl")
        self.osl.validate(f"{path}.osl")
        if self.prefix_groups < 1:
            raise SpecError(f"{path}.prefix_groups", f"must be >= 1, got {self.prefix_groups}")
        if self.prefix_tokens < 0:
            raise SpecError(f"{path}.prefix_tokens", f"must be >= 0 (0: use prefix_ratio), got {self.prefix_tokens}")
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
        if self.arrival != "closed" and not self.rate_rps > 0:
            raise SpecError(f"{path}.rate", f"must be > 0 req/s for {self.arrival} arrivals, got {self.rate_rps}")
        if not self.think_ms >= 0:
            raise SpecError(f"{path}.think_ms", f"must be >= 0, got {self.think_ms}")
        if self.schedule:
            self._validate_schedule()

    def _validate_schedule(self) -> None:
        if len(self.schedule) > MAX_STAGES:
            raise SpecError("schedule", f"at most {MAX_STAGES} stages, got {len(self.schedule)}")
        if self.trace is not None:
            raise SpecError("schedule", "a replayed trace sets its own load: remove [schedule] or kind = 'trace'")
        for k, st in enumerate(self.schedule):
            if st.requests < 1:
                raise SpecError(f"schedule.requests[{k}]", f"must be >= 1, got {st.requests}")
            if not (st.load > 0 and math.isfinite(st.load)):
                raise SpecError(f"schedule.load[{k}]", f"must be a finite number > 0, got {st.load}")
            if self.arrival == "closed" and st.load != int(st.load):
                raise SpecError(f"schedule.load[{k}]", f"a concurrency must be a whole number, got {st.load}")
        if self.arrival == "closed" and self.concurrency != max(int(st.load) for st in self.schedule):
            raise SpecError("workload.concurrency", "must be the schedule's largest concurrency")
        if self.arrival != "closed" and self.rate_rps != self.schedule[0].load:
            raise SpecError("workload.rate", "must be the schedule's first rate")

    def stage_ends(self) -> tuple[int, ...]:
        """Each stage's end as a measured-request index (cumulative counts; empty: no schedule)."""
        ends, total = [], 0
        for st in self.schedule:
            total += st.requests
            ends.append(total)
        return tuple(ends)


# workload keys added after cells had ids: at these defaults they are left out of ids, fingerprints
# and stored specs, which then stay those of the runs written before them
WORKLOAD_LATER_DEFAULTS = {"prefix_tokens": 0, "schedule": ()}


def drop_workload_defaults(workload: dict) -> None:
    """Remove from a workload's dict the keys added later that are at their defaults."""
    for k, default in WORKLOAD_LATER_DEFAULTS.items():
        if workload.get(k, default) == default:
            workload.pop(k, None)
