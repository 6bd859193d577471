"""Slurm array jobs for a grid run: sbatch scripts, submission, and progress/status.

Layout inside a run's output directory DIR (beside what `poa-mc run` writes):

    DIR/slurm/array.sbatch   the array script: task k runs `poa-mc run --shard k/N --resume --quiet`
    DIR/slurm/reduce.sbatch  the final job (afterany the array) running `poa-mc reduce DIR`
    DIR/slurm/shards.json    cell id -> shard for the N of the latest submission (what status shows)
    DIR/slurm/jobs.json      every submission's job ids, appended on each resubmit
    DIR/logs/%A_%a.out       one log per array task (append mode: a requeued task keeps its history)
    DIR/logs/reduce_%j.out   the reduce job's log

Correctness rests on `poa-mc run`: shards are disjoint (grid.assign_shards), each cell is written
atomically, and `--resume` skips finished cells, so a task that is killed, times out or is preempted
and requeued redoes only its unfinished cells. This module adds nothing that could double or lose
a cell: a resubmission waits (afterany) for every job of DIR that is still queued or running.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from poa_mc.io.files import atomic_write_bytes

# Imports inside functions: the command line loads this module for `submit` and `status`; the grid
# parser, the store and the runner load only when one of them needs them.

SLURM_DIR = "slurm"
LOG_DIR = "logs"
ARRAY_SCRIPT = "array.sbatch"
REDUCE_SCRIPT = "reduce.sbatch"
JOBS_FILE = "jobs.json"
SHARDS_FILE = "shards.json"

# Job states after which a task will not run again by itself (Slurm's names, sacct and scontrol).
FAILED_STATES = frozenset(
    {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "REQUEUED",
        "CONFIGURING",
        "COMPLETING",
        "SUSPENDED",
        "RESIZING",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "STAGE_OUT",
        "SIGNALING",
        "STOPPED",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
    }
)

_TIME_RE = re.compile(r"^(?:(\d+)-)?(\d+):(\d{2}):(\d{2})$|^(\d+)$")
_MEM_RE = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
_NAME_RE = re.compile(r"^[A-Za-z0-9_.:@+-]+$")


class SlurmError(Exception):
    """Submission or status failed. `bad_input` marks errors in what the user gave (exit code 2)."""

    def __init__(self, message: str, *, bad_input: bool = False) -> None:
        super().__init__(message)
        self.bad_input = bad_input


SIGNAL_LEAD_S = 90  # the warning signal's lead on the time limit (#SBATCH --signal)


@dataclass(frozen=True)
class SlurmOptions:
    """What the user asks of the scheduler; rendered into #SBATCH lines verbatim after validation."""

    partition: str
    tasks: int | None = None
    gpus_per_task: int = 0
    cpus_per_task: int = 1
    mem: str | None = None
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    extra: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    backend: str | None = None
    reduce_partition: str | None = None
    job_name: str = "poa-mc"

    def validate(self) -> None:
        """Raise SlurmError(bad_input=True) naming the option at fault."""
        for opt, value in (
            ("--partition", self.partition),
            ("--account", self.account),
            ("--qos", self.qos),
            ("--reduce-partition", self.reduce_partition),
            ("--backend", self.backend),
        ):
            # Each value lands on an #SBATCH line or in a shell command: restrict it to a name's
            # characters so that no value can smuggle in another directive or shell syntax.
            if value is not None and not _NAME_RE.match(value):
                raise SlurmError(f"{opt}: invalid value {value!r} (letters, digits and _.:@+- only)", bad_input=True)
        if not self.partition:
            raise SlurmError("--partition: required", bad_input=True)
        if not _NAME_RE.match(self.job_name):
            raise SlurmError(f"job name {self.job_name!r} has characters Slurm would not keep", bad_input=True)
        if self.tasks is not None and self.tasks < 1:
            raise SlurmError(f"--tasks: must be >= 1, got {self.tasks}", bad_input=True)
        if self.gpus_per_task < 0:
            raise SlurmError(f"--gpus-per-task: must be >= 0, got {self.gpus_per_task}", bad_input=True)
        if self.cpus_per_task < 1:
            raise SlurmError(f"--cpus-per-task: must be >= 1, got {self.cpus_per_task}", bad_input=True)
        if self.mem is not None and not _MEM_RE.match(self.mem):
            raise SlurmError(f"--mem: expected a size like 8G or 16000M, got {self.mem!r}", bad_input=True)
        if self.time is not None:
            m = _TIME_RE.match(self.time)
            if not m or (m.group(3) is not None and (int(m.group(3)) > 59 or int(m.group(4)) > 59)):
                raise SlurmError(
                    f"--time: expected HH:MM:SS (or D-HH:MM:SS, or minutes), got {self.time!r}", bad_input=True
                )
        for line in self.extra:
            if "\n" in line or not line.startswith("#SBATCH "):
                raise SlurmError(
                    f"--extra: each value must be one line starting with '#SBATCH ', got {line!r}", bad_input=True
                )
        for line in self.setup:
            if "\n" in line:
                raise SlurmError(f"--setup: each value must be one line, got {line!r}", bad_input=True)


