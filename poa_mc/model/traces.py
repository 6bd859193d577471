"""Real workload traces as sources of request lengths (see docs/traces.md).

Three formats (docs/sources.md, "Trace formats"), each read in one streaming pass with the stdlib csv/json
modules, so that a bad row can be reported by its 1-based line number:

- Mooncake JSONL (`load_mooncake`): one JSON object a line with `timestamp` (ms), `input_length`,
  `output_length`, `hash_ids` (list of block ids); optional `session_id` and `delay` (Dynamo).
- Azure LLM inference CSV (`load_azure`): `TIMESTAMP, ContextTokens, GeneratedTokens`.
- BurstGPT CSV (`load_burstgpt`): `Timestamp` (s), `Model`, `Request tokens`, `Response tokens`,
  `Total tokens`, `Log Type`.

Every loader returns a `Trace` and raises `SpecError(path, message)` on bad input (missing file,
missing column, non-numeric or negative value, empty trace); the message names the file and, for
a bad row, its line number. Files ending in `.gz` are decompressed on the fly. The sha256 of the
(decompressed) content is computed during the same pass.

A grid uses a trace in two ways: its lengths alone (`dist = "trace"`, sampled), or the whole
trace replayed (`[workload] kind = "trace"`: timestamps, sessions, Mooncake's hash_ids as real
prefix sharing; poa_mc.model.replay).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path
from typing import IO, Any

import numpy as np

from poa_mc.model.spec_error import SpecError

FORMATS = ("mooncake", "azure", "burstgpt")
SAMPLE_EXT = {"mooncake": ".jsonl", "azure": ".csv", "burstgpt": ".csv"}


@dataclass(frozen=True, eq=False)
class Trace:
    """Per-request columns of a trace, in file order (rows dropped by the loader excluded).

    isl, osl: input/output lengths in tokens (int64, >= 0). arrival_ms: arrival time in ms (float64):
    the file's own offsets for Mooncake (ms) and BurstGPT (s -> ms); for Azure, whose timestamps
    are wall-clock datetimes, ms since the earliest request. hash_ids: Mooncake only (else None).
    sha256: of the file's (decompressed) bytes.
    """

    isl: np.ndarray
    osl: np.ndarray
    arrival_ms: np.ndarray
    source: str
    sha256: str = ""
    hash_ids: list[list[int]] | None = None
    lines: np.ndarray | None = None  # 1-based line of each row in its file
    session: list[str] | None = None  # Mooncake: session_id of each row ("" none)
    delay_ms: np.ndarray | None = None  # Mooncake: delay of each row after its session's previous turn (0 none)

    def __len__(self) -> int:
        return len(self.isl)


def sample_path(name: str) -> Path | None:
    """The shipped sample trace called `name` (with or without its extension), or None."""
    base = resources.files("poa_mc.data") / "traces"
    for ext in ("", ".jsonl", ".csv"):
        p = base / f"{name}{ext}"
        if p.is_file() and not name.endswith(".py"):
            return Path(str(p))
    return None


def sample_names() -> list[str]:
    base = resources.files("poa_mc.data") / "traces"
    return sorted(p.name.rsplit(".", 1)[0] for p in base.iterdir() if p.name.endswith((".jsonl", ".csv")))


def load_trace(path: str | Path, fmt: str) -> Trace:
    """Load `path` in format `fmt` (one of FORMATS)."""
    loaders = {"mooncake": load_mooncake, "azure": load_azure, "burstgpt": load_burstgpt}
    if fmt not in loaders:
        raise SpecError(str(path), f"unknown trace format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return loaders[fmt](path)


# ---------------------------------------------------------------------------------------------
# reading helpers


class _Reader:
    """Streams the decoded lines of a file while hashing its bytes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.sha = hashlib.sha256()
        if not self.path.is_file():
            raise SpecError(str(path), f"{path}: no such file")

    def lines(self) -> Iterator[str]:
        opener: Any = gzip.open if self.path.suffix == ".gz" else open
        try:
            f: IO[bytes]
            with opener(self.path, "rb") as f:
                for lineno, raw in enumerate(f, start=1):
                    self.sha.update(raw)
                    try:
                        yield raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                    except UnicodeDecodeError:
                        raise self.error(lineno, "not valid UTF-8") from None
        except (zlib.error, EOFError, gzip.BadGzipFile) as e:
            raise SpecError(str(self.path), f"{self.path}: not a valid gzip file ({e})") from None
        except OSError as e:
            raise SpecError(str(self.path), f"{self.path}: cannot read: {e.strerror or e}") from None

    def error(self, lineno: int | None, message: str) -> SpecError:
        where = f"{self.path}, line {lineno}" if lineno else str(self.path)
        return SpecError(str(self.path), f"{where}: {message}")


