"""The `poa-mc` command line: run, validate, presets, reduce, plot (+ submit, status from slurm_cmds).

Exit codes: 0 success, 2 bad input (bad grid, bad option, a directory of another run),
1 anything else. Set POA_MC_DEBUG=1 to see the traceback of an unexpected error.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import click

import poa_mc
from poa_mc.cli.common import (
    BadInput,
    builtin_grids,
    builtin_profiles,
    collect_overrides,
    handle_errors,
    load_grid_arg,
    override_options,
)

# Each command imports what it runs inside its function: `poa-mc --help`, and bad input, answer
# before numba, polars and matplotlib load (bench/bench_startup.py).


class OneLineErrors(click.Group):
    """Usage errors (a bad option, a missing argument) as one `Error:` line with exit code 2, like
    every other bad input, instead of click's usage block."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("standalone_mode", True)
        if not kwargs["standalone_mode"]:
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.UsageError as e:
            where = f" ({e.ctx.command_path} --help)" if e.ctx is not None else ""
            click.echo(f"Error: {e.format_message()}{where}", err=True)
            sys.exit(2)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(poa_mc.__version__, prog_name="poa-mc")
def main() -> None:
    """Monte Carlo Price of Anarchy for disaggregated LLM serving.

    \b
    Quick start:   poa-mc run                    (built-in quickstart grid: seconds; 1-2 min the first time)
    Your grid:     poa-mc validate grid.toml && poa-mc run --grid grid.toml
    Analyse:       python -c "import poa_mc; print(poa_mc.load('runs/quickstart').poa.collect())"

    Exit codes: 0 success, 2 bad input, 1 anything else.
    """


