"""The grid file's [[policy]] tables and the [controller] table: the routing policies compared.

Each [[policy]] is one routing policy with a unique name; [controller] holds the settings of the
adaptive policies (its scalar keys, and one sub-table of router settings per load regime), and
only adaptive policies carry it. A policy's own parameters are checked by PolicySpec.validate.
"""

from __future__ import annotations

import dataclasses

from poa_mc.model.sections import ConfigError
from poa_mc.model.spec_error import SpecError
from poa_mc.model.spec_policy import POLICY_LATER_DEFAULTS, REGIMES, TIER_CREDIT, ControllerSpec, PolicySpec
from poa_mc.model.toml_fields import check_keys, read_fields, read_table

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
    **{k: (type(v), v) for k, v in POLICY_LATER_DEFAULTS.items()},
}

_CONTROLLER_FIELDS = {
    f.name: (f.type if isinstance(f.type, type) else {"float": float, "int": int, "str": str}[f.type], f.default)
    for f in dataclasses.fields(ControllerSpec)
    if f.name not in ("temperature", "overlap_weight")
}


def parse_controller(doc: dict) -> ControllerSpec:
    """[controller]: scalar keys, and one sub-table per regime with its router settings."""
    table = dict(read_table(doc, "controller", "controller"))
    rows = {}
    for regime in REGIMES:
        if regime in table:
            rows[regime] = read_fields(
                read_table(table, regime, f"controller.{regime}"),
                {"temperature": (float, None), "overlap_weight": (float, None)},
                f"controller.{regime}",
            )
            del table[regime]
    check_keys(table, {**_CONTROLLER_FIELDS, **dict.fromkeys(REGIMES)}, "controller")
    f = read_fields(table, _CONTROLLER_FIELDS, "controller")
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


def parse_policies(doc: dict, controller: ControllerSpec) -> tuple[PolicySpec, ...]:
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
        f = read_fields(t, _POLICY_FIELDS, path)
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