def _count(r: _Reader, lineno: int, name: str, value: Any) -> int:
    """A non-negative integer token count (ints, integral floats and their strings)."""
    v = value
    if isinstance(v, str):
        s = v.strip()
        try:
            v = int(s)
        except ValueError:
            try:
                v = float(s)
            except ValueError:
                raise r.error(lineno, f"{name} must be a non-negative integer, got {value!r}") from None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise r.error(lineno, f"{name} must be a non-negative integer, got {value!r}")
    if v < 0:
        raise r.error(lineno, f"{name} must be >= 0, got {value!r}")
    return int(v)


def _number(r: _Reader, lineno: int, name: str, value: Any) -> float:
    """A finite, non-negative number (timestamps, delays)."""
    try:
        v = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise r.error(lineno, f"{name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not np.isfinite(v) or v < 0:
        raise r.error(lineno, f"{name} must be a finite number >= 0, got {value!r}")
    return v


_DATETIME_RE = re.compile(
    r"^\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?\s*$"
)


def _datetime_ms(r: _Reader, lineno: int, name: str, value: str) -> float:
    """Milliseconds since the epoch of `2023-11-16 18:15:46.6805900` (any number of fractional
    digits; optional `T`, `Z` or `+hh:mm`; naive times are taken as UTC)."""
    m = _DATETIME_RE.match(value)
    if not m:
        raise r.error(lineno, f"{name} must be a datetime like 2023-11-16 18:15:46.6805900, got {value!r}")
    y, mo, d, h, mi, s, frac, tz = m.groups()
    offset = timedelta(0)
    if tz and tz != "Z":
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    try:
        dt = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=timezone(offset))
    except ValueError as e:
        raise r.error(lineno, f"{name}: {e} in {value!r}") from None
    return dt.timestamp() * 1000.0 + (float(f"0.{frac}") * 1000.0 if frac else 0.0)


def _finish(
    r: _Reader, isl: list, osl: list, arrival: list, hash_ids: list | None = None, note: str = "", **extra: Any
) -> Trace:
    if not isl:
        raise r.error(None, f"empty trace: no requests{note}")
    return Trace(
        isl=np.asarray(isl, dtype=np.int64),
        osl=np.asarray(osl, dtype=np.int64),
        arrival_ms=np.asarray(arrival, dtype=np.float64),
        source=str(r.path),
        sha256=r.sha.hexdigest(),
        hash_ids=hash_ids,
        **extra,
    )


