"""Files written whole or not at all, and checked later: a temporary name in the final folder,
then a rename (os.replace is atomic on POSIX), so a reader or a killed process never sees half a
file; the size and SHA-256 of what was written (file_record), against which `damage` checks a
file later; and a failed write (a full disk, a quota, an I/O error) as one WriteFault naming the
file, its temporary removed. poa_mc.io.store lays a run directory out with them."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

HOST = socket.gethostname().replace(".", "_") or "host"


def tmp_name(path: Path) -> Path:
    # Ends in ".tmp", never ".parquet": a glob over samples/**/*.parquet must not see it. Host and
    # pid name the writer, so a resume can tell a dead writer's leftovers from a live shard's.
    return path.with_name(f".{path.name}.{HOST}.{os.getpid()}.tmp")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WriteFault(Exception):
    """A file of the run could not be written (a full disk, a quota, an I/O error, a read-only or
    vanished mount): named, nothing half-written left, finished cells kept. Exit code 2."""

    def __init__(self, path: Path, why: str) -> None:
        self.path = path
        super().__init__(
            f"cannot write {path}: {why}; nothing half-written was left and finished cells are kept: "
            "fix this, then go on with --resume"
        )


_OS_ERROR_RE = re.compile(r"\(os error (\d+)\)")


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """An OSError (or polars' error wrapping one: "... (os error 28)") while writing `path`, as
    WriteFault naming it."""
    try:
        yield
    except OSError as e:
        raise WriteFault(path, e.strerror or str(e)) from None
    except pl.exceptions.PolarsError as e:
        m = _OS_ERROR_RE.search(str(e))
        if m is None:
            raise
        raise WriteFault(path, os.strerror(int(m.group(1)))) from None


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = tmp_name(path)
    try:
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def atomic_write_parquet(df: pl.DataFrame, path: Path) -> dict[str, Any]:
    """Write `df` to `path` atomically; its size and checksum (file_record)."""
    tmp, record = stage_parquet(df, path)
    os.replace(tmp, path)
    return record


def stage_parquet(df: pl.DataFrame, path: Path) -> tuple[Path, dict[str, Any]]:
    """`df` written and synced to `path`'s temporary name (nothing left there on failure): the
    temporary file and its record, for the caller to rename into place."""
    tmp = tmp_name(path)
    try:
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            # zstd's level 1: a 5 M-row cell's samples came out as small as at polars' default level
            # (146 against 147 MiB; small cells 6% larger) and were written in 60% of the time (bench/NOTES.md)
            df.write_parquet(tmp, compression="zstd", compression_level=1, statistics=True)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            return tmp, file_record(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


_CHUNK = 1 << 20


def file_record(path: Path) -> dict[str, Any]:
    """What a written file must still be: its size in bytes and SHA-256 (a run's integrity check)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return {"bytes": path.stat().st_size, "sha256": h.hexdigest()}


def damage(path: Path, record: dict[str, Any] | None) -> str | None:
    """Why `path` is not the file `record` describes (None: it is, or there is no record to check)."""
    if record is None:
        return None
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    if size != record.get("bytes"):
        return f"{size:,} bytes, {record.get('bytes'):,} written"
    try:
        if file_record(path)["sha256"] != record.get("sha256"):
            return "its checksum differs from the one written"
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    return None


def create_exclusive_json(path: Path, obj: Any) -> bool:
    """Write `path` only if it does not exist yet, atomically; False if someone else was first."""
    tmp = tmp_name(path)
    try:
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        os.link(tmp, path)  # fails if path exists: the first shard wins, the others compare
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
