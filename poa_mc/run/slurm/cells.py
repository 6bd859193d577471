"""The run's cells as `submit` and `status` see them: the grid's, the shard of each, and which are done.

poa_mc.model.grid decides the cells and their shards, and poa_mc.io.store which cells are complete;
this module only asks them, so that a submission splits the cells exactly as `poa-mc run --shard`
will and counts as done exactly what `--resume` skips. Cell ids get one spelling (norm_cell_id)
whichever file they come from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from poa_mc.run.slurm.options import SlurmError
from poa_mc.run.slurm.records import read_shards

# Imports inside functions: the command line loads this module for `submit` and `status`; the grid
# parser, the store and the runner load only when one of them needs them.


def norm_cell_id(value: object) -> str:
    """One spelling for a cell id, whether it comes as 7, "7" or a zero-padded "0007" directory name."""
    s = str(value).strip()
    return str(int(s)) if s.isdigit() else s


def done_cells(out: Path, damaged: dict[str, str] | None = None) -> set[str]:
    """Cells whose accumulators are on disk (acc/cell_id=XXXX/part.parquet, a cell's commit point)
    and whose files are what was written, or a tune's load points whose files read back (`poa-mc
    submit --tune`); the damaged cells (id -> why) go into `damaged` when given. A resubmission
    runs the shards of damaged cells again, and their tasks (--resume) simulate them again."""
    from poa_mc.io.store import RunDir
    from poa_mc.run.tune import points

    if (out / points.MANIFEST).is_file():
        return {norm_cell_id(c) for c in points.saved_ids(out)}
    run_dir = RunDir(out)
    done = run_dir.complete_cells()
    bad = run_dir.damaged(done)
    if damaged is not None:
        damaged.update({norm_cell_id(c): why for c, why in bad.items()})
    return {norm_cell_id(c) for c in done - set(bad)}


def all_cells(out: Path) -> list[str] | None:
    """Every cell id of the run, from cells.parquet (written by run) or shards.json (by submit)."""
    from poa_mc.io.store import RunDir

    path = RunDir(out).cells_path
    if path.is_file():
        import polars as pl

        # A file without the column (another layout) falls back to shards.json; run writes it atomically.
        if "cell_id" in pl.read_parquet_schema(path):
            ids = pl.read_parquet(path, columns=["cell_id"])["cell_id"].to_list()
            return [norm_cell_id(c) for c in ids]
    shards = read_shards(out)
    if shards is not None:
        return sorted(shards[1], key=_cell_sort_key)
    return None


def _cell_sort_key(c: str) -> tuple[int, int | str]:
    return (0, int(c)) if c.isdigit() else (1, c)


def load_grid(grid_path: Path) -> Any:
    """The parsed grid (poa_mc.model.config), its errors turned into bad-input SlurmErrors."""
    from poa_mc.model.config import load_grid as _load
    from poa_mc.model.sections import ConfigError

    try:
        return _load(grid_path)
    except ConfigError as e:
        raise SlurmError(f"{grid_path}: {e}", bad_input=True) from None
    except OSError as e:
        raise SlurmError(f"--grid: cannot read {grid_path}: {e.strerror or e}", bad_input=True) from None


def plan_shards(grid: Any, n_tasks: int) -> dict[str, int]:
    """cell id -> shard in 0..n_tasks-1, exactly as `poa-mc run --shard k/n_tasks` will split them."""
    from poa_mc.model.grid import assign_shards, expand

    cells = expand(grid)
    shards = assign_shards(cells, n_tasks, grid.run)
    return {norm_cell_id(c.cell_id): int(s) for c, s in zip(cells, shards, strict=True)}


def prepare_run_dir(grid: Any, out: Path, backend: str | None) -> None:
    """Create DIR as `poa-mc run` would (manifest.json, cells.parquet) before any script lands in it.

    Two reasons: run refuses a non-empty directory without a manifest (and DIR/slurm, DIR/logs
    would make it non-empty), and a DIR that holds another run (grid, seed or version) is refused
    here, at submission, naming the difference, instead of in every array task later.
    """
    from poa_mc.io.store import RunDir, RunDirError
    from poa_mc.run.runner import build_manifest, cells_frame

    # The backend stays unresolved ("auto"): resolving it would probe for a GPU on the login node,
    # and the fingerprint leaves the backend out anyway.
    manifest = build_manifest(grid, backend or grid.run.backend)
    try:
        RunDir(out).prepare(manifest, cells_frame(grid.cells()), resume=True)
    except RunDirError as e:
        raise SlurmError(f"--out {out}: {e}", bad_input=True) from None


def load_tune_points(grid_path: Path, n_tasks: int | None, out: Path) -> tuple[Any, dict[str, int] | None, set[str]]:
    """A tune's spec, its load points' shards (as `poa-mc tune --shard k/n_tasks` splits them;
    None without n_tasks) and the points already tuned in `out`; bad input as SlurmErrors."""
    from poa_mc.model.grid import assign_shards
    from poa_mc.model.sections import ConfigError
    from poa_mc.run.tune import points
    from poa_mc.run.tune.space import load_tune

    try:
        spec = load_tune(grid_path)
    except ConfigError as e:
        raise SlurmError(f"{grid_path}: {e}", bad_input=True) from None
    except OSError as e:
        raise SlurmError(f"--grid: cannot read {grid_path}: {e.strerror or e}", bad_input=True) from None
    if spec.joint:
        raise SlurmError(
            f"--tune: {grid_path} tunes a controller's table, raced over every load point at once: "
            "run `poa-mc tune` as one job",
            bad_input=True,
        )
    cells = spec.grid.cells()
    shard_of = None
    if n_tasks is not None:
        shard_of = {c.cell_id: int(s) for c, s in zip(cells, assign_shards(cells, n_tasks, spec.grid.run))}
    return spec, shard_of, set(points.done(out, cells))


def prepare_tune_dir(spec: Any, out: Path) -> None:
    """Create DIR as `poa-mc tune` would (tune.json, points/), or check that it holds this tune."""
    from poa_mc.run.tune import points

    try:
        points.prepare(spec, out)
    except points.TuneDirError as e:
        raise SlurmError(f"--out {out}: {e}", bad_input=True) from None
