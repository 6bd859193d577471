"""The grid file's [run] table: the run's name, seed, replica and request counts, backend,
output directory and how many per-request samples each replica keeps.

These are the settings of the run as a whole, not of a cell; the kernels' 32-bit indices bound
the replica and request counts, so those limits are checked here, where the key can be named.
"""

from __future__ import annotations

import re
from typing import Any

from poa_mc.model.sections import BACKENDS, INT32_MAX, INT64_MAX, ConfigError, RunSection
from poa_mc.model.toml_fields import check_choice, check_keys, check_positive, read_fields, read_table

_RUN_FIELDS = ("name", "seed", "replicas", "requests", "warmup", "backend", "out", "drain", "warmup_per_client")


def parse_run(doc: dict) -> RunSection:
    table = read_table(doc, "run", "run")
    check_keys(table, (*_RUN_FIELDS, "samples"), "run")
    samples = _parse_samples(table.get("samples", "all"))
    table = {k: v for k, v in table.items() if k != "samples"}
    f = read_fields(
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
            "warmup_per_client": (int, 0),
        },
        "run",
    )
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", f["name"]) or set(f["name"]) == {"."}:
        raise ConfigError("run.name", f"use letters, digits, '.', '_' or '-' only, got {f['name']!r}")
    if not 0 <= f["seed"] <= INT64_MAX:
        raise ConfigError("run.seed", f"must be in 0..{INT64_MAX:,}, got {f['seed']}")
    check_positive(f["replicas"], "run.replicas")
    check_positive(f["requests"], "run.requests")
    check_positive(f["warmup"], "run.warmup", allow_zero=True)
    check_positive(f["warmup_per_client"], "run.warmup_per_client", allow_zero=True)
    # the kernels index a replica's requests and the replicas with 32-bit integers
    if f["replicas"] > INT32_MAX:
        raise ConfigError("run.replicas", f"must be at most {INT32_MAX:,}, got {f['replicas']:,}")
    if f["requests"] + f["warmup"] > INT32_MAX:
        raise ConfigError(
            "run.warmup" if f["warmup"] > f["requests"] else "run.requests",
            f"requests + warmup must be at most {INT32_MAX:,}, got {f['requests'] + f['warmup']:,}",
        )
    check_choice(f["backend"], BACKENDS, "run.backend")
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
