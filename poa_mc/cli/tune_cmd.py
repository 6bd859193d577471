"""`poa-mc tune`: the router settings that serve an objective best, per load point, or an adaptive
controller's table for the whole load axis (poa_mc.run.tune). Exit codes as the rest of the CLI:
0 ok, 2 bad input (a bad [tune] table or grid: one line naming the key; a --out that holds another
tune), 1 anything else; Ctrl-C or SIGTERM 130 or 143, the finished points kept."""

from __future__ import annotations

import shlex
import sys
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
@click.option(
    "--shard",
    default=None,
    metavar="I/N",
    help="Tune only shard I of N (0-based) of the load points; a last call without --shard writes the results.",
)
@handle_errors
def tune(grid_file: Path, out: Path | None, shard: str | None) -> None:
    """Search GRID_FILE's [tune] space of router settings for its objective at each topology and
    load, or an adaptive policy's controller table over all of them (successive halving under
    common random numbers), then validate each winner against the policy's own settings and the
    [tune] compare policies on fresh seeds (docs/tune.md). Finished load points are kept in --out:
    a rerun goes on where an interrupted one stopped."""
    from poa_mc.model.grid import assign_shards, parse_shard
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
    cells = spec.grid.cells()
    mine = cells
    if shard is not None:
        try:
            i, n = parse_shard(shard)
        except ValueError as e:
            raise BadInput(f"--shard: {e}") from None
        if spec.joint:
            raise BadInput("--shard: a controller's table is raced over every load point at once; tune it as one task")
        mine = [c for c, s in zip(cells, assign_shards(cells, n, spec.grid.run)) if s == i]

    from poa_mc.engine.engine import simulate
    from poa_mc.run.tune import points
    from poa_mc.run.tune.report import write
    from poa_mc.run.tune.search import tune as run_tune

    out = out if out is not None else Path(f"{spec.grid.run.out}-tune")
    try:
        points.prepare(spec, out)
    except points.TuneDirError as e:
        raise BadInput(str(e)) from None
    done = points.done(out, cells)
    what = "its controller's table over all" if spec.joint else "at"
    todo = sum(c.cell_id not in done for c in mine)
    click.echo(
        f"tuning {', '.join(spec.space)} of {spec.policy.name!r} for {spec.objective} {what} {len(mine)} load points "
        f"({len(mine) - todo} done before), {spec.candidates} candidates",
        err=True,
    )
    try:
        result = run_tune(
            spec, simulate, progress=lambda c: click.echo(f"  {c.label()}", err=True), cells=mine, done=done,
            on_point=lambda p: points.save(out, p), race_done=points.load_race(out) if spec.joint else None,
            on_race=lambda *race: points.save_race(out, *race),
        )  # fmt: skip
    except KeyboardInterrupt:
        kept = len(points.done(out, cells))
        again = shlex.join(["poa-mc", *sys.argv[1:]]) if sys.argv[1:2] == ["tune"] else f"poa-mc tune {grid_file}"
        raise KeyboardInterrupt(f"{kept} of {len(cells)} load points are tuned in {out}; go on with: {again}") from None
    if shard is not None:
        left = len(cells) - len(points.done(out, cells))
        click.echo(
            f"shard {shard}: {len(mine)} load points tuned in {out}; {left} of {len(cells)} left in other shards. "
            f"Once every shard has ended: poa-mc tune {grid_file} --out {out}",
            err=True,
        )
        return
    if spec.joint:
        click.echo(f"{spec.policy.name} tuned: " + ", ".join(f"{k} {v:.3g}" for k, v in result.points[0].best.items()))
    for p in result.points:
        best = "" if spec.joint else ", ".join(f"{k} {v:.3g}" for k, v in p.best.items()) + ": "
        at = f"{p.cell.topology:<8} {spec.grid.load_axis} {p.cell.load:<6g}"
        click.echo(f"{at} {best}{spec.objective} {_gains(p.gains)}")
    if result.overall:
        click.echo(f"{'all':<8} mean gain over the load points: {_gains(result.overall)}")
    paths = write(spec, result, out)
    click.echo(f"results: {paths[0]}, {paths[1]}; settings: {paths[2]}; plot: {paths[3]}", err=True)


def _gains(gains) -> str:
    """The winner's figure and its validated gain over each baseline."""
    head = f"{gains[0].best_objective:.4g}"
    return (
        head
        + "; "
        + "; ".join(
            f"vs {g.baseline} {g.baseline_objective:.4g}: {g.gain:+.1%} [{g.lo:+.1%}, {g.hi:+.1%}]" for g in gains
        )
    )


def register(group: click.Group) -> None:
    group.add_command(tune)
