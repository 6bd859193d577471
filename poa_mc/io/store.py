"""The run directory: Parquet layout, manifest, integrity, claims, resume.

    DIR/manifest.json                      run-level facts + fingerprint (+ per-cell timings)
    DIR/cells.parquet                      one row per cell of the grid
    DIR/meta/<cell_id>.json                per-cell timings, written first
    DIR/samples/cell_id=<id>/part.parquet  per-request samples of a finished cell ([run] samples)
    DIR/acc/cell_id=<id>/part.parquet      per-replica accumulators (poa_mc.stats.accumulate; commit point)
    DIR/summary.parquet, DIR/poa.parquet   written by reduce
    DIR/pd_game.parquet                    written by reduce for a grid with [games.pd]
    DIR/plots/*.png                        written by plot

Every file is written whole or not at all (poa_mc.io.files), so a reader or a killed run never
sees half a file. A cell is
complete exactly when its accumulators file exists; its meta and samples files are written
first, so a complete cell always has its timings (and its samples, when it keeps any). Shards
of one run may write into the same DIR concurrently: they only ever add different cells, and the
files they share (manifest, cells.parquet) have equal content.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import polars as pl

from poa_mc.io.files import (
    HOST,
    atomic_write_json,
    atomic_write_parquet,
    create_exclusive_json,
    damage,
    pid_alive,
    stage_parquet,
    writing,
)
from poa_mc.version import __version__

MANIFEST_FORMAT = 1


class RunDirError(Exception):
    """The directory cannot be used for this run (wrong grid or seed, not a run dir). Exit code 2."""


class DamagedCellError(RunDirError):
    """A complete cell's file is not what was written (a truncated or altered file): named, with
    the command that recomputes it."""

    def __init__(self, root: Path, cell_id: str, why: str, grid: str = "GRID") -> None:
        self.cell_id = cell_id
        super().__init__(
            f"cell {cell_id} is damaged: {why}; `poa-mc run --grid {grid} --out {root} --resume` simulates "
            f"it again (`poa-mc status {root}` lists every damaged cell)"
        )


def fingerprint(resolved_grid: dict[str, Any], version: str = __version__) -> str:
    """Hash of what determines the results: the resolved grid (seed included) and the version.

    `run.out` and `run.backend` are left out: results do not depend on where they are written or
    on the backend (the engine's random streams are keyed by seed, stream and replica only).
    """
    g = json.loads(json.dumps(resolved_grid))
    g.get("run", {}).pop("out", None)
    g.get("run", {}).pop("backend", None)
    blob = json.dumps({"grid": g, "version": version}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def git_commit() -> str | None:
    """Commit of the poa-mc source tree when it is a git checkout (editable installs)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


class CellClaim:
    """A held claim on a cell (RunDir.claim); release() lets it go (twice is harmless)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the lock


class RunDir:
    """Paths and operations of one run directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    manifest_path = property(lambda self: self.root / "manifest.json")
    cells_path = property(lambda self: self.root / "cells.parquet")
    samples_dir = property(lambda self: self.root / "samples")
    acc_dir = property(lambda self: self.root / "acc")
    meta_dir = property(lambda self: self.root / "meta")
    summary_path = property(lambda self: self.root / "summary.parquet")
    poa_path = property(lambda self: self.root / "poa.parquet")
    pd_game_path = property(lambda self: self.root / "pd_game.parquet")
    cache_game_path = property(lambda self: self.root / "cache_game.parquet")
    planner_path = property(lambda self: self.root / "planner.parquet")
    planner_moves_path = property(lambda self: self.root / "planner_moves.parquet")
    stages_path = property(lambda self: self.root / "stages.parquet")
    plots_dir = property(lambda self: self.root / "plots")

    def sample_path(self, cell_id: str) -> Path:
        return self.samples_dir / f"cell_id={cell_id}" / "part.parquet"

    def acc_path(self, cell_id: str) -> Path:
        return self.acc_dir / f"cell_id={cell_id}" / "part.parquet"

    def meta_path(self, cell_id: str) -> Path:
        return self.meta_dir / f"{cell_id}.json"

    def acc_files(self) -> dict[str, Path]:
        """Every accumulators file on disk by cell id (a cell's commit point), in file-name order."""
        files = sorted(self.acc_dir.glob("cell_id=*/part.parquet"))
        return {f.parent.name.removeprefix("cell_id="): f for f in files}

    def complete_sample_files(self) -> dict[str, Path]:
        """The samples files of complete cells (their accumulators written) by cell id: a samples
        file without accumulators is a killed run's."""
        files = sorted(self.samples_dir.glob("cell_id=*/part.parquet"))
        return {cid: f for f in files if self.acc_path(cid := f.parent.name.removeprefix("cell_id=")).exists()}

    # -- manifest ------------------------------------------------------------------------------

    def read_manifest(self) -> dict[str, Any]:
        if not self.manifest_path.exists():
            raise RunDirError(f"{self.root}: no manifest.json; not a poa-mc run directory")
        try:
            manifest = json.loads(self.manifest_path.read_text())
        except json.JSONDecodeError as e:
            raise RunDirError(f"{self.manifest_path}: not valid JSON (line {e.lineno}, column {e.colno})") from None
        except (OSError, UnicodeDecodeError) as e:
            raise RunDirError(f"{self.manifest_path}: cannot read: {e}") from None
        if not isinstance(manifest, dict) or "fingerprint" not in manifest:
            raise RunDirError(f"{self.manifest_path}: not a poa-mc manifest (no fingerprint)")
        return manifest

    def prepare(self, manifest: dict[str, Any], cells_df: pl.DataFrame, *, resume: bool) -> bool:
        """Make DIR ready for this run; True if it already held this run (same fingerprint).

        Refuses (RunDirError) a directory that holds another run, or files but no manifest.
        """
        old = self.check(manifest, cells_df, resume=resume)
        existing = old is not None
        if existing:
            if resume and old.get("fingerprint") != manifest.get("fingerprint"):
                self.remove_temporaries()
                atomic_write_json(self.manifest_path, manifest)
                atomic_write_parquet(cells_df, self.cells_path)
                return True
            if resume:
                self.remove_temporaries()
        self.root.mkdir(parents=True, exist_ok=True)
        if not create_exclusive_json(self.manifest_path, manifest):
            self._check_same_run(self.read_manifest(), manifest)  # a concurrent shard was first
        if not self.cells_path.exists():
            atomic_write_parquet(cells_df, self.cells_path)
        return existing

    def check(self, manifest: dict[str, Any], cells_df: pl.DataFrame, *, resume: bool) -> dict[str, Any] | None:
        """What `prepare` would refuse (RunDirError), reading only: the manifest of the run DIR
        already holds, or None when DIR is absent or empty. `poa-mc validate` calls it too."""
        if self.root.exists() and not self.root.is_dir():
            raise RunDirError(f"{self.root} exists and is not a directory")
        if not (self.root.exists() and any(self.root.iterdir())):
            return None
        if not self.manifest_path.exists():
            raise RunDirError(f"{self.root} is not empty and holds no manifest.json; choose another --out")
        old = self.read_manifest()
        if resume and old.get("fingerprint") != manifest.get("fingerprint"):
            self._check_grown(old, manifest, cells_df)
        else:
            self._check_same_run(old, manifest)
        return old

    def _check_grown(self, old: dict[str, Any], new: dict[str, Any], cells_df: pl.DataFrame) -> None:
        """--resume on a changed grid: allowed when it only adds cells (or changes what reduce and
        plots do, [poa]), with the same seed, Monte Carlo sizes and poa-mc version, so every cell
        already on disk is a cell of the new grid, simulated exactly as the new grid would."""
        if old.get("sim_key") is None or old.get("sim_key") != new.get("sim_key"):
            why = []
            for key in ("seed", "replicas", "requests", "warmup", "warmup_per_client", "drain"):
                a, b = old.get("grid", {}).get("run", {}).get(key), new["grid"]["run"].get(key)
                if a != b:
                    why.append(f"run.{key} {a} there, {b} here")
            if old.get("poa_mc_version") != new.get("poa_mc_version"):
                why.append(f"poa-mc {old.get('poa_mc_version')} there, {new.get('poa_mc_version')} here")
            raise RunDirError(
                "--resume: this directory's cells were simulated differently ("
                + ("; ".join(why) or "written by an older poa-mc")
                + "); use another --out"
            )
        old_ids = set(pl.read_parquet(self.cells_path, columns=["cell_id"])["cell_id"].to_list())
        dropped = old_ids - set(cells_df["cell_id"].to_list())
        if dropped:
            diff = _first_difference(old.get("grid", {}), new.get("grid", {}), ignore={"out", "backend"})
            raise RunDirError(
                f"--resume: the grid no longer has {len(dropped)} of the {len(old_ids)} cells in this directory "
                f"(first difference at {diff}); --resume can add loads, topologies and policies, not change or "
                "remove them: use another --out"
            )

    @staticmethod
    def _check_same_run(old: dict[str, Any], new: dict[str, Any]) -> None:
        if old.get("fingerprint") == new.get("fingerprint"):
            return
        why = []
        if old.get("seed") != new.get("seed"):
            why.append(f"seed {old.get('seed')} there, {new.get('seed')} here")
        # the run's Monte Carlo sizes by name: a changed warm-up also moves the loads it was checked
        # against, and the first difference in the grid would name those instead
        for key in ("replicas", "requests", "warmup", "warmup_per_client", "drain"):
            a, b = old.get("grid", {}).get("run", {}).get(key), new.get("grid", {}).get("run", {}).get(key)
            if a != b:
                why.append(f"run.{key} {a} there, {b} here")
        if old.get("poa_mc_version") != new.get("poa_mc_version"):
            why.append(f"poa-mc {old.get('poa_mc_version')} there, {new.get('poa_mc_version')} here")
        diff = _first_difference(old.get("grid", {}), new.get("grid", {}), ignore={"out", "backend", "seed"})
        if diff and not why:
            why.append(f"grid differs at {diff}")
        raise RunDirError(
            "this directory holds a different run ("
            + ("; ".join(why) or "different fingerprint")
            + "); use another --out, or delete the directory to start over "
            "(a grid grown by new loads, topologies or policies: --resume runs only the new cells)"
        )

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        atomic_write_json(self.manifest_path, manifest)

    def finalize_manifest(self) -> dict[str, Any]:
        """Merge the per-cell meta files of complete cells into manifest.json."""
        manifest = self.read_manifest()
        cells: dict[str, Any] = {}
        for cid in sorted(self.complete_cells()):
            meta = self.read_meta(cid)
            if meta is not None:
                cells[cid] = {k: v for k, v in meta.items() if k not in ("cell_id", "fingerprint")}
        manifest["cells"] = cells
        manifest["devices"] = sorted({f"{m.get('backend')}: {m.get('device')}" for m in cells.values()})
        atomic_write_json(self.manifest_path, manifest)
        return manifest

    # -- cells ---------------------------------------------------------------------------------

    def read_meta(self, cell_id: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.meta_path(cell_id).read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def complete_cells(self, fingerprint: str | None = None, sim_key: str | None = None) -> set[str]:
        """Cell ids whose accumulators file exists (and, if given, whose meta has this fingerprint,
        or this sim key: the same simulation in a grid that has grown since)."""
        done = set()
        if not self.acc_dir.exists():
            return done
        for d in self.acc_dir.iterdir():
            if d.name.startswith("cell_id=") and (d / "part.parquet").exists():
                cid = d.name[len("cell_id=") :]
                if fingerprint is not None:
                    meta = self.read_meta(cid)
                    if meta is None:
                        continue
                    same_key = sim_key is not None and meta.get("sim_key") == sim_key
                    if meta.get("fingerprint") != fingerprint and not same_key:
                        continue
                done.add(cid)
        return done

    def write_cell(
        self, cell_id: str, acc: pl.DataFrame, meta: dict[str, Any], samples: pl.DataFrame | None = None
    ) -> None:
        """Meta first, then the samples (if kept), accumulators last: the commit point of a cell.
        The Parquet files are staged under temporary names first, so that the meta can record
        their sizes and checksums (`files`), against which `damaged` checks them later."""
        staged: list[Path] = []
        try:
            files = {}
            if samples is not None:
                tmp_s, files["samples"] = stage_parquet(samples, self.sample_path(cell_id))
                staged.append(tmp_s)
            tmp_a, files["acc"] = stage_parquet(acc, self.acc_path(cell_id))
            staged.append(tmp_a)
            atomic_write_json(self.meta_path(cell_id), {"cell_id": cell_id, **meta, "files": files})
            with writing(self.acc_path(cell_id)):
                if samples is not None:
                    os.replace(tmp_s, self.sample_path(cell_id))
                else:  # a re-run that keeps none leaves no older samples behind
                    self.sample_path(cell_id).unlink(missing_ok=True)
                os.replace(tmp_a, self.acc_path(cell_id))
        except BaseException:
            for tmp in staged:
                tmp.unlink(missing_ok=True)
            raise

    locks_dir = property(lambda self: self.root / ".locks")

    def claim(self, cell_id: str) -> CellClaim | None:
        """This process's exclusive claim on a cell, or None while another process holds it: two
        runs into one directory (a second `poa-mc run`, overlapping shards) never simulate or
        write one cell at the same time. An advisory lock (flock) on `.locks/<cell>.lock`, held
        until released or until the process ends, however it ends (a SIGKILL included)."""
        self.locks_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.locks_dir / f"{cell_id}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return CellClaim(fd)

    def cell_damage(self, cell_id: str) -> str | None:
        """Why a complete cell's files are not what was written (None: they are). Checks each file
        the meta records (size, then SHA-256); a cell written before poa-mc recorded them is
        checked for a readable meta only."""
        try:
            meta = json.loads(self.meta_path(cell_id).read_text())
        except FileNotFoundError:
            return f"{self.meta_path(cell_id)}: missing"
        except (OSError, ValueError) as e:
            return f"{self.meta_path(cell_id)}: unreadable ({type(e).__name__})"
        files = meta.get("files") if isinstance(meta, dict) else None
        if not isinstance(files, dict):
            return None
        for kind, path in (("acc", self.acc_path(cell_id)), ("samples", self.sample_path(cell_id))):
            why = damage(path, files.get(kind))
            if why:
                return f"{path}: {why}"
        return None

    def damaged(self, cell_ids: set[str] | None = None) -> dict[str, str]:
        """The complete cells (or these of them) whose files are damaged: cell id -> why."""
        ids = self.complete_cells() if cell_ids is None else cell_ids
        return {cid: why for cid in sorted(ids) if (why := self.cell_damage(cid))}

    def _temporaries(self) -> list[Path]:
        """The temporary files (".<name>.tmp") under DIR. Other processes create and remove files and
        directories here meanwhile (a starting shard's --out probe, check_out_dir, lives for
        microseconds): os.walk skips a directory gone before it is listed, where Path.rglob raised
        FileNotFoundError and failed the start of the shard beside it."""
        if not self.root.is_dir():
            return []
        return [
            Path(here) / name
            for here, _, files in os.walk(self.root)
            for name in files
            if name.startswith(".") and name.endswith(".tmp")
        ]

    def remove_own_temporaries(self) -> None:
        """Delete the temporary files this process left (an interrupted write)."""
        mine = f".{HOST}.{os.getpid()}.tmp"
        for p in self._temporaries():
            if p.name.endswith(mine):
                p.unlink(missing_ok=True)

    def remove_temporaries(self) -> None:
        """Delete temporary files of writers that are gone: this host's dead processes (a shard on
        another host, or alive here, may still be writing its own), and names of no known writer."""
        for p in self._temporaries():
            parts = p.name.rsplit(".", 3)  # [".<name>", host, pid, "tmp"]; older: [".<name>", ext, pid, "tmp"]
            if len(parts) == 4 and parts[2].isdigit():
                old_style = parts[1] in ("parquet", "json")
                if (old_style or parts[1] == HOST) and pid_alive(int(parts[2])):
                    continue
                if not old_style and parts[1] != HOST:
                    continue
            p.unlink(missing_ok=True)

    def read_samples(self, cell_id: str) -> pl.DataFrame:
        return self._read_checked(cell_id, "samples", self.sample_path(cell_id))

    def read_acc(self, cell_id: str) -> pl.DataFrame:
        return self._read_checked(cell_id, "acc", self.acc_path(cell_id))

    def _read_checked(self, cell_id: str, kind: str, path: Path) -> pl.DataFrame:
        """A cell's file, checked against the size and checksum its meta recorded (read once):
        DamagedCellError naming the cell when it differs or does not parse."""
        record = ((self.read_meta(cell_id) or {}).get("files") or {}).get(kind)
        try:
            data = path.read_bytes()
        except OSError as e:
            why = f"{path}: unreadable ({e.strerror or e})"
            raise DamagedCellError(self.root, cell_id, why, self._grid()) from None
        if record is not None and (
            len(data) != record.get("bytes") or hashlib.sha256(data).hexdigest() != record.get("sha256")
        ):
            why = f"{path}: its checksum differs from the one written"
            raise DamagedCellError(self.root, cell_id, why, self._grid())
        try:
            return pl.read_parquet(io.BytesIO(data))
        except (pl.exceptions.PolarsError, OSError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DamagedCellError(
                self.root, cell_id, f"{path}: not a readable Parquet file ({first})", self._grid()
            ) from None

    def _grid(self) -> str:
        """The grid file this run was made from, for a repair command (GRID when unknown)."""
        try:
            source = json.loads(self.manifest_path.read_text()).get("source")
        except (OSError, ValueError, AttributeError):
            return "GRID"
        return source if isinstance(source, str) and Path(source).is_file() else "GRID"

    def read_cells(self) -> pl.DataFrame:
        if not self.cells_path.exists():
            raise RunDirError(f"{self.cells_path}: missing; the run directory is incomplete (run it again)")
        return read_parquet_or_fail(self.cells_path)


def read_parquet_or_fail(path: Path) -> pl.DataFrame:
    """A Parquet file of a run, or RunDirError naming it when it is damaged."""
    try:
        return pl.read_parquet(path)
    except (pl.exceptions.ComputeError, OSError, pl.exceptions.PolarsError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RunDirError(f"{path}: not a readable Parquet file ({first})") from None


def _first_difference(a: Any, b: Any, ignore: set[str], path: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in ignore:
                continue
            sub = f"{path}.{k}" if path else k
            if k not in a or k not in b:
                return sub
            d = _first_difference(a[k], b[k], ignore, sub)
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length {len(a)} vs {len(b)})"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_difference(x, y, ignore, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path} ({a!r} there, {b!r} here)"


def samples_frame(samples: dict[str, Any], candidates: dict[str, Any] | None, width: int | None = None) -> pl.DataFrame:
    """Flatten a SimResult's (replicas, requests[, K]) arrays into one row per measured request.

    Columns: `replica` (Int32) first, then every samples array in the engine's order, then, when
    recorded, `chosen` (Int32) and the candidate arrays as fixed-size list columns
    (Array(Float64, width)): everything reduce needs to recompute PoA-hat from disk. `width`
    (at least K; default K) pads the candidate columns with NaN, so that the cells of one grid,
    whatever their topologies, share one schema.
    """
    import numpy as np

    first = next(iter(samples.values()))
    r, n = first.shape
    cols: dict[str, Any] = {"replica": pl.Series("replica", np.repeat(np.arange(r, dtype=np.int32), n))}
    for name, arr in samples.items():
        cols[name] = pl.Series(name, np.ascontiguousarray(arr).reshape(r * n))
    if candidates:
        for name, arr in candidates.items():
            arr = np.ascontiguousarray(arr)
            if arr.ndim == 2:
                cols[name] = pl.Series(name, arr.reshape(r * n))
                continue
            k = arr.shape[2]
            if width is not None and width > k:
                arr = np.concatenate([arr, np.full((r, n, width - k), np.nan)], axis=2)
            cols[name] = pl.Series(name, arr.reshape(r * n, arr.shape[2]))
    return pl.DataFrame(cols)
