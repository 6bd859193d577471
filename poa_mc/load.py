"""`poa_mc.load(DIR)`: a run directory as polars LazyFrames.

Imported by `poa_mc/__init__.py`, so it keeps its top-level imports to the standard library
(polars is imported on first use): `import poa_mc` stays cheap for the engine and kernels.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True)
class Run:
    """The tables of one run directory (schemas in docs/outputs.md). Frames are lazy.

    cells:   one row per cell of the grid
    samples: one row per measured request of every complete cell, with `cell_id` (Hive partition)
    summary: one row per cell, estimates with `_lo`/`_hi` 95% bounds   (after reduce)
    poa:     one row per topology x load                               (after reduce)
    """

    path: Path
    manifest: dict[str, Any]

    def _file(self, name: str) -> Path:
        p = self.path / name
        if not p.exists():
            raise FileNotFoundError(f"{p} does not exist yet; run `poa-mc reduce {self.path}`")
        return p

    @property
    def cells(self) -> pl.LazyFrame:
        import polars as pl

        return pl.scan_parquet(self.path / "cells.parquet")

    @property
    def samples(self) -> pl.LazyFrame:
        import polars as pl

        if not any((self.path / "samples").glob("cell_id=*/part.parquet")):
            return pl.LazyFrame(schema={"cell_id": pl.String, "replica": pl.Int32})
        return pl.scan_parquet(
            self.path / "samples" / "cell_id=*" / "part.parquet",
            hive_partitioning=True,
            hive_schema={"cell_id": pl.String},
        )

    @property
    def summary(self) -> pl.LazyFrame:
        import polars as pl

        return pl.scan_parquet(self._file("summary.parquet"))

    @property
    def poa(self) -> pl.LazyFrame:
        import polars as pl

        return pl.scan_parquet(self._file("poa.parquet"))


def load(path: str | Path) -> Run:
    """Open run directory `path`: `poa_mc.load("runs/quickstart").summary.collect()`."""
    path = Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.exists():
        raise FileNotFoundError(f"{path} holds no manifest.json; not a poa-mc run directory")
    return Run(path=path, manifest=json.loads(manifest_path.read_text()))
