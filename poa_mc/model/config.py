"""Grid files: TOML schema, strict validation, and the resolved grid.

A grid file names one workload, one cluster template, one timing profile, a list of topologies,
a list of loads and a list of routing policies. `load_grid` parses it with tomllib, checks every
key (unknown keys, wrong types, empty lists, duplicates) and returns a frozen `GridConfig`. Every
error is a `ConfigError` whose `path` names the offending key, e.g. `grid.topology[1]`. The
per-cell checks of `CellSpec.validate()` also run here (through `grid.expand`), so a grid that
loads is a grid that can run. docs/grid.md documents every key, unit and default.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
from pathlib import Path
from typing import Any

import tomllib

from poa_mc.model.grid import GridConfig
from poa_mc.model.profiles import resolve_profile
from poa_mc.model.replay import REPLAYS, SAMPLES, build_table
from poa_mc.model.sections import (
    BACKENDS,
    INT32_MAX,
    INT64_MAX,
    MAX_BOOTSTRAP,
    PLANNER_SUFFIX,
    POA_COSTS,
    POA_OBSERVED_FROM,
    POA_PRICINGS,
    POA_STAGES,
    POOL_COSTS,
    SECTIONS,
    SOCIAL_COSTS,
    TOPOLOGY_RE,
    CacheGame,
    ConfigError,
    PdGame,
    PoaSection,
    RunSection,
    SloSection,
    Topology,
    TraceRef,
)
from poa_mc.model.spec import (
    ARRIVALS,
    POPULARITIES,
    REGIMES,
    TIER_CREDIT,
    ClientSpec,
    ClusterSpec,
    ControllerSpec,
    Dist,
    PlannerSpec,
    PolicySpec,
    ProfileSpec,
    SpecError,
    TraceReplay,
    WorkloadSpec,
)
from poa_mc.model.traces import FORMATS as TRACE_FORMATS
from poa_mc.model.traces import load_trace, sample_names, sample_path

# ---------------------------------------------------------------------------------------------
# small typed readers: each returns the value or raises ConfigError naming the key path


def _type_name(t: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(t, t.__name__)


def _coerce(value: Any, typ: type, path: str) -> Any:
    # bool is a subclass of int in Python; TOML keeps them apart, so do we.
    if typ is bool:
        ok = isinstance(value, bool)
    elif typ is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif typ is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            value = float(value)
            if not math.isfinite(value):
                raise ConfigError(path, f"must be a finite number, got {value}")
    else:
        ok = isinstance(value, typ)
    if not ok:
        raise ConfigError(path, f"must be {_type_name(typ)}, got {type(value).__name__} {value!r}")
    return value


def _check_keys(table: dict, allowed: dict | tuple, path: str) -> None:
    for key in table:
        if key not in allowed:
            hint = difflib.get_close_matches(key, list(allowed), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else f"; allowed: {', '.join(sorted(allowed))}"
            raise ConfigError(f"{path}.{key}" if path else key, f"unknown key{extra}")


def _table(doc: dict, key: str, path: str) -> dict:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(path, f"must be a table, got {type(value).__name__}")
    return value


def _read_fields(table: dict, fields: dict[str, tuple[type, Any]], path: str) -> dict[str, Any]:
    _check_keys(table, fields, path)
    return {k: (_coerce(table[k], t, f"{path}.{k}") if k in table else default) for k, (t, default) in fields.items()}


def _choice(value: str, choices: tuple[str, ...], path: str) -> str:
    if value not in choices:
        raise ConfigError(path, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def _positive(value: float, path: str, *, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(path, f"must be {'>= 0' if allow_zero else '> 0'}, got {value}")


# ---------------------------------------------------------------------------------------------
# sections


_RUN_FIELDS = ("name", "seed", "replicas", "requests", "warmup", "backend", "out", "drain")


def _parse_run(doc: dict) -> RunSection:
    table = _table(doc, "run", "run")
    _check_keys(table, (*_RUN_FIELDS, "samples"), "run")
    samples = _parse_samples(table.get("samples", "all"))
    table = {k: v for k, v in table.items() if k != "samples"}
    f = _read_fields(
        table,
        {
            "name": (str, "run"),
            "seed": (int, 1),
            "replicas": (int, 64),
            "requests": (int, 1000),
            "warmup": (int, 100),
            "backend": (str, "auto"),
            "out": (str, ""),
            "drain": (bool, False),
        },
        "run",
    )
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", f["name"]) or set(f["name"]) == {"."}:
        raise ConfigError("run.name", f"use letters, digits, '.', '_' or '-' only, got {f['name']!r}")
    if not 0 <= f["seed"] <= INT64_MAX:
        raise ConfigError("run.seed", f"must be in 0..{INT64_MAX:,}, got {f['seed']}")
    _positive(f["replicas"], "run.replicas")
    _positive(f["requests"], "run.requests")
    _positive(f["warmup"], "run.warmup", allow_zero=True)
    # the kernels index a replica's requests and the replicas with 32-bit integers
    if f["replicas"] > INT32_MAX:
        raise ConfigError("run.replicas", f"must be at most {INT32_MAX:,}, got {f['replicas']:,}")
    if f["requests"] + f["warmup"] > INT32_MAX:
        raise ConfigError(
            "run.warmup" if f["warmup"] > f["requests"] else "run.requests",
            f"requests + warmup must be at most {INT32_MAX:,}, got {f['requests'] + f['warmup']:,}",
        )
    _choice(f["backend"], BACKENDS, "run.backend")
    if "out" in table and not f["out"].strip():
        raise ConfigError("run.out", "must not be empty (leave it out for runs/<name>)")
    if not f["out"]:
        f["out"] = f"runs/{f['name']}"
    return RunSection(**f, samples=samples)


def _parse_samples(value: Any) -> str | int:
    """[run] samples: "all", "none", or N >= 1 (the first N measured requests of each replica)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ConfigError("run.samples", f'must be "all", "none" or a number of requests, got {value!r}')
    if isinstance(value, str):
        if value in ("all", "none"):
            return value
        raise ConfigError("run.samples", f'must be "all", "none" or a number of requests, got {value!r}')
    if value < 0:
        raise ConfigError("run.samples", f"must be >= 0 requests per replica, got {value}")
    return "none" if value == 0 else value


