"""`poa-mc submit` and `poa-mc status`: grids as Slurm array jobs (the work is in poa_mc.run.slurm).

poa_mc/cli/main.py registers these on its group with `register(main)`. Exit codes follow the rest of the
CLI: 0 ok, 2 bad input (a bad option or grid, a missing directory), 1 anything else (sbatch failed).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from poa_mc.cli.common import BadInput, resolve_grid_path
from poa_mc.run.slurm.cells import load_grid
from poa_mc.run.slurm.options import SlurmError, SlurmOptions
from poa_mc.run.slurm.records import LOG_DIR
from poa_mc.run.slurm.status import collect_status, format_status
from poa_mc.run.slurm.submit import submit


def _fail(err: SlurmError) -> None:
    click.echo(f"Error: {err}", err=True)
    raise SystemExit(2 if err.bad_input else 1)


def _grid_file(arg: str) -> Path:
    """A grid file, or the name of a built-in grid: the same lookup as `poa-mc run --grid`."""
    path = Path(arg)
    if path.is_file():
        return path
    try:
        return resolve_grid_path(arg)
    except BadInput as e:
        raise SlurmError(str(e), bad_input=True) from None


def _default_out(grid: Path) -> Path:
    """Where `poa-mc run` writes without --out: the grid's [run].out, else runs/<[run].name>."""
    parsed = load_grid(grid)
    return Path(parsed.run.out) if parsed.run.out else Path("runs") / parsed.run.name


@click.command("submit")
@click.option(
    "--grid", "grid_arg", required=True, metavar="FILE|NAME", help="Grid TOML file, or the name of a built-in grid."
)
@click.option("--partition", required=True, help="Slurm partition for the array (e.g. gpu).")
@click.option(
    "--tasks",
    type=click.IntRange(min=1),
    default=None,
    help="Array tasks (= shards). Default: as last time, else min(cells, 8).",
)
@click.option(
    "--gpus-per-task", type=click.IntRange(min=0), default=0, show_default=True, help="GPUs per task (--gres=gpu:G)."
)
@click.option("--cpus-per-task", type=click.IntRange(min=1), default=1, show_default=True, help="CPUs per task.")
@click.option("--mem", default=None, help="Memory per task, e.g. 16G.")
@click.option("--time", "time_limit", default=None, help="Time limit per task, HH:MM:SS (or D-HH:MM:SS).")
@click.option("--account", default=None, help="Slurm account to charge.")
@click.option("--qos", default=None, help="Slurm quality of service.")
@click.option("--extra", multiple=True, help='Extra directive line, e.g. "#SBATCH --constraint=h100". Repeatable.')
@click.option("--setup", multiple=True, help='Shell line run before poa-mc, e.g. "module load cuda/12.4". Repeatable.')
@click.option("--backend", type=click.Choice(["auto", "cpu", "cuda"]), default=None, help="Passed to `poa-mc run`.")
@click.option("--reduce-partition", default=None, help="Partition of the final reduce job. Default: --partition.")
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run directory. Default: as `poa-mc run`.",
)
@click.option("--dry-run", is_flag=True, help="Write and print the scripts; submit nothing.")
@click.option(
    "--tune",
    "tune",
    is_flag=True,
    help="Shard the grid's [tune] load points (`poa-mc tune --shard`); the last job writes the results.",
)
def submit_cmd(
    grid_arg: str,
    partition: str,
    tasks: int | None,
    gpus_per_task: int,
    cpus_per_task: int,
    mem: str | None,
    time_limit: str | None,
    account: str | None,
    qos: str | None,
    extra: tuple[str, ...],
    setup: tuple[str, ...],
    backend: str | None,
    reduce_partition: str | None,
    out: Path | None,
    dry_run: bool,
    tune: bool,
) -> None:
    """Run a grid as a Slurm array: task k runs shard k/N with --resume; a final job reduces.
    With --tune, task k tunes shard k/N of the grid's [tune] load points and the final job writes
    the tune's results (docs/tune.md).

    Submitting again resubmits only the shards with unfinished cells (finished cells stand), after
    every job of the run that is still queued or running.
    """
    opts = SlurmOptions(
        partition=partition,
        tasks=tasks,
        gpus_per_task=gpus_per_task,
        cpus_per_task=cpus_per_task,
        mem=mem,
        time=time_limit,
        account=account,
        qos=qos,
        extra=tuple(extra),
        setup=tuple(setup),
        backend=backend,
        reduce_partition=reduce_partition,
    )
    try:
        grid = _grid_file(grid_arg)
        out_dir = out if out is not None else _default_out(grid, tune)
        sub = submit(grid, out_dir, opts, dry_run=dry_run, echo=click.echo, tune=tune)
    except SlurmError as e:
        _fail(e)
        return
    if dry_run:
        return
    done = sub.total_cells - sub.pending_cells
    units = "load points" if tune else "cells"
    if sub.array_job_id:
        click.echo(
            f"submitted array job {sub.array_job_id} (tasks {sub.array_spec} of {sub.tasks}; "
            f"{sub.pending_cells} {units} to {'tune' if tune else 'run'}, {done} already done)"
        )
    else:
        click.echo(f"all {sub.total_cells} {units} already done: no array submitted")
    if sub.waits_for:
        click.echo(f"waits for earlier jobs still queued or running: {', '.join(sub.waits_for)}")
    click.echo(f"submitted {'results' if tune else 'reduce'} job {sub.reduce_job_id} (afterany)")
    run_dir = sub.array_script.parent.parent
    click.echo(f"logs: {run_dir / LOG_DIR}; progress: poa-mc status {run_dir}")


@click.command("status")
@click.argument("out", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status_cmd(out: Path, as_json: bool) -> None:
    """Cells done and pending per shard, failed tasks and Slurm job ids of run directory DIR.

    Works without Slurm (cell progress only). Slurm states come from sacct when accounting is on,
    else from scontrol/squeue, else from the task logs in DIR/logs/.
    """
    try:
        st = collect_status(out)
    except SlurmError as e:
        _fail(e)
        return
    if as_json:
        click.echo(json.dumps(st.to_json(), indent=2))
    else:
        click.echo(format_status(st))


def register(group: click.Group) -> None:
    """Add `submit` and `status` to the poa-mc command group."""
    group.add_command(submit_cmd)
    group.add_command(status_cmd)
