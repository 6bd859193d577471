"""`poa-mc profiles build-aic` and `poa-mc profiles aic-models`: timing tables from aiconfigurator.

poa_mc/cli/main.py registers their `profiles` group with `register(main)`; the work is in
poa_mc.model.aic (aiconfigurator is an optional dependency: pip install -e '.[aic]'). Exit codes
follow the rest of the CLI: 0 ok, 2 bad input (aiconfigurator missing or refusing), 1 anything else.
"""

from __future__ import annotations

from pathlib import Path

import click

from poa_mc.cli.common import BadInput, handle_errors

# Each command imports what it runs inside its function: `poa-mc --help`, and bad input, answer
# before numba, polars and matplotlib load (bench/bench_startup.py).


@click.group()
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


def register(group: click.Group) -> None:
    """Add `profiles` (build-aic, aic-models) to the poa-mc command group."""
    group.add_command(profiles)
