"""`poa-mc status`: a run's progress per shard (RunStatus), with the Slurm state of its tasks, and its report.

Cell progress comes from DIR itself (cells.done_cells, which also finds damaged cells), so it works
without Slurm; the tasks' states come from the scheduler module, in the order accounting, controller,
logs. Only a shard's latest task counts as failed: an earlier failure that a resubmission redid is
history, and the report says how to submit the pending cells again.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from poa_mc.run.slurm.cells import all_cells, done_cells
from poa_mc.run.slurm.options import SlurmError
from poa_mc.run.slurm.records import LOG_DIR, SLURM_DIR, read_jobs, read_shards
from poa_mc.run.slurm.scheduler import (
    ACTIVE_STATES,
    FAILED_STATES,
    Runner,
    TaskState,
    _expand_job_field,
    _run,
    query_sacct,
    query_scontrol,
    state_from_log,
)

# Imports inside functions: the command line loads this module for `status`; the store loads only
# when a status is collected.


@dataclass
class ShardStatus:
    shard: int
    cells: int
    done: int
    task: TaskState | None = None

    @property
    def pending(self) -> int:
        return self.cells - self.done


@dataclass
class RunStatus:
    out: Path
    total: int | None
    done: int
    shards: list[ShardStatus]
    submissions: list[dict[str, Any]]
    reduce: list[TaskState]
    failed: list[TaskState]
    source: str
    damaged: dict[str, str] = field(default_factory=dict)  # complete cells whose files changed: id -> why

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "cells": {
                "total": self.total,
                "done": self.done,
                "pending": None if self.total is None else self.total - self.done,
                "damaged": sorted(self.damaged),
            },
            "shards": [
                {
                    "shard": s.shard,
                    "cells": s.cells,
                    "done": s.done,
                    "pending": s.pending,
                    "task": asdict(s.task) if s.task else None,
                }
                for s in self.shards
            ],
            "reduce": [asdict(r) for r in self.reduce],
            "failed": [asdict(f) for f in self.failed],
            "submissions": self.submissions,
            "slurm_source": self.source,
        }


def collect_status(out: Path, *, runner: Runner = _run) -> RunStatus:
    """Cell progress per shard, plus the Slurm state of every task of the latest submission."""
    out = out.resolve()
    if not out.is_dir():
        raise SlurmError(f"no such run directory: {out}", bad_input=True)
    from poa_mc.io.store import RunDir, RunDirError

    run_dir = RunDir(out)
    if not run_dir.manifest_path.exists() and not (out / SLURM_DIR).is_dir():
        raise SlurmError(f"{out} is not a poa-mc run directory (no manifest.json, no slurm/)", bad_input=True)
    if run_dir.manifest_path.exists():
        try:
            run_dir.read_manifest()
        except RunDirError as e:
            raise SlurmError(str(e), bad_input=True) from None
    damaged: dict[str, str] = {}
    done = done_cells(out, damaged)
    cells = all_cells(out)
    subs = read_jobs(out)
    shard_info = read_shards(out)

    job_ids = [str(j) for s in subs for j in (s.get("array_job_id"), s.get("reduce_job_id")) if j]
    states: dict[tuple[str, int | None], TaskState] = {}
    source = "none"
    if job_ids:
        got = query_sacct(job_ids, runner=runner)
        if got is not None:
            states, source = got, "sacct"
        else:
            states = query_scontrol(job_ids, runner=runner)
            source = "scontrol" if states else "none"
    # Logs fill in what the scheduler has forgotten (no accounting, and past MinJobAge).
    log_dir = out / LOG_DIR
    for s in subs:
        aid = s.get("array_job_id")
        if aid:
            for k in _array_tasks(s.get("array", "")):
                if (str(aid), k) not in states:
                    st = state_from_log(log_dir / f"{aid}_{k}.out")
                    if st is not None:
                        states[(str(aid), k)] = TaskState(str(aid), k, st, "", "log")
        rid = s.get("reduce_job_id")
        if rid and (str(rid), None) not in states:
            st = state_from_log(log_dir / f"reduce_{rid}.out")
            if st is not None:
                states[(str(rid), None)] = TaskState(str(rid), None, st, "", "log")
    if source == "none" and states:
        source = "logs"

    shards: list[ShardStatus] = []
    if shard_info is not None:
        n, shard_of = shard_info
        per = [ShardStatus(k, 0, 0) for k in range(n)]
        for c, k in shard_of.items():
            if 0 <= k < n:
                per[k].cells += 1
                per[k].done += c in done
        # A shard's task is the one of the latest submission that ran it (earlier ones may have failed).
        for s in subs:
            aid = s.get("array_job_id")
            if aid and int(s.get("tasks", n)) == n:
                for k in _array_tasks(s.get("array", "")):
                    if (str(aid), k) in states:
                        per[k].task = states[(str(aid), k)]
                    elif 0 <= k < n:
                        per[k].task = TaskState(str(aid), k, "UNKNOWN", "", "")
        shards = per

    reduce = [
        states[(str(s["reduce_job_id"]), None)]
        for s in subs
        if s.get("reduce_job_id") and (str(s["reduce_job_id"]), None) in states
    ]
    if shards:
        # Only a shard's latest task counts: an earlier failure that a resubmission redid is history.
        failed = [s.task for s in shards if s.task is not None and s.task.state in FAILED_STATES]
    else:
        failed = [t for t in states.values() if t.task is not None and t.state in FAILED_STATES]
        failed.sort(key=lambda t: (int(t.job_id) if t.job_id.isdigit() else 0, t.task or 0))
    total = len(cells) if cells is not None else None
    n_done = len(done & set(cells)) if cells is not None else len(done)
    return RunStatus(out, total, n_done, shards, subs, reduce, failed, source, damaged)


def _array_tasks(spec: str) -> list[int]:
    return [k for _, k in _expand_job_field(f"0_{spec}") if k is not None] if spec else []


def format_status(st: RunStatus) -> str:
    """The human-readable report of `poa-mc status`."""
    lines = [f"run {st.out}"]
    if st.total is None:
        lines.append(f"cells: {st.done} done (total unknown: no cells.parquet or slurm/shards.json yet)")
    else:
        pct = 100.0 * st.done / st.total if st.total else 100.0
        lines.append(f"cells: {st.done}/{st.total} done ({pct:.0f}%), {st.total - st.done} pending")
    if st.shards:
        lines.append("")
        lines.append(f"{'shard':>5}  {'cells':>5}  {'done':>5}  {'pending':>7}  {'slurm task':<16} state")
        for s in st.shards:
            task = f"{s.task.job_id}_{s.task.task}" if s.task else "-"
            state = s.task.state if s.task else ("-" if s.pending else "")
            if s.task and s.task.exit_code and s.task.exit_code not in ("0:0", ""):
                state += f" (exit {s.task.exit_code})"
            lines.append(f"{s.shard:>5}  {s.cells:>5}  {s.done:>5}  {s.pending:>7}  {task:<16} {state}")
    if st.submissions:
        lines.append("")
        lines.append(f"submissions (Slurm states from {st.source}):")
        for i, s in enumerate(st.submissions, 1):
            red = s.get("reduce_job_id") or "-"
            rstate = next((r.state for r in st.reduce if r.job_id == str(red)), "")
            arr = f"array {s.get('array_job_id')} [{s.get('array')}]" if s.get("array_job_id") else "no array"
            lines.append(f"  {i}. {s.get('submitted_at', '?')}: {arr}, reduce {red} {rstate}".rstrip())
    if st.damaged:
        lines.append("")
        lines.append(
            f"damaged cells ({len(st.damaged)}; counted as pending, simulated again by --resume or a resubmission):"
        )
        lines += [f"  {cid}: {why}" for cid, why in st.damaged.items()]
        if not st.submissions:
            lines.append(f"  repair: poa-mc run --grid GRID --out {st.out} --resume")
    if st.failed:
        lines.append("")
        lines.append("failed tasks (their finished cells stand):")
        for t in st.failed:
            lines.append(f"  {t.job_id}_{t.task}: {t.state}  log: {st.out / LOG_DIR / f'{t.job_id}_{t.task}.out'}")
    pending = st.total - st.done if st.total is not None else 0
    active = any(s.task is not None and s.task.state in ACTIVE_STATES for s in st.shards)
    if pending and st.submissions and (st.failed or not active):
        last = st.submissions[-1]
        cmd = ["poa-mc", "submit", "--grid", str(last.get("grid", "GRID")), "--out", str(st.out)]
        cmd += ["--partition", str(last.get("options", {}).get("partition", "PARTITION"))]
        lines.append("")
        lines.append(f"to run the {pending} pending cells (finished cells are skipped), submit again (same options):")
        lines.append(f"  {shlex.join(cmd)}")
    return "\n".join(lines)