@dataclass(frozen=True)
class PythonEnv:
    """The interpreter (and its environment) that the batch jobs must use: the one that submitted."""

    executable: str
    virtual_env: str | None = None
    conda_prefix: str | None = None
    pythonpath: str | None = None

    @classmethod
    def current(cls) -> PythonEnv:
        return cls(
            executable=os.path.abspath(sys.executable),
            virtual_env=os.environ.get("VIRTUAL_ENV") or None,
            conda_prefix=os.environ.get("CONDA_PREFIX") or None,
            pythonpath=os.environ.get("PYTHONPATH") or None,
        )

    def activation_lines(self) -> list[str]:
        """Shell lines that recreate the submitting environment even under `sbatch --export=NONE`."""
        q = shlex.quote
        lines = [f'export PATH={q(os.path.dirname(self.executable))}:"$PATH"']
        if self.virtual_env:
            lines.append(f"export VIRTUAL_ENV={q(self.virtual_env)}")
        if self.conda_prefix:
            lines.append(f"export CONDA_PREFIX={q(self.conda_prefix)}")
        if self.pythonpath:
            lines.append(f"export PYTHONPATH={q(self.pythonpath)}")
        lines.append(f"PY={q(self.executable)}")
        return lines


# ----------------------------------------------------------------------------------------------
# Scripts


def _sbatch_common(opts: SlurmOptions, *, partition: str) -> list[str]:
    lines = [f"#SBATCH --partition={partition}"]
    if opts.account:
        lines.append(f"#SBATCH --account={opts.account}")
    if opts.qos:
        lines.append(f"#SBATCH --qos={opts.qos}")
    if opts.time:
        lines.append(f"#SBATCH --time={opts.time}")
    if opts.mem:
        lines.append(f"#SBATCH --mem={opts.mem}")
    return lines


