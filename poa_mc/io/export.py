"""`poa-mc export`: a run directory's tables as CSV or NDJSON, for tools other than polars.

    DEST/summary.<ext>   summary.parquet          DEST/manifest.json   a copy of DIR/manifest.json
    DEST/poa.<ext>       poa.parquet
    DEST/cells.<ext>     cells.parquet
    DEST/stages.<ext>    stages.parquet, where the grid has a [schedule]
    DEST/samples.<ext>   every samples/cell_id=<id>/part.parquet, with `cell_id` first (samples=True)

`<ext>` is `csv` or `ndjson` (format "json": one JSON object per line, "JSON Lines"). The layout,
the column rules and how NaN and null come out are in docs/outputs.md, "Exporting to CSV or JSON".

Every file is written to a temporary name in DEST (`.<name>.<pid>.tmp`, as poa_mc.io.store does) and
renamed into place only once all of them are complete: a failed export leaves no new file behind,
and a reader never sees half a file.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import polars as pl

from poa_mc.io.store import RunDir, RunDirError, read_parquet_or_fail

FORMATS: dict[str, str] = {"csv": "csv", "json": "ndjson"}  # --format -> file extension
TABLES: tuple[str, ...] = ("summary", "poa", "cells")


class ExportError(ValueError):
    """Bad export arguments: an unknown format, or a destination that cannot be written (exit 2)."""


@dataclass(frozen=True)
class ExportResult:
    """What one export wrote: files in write order, and rows per table (manifest excluded)."""

    dest: Path
    fmt: str
    files: tuple[Path, ...]
    rows: dict[str, int] = field(default_factory=dict)


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def flatten_for_csv(df: pl.DataFrame, widths: dict[str, int] | None = None) -> pl.DataFrame:
    """Make `df` CSV-writable: nested columns become flat ones.

    An Array column `x` of width W becomes W Float/Int columns `x_0` .. `x_{W-1}` in its place
    (`widths[x]` may ask for more: the extra columns are null, so the tables of several cells line
    up). List and Struct columns become JSON text (`json_encode`).
    """
    widths = widths or {}
    exprs: list[pl.Expr] = []
    for name, dtype in df.schema.items():
        if isinstance(dtype, pl.Array):
            have = dtype.size
            want = max(widths.get(name, have), have)
            inner = dtype.inner
            for i in range(want):
                e = pl.col(name).arr.get(i) if i < have else pl.lit(None, dtype=inner)
                exprs.append(e.alias(f"{name}_{i}"))
        elif isinstance(dtype, pl.List):
            wrapped = pl.struct(pl.col(name).alias("v")).struct.json_encode()  # {"v":[...]}
            exprs.append(wrapped.str.strip_prefix('{"v":').str.strip_suffix("}").alias(name))
        elif isinstance(dtype, pl.Struct):
            exprs.append(pl.col(name).struct.json_encode().alias(name))
        else:
            exprs.append(pl.col(name))
    return df.select(exprs)


def _check_run_dir(run_dir: Path) -> list[Path]:
    if not run_dir.exists():
        raise RunDirError(f"{run_dir}: no such directory; not a poa-mc run directory")
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: is not a directory; not a poa-mc run directory")
    if not RunDir(run_dir).manifest_path.is_file():
        raise RunDirError(f"{run_dir}: no manifest.json; not a poa-mc run directory")
    RunDir(run_dir).read_manifest()  # a damaged manifest is said, not copied
    paths = [run_dir / f"{t}.parquet" for t in TABLES]
    for p in paths:
        if not p.is_file():
            raise RunDirError(f"{run_dir}: no {p.name}; run `poa-mc reduce {run_dir}` first")
    stages = RunDir(run_dir).stages_path  # a [schedule]'s stages (docs/schedules.md)
    return paths + ([stages] if stages.is_file() else [])


def _prepare_dest(dest: Path) -> bool:
    """Create DEST if needed and prove it writable; True if this call created it."""
    if dest.exists() and not dest.is_dir():
        raise ExportError(f"--to {dest}: exists and is not a directory")
    created = not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        probe = _tmp_name(dest / "probe")
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        if created:
            _remove_empty(dest)
        raise ExportError(f"--to {dest}: cannot write there ({e.strerror or e})") from None
    return created


def _remove_empty(dest: Path) -> None:
    try:
        dest.rmdir()
    except OSError:
        pass


def _sample_files(run_dir: Path) -> list[tuple[str, Path]]:
    """(cell_id, samples file) of every complete cell, in grid order (cells.parquet)."""
    rd = RunDir(run_dir)
    order = pl.read_parquet(rd.cells_path, columns=["cell_id"])["cell_id"].to_list()
    complete = rd.complete_sample_files()
    return [(cid, complete[cid]) for cid in order if cid in complete]


def _write_table(df: pl.DataFrame, f: IO[bytes], fmt: str, *, header: bool = True) -> None:
    if fmt == "csv":
        flatten_for_csv(df).write_csv(f, include_header=header)
    else:
        df.write_ndjson(f)


def _write_samples(files: Iterable[tuple[str, Path]], f: IO[bytes], fmt: str) -> int:
    files = list(files)
    widths: dict[str, int] = {}
    for _, p in files:  # widest array of each column over all cells: one CSV header for all
        try:
            schema = pl.read_parquet_schema(p)
        except (pl.exceptions.PolarsError, OSError) as e:
            raise RunDirError(f"{p}: not a readable Parquet file ({str(e).strip().splitlines()[0]})") from None
        for name, dtype in schema.items():
            if isinstance(dtype, pl.Array):
                widths[name] = max(widths.get(name, 0), dtype.size)
    rows = 0
    for i, (cid, p) in enumerate(files):
        df = read_parquet_or_fail(p).select(pl.lit(cid).alias("cell_id"), pl.all())
        rows += df.height
        if fmt == "csv":
            flatten_for_csv(df, widths).write_csv(f, include_header=i == 0)
        else:
            df.write_ndjson(f)
    return rows


def export_run(
    run_dir: str | Path,
    dest: str | Path,
    fmt: str = "csv",
    *,
    samples: bool = False,
) -> ExportResult:
    """Write the summary, poa and cells tables of `run_dir` (its stages where it has them, and its
    samples) into `dest`.

    fmt: "csv" (nested columns flattened, see `flatten_for_csv`) or "json" (NDJSON, arrays kept).
    Raises RunDirError when `run_dir` is no reduced run directory, ExportError on a bad `fmt` or a
    `dest` that is a file or cannot be written. Existing files of the same names in `dest` are
    replaced; other files there are left alone.
    """
    run_dir, dest = Path(run_dir), Path(dest)
    if fmt not in FORMATS:
        raise ExportError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    ext = FORMATS[fmt]
    tables = _check_run_dir(run_dir)
    created = _prepare_dest(dest)

    finals: list[Path] = []
    tmps: list[Path] = []
    rows: dict[str, int] = {}
    try:
        for path in tables:
            final = dest / f"{path.stem}.{ext}"
            tmp = _tmp_name(final)
            finals.append(final)
            tmps.append(tmp)
            df = read_parquet_or_fail(path)
            rows[path.stem] = df.height
            with open(tmp, "wb") as f:
                _write_table(df, f, fmt)
                f.flush()
                os.fsync(f.fileno())
        if samples:
            final = dest / f"samples.{ext}"
            tmp = _tmp_name(final)
            finals.append(final)
            tmps.append(tmp)
            with open(tmp, "wb") as f:
                rows["samples"] = _write_samples(_sample_files(run_dir), f, fmt)
                f.flush()
                os.fsync(f.fileno())
        final = dest / "manifest.json"
        tmp = _tmp_name(final)
        finals.append(final)
        tmps.append(tmp)
        shutil.copyfile(RunDir(run_dir).manifest_path, tmp)
    except BaseException:
        for t in tmps:
            t.unlink(missing_ok=True)
        if created:
            _remove_empty(dest)
        raise
    for tmp, final in zip(tmps, finals):
        os.replace(tmp, final)
    return ExportResult(dest=dest, fmt=fmt, files=tuple(finals), rows=rows)
