"""`poa-mc reduce`, `poa-mc plot` and `poa-mc games`: what a run directory's results become.

`reduce` rebuilds summary.parquet and poa.parquet from the accumulators (with other [poa] settings
if asked), `plot` redraws the figures, `games` prints the games' tables. poa_mc/cli/main.py registers
these on its group with `register(main)`; `_figure_workers` is shared with `run` (run_cmds.py).
Exit codes follow the rest of the CLI: 0 ok, 2 bad input, 1 anything else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from poa_mc.cli.common import BadInput, handle_errors

# Each command imports what it runs inside its function: `poa-mc --help`, and bad input, answer
# before numba, polars and matplotlib load (bench/bench_startup.py).


@click.command()
@click.argument("run_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--allow-partial", is_flag=True, help="Summarise the cells present even if some are missing.")
@click.option("--window", type=click.IntRange(min=1), default=None, help="Override [poa].window for this reduce.")
@click.option(
    "--slots",
    type=click.IntRange(min=0),
    default=None,
    help="Override [poa].slots (0 = the pricing's default: window for slot, ceil(window/K) for frozen).",
)
@click.option("--cost", type=click.Choice(["router", "ttft", "observed"]), default=None, help="Override [poa].cost.")
@click.option("--stage", type=click.Choice(["auto", "prefill", "decode"]), default=None, help="Override [poa].stage.")
@click.option("--pricing", type=click.Choice(["slot", "frozen"]), default=None, help="Override [poa].pricing.")
@click.option(
    "--social-cost",
    type=click.Choice(["mean_ttft", "mean_e2e", "p99_ttft"]),
    default=None,
    help="Override [poa].social_cost.",
)
@click.option("--plot/--no-plot", default=True, show_default=True, help="Redraw the figures afterwards.")
@handle_errors
def reduce(
    run_dir: Path,
    allow_partial: bool,
    window: int | None,
    slots: int | None,
    cost: str | None,
    stage: str | None,
    pricing: str | None,
    social_cost: str | None,
    plot: bool,
) -> None:
    """Rebuild summary.parquet and poa.parquet of DIR from its per-replica accumulators (acc/).

    Other [poa] settings than the run's (--window, ...) recompute PoA-hat from the samples, which
    the run must then have kept in full ([run] samples = "all")."""
    from poa_mc.io.store import RunDir
    from poa_mc.stats.reduce import reduce_run

    if not RunDir(run_dir).manifest_path.exists():
        raise BadInput(f"{run_dir}: no manifest.json; not a poa-mc run directory")
    overrides = {
        k: v
        for k, v in {
            "window": window, "slots": slots, "cost": cost, "social_cost": social_cost, "stage": stage,
            "pricing": pricing,
        }.items()
        if v is not None
    }  # fmt: skip
    if overrides:
        _check_stage_and_slots(run_dir, overrides)
    with _figure_workers(plot) as workers:  # they import matplotlib while the reduce runs
        summary, poa = reduce_run(run_dir, allow_partial=allow_partial, overrides=overrides)
        click.echo(f"summary: {run_dir / 'summary.parquet'} ({summary.height} cells)")
        click.echo(f"poa:     {run_dir / 'poa.parquet'} ({poa.height} topology x load points)")
        import json

        from poa_mc.run.console import summary_notes

        warm = int(json.loads(RunDir(run_dir).manifest_path.read_text())["grid"]["run"]["warmup"])
        for line in summary_notes(summary, warm):
            click.echo(line, err=True)
        if plot and poa.height:
            from poa_mc.plots.figures import plot_run

            paths = plot_run(run_dir, workers)
            click.echo(f"plots:   {run_dir / 'plots'}/ ({', '.join(p.name for p in paths)})")


def _figure_workers(plotting: bool = True) -> Any:
    """figure_workers.start, a bad POA_MC_FIGURE_WORKERS said as bad input."""
    from poa_mc.plots import figure_workers

    try:
        return figure_workers.start(plotting)
    except ValueError as e:
        raise BadInput(str(e)) from None


def _check_stage_and_slots(run_dir: Path, overrides: dict[str, Any]) -> None:
    """The overridden [poa] must fit every cell: its stage must exist in the cell's flow, and its
    slots must let the stage's K workers take a window."""
    import json

    import polars as pl

    from poa_mc.io.store import RunDir
    from poa_mc.model.sections import PoaSection
    from poa_mc.model.spec_error import SpecError
    from poa_mc.model.spec_json import spec_from_json

    poa = {**json.loads(RunDir(run_dir).manifest_path.read_text())["grid"]["poa"], **overrides}
    section = PoaSection(**{k: v for k, v in poa.items() if k in PoaSection.__dataclass_fields__})
    for spec_json in pl.read_parquet(RunDir(run_dir).cells_path)["spec_json"].unique().to_list():
        cluster = spec_from_json(spec_json).cluster
        try:
            _, _, k = cluster.poa_stage(section.stage)
        except SpecError as e:
            raise BadInput(f"--stage: {e.message}") from None
        if k > 1 and section.slots_for(k) * k < section.window:
            raise BadInput(f"--slots: {section.slots} slots x {k} workers cannot take a window of {section.window}")


@click.command()
@click.argument("run_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@handle_errors
def plot(run_dir: Path) -> None:
    """Redraw the figures of DIR (into DIR/plots/) from summary.parquet and poa.parquet."""
    from poa_mc.io.store import RunDir
    from poa_mc.plots.figures import plot_run

    RunDir(run_dir).read_manifest()  # a damaged run directory is said before any figure is redrawn
    if not RunDir(run_dir).summary_path.exists():
        raise BadInput(f"{run_dir}: no summary.parquet; run `poa-mc reduce {run_dir}` first")
    with _figure_workers() as workers:  # two figures at a time (docs/outputs.md)
        paths = plot_run(run_dir, workers)
    for p in paths:
        click.echo(str(p))


@click.command()
@click.argument("run_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@handle_errors
def games(run_dir: Path) -> None:
    """Summarise the games of a reduced run: pd_game.parquet (the prefill/decode split game),
    planner.parquet (the Planner moving that split) and cache_game.parquet (selfish against
    coordinated caching)."""
    from poa_mc.io.store import RunDir, read_parquet_or_fail
    from poa_mc.run.console import print_cache_game, print_pd_game, print_planner

    if not RunDir(run_dir).manifest_path.exists():
        raise BadInput(f"{run_dir}: no manifest.json; not a poa-mc run directory")
    found = [(run_dir / name, show) for name, show in (("pd_game.parquet", print_pd_game),
                                                       ("planner.parquet", print_planner),
                                                       ("cache_game.parquet", print_cache_game))]  # fmt: skip
    found = [(path, show) for path, show in found if path.exists()]
    if not found:
        raise BadInput(
            f"{run_dir}: no pd_game.parquet or cache_game.parquet; the grid has no [games.pd] or [games.cache] "
            f"table, or `poa-mc reduce {run_dir}` has not run"
        )
    game_policy = None
    for path, show in found:
        frame = read_parquet_or_fail(path)
        if path.name == "pd_game.parquet" and frame.height:
            game_policy = frame["policy"][0]  # the planner's table follows the game's policy
        if show is print_planner:
            show(frame, policy=game_policy)
        else:
            show(frame)


def register(group: click.Group) -> None:
    """Add `reduce`, `plot` and `games` to the poa-mc command group."""
    group.add_command(reduce)
    group.add_command(plot)
    group.add_command(games)
