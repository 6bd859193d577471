"""`poa_mc.load(DIR)`: a run directory as polars LazyFrames.

Imported by `poa_mc/__init__.py`, so it keeps its top-level imports to the standard library
(polars is imported on first use): `import poa_mc` stays cheap for the engine and kernels.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Imports inside functions: `import poa_mc` stays light (the store loads polars when a run is opened).

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True)
class Run:
    """The tables of one run directory (schemas in docs/outputs.md). Frames are lazy.

    cells:   one row per cell of the grid
    samples: one row per measured request of every complete cell, with `cell_id` (Hive partition);
             when cells differ in worker count, the candidate arrays are read as lists (only the
             requests [run] samples kept)
    acc:     one row per replica of every complete cell: its accumulators (poa_mc.stats.accumulate)
    summary: one row per cell, estimates with `_lo`/`_hi` 95% bounds   (after reduce)
    poa:     one row per topology x load                               (after reduce)
    stages:  one row per cell and stage of a [schedule]                (after reduce; docs/schedules.md)
    """

    path: Path
    manifest: dict[str, Any]

    def _file(self, p: Path) -> Path:
        if not p.exists():
            raise FileNotFoundError(f"{p} does not exist yet; run `poa-mc reduce {self.path}`")
        return p

    @property
    def cells(self) -> pl.LazyFrame:
        import polars as pl

        from poa_mc.io.store import RunDir

        return pl.scan_parquet(RunDir(self.path).cells_path)

    @property
    def samples(self) -> pl.LazyFrame:
        import polars as pl

        # complete cells only: a samples file whose accumulators were never written is a killed run's
        from poa_mc.io.store import RunDir

        by_cell = RunDir(self.path).complete_sample_files()
        files = list(by_cell.values())
        if not files:
            return pl.LazyFrame(schema={"cell_id": pl.String, "replica": pl.Int32})
        schemas = {str(_schema(f)) for f in files}  # footers only
        if len(schemas) == 1:
            return pl.scan_parquet(files, hive_partitioning=True, hive_schema={"cell_id": pl.String})
        # cells of other topologies have candidate arrays of other widths (one column per worker):
        # read as variable-length lists, so that every cell fits one frame
        frames = []
        for cid, f in by_cell.items():
            lf = pl.scan_parquet(f)
            arrays = [k for k, v in lf.collect_schema().items() if isinstance(v, pl.Array)]
            lf = lf.with_columns(pl.col(k).cast(pl.List(pl.Float64)) for k in arrays)
            frames.append(lf.select(pl.lit(cid).alias("cell_id"), pl.all()))
        return pl.concat(frames, how="diagonal_relaxed")

    @property
    def acc(self) -> pl.LazyFrame:
        import polars as pl

        from poa_mc.io.store import RunDir

        files = RunDir(self.path).acc_files()
        if not files:
            return pl.LazyFrame(schema={"cell_id": pl.String, "replica": pl.Int32})
        # only adaptive and planner cells have log columns: one frame, absent columns null
        frames = []
        for cid, f in files.items():
            _schema(f)
            frames.append(pl.scan_parquet(f).select(pl.lit(cid).alias("cell_id"), pl.all()))
        return pl.concat(frames, how="diagonal_relaxed")

    @property
    def summary(self) -> pl.LazyFrame:
        import polars as pl

        from poa_mc.io.store import RunDir

        return pl.scan_parquet(self._file(RunDir(self.path).summary_path))

    @property
    def poa(self) -> pl.LazyFrame:
        import polars as pl

        from poa_mc.io.store import RunDir

        return pl.scan_parquet(self._file(RunDir(self.path).poa_path))

    @property
    def stages(self) -> pl.LazyFrame:
        import polars as pl

        from poa_mc.io.store import RunDir

        return pl.scan_parquet(self._file(RunDir(self.path).stages_path))


def load(path: str | Path) -> Run:
    """Open run directory `path`: `poa_mc.load("runs/quickstart").summary.collect()`."""
    path = Path(path)
    from poa_mc.io.store import RunDir

    manifest_path = RunDir(path).manifest_path
    if not manifest_path.exists():
        raise FileNotFoundError(f"{path} holds no manifest.json; not a poa-mc run directory")
    return Run(path=path, manifest=json.loads(manifest_path.read_text()))


def _schema(path: Path) -> Any:
    """A Parquet file's schema (its footer), or RunDirError naming a damaged file."""
    import polars as pl

    from poa_mc.io.store import RunDirError

    try:
        return pl.read_parquet_schema(path)
    except (OSError, pl.exceptions.PolarsError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RunDirError(f"{path}: not a readable Parquet file ({first})") from None
