"""`poa-mc tune`: the router settings that serve an objective best, per load point
(poa_mc.run.tune). Exit codes as the rest of the CLI: 0 ok, 2 bad input (a bad [tune] table or
grid: one line naming the key), 1 anything else."""

from __future__ import annotations

from pathlib import Path

import click

from poa_mc.cli.common import BadInput, handle_errors


@click.command()
@click.argument("grid_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the results go. Default: the grid's [run].out + '-tune'.",
)
@handle_errors
def tune(grid_file: Path, out: Path | None) -> None:
    """Search GRID_FILE's [tune] space of router settings for its objective at each topology and
    load (successive halving under common random numbers), then validate each winner against the
    policy's own settings on fresh seeds (docs/tune.md)."""
    from poa_mc.model.sections import ConfigError

    if not grid_file.is_file():
        raise BadInput(f"{grid_file}: no such file")
    try:
        from poa_mc.run.tune.space import load_tune

        spec = load_tune(grid_file)
    except ConfigError as e:
        raise BadInput(f"{grid_file}: {e}") from None
    except OSError as e:
        raise BadInput(f"{grid_file}: cannot read: {e.strerror or e}") from None

    from poa_mc.engine.engine import simulate
    from poa_mc.run.tune.report import write
    from poa_mc.run.tune.search import tune as run_tune

    out = out if out is not None else Path(f"{spec.grid.run.out}-tune")
    cells = spec.grid.cells()
    click.echo(
        f"tuning {', '.join(spec.space)} of {spec.policy.name!r} for {spec.objective} at {len(cells)} load points, "
        f"{spec.candidates} candidates each",
        err=True,
    )
    results = run_tune(spec, simulate, progress=lambda c: click.echo(f"  {c.label()}", err=True))
    for p in results:
        best = ", ".join(f"{k} {v:.3g}" for k, v in p.best.items())
        click.echo(
            f"{p.cell.topology:<8} {spec.grid.load_axis} {p.cell.load:<6g} {best}: {spec.objective} "
            f"{p.own_objective:.4g} -> {p.best_objective:.4g}, gain {p.gain:+.1%} [{p.gain_lo:+.1%}, {p.gain_hi:+.1%}]"
        )
    paths = write(spec, results, out)
    click.echo(f"results: {paths[0]}, {paths[1]}; settings: {paths[2]}; plot: {paths[3]}", err=True)


def register(group: click.Group) -> None:
    group.add_command(tune)