_DIST_FIELDS: dict[str, dict[str, tuple[type, Any]]] = {
    "fixed": {"value": (int, None)},
    "uniform": {"low": (int, None), "high": (int, None)},
    "lognormal": {"mean": (float, None), "sigma": (float, None), "cap": (int, 1 << 20)},
    "empirical": {"values": (list, None)},
    "trace": {"file": (str, None), "format": (str, None), "max": (int, 0)},
}


def _resolve_trace_file(name: str, base_dir: Path, path: str) -> Path:
    """The file to read: relative paths are taken from the grid file's directory; a bare name
    that is no file there may name a shipped sample (`mooncake_sample`)."""

    p = Path(name).expanduser()
    if not p.is_absolute():
        p = base_dir / p
    if p.is_file():
        return p
    hint = ""
    if "/" not in name and "\\" not in name:
        sample = sample_path(name)
        if sample is not None:
            return sample
        hint = f" (nor a shipped sample: {', '.join(sample_names())})"
    raise ConfigError(f"{path}.file", f"no such file {str(p)!r}{hint}")


def _parse_trace_dist(value: dict, path: str, base_dir: Path) -> tuple[Dist, TraceRef]:

    fields = _DIST_FIELDS["trace"]
    _check_keys(value, {"dist": None, **fields}, path)
    for k in ("file", "format"):
        if k not in value:
            raise ConfigError(f"{path}.{k}", "required for dist = 'trace'")
    name = _coerce(value["file"], str, f"{path}.file")
    fmt = _choice(_coerce(value["format"], str, f"{path}.format"), TRACE_FORMATS, f"{path}.format")
    cap = _coerce(value.get("max", 0), int, f"{path}.max")
    if "max" in value:
        _positive(cap, f"{path}.max")
    column = path.rsplit(".", 1)[-1]
    if column not in ("isl", "osl"):
        raise ConfigError(f"{path}.dist", "dist = 'trace' is for workload.isl and workload.osl only")
    file = _resolve_trace_file(name, base_dir, path)
    try:
        trace = load_trace(file, fmt)
    except SpecError as e:
        raise ConfigError(f"{path}.file", e.message) from None
    # Lengths of 0 (e.g. an Azure request that generated nothing) become 1: a Dist draws counts >= 1.
    values = getattr(trace, column).clip(min=1)
    if cap:
        values = values.clip(max=cap)
    dist = Dist("empirical", values=tuple(int(v) for v in values))
    return dist, TraceRef(path, name, fmt, column, cap, trace.sha256, len(values))


def parse_dist(value: Any, path: str, base_dir: Path | None = None) -> Dist:
    """A token-count distribution: a plain integer (fixed) or a `{ dist = ..., ... }` table.

    `dist = "trace"` resolves to an empirical Dist of the trace's lengths; its file is read
    relative to `base_dir` (the grid file's directory; default the working directory). Use
    `parse_length` to also get the TraceRef that describes it in the resolved grid."""
    return parse_length(value, path, base_dir)[0]


def parse_length(value: Any, path: str, base_dir: Path | None = None) -> tuple[Dist, TraceRef | None]:
    """parse_dist, plus the TraceRef of a `dist = "trace"` table (None for every other kind)."""
    ref = None
    if isinstance(value, int) and not isinstance(value, bool):
        dist = Dist("fixed", value=value)
    elif isinstance(value, dict) and value.get("dist") == "trace":
        dist, ref = _parse_trace_dist(value, path, base_dir if base_dir is not None else Path.cwd())
    elif isinstance(value, dict):
        kind = _coerce(value.get("dist", "fixed"), str, f"{path}.dist")
        if kind not in _DIST_FIELDS:
            raise ConfigError(f"{path}.dist", f"must be one of {', '.join(_DIST_FIELDS)}, got {kind!r}")
        fields = _DIST_FIELDS[kind]
        _check_keys(value, {"dist": None, **fields}, path)
        kw: dict[str, Any] = {}
        for k, (t, default) in fields.items():
            if k not in value:
                if default is None:
                    raise ConfigError(f"{path}.{k}", f"required for dist = {kind!r}")
                kw[k] = default
            else:
                kw[k] = _coerce(value[k], t, f"{path}.{k}")
        if kind == "empirical":
            if not kw["values"]:
                raise ConfigError(f"{path}.values", "must be a non-empty list of token counts")
            kw["values"] = tuple(_coerce(v, int, f"{path}.values[{i}]") for i, v in enumerate(kw["values"]))
        dist = Dist(kind, **kw)
    else:
        raise ConfigError(path, f"must be an integer or a {{ dist = ... }} table, got {type(value).__name__}")
    try:
        dist.validate(path)
    except SpecError as e:
        raise ConfigError(e.path, e.message) from None
    return dist, ref


