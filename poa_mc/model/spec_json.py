"""A cell's spec as JSON and back: the form cells.parquet's `spec_json` stores, and the one place
that turns it into a `CellSpec` again (reduce, the PoA-hat plan, the accumulators and the command
line read stored specs through `spec_from_json`; nothing rebuilds a spec from a dict elsewhere).

Empirical length lists (a trace can hold millions) are stored as their count and sha256 instead of
inline; the cell id still hashes the full values. Reading such a list back gives `values = ()`
and `values_digest` on the side: everything downstream of the kernels needs only the lengths'
bounds, which the stored spec keeps (`low`, `high`, `cap`)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import types
import typing
from typing import Any

from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_policy import drop_policy_defaults
from poa_mc.model.spec_workload import drop_workload_defaults

INLINE_VALUES = 64  # an empirical list longer than this is stored as its count and digest


def compact(obj: Any) -> Any:
    """`obj` (an `asdict` of a spec or a part of one) with long empirical lists as count and digest."""
    if isinstance(obj, dict):
        out = {k: compact(v) for k, v in obj.items()}
        values = obj.get("values")
        if isinstance(values, (list, tuple)) and len(values) > INLINE_VALUES:
            digest = hashlib.sha256(json.dumps(list(values)).encode()).hexdigest()
            out["values"] = {"count": len(values), "sha256": digest}
        return out
    if isinstance(obj, (list, tuple)):
        return [compact(v) for v in obj]
    return obj


def spec_to_json(spec: CellSpec) -> str:
    """The stored form of a spec (sorted keys, long lists compacted)."""
    d = dataclasses.asdict(spec)
    drop_workload_defaults(d["workload"])  # a key at its later-added default: the stored form it had before
    drop_policy_defaults(d["policy"])
    return json.dumps(compact(d), sort_keys=True)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(tp: Any, value: Any) -> Any:
    """`value` (parsed JSON) as type `tp`: dataclasses field by field (a key the JSON lacks takes
    the field's default, as keys added after a run was written do), tuples from lists."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(args[0], value) if len(args) == 1 else value
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                v = value[f.name]
                if f.name == "values" and isinstance(v, dict):  # compacted: count and digest only
                    v = ()
                kwargs[f.name] = _build(hints[f.name], v)
        return tp(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        return tuple(_build(inner, v) for v in value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def spec_from_dict(d: dict[str, Any]) -> CellSpec:
    """A `CellSpec` from its dict form (`asdict`, or parsed `spec_json`)."""
    return _build(CellSpec, d)


@functools.lru_cache(maxsize=4096)
def spec_from_json(text: str) -> CellSpec:
    """A `CellSpec` from cells.parquet's `spec_json` (cached: a run's cells share few distinct texts
    per reduction pass, and specs are frozen)."""
    return spec_from_dict(json.loads(text))