def _out_dir(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    if value is not None and not value.strip():
        raise click.BadParameter("empty path (leave --out out for the grid's [run].out)")
    return Path(value) if value is not None else None


@main.command()
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
    if report.reduced:
        import polars as pl

        from poa_mc.run.console import summary_notes

        for line in summary_notes(pl.read_parquet(report.out / "summary.parquet"), grid.run.warmup):
            if not (quiet and line.startswith("note:")):  # --quiet keeps the warnings only
                click.echo(line, err=True)
        say(f"results: {report.out / 'summary.parquet'}, {report.out / 'poa.parquet'}")
        if report.plots:
            say(f"plots:   {report.out / 'plots'}/ ({', '.join(p.name for p in report.plots)})")
        say(f"analyse: python -c \"import poa_mc; print(poa_mc.load('{report.out}').poa.collect())\"")
    elif shard_t is not None:
        say(f"shard {shard_t[0]}/{shard_t[1]} done; reduce with `poa-mc reduce {report.out}` once all shards finish")


def _warn(grid) -> None:
    from poa_mc.model.config import grid_warnings

    for w in grid_warnings(grid):
        click.echo(f"warning: {w}", err=True)


@main.command()
@click.argument("grid_file", metavar="FILE")
@override_options
@handle_errors
def validate(grid_file: str, sets: tuple[str, ...], **shortcuts: int | None) -> None:
    """Check a grid file (every key, every cell) without running anything."""
    from poa_mc.model.grid import estimate_cost

    grid = load_grid_arg(grid_file, "FILE", collect_overrides(sets, shortcuts))
    _warn(grid)
    from poa_mc.engine.engine import check_memory
    from poa_mc.model.sections import ConfigError
    from poa_mc.run import speed
    from poa_mc.run.runner import check_backend, check_out_dir, resolve_backend

    cells = grid.cells()
    r = grid.run
    try:
        check_memory(cells, r)
    except ConfigError as e:
        raise BadInput(f"{grid.source}: {e}") from None
    backend = resolve_backend(r.backend)
    check_backend(backend)  # what `run` would refuse on this machine, validate refuses too
    check_out_dir(Path(r.out))
    resumable = _check_existing_out(grid, backend, cells)
    work = sum(estimate_cost(c, r) for c in cells)
    expected = speed.expected_seconds(work, backend, len(cells))
    when = (
        f"about {_duration(expected)} of simulation on this machine's {backend} (its measured speed)"
        if expected is not None
        else f"no run timed on this machine's {backend} yet, so no time estimate"
    )
    click.echo(
        f"ok: {grid.source}: {len(cells)} cells = {len(grid.topologies)} topologies x {len(grid.loads)} "
        f"{grid.load_axis} values x {len(grid.policies)} policies; {r.replicas} replicas x "
        f"({r.requests} + {r.warmup} warm-up) requests per cell; {len(cells) * r.replicas * (r.requests + r.warmup):,} "
        f"simulated requests, {when}; selfish policy {grid.poa.selfish!r}; out {r.out}"
    )
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


@main.command()
@click.option("--show", "name", metavar="NAME", default=None, help="Print one built-in grid (TOML) or profile.")
@handle_errors
def presets(name: str | None) -> None:
    """List the built-in grids and timing profiles."""
    grids, profiles = builtin_grids(), builtin_profiles()
    if name is not None:
        if name in grids:
            click.echo(grids[name].read_text(), nl=False)
            return
        if name in profiles:
            from poa_mc.model.parse_cluster import parse_profile

            spec = parse_profile({"profile": {"name": name}})
            click.echo(f"{name}: {profiles[name]}")
            click.echo("resolved (the [profile] keys a grid may set are in docs/profiles.md):")
            # an aic profile is its table: the polynomial's fields do not apply to it
            poly = {"p2", "p1", "p0", "d2", "d1", "d0", "d_min", "prefill_ms", "decode_ms"}
            skip = poly if spec.kind == "aic" else set()
            for k, v in vars(spec).items():
                if k not in skip:
                    click.echo(f"  {k} = {v!r}")
            return
        raise BadInput(f"--show: no built-in grid or profile named {name!r}")
    click.echo("grids (poa-mc run --grid NAME):")
    for g, path in grids.items():
        first = next((ln.lstrip("# ").strip() for ln in path.read_text().splitlines() if ln.startswith("#")), "")
        click.echo(f"  {g:<32} {first}")
    click.echo("profiles ([profile] name = ...):")
    for p, desc in profiles.items():
        click.echo(f"  {p:<32} {desc}")


@main.command()
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
    from poa_mc.stats.reduce import reduce_run

    if not (run_dir / "manifest.json").exists():
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

        warm = int(json.loads((run_dir / "manifest.json").read_text())["grid"]["run"]["warmup"])
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

    from poa_mc.model.sections import PoaSection
    from poa_mc.model.spec import SpecError
    from poa_mc.model.spec_json import spec_from_json

    poa = {**json.loads((run_dir / "manifest.json").read_text())["grid"]["poa"], **overrides}
    section = PoaSection(**{k: v for k, v in poa.items() if k in PoaSection.__dataclass_fields__})
    for spec_json in pl.read_parquet(run_dir / "cells.parquet")["spec_json"].unique().to_list():
        cluster = spec_from_json(spec_json).cluster
        try:
            _, _, k = cluster.poa_stage(section.stage)
        except SpecError as e:
            raise BadInput(f"--stage: {e.message}") from None
        if k > 1 and section.slots_for(k) * k < section.window:
            raise BadInput(f"--slots: {section.slots} slots x {k} workers cannot take a window of {section.window}")


@main.command()
@click.argument("run_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@handle_errors
def plot(run_dir: Path) -> None:
    """Redraw the figures of DIR (into DIR/plots/) from summary.parquet and poa.parquet."""
    from poa_mc.io.store import RunDir
    from poa_mc.plots.figures import plot_run

    RunDir(run_dir).read_manifest()  # a damaged run directory is said before any figure is redrawn
    if not (run_dir / "summary.parquet").exists():
        raise BadInput(f"{run_dir}: no summary.parquet; run `poa-mc reduce {run_dir}` first")
    with _figure_workers() as workers:  # two figures at a time (docs/outputs.md)
        paths = plot_run(run_dir, workers)
    for p in paths:
        click.echo(str(p))


@main.command()
@click.argument("run_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@handle_errors
def games(run_dir: Path) -> None:
    """Summarise the games of a reduced run: pd_game.parquet (the prefill/decode split game),
    planner.parquet (the Planner moving that split) and cache_game.parquet (selfish against
    coordinated caching)."""
    from poa_mc.io.store import read_parquet_or_fail
    from poa_mc.run.console import print_cache_game, print_pd_game, print_planner

    if not (run_dir / "manifest.json").exists():
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


@main.group()
def profiles() -> None:
    """Timing profiles: build an aic table from aiconfigurator."""


@profiles.command("build-aic")
@click.option(
    "--model",
    required=True,
    help='aiconfigurator model, e.g. "nvidia/Llama-3.1-70B-Instruct-FP8" (poa-mc profiles aic-models lists them).',
)
@click.option("--system", required=True, help='aiconfigurator system, e.g. "b200_sxm", "h200_sxm".')
@click.option("--backend", default="vllm", show_default=True, help="vllm, trtllm or sglang.")
@click.option("--tp", type=click.IntRange(min=1), required=True, help="Tensor-parallel GPUs per worker.")
@click.option("--backend-version", default=None, help="The backend's version in aiconfigurator (default: its latest).")
@click.option("--name", default=None, help="The table's name (default: the output file's stem).")
@click.option(
    "--envelope/--no-envelope",
    default=True,
    show_default=True,
    help="Make times non-decreasing in tokens, cached tokens, sequences and context (docs/profiles.md).",
)
@click.option(
    "--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Table file to write."
)
@handle_errors
def build_aic(
    model: str,
    system: str,
    backend: str,
    tp: int,
    backend_version: str | None,
    name: str | None,
    envelope: bool,
    out: Path,
) -> None:
    """Tabulate aiconfigurator's prefill and decode latencies into a profile table (needs
    pip install -e '.[aic]'); use it with [profile] kind = "aic", table = "FILE"."""
    import json

    from poa_mc.model.aic import AicUnavailable, build_table
    from poa_mc.model.timing_tables import parse

    if not out.parent.is_dir():
        raise BadInput(f"--out: no directory {str(out.parent)!r} to write the table in")

    try:
        doc = build_table(
            name or out.stem, model, system, backend, tp, backend_version=backend_version, envelope=envelope
        )
    except AicUnavailable as e:
        raise BadInput(str(e)) from None
    except (ValueError, KeyError, FileNotFoundError) as e:
        what = f"--model {model!r} --system {system!r} --backend {backend!r}"
        raise BadInput(f"aiconfigurator refused {what}: {e}") from None
    parse(doc, str(out))  # the file poa-mc will read back
    tmp = out.with_name(out.name + ".part")
    tmp.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    tmp.replace(out)
    p, d = doc["prefill"], doc["decode"]
    lowered = ", ".join(f"{k} {v['points_lowered']}/{v['points']}" for k, v in doc["provenance"]["monotone"].items())
    click.echo(
        f"{out}: prefill {len(p['tokens'])} token nodes and {len(p['batch'])} x {len(p['uncached'])} x "
        f"{len(p['cached'])} attention nodes, decode {len(d['batch'])} x {len(d['context'])}; "
        f"envelope lowered {lowered if envelope else 'nothing (--no-envelope)'}"
    )


@profiles.command("aic-models")
@handle_errors
def aic_models() -> None:
    """List the models and systems aiconfigurator ships data for (needs pip install -e '.[aic]')."""
    from poa_mc.model.aic import AicUnavailable, bundled

    try:
        models, systems = bundled()
    except ModuleNotFoundError:
        raise BadInput(str(AicUnavailable("aiconfigurator-core is not installed: pip install -e '.[aic]'"))) from None
    click.echo("systems: " + ", ".join(systems))
    click.echo("models:")
    for m in models:
        click.echo(f"  {m}")


def _register_optional_commands() -> None:
    # submit/status live in poa_mc/cli/slurm_cmds.py; a checkout without it still gets a working CLI,
    # but an error *inside* that module must not be swallowed. export (poa_mc/cli/export_cmd.py): the same.
    try:
        from poa_mc.cli import export_cmd
    except ModuleNotFoundError as e:
        if e.name != "poa_mc.cli.export_cmd":
            raise
    else:
        if hasattr(export_cmd, "register"):
            export_cmd.register(main)
        else:
            for cmd in getattr(export_cmd, "COMMANDS", ()):
                main.add_command(cmd)
    try:
        from poa_mc.cli import slurm_cmds
    except ModuleNotFoundError as e:
        if e.name != "poa_mc.cli.slurm_cmds":
            raise
        return
    if hasattr(slurm_cmds, "register"):
        slurm_cmds.register(main)
    else:
        for cmd in getattr(slurm_cmds, "COMMANDS", ()):
            main.add_command(cmd)


_register_optional_commands()


def entry() -> None:
    """The `poa-mc` console script: `main`, then out of the process as soon as its output is
    flushed. The interpreter's teardown (freeing the loaded kernels' and the plotting modules'
    objects one by one) took about 0.5 s after a run (bench/NOTES.md), and by then there is nothing
    left to clean up: every file is written and closed and the thread pools are idle. An
    unexpected error (POA_MC_DEBUG=1) still leaves through the interpreter, with its traceback."""
    import logging

    code: int | str | None = 0
    try:
        main()
    except SystemExit as e:
        code = e.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away: nothing more can reach it
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    entry()