_REPLAY_FIELDS = {
    "kind": (str, "trace"),
    "format": (str, None),
    "path": (str, None),
    "replay": (str, "closed"),
    "sample": (str, "offset"),
    "trace_block_size": (int, 512),
    "prefix_groups": (int, 16),
    "prefix_ratio": (float, 0.5),
    "popularity": (str, "uniform"),
    "zipf_alpha": (float, 1.0),
}


TIER_VARIANTS = ("g1", "g1+g2", "g1+g2+g3", "g1+g2+g3+g4")


def _tier_variants(table: dict) -> list[str]:
    """`[grid] tiers`: each topology once per variant, with the [cluster]'s lower tiers it names (the
    others set to 0), so G1 alone and G1 + G2 + G3 are compared on the same requests."""
    values = table["tiers"]
    if not isinstance(values, list) or not values:
        raise ConfigError("grid.tiers", f'must be a non-empty list such as ["g1", "g1+g2+g3"], got {values!r}')
    out: list[str] = []
    for i, v in enumerate(values):
        v = _choice(_coerce(v, str, f"grid.tiers[{i}]"), TIER_VARIANTS, f"grid.tiers[{i}]")
        if v in out:
            raise ConfigError(f"grid.tiers[{i}]", f"{v!r} repeats grid.tiers[{out.index(v)}]")
        out.append(v)
    return out


def _parse_replay(table: dict, base_dir: Path) -> tuple[WorkloadSpec, str]:
    """`[workload] kind = "trace"`: the trace replayed as it happened (poa_mc/model/replay.py). Its lengths
    are the trace's; Azure and BurstGPT traces (no hash_ids) take the synthetic prefix keys."""

    for key in ("isl", "osl", "arrival", "think_ms"):
        if key in table:
            raise ConfigError(f"workload.{key}", "comes from the trace with kind = 'trace'")
    f = _read_fields(table, _REPLAY_FIELDS, "workload")
    for key in ("format", "path"):
        if f[key] is None:
            raise ConfigError(f"workload.{key}", "required with kind = 'trace'")
    fmt = _choice(f["format"], TRACE_FORMATS, "workload.format")
    replay = _choice(f["replay"], REPLAYS, "workload.replay")
    sample = _choice(f["sample"], SAMPLES, "workload.sample")
    if sample == "sessions" and replay != "closed":
        raise ConfigError("workload.sample", "sessions are drawn for replay = 'closed' only")
    _positive(f["trace_block_size"], "workload.trace_block_size")
    try:
        file = _resolve_trace_file(f["path"], base_dir, "workload")
    except ConfigError as e:
        raise ConfigError("workload.path", e.message) from None
    tb = f["trace_block_size"]
    try:
        trace = load_trace(file, fmt)
        table_ = build_table(trace, replay=replay, block_size=tb, trace_block_size=tb)
    except SpecError as e:
        raise ConfigError("workload.path", e.message) from None
    groups = table_.groups if table_.groups else f["prefix_groups"]
    ref = TraceReplay(
        file=f["path"], format=fmt, sha256=trace.sha256, replay=replay, sample=sample,
        trace_block_size=f["trace_block_size"], rows=len(trace), sessions=len(table_.starts),
        rate_rps=table_.rate_rps if replay == "timestamps" else 0.0, kept_share=table_.kept_share,
        path=str(file.resolve()),
    )  # fmt: skip
    spec = WorkloadSpec(
        isl=Dist("empirical", values=tuple(int(v) for v in table_.isl)),
        osl=Dist("empirical", values=tuple(int(v) for v in table_.osl)),
        prefix_groups=groups,
        prefix_ratio=f["prefix_ratio"],
        popularity=_choice(f["popularity"], POPULARITIES, "workload.popularity"),
        zipf_alpha=f["zipf_alpha"],
        arrival="closed" if replay == "closed" else "poisson",
        trace=ref,
    )
    return spec, spec.arrival


