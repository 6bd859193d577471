"""The grid file's [schedule] table: the grid's load list run as stages back to back in one
simulation (poa_mc/kernels/schedule.py), as a benchmark's sweep runs them, instead of one cell per
load. Each stage sends `requests[k]` measured requests, or, at a rate, `duration_s[k]` seconds'
worth of them (rate x duration, rounded).
"""

from __future__ import annotations

from poa_mc.model.sections import ConfigError
from poa_mc.model.spec_workload import Stage
from poa_mc.model.toml_fields import check_keys, coerce, read_table

_KEYS = ("requests", "duration_s")


def parse_schedule(doc: dict, axis: str, loads: tuple[float, ...]) -> tuple[Stage, ...]:
    """The stages of `[schedule]` (empty without one): stage k runs at loads[k] (the grid's
    `concurrency` or `rate` list, in order, repeats allowed)."""
    if "schedule" not in doc:
        return ()
    table = read_table(doc, "schedule", "schedule")
    check_keys(table, _KEYS, "schedule")
    given = [k for k in _KEYS if k in table]
    if len(given) != 1:
        raise ConfigError("schedule", "give each stage's length as `requests` or as `duration_s` (one of them)")
    key = given[0]
    if key == "duration_s" and axis == "concurrency":
        raise ConfigError("schedule.duration_s", "a concurrency stage is given by its requests: use schedule.requests")
    value = table[key]
    if not isinstance(value, list):
        raise ConfigError(f"schedule.{key}", f"must be a list, got {type(value).__name__}")
    if len(value) != len(loads):
        raise ConfigError(
            f"schedule.{key}", f"has {len(value)} stages, grid.{axis} {len(loads)} loads: one length per stage"
        )
    stages = []
    for k, (v, load) in enumerate(zip(value, loads)):
        path = f"schedule.{key}[{k}]"
        v = coerce(v, int if key == "requests" else float, path)
        if not v > 0:
            raise ConfigError(path, f"must be > 0, got {v}")
        n = v if key == "requests" else round(load * v)
        if n < 1:
            raise ConfigError(path, f"{v:g} s at {load:g} req/s is no request")
        stages.append(Stage(float(load), int(n)))
    if "run" in doc and isinstance(doc["run"], dict) and "requests" in doc["run"]:
        raise ConfigError("run.requests", "[schedule] sets each stage's requests: remove run.requests")
    samples = doc.get("run", {}).get("samples", "all") if isinstance(doc.get("run"), dict) else "all"
    if samples != "all":
        raise ConfigError("run.samples", 'a [schedule] summarises its stages from every request: samples = "all"')
    return tuple(stages)
