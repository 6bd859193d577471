"""Typed readers for the grid file's TOML tables, shared by every section parser.

TOML keeps booleans, integers, floats and strings apart and the grid is strict about them: each
reader here returns the value, widened where the grid allows it (an integer where a number is asked), or raises a
ConfigError whose path names the offending key, e.g. `workload.isl.mean`. An unknown key is an
error with the closest allowed key as a hint, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

from poa_mc.model.sections import ConfigError


def _type_name(t: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(t, t.__name__)


def coerce(value: Any, typ: type, path: str) -> Any:
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


def check_keys(table: dict, allowed: dict | tuple, path: str) -> None:
    for key in table:
        if key not in allowed:
            hint = difflib.get_close_matches(key, list(allowed), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else f"; allowed: {', '.join(sorted(allowed))}"
            raise ConfigError(f"{path}.{key}" if path else key, f"unknown key{extra}")


def read_table(doc: dict, key: str, path: str) -> dict:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(path, f"must be a table, got {type(value).__name__}")
    return value


def read_fields(table: dict, fields: dict[str, tuple[type, Any]], path: str) -> dict[str, Any]:
    check_keys(table, fields, path)
    return {k: (coerce(table[k], t, f"{path}.{k}") if k in table else default) for k, (t, default) in fields.items()}


def check_choice(value: str, choices: tuple[str, ...], path: str) -> str:
    if value not in choices:
        raise ConfigError(path, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def check_positive(value: float, path: str, *, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(path, f"must be {'>= 0' if allow_zero else '> 0'}, got {value}")
