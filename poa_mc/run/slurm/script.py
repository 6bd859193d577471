"""The text of the two sbatch scripts `submit` writes: the array of shards, and the reduce job after it.

Both run `python -m poa_mc.cli.main` with the interpreter that submitted (PythonEnv), recreated
by explicit shell lines so that the jobs work under `sbatch --export=NONE` too. The array script
also forwards the time limit's warning signal to poa-mc and closes its log with the exit status,
which `poa-mc status` reads when accounting is unavailable (scheduler.state_from_log_text).
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from poa_mc.run.slurm.options import SlurmOptions
from poa_mc.run.slurm.records import ARRAY_SCRIPT, LOG_DIR, SLURM_DIR

SIGNAL_LEAD_S = 90  # the warning signal's lead on the time limit (#SBATCH --signal)


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


def render_array_script(
    grid: Path, out: Path, opts: SlurmOptions, n_tasks: int, python: PythonEnv, *, tune: bool = False
) -> str:
    """The sbatch array script: task k of n_tasks runs shard k/n_tasks of the grid, resuming (with
    `tune`, shard k/n_tasks of its [tune]'s load points, which always resumes)."""
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
    run_cmd = ['"$PY"', "-m", "poa_mc.cli.main", "run", "--grid", q(str(grid)), "--out", q(str(out)),
               "--shard", '"$SHARD/$NSHARDS"', "--resume", "--quiet"]  # fmt: skip
    if tune:
        run_cmd = ['"$PY"', "-m", "poa_mc.cli.main", "tune", q(str(grid)), "--out", q(str(out)),
                   "--shard", '"$SHARD/$NSHARDS"']  # fmt: skip
    elif opts.backend:
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


def render_reduce_script(out: Path, opts: SlurmOptions, python: PythonEnv, *, tune_grid: Path | None = None) -> str:
    """The final job: merges the shards (reduce itself refuses mismatched or missing cells); for a
    tune, `poa-mc tune` without --shard, which tunes any point still missing and writes the results."""
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
        f'"$PY" -m poa_mc.cli.main reduce {q(str(out))}'
        if tune_grid is None
        else f'"$PY" -m poa_mc.cli.main tune {q(str(tune_grid.resolve()))} --out {q(str(out))}',
        "rc=$?",
        'echo "[poa-mc] $(date -Is) reduce exited with status $rc"',
        "exit $rc",
        "",
    ]
    return "\n".join(lines)
