"""`poa-mc export DIR --format csv|json --to DEST`: the run's tables for tools other than polars.

poa_mc/cli/main.py registers it on its group with `register(main)`; the work is in poa_mc.io.export. Exit
codes follow the rest of the CLI: 0 ok, 2 bad input (not a reduced run directory, a bad --format,
a --to that is a file or cannot be written), 1 anything else.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from poa_mc.cli.common import BadInput, handle_errors

# The exporter (and polars) load when the command runs, not when the command line starts.


@click.command("export")
@click.argument("run_dir", metavar="DIR", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    metavar="csv|json",
    default="csv",
    show_default=True,
    help="csv: one CSV file per table, array columns flattened to NAME_0..NAME_{W-1}. "
    "json: NDJSON (one object per line, .ndjson), arrays kept, NaN and infinities as null.",
)
@click.option(
    "--to",
    "dest",
    metavar="DEST",
    required=True,
    type=click.Path(path_type=Path),
    help="Folder to write into (created if missing; files of the same names are replaced).",
)
@click.option("--samples", is_flag=True, help="Also write the per-request samples of every complete cell.")
@handle_errors
def export_cmd(run_dir: Path, fmt: str, dest: Path, samples: bool) -> None:
    """Write summary, poa and cells (and with --samples the samples) of run directory DIR as CSV or JSON.

    \b
    DEST/summary.csv  poa.csv  cells.csv  [samples.csv]  manifest.json     (--format csv)
    DEST/summary.ndjson  poa.ndjson  cells.ndjson  [samples.ndjson]  ...   (--format json)

    Files appear only once all of them are written. Columns as in docs/outputs.md.
    """
    from poa_mc.io.export import ExportError, export_run

    try:
        result = export_run(run_dir, dest, fmt, samples=samples)
    except ExportError as e:
        raise BadInput(str(e)) from None
    for path in result.files:
        n = result.rows.get(path.stem)
        click.echo(f"{path}" + (f" ({n} rows)" if n is not None else ""))


COMMANDS = (export_cmd,)


def register(group: click.Group) -> None:
    """Add `export` to the poa-mc command group."""
    group.add_command(export_cmd)


# When this module is imported before poa_mc.cli.main, main's own registration runs while this
# module is half-initialised (no `register` yet) and adds nothing: add the command here as well.
# Adding it twice is harmless (click keys commands by name).
_main_module = sys.modules.get("poa_mc.cli.main")
if _main_module is not None and isinstance(getattr(_main_module, "main", None), click.Group):
    register(_main_module.main)
