"""Talking to Slurm (sbatch, squeue, sacct, scontrol), and the state of a task as Slurm or its log reports it.

Every command goes through a Runner, so that tests can fake Slurm; with the real one, a missing
command means "no Slurm here" rather than an error, except for sbatch. A task's state comes from
accounting (sacct) when it is on, else from the controller's memory (scontrol), and its log fills
in what both have forgotten: the closing line the array script writes, or slurmstepd's kill notice.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from poa_mc.run.slurm.options import SlurmError

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