def _parse_workload(doc: dict, base_dir: Path) -> tuple[WorkloadSpec, str, tuple[TraceRef, ...]]:
    table = _table(doc, "workload", "workload")
    for key in ("concurrency", "rate", "rate_rps"):
        if key in table:
            raise ConfigError(f"workload.{key}", "the load is a grid axis: set it as a list in [grid]")
    kind = table.get("kind", "synthetic")
    if kind not in ("synthetic", "trace"):
        raise ConfigError("workload.kind", f"must be synthetic or trace, got {kind!r}")
    if kind == "trace":
        spec, arrival = _parse_replay(table, base_dir)
        return spec, arrival, ()
    table = {k: v for k, v in table.items() if k != "kind"}
    for key in ("concurrency", "rate", "rate_rps"):
        if key in table:
            raise ConfigError(f"workload.{key}", "the load is a grid axis: set it as a list in [grid]")
    base = WorkloadSpec()
    f = _read_fields(
        {k: v for k, v in table.items() if k not in ("isl", "osl")},
        {
            "prefix_groups": (int, base.prefix_groups),
            "prefix_ratio": (float, base.prefix_ratio),
            "popularity": (str, base.popularity),
            "zipf_alpha": (float, base.zipf_alpha),
            "arrival": (str, base.arrival),
            "think_ms": (float, base.think_ms),
        },
        "workload",
    )
    # checked here because the grid's load axis follows from the arrival process
    _choice(f["arrival"], ARRIVALS, "workload.arrival")
    _choice(f["popularity"], POPULARITIES, "workload.popularity")
    refs: list[TraceRef] = []
    for key in ("isl", "osl"):
        if key in table:
            f[key], ref = parse_length(table[key], f"workload.{key}", base_dir)
            if ref is not None:
                refs.append(ref)
        else:
            f[key] = getattr(base, key)
    spec = WorkloadSpec(**f)
    return spec, f["arrival"], tuple(refs)


def _parse_client(doc: dict) -> ClientSpec | None:
    """[client]: the load generator (poa_mc/kernels/client.py); absent, requests reach the frontend as they
    are created and no client is modelled."""
    if "client" not in doc:
        return None
    table = _table(doc, "client", "client")
    base = ClientSpec()
    f = _read_fields(
        table, {"max_connections": (int, base.max_connections), "overhead_ms": (float, base.overhead_ms)}, "client"
    )
    spec = ClientSpec(**f)
    try:
        spec.validate("client")
    except SpecError as e:
        raise ConfigError(e.path, e.message) from None
    return spec


_CLUSTER_FIELDS = {
    f.name: (float if isinstance(f.default, float) else type(f.default), f.default)
    for f in dataclasses.fields(ClusterSpec)
    if f.name not in ("n_prefill", "n_decode")
}


def _parse_cluster(doc: dict) -> ClusterSpec:
    table = _table(doc, "cluster", "cluster")
    for key in ("n_prefill", "n_decode"):
        if key in table:
            raise ConfigError(f"cluster.{key}", 'worker counts come from grid.topology ("xP/yD")')
    spec = ClusterSpec(**_read_fields(table, _CLUSTER_FIELDS, "cluster"))
    try:
        spec.validate("cluster")  # before the profile reads block_size, so its errors name cluster.*
    except SpecError as e:
        raise ConfigError(e.path, e.message) from None
    return spec


def _parse_profile(doc: dict, cluster: ClusterSpec | None = None, base_dir: Path | None = None) -> ProfileSpec:
    """The [profile] table through poa_mc.model.profiles; roofline decode slopes are per unit of the
    decode worker's KV capacity, hence the cluster's decode_kv_blocks and block_size; an aic
    profile's table file is read relative to the grid file's directory."""
    table = _table(doc, "profile", "profile")
    if not table:
        table = {"name": "dynamo-mocker"}

    try:
        if cluster is not None:
            profile = resolve_profile(
                table,
                "profile",
                kv_blocks=cluster.decode_kv_blocks,
                block_size=cluster.block_size,
                base_dir=base_dir,
            )
        else:
            profile = resolve_profile(table, "profile", base_dir=base_dir)
    except SpecError as e:
        raise ConfigError(e.path, e.message) from None
    except (TypeError, ValueError, KeyError) as e:
        raise ConfigError("profile", str(e)) from None
    return profile


def _arrival_key(doc: dict, arrival: str) -> str:
    """The setting that chose the load axis, as the user wrote it (a replay's, or the arrival's)."""
    workload = doc.get("workload", {})
    if isinstance(workload, dict) and workload.get("kind") == "trace":
        return f"workload.replay = {workload.get('replay', 'closed')!r}"
    return f"workload.arrival = {arrival!r}"


