"""`poa-mc presets`: the built-in grids and timing profiles, listed or shown one at a time.

poa_mc/cli/main.py registers it on its group with `register(main)`. Exit codes follow the rest of
the CLI: 0 ok, 2 bad input (no built-in of that name), 1 anything else.
"""

from __future__ import annotations

import click

from poa_mc.cli.common import BadInput, builtin_grids, builtin_profiles, handle_errors

# Each command imports what it runs inside its function: `poa-mc --help`, and bad input, answer
# before numba, polars and matplotlib load (bench/bench_startup.py).


@click.command()
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


def register(group: click.Group) -> None:
    """Add `presets` to the poa-mc command group."""
    group.add_command(presets)
