"""The Slurm part of a run directory's layout, and the two records `submit` keeps there.

DIR/slurm holds the scripts, jobs.json (every submission's job ids, oldest first: what a
resubmission waits for and what status asks Slurm about) and shards.json (cell id -> shard of the
latest submission); DIR/logs holds the tasks' logs. The rest of DIR is poa_mc.io.store's. Every
file here is written atomically, like the store's, since array tasks may start beside `submit`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from poa_mc.io.files import atomic_write_bytes
from poa_mc.run.slurm.options import SlurmError

SLURM_DIR = "slurm"
LOG_DIR = "logs"
ARRAY_SCRIPT = "array.sbatch"
REDUCE_SCRIPT = "reduce.sbatch"
JOBS_FILE = "jobs.json"
SHARDS_FILE = "shards.json"


def atomic_write_text(path: Path, text: str) -> None:
    """The store's atomic write: its temporary names the writer (host, pid), so a shard starting
    beside `submit` and sweeping dead writers' leftovers leaves this one alone."""
    atomic_write_bytes(path, text.encode("utf-8"))


def read_jobs(out: Path) -> list[dict[str, Any]]:
    """Every recorded submission of DIR, oldest first ([] when none)."""
    path = out / SLURM_DIR / JOBS_FILE
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise SlurmError(f"{path}: not valid JSON ({e})") from e
    subs = data.get("submissions", []) if isinstance(data, dict) else []
    return [s for s in subs if isinstance(s, dict)]


def append_job(out: Path, record: Mapping[str, Any]) -> None:
    subs = read_jobs(out)
    subs.append(dict(record))
    atomic_write_text(out / SLURM_DIR / JOBS_FILE, json.dumps({"submissions": subs}, indent=2) + "\n")


def update_last_job(out: Path, record: Mapping[str, Any]) -> None:
    subs = read_jobs(out)
    subs[-1] = dict(record)
    atomic_write_text(out / SLURM_DIR / JOBS_FILE, json.dumps({"submissions": subs}, indent=2) + "\n")


def write_shards(out: Path, n_tasks: int, shard_of: Mapping[str, int]) -> None:
    data = {"tasks": n_tasks, "cells": {str(k): int(v) for k, v in shard_of.items()}}
    atomic_write_text(out / SLURM_DIR / SHARDS_FILE, json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_shards(out: Path) -> tuple[int, dict[str, int]] | None:
    path = out / SLURM_DIR / SHARDS_FILE
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return int(data["tasks"]), {str(k): int(v) for k, v in data["cells"].items()}
