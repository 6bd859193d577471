"""`poa-mc submit`: write the two scripts into DIR/slurm and submit the array, then the reduce job after it.

A resubmission is the same call: it runs only the shards that still have unfinished cells, keeps
the shard count (so cell -> shard stays the same), and waits for every job of DIR still queued or
running, so that no two tasks ever work on the same cell. jobs.json records each submission as
soon as its array is in, so a failure in between leaves nothing that status cannot see.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from poa_mc.run.slurm.cells import (
    done_cells,
    load_grid,
    load_tune_points,
    plan_shards,
    prepare_run_dir,
    prepare_tune_dir,
)
from poa_mc.run.slurm.options import SlurmError, SlurmOptions
from poa_mc.run.slurm.records import (
    ARRAY_SCRIPT,
    LOG_DIR,
    REDUCE_SCRIPT,
    SLURM_DIR,
    append_job,
    atomic_write_text,
    read_jobs,
    update_last_job,
    write_shards,
)
from poa_mc.run.slurm.scheduler import Runner, _run, active_jobs, sbatch
from poa_mc.run.slurm.script import PythonEnv, render_array_script, render_reduce_script


@dataclass
class Submission:
    """What `submit` did (or would do, with dry_run)."""

    array_script: Path
    reduce_script: Path
    tasks: int
    array_spec: str
    array_job_id: str | None = None
    reduce_job_id: str | None = None
    waits_for: list[str] = field(default_factory=list)
    pending_cells: int = 0
    total_cells: int = 0


def _array_spec(shards: Iterable[int]) -> str:
    """Compact sbatch --array syntax: [0,1,2,5,7,8] -> '0-2,5,7-8'."""
    ks = sorted(set(shards))
    parts: list[str] = []
    i = 0
    while i < len(ks):
        j = i
        while j + 1 < len(ks) and ks[j + 1] == ks[j] + 1:
            j += 1
        parts.append(str(ks[i]) if i == j else f"{ks[i]}-{ks[j]}")
        i = j + 1
    return ",".join(parts)


def submit(
    grid: Path,
    out: Path,
    opts: SlurmOptions,
    *,
    dry_run: bool = False,
    python: PythonEnv | None = None,
    runner: Runner = _run,
    echo: Callable[[str], None] = print,
    tune: bool = False,
) -> Submission:
    """Write DIR/slurm/{array,reduce}.sbatch and, unless dry_run, submit both (reduce afterany array).

    A resubmission runs only the shards that still have unfinished cells, keeps the shard count of
    the previous submission (so cell -> shard stays the same) unless --tasks says otherwise, and
    waits for every job of DIR still in the queue, so no two tasks ever work on the same cell.
    With `tune`, the grid's [tune] load points take the cells' place: task k runs `poa-mc tune
    --shard k/N` and the last job `poa-mc tune` (which writes the results).
    """
    opts.validate()
    grid = grid.resolve()
    out = out.resolve()
    if not grid.is_file():
        raise SlurmError(f"--grid: no such file {grid}", bad_input=True)
    python = python or PythonEnv.current()
    previous = read_jobs(out)

    if tune and opts.backend:
        raise SlurmError("--backend: a tune uses its grid's [run] backend", bad_input=True)
    if tune:
        spec, _, _ = load_tune_points(grid, None, out)
        total = len(spec.grid.cells())
    else:
        parsed = load_grid(grid)
        total = len(parsed.cells())
    if total == 0:
        raise SlurmError(f"{grid}: the grid has no cells", bad_input=True)
    n_tasks = opts.tasks
    if n_tasks is None and previous:
        n_tasks = int(previous[-1].get("tasks", 0)) or None
    if n_tasks is None:
        n_tasks = min(total, 8)
    # More shards than cells would leave tasks with nothing to do: each would still queue, start
    # Python and wait for a GPU.
    n_tasks = min(n_tasks, total)
    if tune:
        spec, shard_of, done = load_tune_points(grid, n_tasks, out)
    else:
        shard_of = plan_shards(parsed, n_tasks)
        done = done_cells(out)
    pending_shards = sorted({s for c, s in shard_of.items() if c not in done})
    pending = sum(1 for c in shard_of if c not in done)
    array_spec = _array_spec(pending_shards) if pending_shards else ""

    sdir = out / SLURM_DIR
    array_path, reduce_path = sdir / ARRAY_SCRIPT, sdir / REDUCE_SCRIPT
    array_text = render_array_script(grid, out, opts, n_tasks, python, tune=tune)
    reduce_text = render_reduce_script(out, opts, python, tune_grid=grid if tune else None)
    sub = Submission(array_path, reduce_path, n_tasks, array_spec, pending_cells=pending, total_cells=total)

    if tune:
        prepare_tune_dir(spec, out)
    else:
        prepare_run_dir(parsed, out, opts.backend)
    if dry_run:
        echo(f"# {array_path}")
        echo(array_text)
        echo(f"# {reduce_path}")
        echo(reduce_text)
        echo(f"# would run: sbatch --parsable --array={array_spec or '(none: all cells done)'} {array_path}")
        echo(f"# then:      sbatch --parsable --dependency=afterany:<array job id> {reduce_path}")
        _write_scripts(out, array_text, reduce_text)
        return sub

    _write_scripts(out, array_text, reduce_text)
    write_shards(out, n_tasks, shard_of)

    earlier = [str(j) for s in previous for j in (s.get("array_job_id"), s.get("reduce_job_id")) if j]
    sub.waits_for = active_jobs(earlier, runner=runner)
    dep = ["--dependency=afterany:" + ":".join(sub.waits_for)] if sub.waits_for else []

    record: dict[str, Any] = {
        "submitted_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "array_job_id": None,
        "reduce_job_id": None,
        "tasks": n_tasks,
        "array": array_spec,
        "waits_for": sub.waits_for,
        "pending_cells": pending,
        "total_cells": total,
        "grid": str(grid),
        "python": python.executable,
        "options": {k: v for k, v in asdict(opts).items() if k != "tasks"},
    }
    reduce_dep = dep
    if array_spec:
        sub.array_job_id = sbatch([f"--array={array_spec}", *dep, str(array_path)], runner=runner)
        # Recorded at once: if the reduce submission fails, status and a resubmission still know the array.
        record["array_job_id"] = sub.array_job_id
        append_job(out, record)
        reduce_dep = [f"--dependency=afterany:{sub.array_job_id}"]
    try:
        sub.reduce_job_id = sbatch([*reduce_dep, str(reduce_path)], runner=runner)
    except SlurmError as e:
        if sub.array_job_id:
            raise SlurmError(
                f"{e}\nthe array job {sub.array_job_id} was submitted; once it ends run `poa-mc reduce {out}`"
            ) from None
        raise
    record["reduce_job_id"] = sub.reduce_job_id
    if sub.array_job_id:
        update_last_job(out, record)
    else:
        append_job(out, record)
    return sub


def _write_scripts(out: Path, array_text: str, reduce_text: str) -> None:
    # Slurm opens --output before the job starts and does not create directories.
    (out / LOG_DIR).mkdir(parents=True, exist_ok=True)
    for path, text in ((out / SLURM_DIR / ARRAY_SCRIPT, array_text), (out / SLURM_DIR / REDUCE_SCRIPT, reduce_text)):
        atomic_write_text(path, text)
        path.chmod(0o755)