def _parse_grid_axes(
    doc: dict,
    arrival: str,
    flow: str = "prefill_first",
    pd_game: PdGame | None = None,
    cache_game: CacheGame | None = None,
) -> tuple[tuple[Topology, ...], str, tuple[float, ...]]:
    if "grid" not in doc:
        raise ConfigError("grid", "missing section: a grid needs at least `topology` and a load list")
    table = dict(_table(doc, "grid", "grid"))
    _check_keys(table, ("topology", "concurrency", "rate", "tiers"), "grid")
    if pd_game is not None:
        if "topology" in table:
            raise ConfigError(
                "grid.topology", "[games.pd] sets the topologies (every split of its gpu_budget): remove one of them"
            )
        table["topology"] = [f"{n_p}P/{n_d}D" for n_p, n_d in pd_game.splits()]
        if pd_game.planner is not None:
            table["topology"] += [f"{label}{PLANNER_SUFFIX}" for label in pd_game.planner_starts]

    def read_list(key: str) -> list:
        value = table[key]
        if not isinstance(value, list):
            raise ConfigError(f"grid.{key}", f"must be a list, got {type(value).__name__}")
        if not value:
            raise ConfigError(f"grid.{key}", "must not be empty")
        return value

    if "topology" not in table:
        raise ConfigError("grid.topology", 'required: a list such as ["1P/2D", "1P/5D"]')
    topologies: list[Topology] = []
    seen: dict[tuple[int, int], int] = {}
    for i, label in enumerate(read_list("topology")):
        path = f"grid.topology[{i}]"
        label = _coerce(label, str, path)
        if pd_game is not None and label.endswith(PLANNER_SUFFIX):
            m = TOPOLOGY_RE.match(label[: -len(PLANNER_SUFFIX)])
            topologies.append(Topology(label, int(m.group(1)), int(m.group(2)), planner=True))
            continue
        m = TOPOLOGY_RE.match(label)
        if not m:
            raise ConfigError(path, f'"{label}" is not of the form xP/yD (e.g. "1P/2D")')
        key = (int(m.group(1)), int(m.group(2)))
        if flow == "aggregated" and key[0] != 0:
            raise ConfigError(
                path,
                f'"{label}": cluster.flow = "aggregated" has no prefill pool (every worker prefills and decodes); '
                f'write "0P/{key[1]}D"',
            )
        if key in seen:
            raise ConfigError(path, f'"{label}" repeats grid.topology[{seen[key]}]')
        seen[key] = i
        topologies.append(Topology(f"{key[0]}P/{key[1]}D", *key))
    if cache_game is not None:
        topologies = [
            dataclasses.replace(t, label=f"{t.label} kv={c} a={a:g}", prefill_kv_blocks=c, zipf_alpha=a)
            for t in topologies
            for c in cache_game.prefill_kv_blocks
            for a in cache_game.zipf_alpha
        ]

    if "tiers" in table:
        topologies = [
            dataclasses.replace(t, label=f"{t.label} {v}", tiers=v) for t in topologies for v in _tier_variants(table)
        ]

    axis = "concurrency" if arrival == "closed" else "rate"
    other = "rate" if axis == "concurrency" else "concurrency"
    if other in table:
        raise ConfigError(f"grid.{other}", f"{_arrival_key(doc, arrival)} sweeps grid.{axis}, not grid.{other}")
    if axis not in table:
        raise ConfigError(f"grid.{axis}", f"required for {_arrival_key(doc, arrival)}")
    loads: list[float] = []
    for i, value in enumerate(read_list(axis)):
        path = f"grid.{axis}[{i}]"
        value = _coerce(value, int if axis == "concurrency" else float, path)
        _positive(value, path)
        if value in loads:
            raise ConfigError(path, f"{value} repeats grid.{axis}[{loads.index(value)}]")
        loads.append(value)
    return tuple(topologies), axis, tuple(loads)


_POLICY_FIELDS = {
    "name": (str, None),
    "kind": (str, "kv"),
    "overlap_weight": (float, 1.0),
    "temperature": (float, 0.0),
    "d": (int, 2),
    "decode_overlap_weight": (float, 0.0),
    "batch_size": (int, 8),
    "batch_ms": (float, 5.0),
    "cache": (str, "per_worker"),
    "tier_credit": (list, list(TIER_CREDIT)),
}

_CONTROLLER_FIELDS = {
    f.name: (f.type if isinstance(f.type, type) else {"float": float, "int": int, "str": str}[f.type], f.default)
    for f in dataclasses.fields(ControllerSpec)
    if f.name not in ("temperature", "overlap_weight")
}


def _parse_controller(doc: dict) -> ControllerSpec:
    """[controller]: scalar keys, and one sub-table per regime with its router settings."""
    table = dict(_table(doc, "controller", "controller"))
    rows = {}
    for regime in REGIMES:
        if regime in table:
            rows[regime] = _read_fields(
                _table(table, regime, f"controller.{regime}"),
                {"temperature": (float, None), "overlap_weight": (float, None)},
                f"controller.{regime}",
            )
            del table[regime]
    _check_keys(table, {**_CONTROLLER_FIELDS, **dict.fromkeys(REGIMES)}, "controller")
    f = _read_fields(table, _CONTROLLER_FIELDS, "controller")
    base = ControllerSpec()
    tau, omega = list(base.temperature), list(base.overlap_weight)
    for i, regime in enumerate(REGIMES):
        row = rows.get(regime, {})
        if row.get("temperature") is not None:
            tau[i] = row["temperature"]
        if row.get("overlap_weight") is not None:
            omega[i] = row["overlap_weight"]
    spec = ControllerSpec(**f, temperature=tuple(tau), overlap_weight=tuple(omega))
    try:
        spec.validate("controller")
    except SpecError as e:
        raise ConfigError(e.path, e.message) from None
    return spec


