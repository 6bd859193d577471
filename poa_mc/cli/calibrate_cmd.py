"""`poa-mc calibrate`: fit the profile's free parameters to a deployment's own benchmark results
(poa_mc.run.calibrate). Exit codes as the rest of the CLI: 0 ok, 2 bad input (a bad deployment
file, an unreadable or malformed benchmark file: one line naming the file and line), 1 anything else.
"""

from __future__ import annotations

from pathlib import Path

import click

from poa_mc.cli.common import BadInput, handle_errors


@click.command()
@click.argument("deployment", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the results go. Default: the deployment's [run].out + '-calibration'.",
)
@click.option(
    "--bootstrap",
    type=click.IntRange(min=0),
    default=None,
    help="Refits behind each 95%% interval (default 40; 0: no intervals).",
)
@handle_errors
def calibrate(deployment: Path, out: Path | None, bootstrap: int | None) -> None:
    """Fit DEPLOYMENT's profile (host times, prefill and decode timing scales) to its measured
    benchmark files (AIPerf, genai-perf, vllm bench serve, inference-perf): the fitted values with
    intervals, the held-out error per figure, a plot, and a [profile] table (docs/calibrate.md)."""
    from poa_mc.io.benchmarks.common import BenchmarkFormatError
    from poa_mc.model.sections import ConfigError

    if not deployment.is_file():
        raise BadInput(f"{deployment}: no such file")
    try:
        from poa_mc.run.calibrate.deployment import load_deployment

        dep = load_deployment(deployment)
    except ConfigError as e:
        raise BadInput(f"{deployment}: {e}") from None
    except BenchmarkFormatError as e:
        raise BadInput(str(e)) from None
    except OSError as e:
        raise BadInput(f"{deployment}: cannot read: {e.strerror or e}") from None

    from poa_mc.engine.engine import simulate
    from poa_mc.run.calibrate.fit import BOOTSTRAP
    from poa_mc.run.calibrate.report import calibrate as run_calibration
    from poa_mc.run.calibrate.report import lines, write

    out = out if out is not None else Path(f"{dep.grid.run.out}-calibration")
    n = len(dep.points)
    click.echo(
        f"fitting {', '.join(p.name for p in dep.params)} to {n} load points x {len(dep.figures)} figures", err=True
    )
    cal = run_calibration(dep, simulate, BOOTSTRAP if bootstrap is None else bootstrap)
    for line in lines(dep, cal):
        click.echo(line)
    paths = write(dep, cal, out)
    click.echo(f"results: {paths[0]}, {paths[1]}; profile: {paths[2]}; plot: {paths[3]}", err=True)


def register(group: click.Group) -> None:
    group.add_command(calibrate)
