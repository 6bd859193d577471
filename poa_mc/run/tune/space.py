"""The [tune] table of a grid file: which policy's settings to search, over what, for what.

    [tune]
    policy = "dynamo-default"            # a [[policy]] of kind kv, llmd, sglang or adaptive: its settings are searched
    objective = "ttft_p99"               # ttft_mean | ttft_p99 | e2e_mean | goodput ([slo] needed)
    space = { overlap_weight = [0.0, 2.0], temperature = [0.0, 1.0] }
    candidates = 16                      # settings raced (the policy's own among them)
    replicas = 4                         # replicas of each candidate in the first round
    validate_replicas = 64               # the winner against the policy's own settings, fresh seeds
    compare = ["adaptive"]               # other [[policy]] tables the winner is validated against
    refine = 0                           # races around the winner after the first, each in a box half as wide

A kv, llmd or sglang policy's static settings are searched per load point. An adaptive policy's [controller]
(its thresholds and its regimes' rows) is one table for every load, so it is searched across the
grid's load points jointly. The grid's other policies are used only as `compare` baselines. Bad
input raises ConfigError naming the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from poa_mc.model.config import parse_grid, read_with_table
from poa_mc.model.grid import GridConfig
from poa_mc.model.sections import ConfigError
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_policy import REGIMES, PolicySpec

# a router's static settings (PolicySpec fields), by policy kind
SETTINGS_BY_KIND = {
    "kv": {
        "overlap_weight": "the kv router's weight on cached prefix blocks (omega)",
        "temperature": "the kv router's softmax temperature over its costs (tau; 0: the cheapest)",
        "decode_overlap_weight": "prefill_first's decode decision: its weight on the decode worker's cache",
    },
    "llmd": {
        "prefix_weight": "llm-d's weight on its prefix-cache score",
        "kv_util_weight": "llm-d's weight on its KV-cache-utilisation score",
        "queue_weight": "llm-d's weight on its queue score",
    },
    "sglang": {
        "cache_threshold": "SGLang's prefix match rate above which the best match is chosen (<= 1)",
        "balance_abs_threshold": "SGLang's load imbalance threshold in requests (rounded to an integer)",
        "balance_rel_threshold": "SGLang's load imbalance threshold, max over min load (>= 1)",
    },
}
SETTINGS = {k: v for table in SETTINGS_BY_KIND.values() for k, v in table.items()}
# an adaptive policy's [controller] (ControllerSpec fields; a regime's row as <regime>_<setting>)
CONTROLLER_SETTINGS = {
    "theta1": "the TTFT P99 (EWMA) from which the controller leaves the below-saturation regime",
    "theta2": "the TTFT P99 (EWMA) from which it is saturated (> theta1)",
    **{
        f"{regime}_{name}": f"the {regime} regime's {name.replace('_', ' ')}"
        for regime in REGIMES
        for name in ("temperature", "overlap_weight")
    },
}
# objective -> True when larger is better
OBJECTIVES = {"ttft_mean": False, "ttft_p99": False, "e2e_mean": False, "goodput": True}
_KEYS = ("policy", "objective", "space", "candidates", "replicas", "validate_replicas", "compare", "refine")


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
    compare: tuple[PolicySpec, ...] = ()
    refine: int = 0  # races around the winner after the first

    @property
    def maximise(self) -> bool:
        return OBJECTIVES[self.objective]

    @property
    def joint(self) -> bool:
        """True when one setting serves every load point (an adaptive policy's controller)."""
        return self.policy.kind == "adaptive"


def own_settings(policy: PolicySpec, names: list[str] | tuple[str, ...]) -> dict[str, float]:
    """The policy's current values of the named settings."""
    c = policy.controller
    out = {}
    for name in names:
        if name in SETTINGS:
            out[name] = float(getattr(policy, name))
        elif name in ("theta1", "theta2"):
            out[name] = float(getattr(c, name))
        else:
            regime, setting = _row(name)
            out[name] = float(getattr(c, setting)[REGIMES.index(regime)])
    return out


def apply(policy: PolicySpec, settings: dict[str, float]) -> PolicySpec:
    """The policy with these settings (static ones on the policy, an integer one rounded, the
    others on its controller)."""
    static = {k: round(v) if isinstance(getattr(policy, k), int) else v for k, v in settings.items() if k in SETTINGS}
    c = policy.controller
    ctl = {k: v for k, v in settings.items() if k in ("theta1", "theta2")}
    rows = {"temperature": list(c.temperature), "overlap_weight": list(c.overlap_weight)}
    for name, v in settings.items():
        if name in SETTINGS or name in ctl:
            continue
        regime, setting = _row(name)
        rows[setting][REGIMES.index(regime)] = v
    rows = {k: tuple(v) for k, v in rows.items()}
    return dataclasses.replace(policy, **static, controller=dataclasses.replace(c, **ctl, **rows))


def ordered(settings: dict[str, float], policy: PolicySpec | None = None) -> dict[str, float]:
    """A candidate as it is simulated: an integer setting rounded; theta1 < theta2 (when both are
    searched and a point crosses them, the two values are swapped: the pair is what the space
    samples)."""
    if policy is not None:
        settings = {k: float(round(v)) if isinstance(getattr(policy, k, None), int) else v for k, v in settings.items()}
    if "theta1" in settings and "theta2" in settings and settings["theta1"] > settings["theta2"]:
        settings = {**settings, "theta1": settings["theta2"], "theta2": settings["theta1"]}
    return settings


def _row(name: str) -> tuple[str, str]:
    regime, _, setting = name.partition("_")
    return regime, setting


def load_tune(path: str | Path) -> TuneSpec:
    path = Path(path)
    doc, t = read_with_table(path, "tune", _KEYS, "policy, objective, space")
    if "schedule" in doc:  # a schedule's cell is every stage at once: no load point to tune for
        raise ConfigError("schedule", "poa-mc tune tunes per load point: remove [schedule] (docs/schedules.md)")
    grid = parse_grid(doc, str(path), path.parent)
    names = [p.name for p in grid.policies]
    name = t.get("policy", names[0])
    if name not in names:
        raise ConfigError("tune.policy", f"no [[policy]] named {name!r} (the grid has {', '.join(names)})")
    policy = next(p for p in grid.policies if p.name == name)
    if policy.kind not in (*SETTINGS_BY_KIND, "adaptive"):
        kinds = ", ".join((*SETTINGS_BY_KIND, "adaptive"))
        raise ConfigError("tune.policy", f"{name!r} is a {policy.kind} policy; tune searches the settings of {kinds}")
    objective = t.get("objective", "ttft_p99")
    if objective not in OBJECTIVES:
        raise ConfigError("tune.objective", f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if objective == "goodput" and not grid.slo.is_set():
        raise ConfigError("tune.objective", "goodput counts requests within [slo]: give the grid an [slo] table")
    space = _space(t.get("space"), policy)
    counts = {}
    bounds = (("candidates", 16, 2), ("replicas", 4, 2), ("validate_replicas", 64, 4), ("refine", 0, 0))
    for key, default, least in bounds:
        v = t.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise ConfigError(f"tune.{key}", f"must be an integer >= {least}, got {v!r}")
        counts[key] = v
    compare = _compare(t.get("compare", []), grid, name)
    return TuneSpec(path, dataclasses.replace(grid, policies=(policy,)), policy, objective, space, **counts,
                    compare=compare)  # fmt: skip


def _space(space: object, policy: PolicySpec) -> dict[str, tuple[float, float]]:
    allowed = CONTROLLER_SETTINGS if policy.kind == "adaptive" else SETTINGS_BY_KIND[policy.kind]
    if not isinstance(space, dict) or not space:
        raise ConfigError("tune.space", f"a table of setting = [low, high]; settings: {', '.join(allowed)}")
    out = {}
    for name, bounds in space.items():
        key = f"tune.space.{name}"
        if name not in allowed:
            why = (
                f"an adaptive policy's router settings are its [controller]'s: one of {', '.join(allowed)}"
                if policy.kind == "adaptive"
                else f"unknown setting (one of {', '.join(allowed)})"
            )
            raise ConfigError(key, why)
        ok = isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int | float) for b in bounds)
        if not ok or not 0 <= bounds[0] < bounds[1]:
            raise ConfigError(key, f"must be [low, high] with 0 <= low < high, got {bounds!r}")
        if name in ("theta1", "theta2") and not bounds[0] > 0:
            raise ConfigError(key, f"a threshold must be > 0: low must be > 0, got {bounds!r}")
        if name in SETTINGS:  # both ends must make a valid policy
            for b in bounds:
                try:
                    apply(policy, {name: float(b)}).validate("policy")
                except SpecError as e:
                    raise ConfigError(key, f"{bounds!r} reaches outside the setting's range: {e.message}") from None
        out[name] = (float(bounds[0]), float(bounds[1]))
    c = policy.controller
    # one threshold searched, the other fixed: every candidate must keep theta1 < theta2
    if "theta1" in out and "theta2" not in out and not out["theta1"][1] < c.theta2:
        raise ConfigError("tune.space.theta1", f"high must be below the controller's theta2 ({c.theta2:g})")
    if "theta2" in out and "theta1" not in out and not out["theta2"][0] > c.theta1:
        raise ConfigError("tune.space.theta2", f"low must be above the controller's theta1 ({c.theta1:g})")
    return out


def _compare(names: object, grid: GridConfig, tuned: str) -> tuple[PolicySpec, ...]:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError("tune.compare", f"a list of [[policy]] names, got {names!r}")
    by_name = {p.name: p for p in grid.policies}
    out = []
    for i, n in enumerate(names):
        if n not in by_name:
            raise ConfigError(f"tune.compare[{i}]", f"no [[policy]] named {n!r} (the grid has {', '.join(by_name)})")
        if n == tuned or n in names[:i]:
            raise ConfigError(f"tune.compare[{i}]", f"{n!r} is the tuned policy or named twice")
        out.append(by_name[n])
    return tuple(out)