def _parse_policies(doc: dict, controller: ControllerSpec) -> tuple[PolicySpec, ...]:
    if "policy" not in doc:
        raise ConfigError("policy", "at least one [[policy]] table is required")
    tables = doc["policy"]
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError("policy", "must be an array of tables: write each one as [[policy]]")
    if not tables:
        raise ConfigError("policy", "must not be empty")
    policies: list[PolicySpec] = []
    names: dict[str, int] = {}
    for i, t in enumerate(tables):
        path = f"policy[{i}]"
        if "name" not in t:
            raise ConfigError(f"{path}.name", "required: every policy needs a unique name")
        f = _read_fields(t, _POLICY_FIELDS, path)
        f["tier_credit"] = tuple(f["tier_credit"])
        if f["name"] in names:
            raise ConfigError(f"{path}.name", f"duplicate policy name {f['name']!r} (also policy[{names[f['name']]}])")
        if not f["name"] or "/" in f["name"]:
            raise ConfigError(f"{path}.name", f"must be non-empty and contain no '/', got {f['name']!r}")
        names[f["name"]] = i
        # only adaptive policies carry the [controller] table: other cells keep their ids
        spec = PolicySpec(**f, controller=controller if f["kind"] == "adaptive" else ControllerSpec())
        try:
            spec.validate(path)
        except SpecError as e:
            raise ConfigError(e.path, e.message) from None
        policies.append(spec)
    return tuple(policies)


def _parse_poa(doc: dict, policies: tuple[PolicySpec, ...]) -> PoaSection:
    f = _read_fields(
        _table(doc, "poa", "poa"),
        {
            "selfish": (str, ""),
            "social_cost": (str, "mean_ttft"),
            "window": (int, 8),
            "cost": (str, "router"),
            "slots": (int, 0),
            "overlap_weight": (float, 1.0),
            "freeze": (bool, True),
            "bootstrap": (int, 1000),
            "stage": (str, "auto"),
            "pricing": (str, "slot"),
            "observed_from": (str, "decision"),
        },
        "poa",
    )
    names = [p.name for p in policies]
    if not f["selfish"]:
        # The greedy KV router is what the paper calls selfish; fall back to the first policy.
        f["selfish"] = next((p.name for p in policies if p.kind == "kv"), names[0])
    elif f["selfish"] not in names:
        raise ConfigError("poa.selfish", f"{f['selfish']!r} names no policy; policies: {', '.join(names)}")
    _choice(f["social_cost"], SOCIAL_COSTS, "poa.social_cost")
    _choice(f["cost"], POA_COSTS, "poa.cost")
    _choice(f["stage"], POA_STAGES, "poa.stage")
    _choice(f["pricing"], POA_PRICINGS, "poa.pricing")
    _choice(f["observed_from"], POA_OBSERVED_FROM, "poa.observed_from")
    _positive(f["window"], "poa.window")
    _positive(f["slots"], "poa.slots", allow_zero=True)
    _positive(f["overlap_weight"], "poa.overlap_weight", allow_zero=True)
    if not 100 <= f["bootstrap"] <= MAX_BOOTSTRAP:
        raise ConfigError("poa.bootstrap", f"must be 100..{MAX_BOOTSTRAP:,} resamples, got {f['bootstrap']:,}")
    if f["slots"] > f["window"]:  # a worker takes at most every decision of a window
        raise ConfigError("poa.slots", f"must be at most poa.window ({f['window']}), got {f['slots']:,}")
    return PoaSection(**f)


def _parse_pd_game(doc: dict, flow: str, slo: SloSection | None = None) -> PdGame | None:
    games = _table(doc, "games", "games")
    _check_keys(games, ("pd", "cache"), "games")
    if "pd" not in games:
        return None

    table = _table(games, "pd", "games.pd")
    if "gpu_budget" not in table:
        raise ConfigError("games.pd.gpu_budget", "required: the GPUs the two pools share")
    f = _read_fields(
        table,
        {
            "gpu_budget": (int, None),
            "prefill_gpus": (int, 1),
            "decode_gpus": (int, 1),
            "prefill_cost": (str, "ttft_mean_ms"),
            "decode_cost": (str, "itl_mean_ms"),
            "social_cost": (str, "e2e_mean_ms"),
            "policy": (str, ""),
            "planner": (dict, None),
        },
        "games.pd",
    )
    planner_table = f.pop("planner")
    for key in ("gpu_budget", "prefill_gpus", "decode_gpus"):
        _positive(f[key], f"games.pd.{key}")
    for key in ("prefill_cost", "decode_cost", "social_cost"):
        _choice(f[key], POOL_COSTS, f"games.pd.{key}")
    if flow == "aggregated":
        raise ConfigError("games.pd", 'needs a prefill pool: cluster.flow = "aggregated" has none')
    game = PdGame(**f)
    if len(game.splits()) < 2:
        raise ConfigError(
            "games.pd.gpu_budget",
            f"{game.gpu_budget} GPUs make {len(game.splits())} split(s) of {game.prefill_gpus}-GPU prefill and "
            f"{game.decode_gpus}-GPU decode workers; a game needs at least 2",
        )
    if planner_table is not None:
        game = _parse_planner(planner_table, game, slo or SloSection())
    return game


