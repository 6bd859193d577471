"""The grid file's [workload] and [client] tables: what requests the cells simulate and who sends them.

A synthetic workload draws its prompt and output lengths from token-count distributions (a fixed
count, uniform, lognormal, an empirical list, or the lengths of a trace file); a trace workload
(`kind = "trace"`) replays a trace's requests as they happened (poa_mc/model/replay.py). Trace
files are read relative to the grid file's directory, or name a shipped sample. [client] is the
load generator between the workload and the frontend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from poa_mc.model.replay import REPLAYS, SAMPLES, build_table
from poa_mc.model.sections import ConfigError, TraceRef
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_workload import ARRIVALS, POPULARITIES, ClientSpec, Dist, TraceReplay, WorkloadSpec
from poa_mc.model.toml_fields import check_choice, check_keys, check_positive, coerce, read_fields, read_table
from poa_mc.model.traces import FORMATS as TRACE_FORMATS
from poa_mc.model.traces import load_trace, sample_names, sample_path

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
    check_keys(value, {"dist": None, **fields}, path)
    for k in ("file", "format"):
        if k not in value:
            raise ConfigError(f"{path}.{k}", "required for dist = 'trace'")
    name = coerce(value["file"], str, f"{path}.file")
    fmt = check_choice(coerce(value["format"], str, f"{path}.format"), TRACE_FORMATS, f"{path}.format")
    cap = coerce(value.get("max", 0), int, f"{path}.max")
    if "max" in value:
        check_positive(cap, f"{path}.max")
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
        kind = coerce(value.get("dist", "fixed"), str, f"{path}.dist")
        if kind not in _DIST_FIELDS:
            raise ConfigError(f"{path}.dist", f"must be one of {', '.join(_DIST_FIELDS)}, got {kind!r}")
        fields = _DIST_FIELDS[kind]
        check_keys(value, {"dist": None, **fields}, path)
        kw: dict[str, Any] = {}
        for k, (t, default) in fields.items():
            if k not in value:
                if default is None:
                    raise ConfigError(f"{path}.{k}", f"required for dist = {kind!r}")
                kw[k] = default
            else:
                kw[k] = coerce(value[k], t, f"{path}.{k}")
        if kind == "empirical":
            if not kw["values"]:
                raise ConfigError(f"{path}.values", "must be a non-empty list of token counts")
            kw["values"] = tuple(coerce(v, int, f"{path}.values[{i}]") for i, v in enumerate(kw["values"]))
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


def _parse_replay(table: dict, base_dir: Path) -> tuple[WorkloadSpec, str]:
    """`[workload] kind = "trace"`: the trace replayed as it happened (poa_mc/model/replay.py). Its lengths
    are the trace's; Azure and BurstGPT traces (no hash_ids) take the synthetic prefix keys."""

    for key in ("isl", "osl", "arrival", "think_ms"):
        if key in table:
            raise ConfigError(f"workload.{key}", "comes from the trace with kind = 'trace'")
    f = read_fields(table, _REPLAY_FIELDS, "workload")
    for key in ("format", "path"):
        if f[key] is None:
            raise ConfigError(f"workload.{key}", "required with kind = 'trace'")
    fmt = check_choice(f["format"], TRACE_FORMATS, "workload.format")
    replay = check_choice(f["replay"], REPLAYS, "workload.replay")
    sample = check_choice(f["sample"], SAMPLES, "workload.sample")
    if sample == "sessions" and replay != "closed":
        raise ConfigError("workload.sample", "sessions are drawn for replay = 'closed' only")
    check_positive(f["trace_block_size"], "workload.trace_block_size")
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
        popularity=check_choice(f["popularity"], POPULARITIES, "workload.popularity"),
        zipf_alpha=f["zipf_alpha"],
        arrival="closed" if replay == "closed" else "poisson",
        trace=ref,
    )
    return spec, spec.arrival


def parse_workload(doc: dict, base_dir: Path) -> tuple[WorkloadSpec, str, tuple[TraceRef, ...]]:
    table = read_table(doc, "workload", "workload")
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
    f = read_fields(
        {k: v for k, v in table.items() if k not in ("isl", "osl")},
        {
            "prefix_groups": (int, base.prefix_groups),
            "prefix_ratio": (float, base.prefix_ratio),
            "prefix_tokens": (int, base.prefix_tokens),
            "popularity": (str, base.popularity),
            "zipf_alpha": (float, base.zipf_alpha),
            "arrival": (str, base.arrival),
            "think_ms": (float, base.think_ms),
        },
        "workload",
    )
    if "prefix_tokens" in table and "prefix_ratio" in table:
        raise ConfigError("workload.prefix_tokens", "give the shared prefix as prefix_tokens or prefix_ratio, not both")
    # checked here because the grid's load axis follows from the arrival process
    check_choice(f["arrival"], ARRIVALS, "workload.arrival")
    check_choice(f["popularity"], POPULARITIES, "workload.popularity")
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


def parse_client(doc: dict) -> ClientSpec | None:
    """[client]: the load generator (poa_mc/kernels/client.py); absent, requests reach the frontend as they
    are created and no client is modelled."""
    if "client" not in doc:
        return None
    table = read_table(doc, "client", "client")
    base = ClientSpec()
    f = read_fields(
        table, {"max_connections": (int, base.max_connections), "overhead_ms": (float, base.overhead_ms)}, "client"
    )
    spec = ClientSpec(**f)
    try:
        spec.validate("client")
    except SpecError as e:
        raise ConfigError(e.path, e.message) from None
    return spec
