"""The `poa-mc` command line: the group its commands join, its usage errors, and the console script.

The commands live one concept a file: run, validate (run_cmds.py); reduce, plot, games
(results_cmds.py); capacity (capacity_cmd.py); calibrate (calibrate_cmd.py); tune (tune_cmd.py); presets
(presets_cmd.py); profiles build-aic, aic-models (profile_cmds.py); export (export_cmd.py); submit,
status (slurm_cmds.py). Each has `register(group)`, which this module calls on `main`.

Exit codes: 0 success, 2 bad input (bad grid, bad option, a directory of another run),
1 anything else. Set POA_MC_DEBUG=1 to see the traceback of an unexpected error.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

import poa_mc
from poa_mc.cli import calibrate_cmd, capacity_cmd, presets_cmd, profile_cmds, results_cmds, run_cmds, tune_cmd

# Each command imports what it runs inside its function (in its own module): `poa-mc --help`, and
# bad input, answer before numba, polars and matplotlib load (bench/bench_startup.py).


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


run_cmds.register(main)
capacity_cmd.register(main)
calibrate_cmd.register(main)
tune_cmd.register(main)
presets_cmd.register(main)
results_cmds.register(main)
profile_cmds.register(main)


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