def render_array_script(grid: Path, out: Path, opts: SlurmOptions, n_tasks: int, python: PythonEnv) -> str:
    """The sbatch array script: task k of n_tasks runs shard k/n_tasks of the grid, resuming."""
    q = shlex.quote
    grid, out = grid.resolve(), out.resolve()
    log = out / LOG_DIR / "%A_%a.out"
    head = [
        "#!/bin/bash",
        f"# Written by poa-mc submit: {n_tasks} shards of {grid} into {out}.",
        "# Resubmit the whole array (finished cells are skipped) with `poa-mc submit` again, or by hand:",
        f"#   sbatch --array=K[,K...] {out / SLURM_DIR / ARRAY_SCRIPT}",
        f"#SBATCH --job-name={opts.job_name}",
        f"#SBATCH --array=0-{n_tasks - 1}",
        *_sbatch_common(opts, partition=opts.partition),
        "#SBATCH --ntasks=1",
        f"#SBATCH --cpus-per-task={opts.cpus_per_task}",
    ]
    if opts.gpus_per_task > 0:
        head.append(f"#SBATCH --gres=gpu:{opts.gpus_per_task}")
    head += [
        f"#SBATCH --output={log}",
        f"#SBATCH --error={log}",
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue",
        # SIGTERM to the batch shell SIGNAL_LEAD_S before the time limit (Slurm may send it up to a
        # minute earlier still): the shell hands it to poa-mc, which stops with its resume line and
        # status 143 before the limit's SIGKILL; finished cells are kept and a resubmission goes on
        f"#SBATCH --signal=B:TERM@{SIGNAL_LEAD_S}",
        *opts.extra,
    ]
    run_cmd = [
        '"$PY"',
        "-m",
        "poa_mc.cli.main",
        "run",
        "--grid",
        q(str(grid)),
        "--out",
        q(str(out)),
        "--shard",
        '"$SHARD/$NSHARDS"',
        "--resume",
        "--quiet",
    ]
    if opts.backend:
        run_cmd += ["--backend", q(opts.backend)]
    body = [
        "",
        # No `set -u`: site scripts run by --setup (environment modules, conda) often read unset variables.
        "set -o pipefail",
        *python.activation_lines(),
        *opts.setup,
        # The shard count is fixed here rather than read from SLURM_ARRAY_TASK_COUNT: a resubmission
        # of only some tasks (sbatch --array=1,3) has a smaller count, and would re-split the cells.
        f"NSHARDS={n_tasks}",
        'SHARD="${SLURM_ARRAY_TASK_ID:?this script must run as a Slurm array task}"',
        (
            'echo "[poa-mc] $(date -Is) shard $SHARD/$NSHARDS starts on $(hostname)'
            ' (job ${SLURM_ARRAY_JOB_ID:-?}_${SHARD}, restart ${SLURM_RESTART_COUNT:-0})"'
        ),
        # Not exec: the closing line below is what `poa-mc status` reads when sacct is unavailable.
        # In the background, waited for: bash runs a trap only between commands, so a foreground
        # poa-mc would not hear the time limit's SIGTERM (or a SIGHUP) the shell was sent.
        " ".join(run_cmd) + " &",
        "pid=$!",
        """trap 'kill -TERM "$pid" 2>/dev/null' TERM HUP""",
        'wait "$pid"',
        "rc=$?",
        # a trap ends the first wait early (128 + the signal): wait again for poa-mc's own status
        'if kill -0 "$pid" 2>/dev/null; then wait "$pid"; rc=$?; fi',
        'echo "[poa-mc] $(date -Is) shard $SHARD/$NSHARDS exited with status $rc"',
        "exit $rc",
        "",
    ]
    return "\n".join(head + body)


