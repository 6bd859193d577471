"""`poa-mc capacity`: the highest load meeting an SLO, per topology and policy (poa_mc.run.capacity).

poa_mc/cli/main.py registers it with `register(main)`. Exit codes as the rest of the CLI: 0 ok,
2 bad input (a bad grid or --slo), 1 anything else.
"""

from __future__ import annotations

from pathlib import Path

import click

from poa_mc.cli.common import BadInput, collect_overrides, handle_errors, load_grid_arg, override_options

# Each command imports what it runs inside its function: `poa-mc --help`, and bad input, answer
# before numba, polars and matplotlib load (bench/bench_startup.py).


@click.command()
@click.option("--grid", "grid_arg", metavar="FILE|NAME", default=None, help="Grid file or built-in name.")
@click.option(
    "--slo",
    "slos",
    multiple=True,
    metavar="METRIC:pN=MS",
    help="A latency target, e.g. ttft:p99=2000 or itl:p99=50 (repeatable; every one must hold). "
    "Metrics: ttft, itl (p50, p90, p99), e2e (p99).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where capacity.parquet and capacity.png go. Default: the grid's [run].out + '-capacity'.",
)
@override_options
@handle_errors
def capacity(
    grid_arg: str | None, slos: tuple[str, ...], out: Path | None, sets: tuple[str, ...], **shortcuts: int | None
) -> None:
    """The highest load (the grid's axis, within its range) meeting every --slo target, per topology
    and policy, by bisection; with a bracket from the 95% intervals."""
    from poa_mc.model.sections import ConfigError
    from poa_mc.run.capacity import parse_target

    if not slos:
        raise BadInput("--slo: give at least one target, e.g. --slo ttft:p99=2000")
    try:
        targets = [parse_target(s) for s in slos]
    except ConfigError as e:
        raise BadInput(str(e)) from None
    grid = load_grid_arg(grid_arg, "--grid", collect_overrides(sets, shortcuts))
    if len(grid.loads) < 2:
        raise BadInput(f"{grid.source}: grid.{grid.load_axis} needs two loads at least: the range to search")
    out = out if out is not None else Path(f"{grid.run.out}-capacity")

    import polars as pl

    from poa_mc.engine.engine import simulate
    from poa_mc.io.files import atomic_write_parquet
    from poa_mc.plots.capacity_figure import plot_capacity
    from poa_mc.run.capacity import find_capacities

    click.echo(
        f"searching {grid.load_axis} {min(grid.loads):g}..{max(grid.loads):g} for "
        + " and ".join(str(t) for t in targets),
        err=True,
    )
    found = find_capacities(grid, targets, simulate)
    slo = "; ".join(str(t) for t in targets)
    frame = pl.DataFrame(
        [
            {
                "topology": c.topology, "policy": c.policy, "load_axis": c.load_axis, "slo": slo,
                "capacity": c.capacity, "capacity_lo": c.capacity_lo, "capacity_hi": c.capacity_hi,
                "status": c.status, "probes": len(c.probes),
                "probe_loads": [p.load for p in c.probes], "probe_meets": [p.meets for p in c.probes],
            }
            for c in found
        ],
        schema={
            "topology": pl.String, "policy": pl.String, "load_axis": pl.String, "slo": pl.String,
            "capacity": pl.Float64, "capacity_lo": pl.Float64, "capacity_hi": pl.Float64, "status": pl.String,
            "probes": pl.Int64, "probe_loads": pl.List(pl.Float64), "probe_meets": pl.List(pl.Boolean),
        },
    )  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(frame, out / "capacity.parquet")
    png = plot_capacity(frame, out / "capacity.png")
    for c in found:
        if c.status == "below":
            says = f"missed even at {grid.load_axis} {min(grid.loads):g}"
        else:
            bracket = f"[{_num(c.capacity_lo)}, {_num(c.capacity_hi)}]"
            above = " (met at the largest load: the capacity is higher)" if c.status == "above" else ""
            says = f"{_num(c.capacity)} {bracket}{above}"
        click.echo(f"{c.topology:<12} {c.policy:<16} {grid.load_axis} {says}")
    click.echo(f"results: {out / 'capacity.parquet'}; plot: {png}", err=True)


def _num(v: float | None) -> str:
    return "?" if v is None else f"{v:g}"


def register(group: click.Group) -> None:
    group.add_command(capacity)
