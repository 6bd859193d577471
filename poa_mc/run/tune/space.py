"""The [tune] table of a grid file: which policy's settings to search, over what, for what.

    [tune]
    policy = "dynamo-default"            # a [[policy]] of kind kv or adaptive: its settings are searched
    objective = "ttft_p99"               # ttft_mean | ttft_p99 | e2e_mean | goodput ([slo] needed)
    space = { overlap_weight = [0.0, 2.0], temperature = [0.0, 1.0] }
    candidates = 16                      # settings raced per load point (the policy's own among them)
    replicas = 4                         # replicas of each candidate in the first round
    validate_replicas = 64               # the winner against the policy's own settings, fresh seeds

The grid's other policies are ignored; its topologies and loads are the points tuned. Bad input
raises ConfigError naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from poa_mc.model.config import parse_grid, read_with_table
from poa_mc.model.grid import GridConfig
from poa_mc.model.sections import ConfigError
from poa_mc.model.spec_policy import PolicySpec

# the router settings the search may vary (PolicySpec fields), each >= 0
SETTINGS = {
    "overlap_weight": "the kv router's weight on cached prefix blocks (omega)",
    "temperature": "the kv router's softmax temperature over its costs (tau; 0: the cheapest)",
    "decode_overlap_weight": "prefill_first's decode decision: its weight on the decode worker's cache",
}
# objective -> True when larger is better
OBJECTIVES = {"ttft_mean": False, "ttft_p99": False, "e2e_mean": False, "goodput": True}


@dataclass(frozen=True)
class TuneSpec:
    source: Path
    grid: GridConfig  # the tuned policy alone
    policy: PolicySpec
    objective: str
    space: dict[str, tuple[float, float]]
    candidates: int
    replicas: int
    validate_replicas: int

    @property
    def maximise(self) -> bool:
        return OBJECTIVES[self.objective]


def load_tune(path: str | Path) -> TuneSpec:
    path = Path(path)
    known = ("policy", "objective", "space", "candidates", "replicas", "validate_replicas")
    doc, t = read_with_table(path, "tune", known, "policy, objective, space")
    grid = parse_grid(doc, str(path), path.parent)
    names = [p.name for p in grid.policies]
    name = t.get("policy", names[0])
    if name not in names:
        raise ConfigError("tune.policy", f"no [[policy]] named {name!r} (the grid has {', '.join(names)})")
    policy = next(p for p in grid.policies if p.name == name)
    if policy.kind not in ("kv", "adaptive"):
        raise ConfigError("tune.policy", f"{name!r} is a {policy.kind} policy; tune searches kv router settings")
    objective = t.get("objective", "ttft_p99")
    if objective not in OBJECTIVES:
        raise ConfigError("tune.objective", f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if objective == "goodput" and not grid.slo.is_set():
        raise ConfigError("tune.objective", "goodput counts requests within [slo]: give the grid an [slo] table")
    space = _space(t.get("space"))
    counts = {}
    for key, default, least in (("candidates", 16, 2), ("replicas", 4, 2), ("validate_replicas", 64, 4)):
        v = t.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise ConfigError(f"tune.{key}", f"must be an integer >= {least}, got {v!r}")
        counts[key] = v
    grid = _only(grid, policy)
    return TuneSpec(path, grid, policy, objective, space, **counts)


def _space(space: object) -> dict[str, tuple[float, float]]:
    if not isinstance(space, dict) or not space:
        raise ConfigError("tune.space", f"a table of setting = [low, high]; settings: {', '.join(SETTINGS)}")
    out = {}
    for name, bounds in space.items():
        key = f"tune.space.{name}"
        if name not in SETTINGS:
            raise ConfigError(key, f"unknown setting (one of {', '.join(SETTINGS)})")
        ok = isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int | float) for b in bounds)
        if not ok or not 0 <= bounds[0] < bounds[1]:
            raise ConfigError(key, f"must be [low, high] with 0 <= low < high, got {bounds!r}")
        out[name] = (float(bounds[0]), float(bounds[1]))
    return out


def _only(grid: GridConfig, policy: PolicySpec) -> GridConfig:
    import dataclasses

    return dataclasses.replace(grid, policies=(policy,))