def render_reduce_script(out: Path, opts: SlurmOptions, python: PythonEnv) -> str:
    """The final job: merges the shards (reduce itself refuses mismatched or missing cells)."""
    q = shlex.quote
    out = out.resolve()
    log = out / LOG_DIR / "reduce_%j.out"
    lines = [
        "#!/bin/bash",
        f"# Written by poa-mc submit: merges the shards in {out} once the array has ended.",
        f"#SBATCH --job-name={opts.job_name}-reduce",
        *_sbatch_common(opts, partition=opts.reduce_partition or opts.partition),
        "#SBATCH --ntasks=1",
        f"#SBATCH --cpus-per-task={opts.cpus_per_task}",
        f"#SBATCH --output={log}",
        f"#SBATCH --error={log}",
        "#SBATCH --open-mode=append",
        *opts.extra,
        "",
        "set -o pipefail",
        *python.activation_lines(),
        *opts.setup,
        'echo "[poa-mc] $(date -Is) reduce starts on $(hostname)"',
        f'"$PY" -m poa_mc.cli.main reduce {q(str(out))}',
        "rc=$?",
        'echo "[poa-mc] $(date -Is) reduce exited with status $rc"',
        "exit $rc",
        "",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Files


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


def norm_cell_id(value: object) -> str:
    """One spelling for a cell id, whether it comes as 7, "7" or a zero-padded "0007" directory name."""
    s = str(value).strip()
    return str(int(s)) if s.isdigit() else s


def done_cells(out: Path, damaged: dict[str, str] | None = None) -> set[str]:
    """Cells whose accumulators are on disk (acc/cell_id=XXXX/part.parquet, a cell's commit point)
    and whose files are what was written; the damaged ones (id -> why) go into `damaged` when
    given. A resubmission runs the shards of damaged cells again, and their tasks (--resume)
    simulate them again."""
    from poa_mc.io.store import RunDir

    run_dir = RunDir(out)
    done = run_dir.complete_cells()
    bad = run_dir.damaged(done)
    if damaged is not None:
        damaged.update({norm_cell_id(c): why for c, why in bad.items()})
    return {norm_cell_id(c) for c in done - set(bad)}


def all_cells(out: Path) -> list[str] | None:
    """Every cell id of the run, from cells.parquet (written by run) or shards.json (by submit)."""
    path = out / "cells.parquet"
    if path.is_file():
        import polars as pl

        # A file without the column (another layout) falls back to shards.json; run writes it atomically.
        if "cell_id" in pl.read_parquet_schema(path):
            ids = pl.read_parquet(path, columns=["cell_id"])["cell_id"].to_list()
            return [norm_cell_id(c) for c in ids]
    shards = read_shards(out)
    if shards is not None:
        return sorted(shards[1], key=_cell_sort_key)
    return None


def _cell_sort_key(c: str) -> tuple[int, int | str]:
    return (0, int(c)) if c.isdigit() else (1, c)


# ----------------------------------------------------------------------------------------------
# Grid: cells and their shards (poa_mc.model.grid decides; this only asks it)


def load_grid(grid_path: Path) -> Any:
    """The parsed grid (poa_mc.model.config), its errors turned into bad-input SlurmErrors."""
    from poa_mc.model.config import load_grid as _load
    from poa_mc.model.sections import ConfigError

    try:
        return _load(grid_path)
    except ConfigError as e:
        raise SlurmError(f"{grid_path}: {e}", bad_input=True) from None
    except OSError as e:
        raise SlurmError(f"--grid: cannot read {grid_path}: {e.strerror or e}", bad_input=True) from None


def plan_shards(grid: Any, n_tasks: int) -> dict[str, int]:
    """cell id -> shard in 0..n_tasks-1, exactly as `poa-mc run --shard k/n_tasks` will split them."""
    from poa_mc.model.grid import assign_shards, expand

    cells = expand(grid)
    shards = assign_shards(cells, n_tasks, grid.run)
    return {norm_cell_id(c.cell_id): int(s) for c, s in zip(cells, shards, strict=True)}


def prepare_run_dir(grid: Any, out: Path, backend: str | None) -> None:
    """Create DIR as `poa-mc run` would (manifest.json, cells.parquet) before any script lands in it.

    Two reasons: run refuses a non-empty directory without a manifest (and DIR/slurm, DIR/logs
    would make it non-empty), and a DIR that holds another run (grid, seed or version) is refused
    here, at submission, naming the difference, instead of in every array task later.
    """
    from poa_mc.io.store import RunDir, RunDirError
    from poa_mc.run.runner import build_manifest, cells_frame

    # The backend stays unresolved ("auto"): resolving it would probe for a GPU on the login node,
    # and the fingerprint leaves the backend out anyway.
    manifest = build_manifest(grid, backend or grid.run.backend)
    try:
        RunDir(out).prepare(manifest, cells_frame(grid.cells()), resume=True)
    except RunDirError as e:
        raise SlurmError(f"--out {out}: {e}", bad_input=True) from None


# ----------------------------------------------------------------------------------------------
# Talking to Slurm


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=120, check=False)