def _parse_planner(table: dict, game: PdGame, slo: SloSection) -> PdGame:
    """[games.pd.planner]: Dynamo's Planner moving the split in one run, from each start split."""
    path = "games.pd.planner"
    f = _read_fields(
        table,
        {"interval_ms": (float, 30_000.0), "startup_ms": (float, 0.0), "starts": (list, None), "log_moves": (int, 256)},
        path,
    )
    labels = [f"{n_p}P/{n_d}D" for n_p, n_d in game.splits()]
    starts = f.pop("starts")
    if starts is None:
        starts = labels
    if not starts:
        raise ConfigError(f"{path}.starts", "must not be empty")
    for i, label in enumerate(starts):
        label = _coerce(label, str, f"{path}.starts[{i}]")
        if label not in labels:
            raise ConfigError(f"{path}.starts[{i}]", f"{label!r} is not a split of the budget: {', '.join(labels)}")
        if label in starts[:i]:
            raise ConfigError(f"{path}.starts[{i}]", f"{label!r} repeats")
    if not (slo.ttft_ms > 0 and slo.itl_ms > 0):
        raise ConfigError(path, "needs its targets: an [slo] table with ttft_ms and itl_ms")
    spec = PlannerSpec(
        game.gpu_budget, game.prefill_gpus, game.decode_gpus, ttft_ms=slo.ttft_ms, itl_ms=slo.itl_ms, **f
    )
    try:
        spec.validate(path)
    except SpecError as e:
        raise ConfigError(e.path, e.message) from None
    return dataclasses.replace(game, planner=spec, planner_starts=tuple(starts))


def _parse_cache_game(
    doc: dict, cluster: ClusterSpec, workload: WorkloadSpec, policies: tuple[PolicySpec, ...], selfish: str
) -> CacheGame | None:
    games = _table(doc, "games", "games")
    if "cache" not in games:
        return None
    path = "games.cache"
    table = dict(_table(games, "cache", path))
    _check_keys(table, ("prefill_kv_blocks", "zipf_alpha", "selfish", "coordinated", "social_cost"), path)
    if cluster.flow != "prefill_first":
        raise ConfigError(path, "is played by the prefill workers' caches: it needs cluster.flow = prefill_first")
    if "pd" in games:
        raise ConfigError(path, "[games.pd] and [games.cache] each set the topologies: give them separate grids")

    def read_list(key: str, typ: type, default: tuple) -> tuple:
        if key not in table:
            if not default:
                raise ConfigError(f"{path}.{key}", "required: a list of values to sweep")
            return default
        value = table[key]
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{path}.{key}", "must be a non-empty list")
        out = []
        for i, v in enumerate(value):
            v = _coerce(v, typ, f"{path}.{key}[{i}]")
            if v in out:
                raise ConfigError(f"{path}.{key}[{i}]", f"{v} repeats {path}.{key}[{out.index(v)}]")
            out.append(v)
        return tuple(out)

    capacities = read_list("prefill_kv_blocks", int, ())
    prompt = -(-workload.isl.max_value() // cluster.block_size)
    for i, c in enumerate(capacities):
        if c < prompt:
            raise ConfigError(
                f"{path}.prefill_kv_blocks[{i}]",
                f"{c} blocks cannot hold a prompt of up to {workload.isl.max_value()} tokens ({prompt} blocks)",
            )
    alphas = read_list("zipf_alpha", float, (0.0,))
    for i, a in enumerate(alphas):
        _positive(a, f"{path}.zipf_alpha[{i}]", allow_zero=True)
    names = [p.name for p in policies]
    f = _read_fields(
        {k: table[k] for k in ("selfish", "social_cost") if k in table},
        {"selfish": (str, selfish), "social_cost": (str, "mean_ttft")},
        path,
    )
    _choice(f["social_cost"], SOCIAL_COSTS, f"{path}.social_cost")
    if f["selfish"] not in names:
        raise ConfigError(f"{path}.selfish", f"{f['selfish']!r} names no policy; policies: {', '.join(names)}")
    coordinated = read_list("coordinated", str, tuple(n for n in names if n != f["selfish"]) or ("",))
    for i, name in enumerate(coordinated):
        if name not in names or name == f["selfish"]:
            raise ConfigError(
                f"{path}.coordinated[{i}]" if "coordinated" in table else f"{path}.coordinated",
                f"{name!r} is not a policy other than the selfish one; policies: {', '.join(names)}",
            )
    return CacheGame(capacities, alphas, f["selfish"], coordinated, f["social_cost"])


def _parse_slo(doc: dict) -> SloSection:
    f = _read_fields(_table(doc, "slo", "slo"), {"ttft_ms": (float, 0.0), "itl_ms": (float, 0.0)}, "slo")
    for key, value in f.items():
        _positive(value, f"slo.{key}", allow_zero=True)
    return SloSection(**f)


def parse_grid(doc: dict, source: str = "<string>", base_dir: str | Path | None = None) -> GridConfig:
    """Validate a parsed TOML document and resolve it into a GridConfig (cells checked too).

    Trace files (`dist = "trace"`) are read relative to `base_dir`: by default the directory of
    `source` when it names a file, else the working directory."""
    if base_dir is None:
        base_dir = Path(source).parent if source != "<string>" else Path.cwd()
    _check_keys(doc, SECTIONS, "")
    run = _parse_run(doc)
    workload, arrival, traces = _parse_workload(doc, Path(base_dir))
    client = _parse_client(doc)
    if client is not None:
        workload = dataclasses.replace(workload, client=client)
    cluster = _parse_cluster(doc)
    profile = _parse_profile(doc, cluster, Path(base_dir))
    slo = _parse_slo(doc)
    pd_game = _parse_pd_game(doc, cluster.flow, slo)
    policies = _parse_policies(doc, _parse_controller(doc))
    poa = _parse_poa(doc, policies)
    cache_game = _parse_cache_game(doc, cluster, workload, policies, poa.selfish)
    topologies, axis, loads = _parse_grid_axes(doc, arrival, cluster.flow, pd_game, cache_game)
    if poa.window > run.requests:
        raise ConfigError(
            "poa.window", f"{poa.window:,} decisions exceed the {run.requests:,} measured requests of a replica"
        )
    if pd_game is not None:
        names = [p.name for p in policies]
        if not pd_game.policy:
            pd_game = dataclasses.replace(pd_game, policy=poa.selfish)
        elif pd_game.policy not in names:
            raise ConfigError("games.pd.policy", f"{pd_game.policy!r} names no policy; policies: {', '.join(names)}")
    grid = GridConfig(
        run, profile, workload, cluster, topologies, axis, loads, policies, poa, source, traces, slo, pd_game,
        cache_game,
    )  # fmt: skip
    grid.cells()  # runs CellSpec.validate() on every cell; raises ConfigError with a grid key path
    return grid


_SET_SEGMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*)(?:\[(\d+)\])?$")


