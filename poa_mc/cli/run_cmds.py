"""`poa-mc run` and `poa-mc validate`: a grid simulated end to end, or checked without running.

poa_mc/cli/main.py registers these on its group with `register(main)`. `validate` refuses what `run`
would refuse (the grid, the backend, the memory, an --out of another run) and estimates the time.
Exit codes follow the rest of the CLI: 0 ok, 2 bad input, 1 anything else.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import click

from poa_mc.cli.common import BadInput, collect_overrides, handle_errors, load_grid_arg, override_options
from poa_mc.cli.results_cmds import _figure_workers

# Each command imports what it runs inside its function: `poa-mc --help`, and bad input, answer
# before numba, polars and matplotlib load (bench/bench_startup.py).


def _out_dir(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    if value is not None and not value.strip():
        raise click.BadParameter("empty path (leave --out out for the grid's [run].out)")
    return Path(value) if value is not None else None


@click.command()
@click.option(
    "--grid",
    "grid_arg",
    metavar="FILE|NAME",
    default=None,
    help="Grid file, or a built-in grid name (see `poa-mc presets`). Default: quickstart.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    callback=_out_dir,
    help="Run directory. Default: the grid's [run].out.",
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default=None,
    help="Where the engine runs. Default: the grid's [run].backend.",
)
@click.option(
    "--shard",
    metavar="I/N",
    default=None,
    help="Run only shard I of N (0-based); the reduce is skipped until all cells exist.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Skip cells already complete in --out; a grid grown by loads, topologies or policies runs only its new cells.",
)
@click.option(
    "--recompute",
    is_flag=True,
    help="With --resume: simulate again the cells an engine of other sources made (an edited or other checkout).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, no result table, no summary lines.")
@override_options
@handle_errors
def run(
    grid_arg: str | None,
    out: Path | None,
    backend: str | None,
    shard: str | None,
    resume: bool,
    recompute: bool,
    quiet: bool,
    sets: tuple[str, ...],
    **shortcuts: int | None,
) -> None:
    """Simulate every cell of a grid, then reduce and plot.

    Results go to the run directory: manifest.json, cells.parquet, acc/ and samples/ (one Parquet
    file per cell each, written atomically as it finishes; [run] samples says how many requests the
    samples keep), summary.parquet, poa.parquet and plots/. A run
    killed partway keeps its finished cells; run it again with --resume to do the rest.
    """
    from poa_mc.model.grid import parse_shard

    grid = load_grid_arg(grid_arg, overrides=collect_overrides(sets, shortcuts))
    _warn(grid)
    shard_t = None
    if shard is not None:
        try:
            shard_t = parse_shard(shard)
        except ValueError as e:
            raise BadInput(f"--shard: {e}") from None
    if recompute and not resume:
        raise BadInput("--recompute: only with --resume (a run without it simulates every cell anyway)")
    say = (lambda *_: None) if quiet else click.echo
    t0 = time.perf_counter()
    # the figures' workers start before the engine's imports, and import as the run starts
    with _figure_workers(shard_t is None) as workers:
        from poa_mc.run.runner import run_grid

        log = lambda m: click.echo(m, err=True)  # noqa: E731
        report = run_grid(
            grid,
            out=out,
            backend=backend,
            shard=shard_t,
            resume=resume,
            recompute=recompute,
            quiet=quiet,
            log=log,
            workers=workers,
        )
    dt = time.perf_counter() - t0
    done = f"ran {len(report.ran)} cell(s)"
    if report.skipped:
        done += f", {len(report.skipped)} already complete"
    say(f"{done} in {dt:.1f} s; {report.complete}/{report.total} cells of the grid are complete")
    if report.reduced and not quiet:
        import polars as pl

        from poa_mc.run.console import print_results

        summary, poa = (pl.read_parquet(report.out / f"{t}.parquet") for t in ("summary", "poa"))
        print_results(summary, poa, grid.poa.selfish)
        if (report.out / "stages.parquet").exists():  # [schedule]: the whole runs above, each stage here
            from rich.console import Console

            from poa_mc.run.console import stages_table

            Console(width=None if sys.stdout.isatty() else 160, highlight=False).print(
                stages_table(pl.read_parquet(report.out / "stages.parquet"))
            )
    if report.reduced:
        import polars as pl

        from poa_mc.io.store import RunDir
        from poa_mc.run.console import summary_notes

        rd = RunDir(report.out)
        for line in summary_notes(pl.read_parquet(rd.summary_path), grid.run.warmup):
            if not (quiet and line.startswith("note:")):  # --quiet keeps the warnings only
                click.echo(line, err=True)
        stages = f", {rd.stages_path}" if rd.stages_path.exists() else ""
        say(f"results: {rd.summary_path}, {rd.poa_path}{stages}")
        if report.plots:
            say(f"plots:   {report.out / 'plots'}/ ({', '.join(p.name for p in report.plots)})")
        say(f"analyse: python -c \"import poa_mc; print(poa_mc.load('{report.out}').poa.collect())\"")
    elif shard_t is not None:
        say(f"shard {shard_t[0]}/{shard_t[1]} done; reduce with `poa-mc reduce {report.out}` once all shards finish")


def _warn(grid) -> None:
    from poa_mc.model.config import grid_warnings

    for w in grid_warnings(grid):
        click.echo(f"warning: {w}", err=True)


@click.command()
@click.argument("grid_file", metavar="FILE")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    callback=_out_dir,
    help="Also check that `run` could write this run directory (refused: exit 2). Default: the grid's [run].out, "
    "whose problems are reported as a note.",
)
@override_options
@handle_errors
def validate(grid_file: str, out: Path | None, sets: tuple[str, ...], **shortcuts: int | None) -> None:
    """Check a grid file (every key, every cell) without running anything; then whether `run` could
    use its run directory, a separate check (--out)."""
    from poa_mc.model.grid import estimate_cost

    grid = load_grid_arg(grid_file, "FILE", collect_overrides(sets, shortcuts))
    if out is not None:
        grid = dataclasses.replace(grid, run=dataclasses.replace(grid.run, out=str(out)))
    _warn(grid)
    from poa_mc.engine.memory import check_memory
    from poa_mc.model.sections import ConfigError
    from poa_mc.run import speed
    from poa_mc.run.runner import EnvironmentFault, check_backend, check_out_dir, kernels_cold, resolve_backend

    cells = grid.cells()
    r = grid.run
    try:
        check_memory(cells, r)
    except ConfigError as e:
        raise BadInput(f"{grid.source}: {e}") from None
    backend = resolve_backend(r.backend)
    check_backend(backend)  # what `run` would refuse on this machine, validate refuses too
    # the run directory is a second question: a grid is valid whatever its default --out holds
    refused = None
    try:
        check_out_dir(Path(r.out))
        resumable = _check_existing_out(grid, backend, cells)
    except (BadInput, EnvironmentFault) as e:
        if out is not None:
            raise
        refused, resumable = str(e).removeprefix(f"--out {r.out}: "), False
    work = sum(estimate_cost(c, r) for c in cells)
    expected = speed.expected_seconds(work, backend, len(cells))
    when = (
        f"about {_duration(expected)} of simulation on this machine's {backend} (its measured speed)"
        if expected is not None
        else f"no run timed on this machine's {backend} yet, so no time estimate"
    )
    if kernels_cold(backend, cells):  # the first run on a machine compiles before it simulates
        when += f", after compiling the {backend} kernels once (about a minute on 2 cores, cached from then on)"
    warmups = sorted({r.warmup_for(c.concurrency) for c in cells})
    warm = f"{warmups[0]}" if len(warmups) == 1 else f"{warmups[0]}..{warmups[-1]}"
    loads = f"{len(grid.loads)} {grid.load_axis} values"
    if grid.workload.schedule:  # one cell runs every load, as a stage (docs/schedules.md)
        loads = f"1 schedule of {len(grid.loads)} {grid.load_axis} stages"
    click.echo(
        f"ok: {grid.source}: {len(cells)} cells = {len(grid.topologies)} topologies x {loads} x "
        f"{len(grid.policies)} policies; {r.replicas} replicas x "
        f"({r.requests} + {warm} warm-up) requests per cell; "
        f"{sum(r.replicas * (r.requests + r.warmup_for(c.concurrency)) for c in cells):,} "
        f"simulated requests, {when}; selfish policy {grid.poa.selfish!r}; out {r.out}"
    )
    if refused:
        click.echo(f"note: `run` would refuse {r.out} (the grid's [run].out): {refused}", err=True)
    if resumable:
        click.echo(
            f"note: {r.out} holds an earlier run of a smaller grid: `poa-mc run --resume` runs only the new cells "
            "(without --resume, run refuses the directory)"
        )


def _check_existing_out(grid, backend: str, cells: list) -> bool:
    """The refusals `run` would meet in an --out that already holds a run (another grid, files
    without a manifest); True when only `run --resume` can use it (a grown grid)."""
    from poa_mc.io.store import RunDir, RunDirError
    from poa_mc.run.runner import build_manifest, cells_frame

    run_dir = RunDir(Path(grid.run.out))
    manifest = build_manifest(grid, backend)
    cells_df = cells_frame(cells)
    try:
        run_dir.check(manifest, cells_df, resume=False)
        return False
    except RunDirError as plain:
        try:
            run_dir.check(manifest, cells_df, resume=True)
        except RunDirError:
            raise BadInput(f"--out {grid.run.out}: {plain}") from None
        return True


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(seconds, 0.1):.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def register(group: click.Group) -> None:
    """Add `run` and `validate` to the poa-mc command group."""
    group.add_command(run)
    group.add_command(validate)