def sbatch(args: Sequence[str], *, runner: Runner = _run) -> str:
    """Submit; return the job id (`--parsable` prints "id" or "id;cluster")."""
    if shutil.which("sbatch") is None and runner is _run:
        raise SlurmError("sbatch not found: run `poa-mc submit` on a Slurm login node (or use --dry-run)")
    cmd = ["sbatch", "--parsable", *args]
    proc = runner(cmd)
    if proc.returncode != 0:
        raise SlurmError(f"{shlex.join(cmd)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    job_id = proc.stdout.strip().splitlines()[-1].split(";")[0] if proc.stdout.strip() else ""
    if not job_id.isdigit():
        raise SlurmError(f"{shlex.join(cmd)} printed no job id: {proc.stdout!r}")
    return job_id


def active_jobs(job_ids: Iterable[str], *, runner: Runner = _run) -> list[str]:
    """Those of job_ids (array or plain job ids) with anything still queued or running."""
    ids = [j for j in job_ids if j]
    if not ids or shutil.which("squeue") is None and runner is _run:
        return []
    proc = runner(["squeue", "-h", "-o", "%i|%T", "-j", ",".join(ids)])
    if proc.returncode != 0:
        # squeue rejects the whole list once any id has left the controller: ask one at a time.
        alive = []
        for j in ids:
            p = runner(["squeue", "-h", "-o", "%i|%T", "-j", j])
            if p.returncode == 0 and p.stdout.strip():
                alive.append(j)
        return alive
    alive_ids = set()
    for line in proc.stdout.splitlines():
        jid = line.split("|", 1)[0].strip()
        base = jid.split("_", 1)[0]
        alive_ids.add(base)
    return [j for j in ids if j in alive_ids]


@dataclass
class TaskState:
    """One array task (or the reduce job) as Slurm last reported it."""

    job_id: str
    task: int | None
    state: str
    exit_code: str = ""
    source: str = ""


def _parse_state(raw: str) -> str:
    # sacct prints "CANCELLED by 0"; scontrol and squeue print the bare name.
    return raw.strip().split(" ", 1)[0].upper() if raw.strip() else "UNKNOWN"


def query_sacct(job_ids: Sequence[str], *, runner: Runner = _run) -> dict[tuple[str, int | None], TaskState] | None:
    """States from accounting, or None when sacct is missing or accounting is disabled."""
    if not job_ids or (shutil.which("sacct") is None and runner is _run):
        return None
    proc = runner(["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", ",".join(job_ids)])
    if proc.returncode != 0 or "accounting storage is disabled" in (proc.stdout + proc.stderr):
        return None
    states: dict[tuple[str, int | None], TaskState] = {}
    for line in proc.stdout.splitlines():
        parts = line.split("|")
        if len(parts) < 3:
            continue
        for key in _expand_job_field(parts[0]):
            states[key] = TaskState(key[0], key[1], _parse_state(parts[1]), parts[2], "sacct")
    return states


def _expand_job_field(field_: str) -> list[tuple[str, int | None]]:
    """'12_3' -> [(12, 3)]; '12_[4-6,8]' (pending) -> [(12, 4), (12, 5), (12, 6), (12, 8)]; '13' -> [(13, None)]."""
    field_ = field_.strip()
    if "_" not in field_:
        return [(field_, None)] if field_.isdigit() else []
    base, rest = field_.split("_", 1)
    rest = rest.strip("[]").split("%", 1)[0]
    out: list[tuple[str, int | None]] = []
    for part in rest.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            if lo.isdigit() and hi.isdigit():
                out += [(base, k) for k in range(int(lo), int(hi) + 1)]
        elif part.isdigit():
            out.append((base, int(part)))
    return out


def query_scontrol(job_ids: Sequence[str], *, runner: Runner = _run) -> dict[tuple[str, int | None], TaskState]:
    """States from the controller's memory (jobs stay there MinJobAge seconds after ending)."""
    states: dict[tuple[str, int | None], TaskState] = {}
    if shutil.which("scontrol") is None and runner is _run:
        return states
    for jid in job_ids:
        proc = runner(["scontrol", "-o", "show", "job", jid])
        if proc.returncode != 0:
            continue
        for line in proc.stdout.splitlines():
            fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            base = fields.get("ArrayJobId") or fields.get("JobId", "")
            task_field = fields.get("ArrayTaskId")
            state = _parse_state(fields.get("JobState", ""))
            if task_field is None:
                states[(base, None)] = TaskState(base, None, state, fields.get("ExitCode", ""), "scontrol")
                continue
            for key in _expand_job_field(f"{base}_{task_field}"):
                states[key] = TaskState(key[0], key[1], state, fields.get("ExitCode", ""), "scontrol")
    return states


_LOG_END_RE = re.compile(r"\[poa-mc\] .* exited with status (\d+)")
_LOG_SLURM_RE = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+(?: DUE TO (\w+(?: \w+)*))?")


def state_from_log(path: Path) -> str | None:
    """What a task's log says of its last attempt (None when there is no log)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return state_from_log_text(text)


def state_from_log_text(text: str) -> str | None:
    """Our closing line, or slurmstepd's kill notice, in the last attempt of a task's log."""
    # Only the last attempt counts: a requeued task appends a new "starts" line to the same log.
    start = text.rfind("starts on")
    tail = text[start:] if start >= 0 else text
    m = _LOG_SLURM_RE.search(tail)
    if m:
        reason = (m.group(1) or "").upper()
        known = {
            "TIME LIMIT": "TIMEOUT",
            "PREEMPTION": "PREEMPTED",
            "NODE FAILURE": "NODE_FAIL",
            "JOB REQUEUE": "REQUEUED",
        }
        return known.get(reason, "CANCELLED")
    ends = _LOG_END_RE.findall(tail)
    if ends:
        return "COMPLETED" if ends[-1] == "0" else "FAILED"
    if "oom-kill" in tail or "Out Of Memory" in tail:
        return "OUT_OF_MEMORY"
    return "STARTED" if start >= 0 else None


# ----------------------------------------------------------------------------------------------
# submit


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
) -> Submission:
    """Write DIR/slurm/{array,reduce}.sbatch and, unless dry_run, submit both (reduce afterany array).

    A resubmission runs only the shards that still have unfinished cells, keeps the shard count of
    the previous submission (so cell -> shard stays the same) unless --tasks says otherwise, and
    waits for every job of DIR still in the queue, so no two tasks ever work on the same cell.
    """
    opts.validate()
    grid = grid.resolve()
    out = out.resolve()
    if not grid.is_file():
        raise SlurmError(f"--grid: no such file {grid}", bad_input=True)
    python = python or PythonEnv.current()
    previous = read_jobs(out)

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
    shard_of = plan_shards(parsed, n_tasks)

    done = done_cells(out)
    pending_shards = sorted({s for c, s in shard_of.items() if c not in done})
    pending = sum(1 for c in shard_of if c not in done)
    array_spec = _array_spec(pending_shards) if pending_shards else ""

    sdir = out / SLURM_DIR
    array_path, reduce_path = sdir / ARRAY_SCRIPT, sdir / REDUCE_SCRIPT
    array_text = render_array_script(grid, out, opts, n_tasks, python)
    reduce_text = render_reduce_script(out, opts, python)
    sub = Submission(array_path, reduce_path, n_tasks, array_spec, pending_cells=pending, total_cells=total)

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


# ----------------------------------------------------------------------------------------------
# status


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
    if not (out / "manifest.json").exists() and not (out / SLURM_DIR).is_dir():
        raise SlurmError(f"{out} is not a poa-mc run directory (no manifest.json, no slurm/)", bad_input=True)
    if (out / "manifest.json").exists():
        from poa_mc.io.store import RunDir, RunDirError

        try:
            RunDir(out).read_manifest()
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