def _set_value(text: str) -> Any:
    """A --set value as TOML reads it (8, 0.5, true, [1, 2], "x"); a bare word is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(doc: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """`KEY=VALUE` assignments (dotted key paths, `policy[1].temperature=0.5`) applied to a parsed
    grid document, before it is validated, so an override is checked exactly like the file.
    Raises ConfigError naming the override on a malformed one."""
    doc = copy.deepcopy(doc)
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError("--set", f"{item!r} is not KEY=VALUE (e.g. run.replicas=8)")
        node: Any = doc
        parts = key.split(".")
        for depth, part in enumerate(parts):
            m = _SET_SEGMENT.match(part)
            if not m:
                raise ConfigError(f"--set {key}", f"{part!r} is not a key name or name[index]")
            name, index = m.group(1), m.group(2)
            last = depth == len(parts) - 1
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}", f"{'.'.join(parts[:depth])} is not a table")
            if index is None:
                if last:
                    node[name] = _set_value(text.strip())
                else:
                    node = node.setdefault(name, {})
                continue
            seq = node.get(name)
            if not isinstance(seq, list) or int(index) >= len(seq):
                have = len(seq) if isinstance(seq, list) else 0
                raise ConfigError(f"--set {key}", f"no {name}[{index}]: the grid has {have}")
            if last:
                seq[int(index)] = _set_value(text.strip())
            else:
                node = seq[int(index)]
    return doc


def load_grid(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> GridConfig:
    """Read and validate a grid file, with `overrides` (`KEY=VALUE`, see apply_overrides) applied
    first. Raises ConfigError (bad grid) or OSError (unreadable file)."""
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark some editors write is no error
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"line {line}", f"not UTF-8 text (byte 0x{data[e.start]:02x}); a TOML grid file is UTF-8"
        ) from None
    return loads_grid(text, str(path), overrides=overrides)


def loads_grid(
    text: str,
    source: str = "<string>",
    base_dir: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> GridConfig:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("not valid TOML", str(e)) from None
    if overrides:
        doc = apply_overrides(doc, overrides)
    return parse_grid(doc, source, base_dir)


def grid_warnings(grid: GridConfig) -> list[str]:
    """Legal but suspicious settings, said before a run starts (not errors: nothing is refused)."""
    out = []
    if grid.load_axis == "concurrency" and grid.loads:
        c = int(max(grid.loads))
        if grid.run.warmup < 2 * c:
            out.append(
                f"run.warmup = {grid.run.warmup} is below twice the largest concurrency ({c}): all clients send "
                f"their first requests together at t = 0, and that start-up burst will be measured; "
                f"use warmup >= {2 * c}"
            )
        tr = grid.workload.trace
        if tr is not None and tr.replay == "closed" and tr.sessions:
            # every client starts a session at t = 0: the cluster only settles once the first
            # sessions have run through their turns
            want = c * math.ceil(tr.rows / tr.sessions)
            if grid.run.warmup < want and grid.run.warmup >= 2 * c:
                out.append(
                    f"run.warmup = {grid.run.warmup}: the {c} clients of this closed replay all start a session at "
                    f"t = 0 and its sessions average {tr.rows / tr.sessions:.1f} turns; the start-up transient lasts "
                    f"about one session per client: use warmup >= {want}"
                )
    return out