def _csv_rows(r: _Reader, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for each data row of a CSV file with a header naming `required`."""
    reader = csv.reader(r.lines())
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise r.error(None, "empty file: no header row") from None
    except csv.Error as e:
        raise r.error(reader.line_num, f"bad CSV: {e}") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise r.error(1, f"missing column(s) {', '.join(missing)}; header has {', '.join(header)}")
    index = {c: header.index(c) for c in required}
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise r.error(start, f"bad CSV: {e}") from None
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) < len(header):
            raise r.error(start, f"expected {len(header)} fields, got {len(row)}")
        yield start, {c: row[i] for c, i in index.items()}


# ---------------------------------------------------------------------------------------------
# the three formats


def load_mooncake(path: str | Path) -> Trace:
    """Mooncake JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (list of ints)
    on every line; `session_id` (a string or integer) and `delay` (ms after the previous turn of
    the session completed; Dynamo's multi-turn extension) optional. Blank lines are skipped."""
    r = _Reader(path)
    isl: list[int] = []
    osl: list[int] = []
    arrival: list[float] = []
    hashes: list[list[int]] = []
    lines: list[int] = []
    sessions: list[str] = []
    delays: list[float] = []
    for lineno, line in enumerate(r.lines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise r.error(lineno, f"not valid JSON: {e.msg}") from None
        if not isinstance(obj, dict):
            raise r.error(lineno, f"expected a JSON object, got {type(obj).__name__}")
        missing = [k for k in ("timestamp", "input_length", "output_length", "hash_ids") if k not in obj]
        if missing:
            raise r.error(lineno, f"missing field(s) {', '.join(missing)}")
        arrival.append(_number(r, lineno, "timestamp", obj["timestamp"]))
        isl.append(_count(r, lineno, "input_length", obj["input_length"]))
        osl.append(_count(r, lineno, "output_length", obj["output_length"]))
        ids = obj["hash_ids"]
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
            raise r.error(lineno, "hash_ids must be a list of integers")
        hashes.append(ids)
        lines.append(lineno)
        delays.append(_number(r, lineno, "delay", obj["delay"]) if "delay" in obj else 0.0)
        sid = obj.get("session_id", "")
        if isinstance(sid, bool) or not isinstance(sid, (str, int)):
            raise r.error(lineno, f"session_id must be a string or an integer, got {sid!r}")
        sessions.append(str(sid))
    return _finish(
        r, isl, osl, arrival, hashes, lines=np.asarray(lines), session=sessions, delay_ms=np.asarray(delays, float)
    )


def load_azure(path: str | Path) -> Trace:
    """Azure LLM inference trace CSV (2023 and 2024): `TIMESTAMP` (a datetime such as
    `2023-11-16 18:15:46.6805900`; any number of fractional digits), `ContextTokens`,
    `GeneratedTokens`. arrival_ms is relative to the earliest request."""
    r = _Reader(path)
    isl: list[int] = []
    osl: list[int] = []
    arrival: list[float] = []
    for lineno, row in _csv_rows(r, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        arrival.append(_datetime_ms(r, lineno, "TIMESTAMP", row["TIMESTAMP"]))
        isl.append(_count(r, lineno, "ContextTokens", row["ContextTokens"]))
        osl.append(_count(r, lineno, "GeneratedTokens", row["GeneratedTokens"]))
    trace = _finish(r, isl, osl, arrival)
    object.__setattr__(trace, "arrival_ms", trace.arrival_ms - trace.arrival_ms.min())
    return trace


def load_burstgpt(path: str | Path) -> Trace:
    """BurstGPT CSV: `Timestamp` (s), `Request tokens`, `Response tokens` (also `Model`,
    `Total tokens`, `Log Type`, which are not required and not used).

    Rows with 0 response tokens are failed requests in BurstGPT: they are dropped (not errors).
    A file whose every row failed is an empty trace (an error)."""
    r = _Reader(path)
    isl: list[int] = []
    osl: list[int] = []
    arrival: list[float] = []
    dropped = 0
    for lineno, row in _csv_rows(r, ("Timestamp", "Request tokens", "Response tokens")):
        t = _number(r, lineno, "Timestamp", row["Timestamp"])
        i = _count(r, lineno, "Request tokens", row["Request tokens"])
        o = _count(r, lineno, "Response tokens", row["Response tokens"])
        if o == 0:
            dropped += 1
            continue
        arrival.append(t * 1000.0)
        isl.append(i)
        osl.append(o)
    return _finish(r, isl, osl, arrival, note=f" ({dropped} failed rows with 0 response tokens dropped)")
