"""Timing tables: the file format of `aic` profiles, read, checked and packed for the kernels.

A table file (JSON, written by poa_mc.model.aic) holds a worker's pass and step times on a grid:

    {"format": "poa-mc timing table 2", "name": ..., "envelope": true, "provenance": {...},
     "prefill": {"tokens": [...], "gemm_ms": [...],
                 "batch": [...], "uncached": [...], "cached": [...], "attention_ms": [[[...]]]},
     "decode": {"batch": [...], "context": [...], "ms": [[...]]}}

A prefill pass of b requests, each computing u new tokens on c cached ones, takes
gemm_ms(b u) + attention_ms(b, u, c): `gemm_ms[t]` is everything but attention for a pass of
`tokens[t]` new tokens in all (the GEMMs' rows: where the source's latency jumps, so this axis is
fine), `attention_ms[b][u][c]` attention for `batch[b]` requests of `uncached[u]` new tokens on
`cached[c]`. `decode.ms[b][c]` is the step of `batch[b]` sequences whose context is `context[c]`
tokens each. The kernels interpolate these (poa_mc/kernels/timing.py). With `"envelope": true` the
source's values were made non-decreasing in tokens (gemm_ms), in new and cached tokens
(attention_ms) and in sequences and context (decode) by the lower envelope: each value is the
least at any point at least as large on those axes, since a pass or a step can always be padded to
a larger one (docs/profiles.md, "aic"); `false` marks a table kept as its source gave it
(`poa-mc profiles build-aic --no-envelope`), falls and all. Axes are strictly increasing, at
least two points, gaps of at least one (token or request).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from poa_mc.model.spec_error import SpecError

FORMAT = "poa-mc timing table 2"
TABLES_DIR = Path(__file__).resolve().parent.parent / "data" / "profiles"


def _tables_dir() -> Path:
    """The shipped tables (an installed package keeps them in poa_mc/data/profiles)."""
    here = TABLES_DIR
    if here.is_dir():
        return here
    from importlib.resources import files

    return Path(str(files("poa_mc.data") / "profiles"))


def builtin_tables() -> dict[str, Path]:
    """Shipped table name -> file."""
    d = _tables_dir()
    return {p.stem: p for p in sorted(d.glob("*.json"))} if d.is_dir() else {}


@dataclass(frozen=True, eq=False)
class TimingTable:
    name: str
    prefill_tokens: np.ndarray
    prefill_gemm_ms: np.ndarray  # (tokens,)
    prefill_batch: np.ndarray
    prefill_uncached: np.ndarray
    prefill_cached: np.ndarray
    prefill_attention_ms: np.ndarray  # (batch, uncached, cached)
    decode_batch: np.ndarray
    decode_context: np.ndarray
    decode_ms: np.ndarray  # (batch, context)
    provenance: dict[str, Any] = field(default_factory=dict)
    sha: str = ""

    def parts(self) -> list[np.ndarray]:
        """The arrays in the order the kernels read them (poa_mc/kernels/layout.py, F_TB_*)."""
        return [
            self.prefill_batch, self.prefill_uncached, self.prefill_cached, self.prefill_attention_ms.ravel(),
            self.prefill_tokens, self.prefill_gemm_ms, self.decode_batch, self.decode_context, self.decode_ms.ravel(),
        ]  # fmt: skip

    @functools.cached_property
    def _region(self) -> tuple[np.ndarray, tuple[int, ...]]:
        parts = self.parts() + [batch_lookup(self.decode_batch), batch_lookup(self.prefill_batch)]
        offsets = tuple(int(x) for x in np.cumsum([0] + [len(p) for p in parts[:-1]]))
        return np.concatenate(parts).astype(np.float64), offsets

    def region(self) -> tuple[np.ndarray, tuple[int, ...]]:
        """The floats the kernels read after fp's fixed fields, and each array's offset in them
        (relative to the region's start): those of `parts`, then the decode and the prefill batch
        axes' lookups (batch_lookup; poa_mc/kernels/layout.py, F_TB_DN and F_TB_PN)."""
        return self._region


LOOKUP_MAX = 1024  # batch sizes past this (or past the axis's last node) search the axis


def batch_lookup(axis: np.ndarray) -> np.ndarray:
    """For each whole batch size b from 0 to the axis's last node (at most LOOKUP_MAX), at 2 b and
    2 b + 1: the index i of the interval [a_i, a_i+1] that poa_mc/kernels/timing.py's `bracket` uses for b
    (the last i <= len(axis) - 2 with a_i <= b, 0 if none) and b's weight in it,
    (b - a_i) / (a_i+1 - a_i), with bracket's arithmetic, so that reading it gives bracket's numbers
    to the bit (b = 0, which no step or pass has, holds b = 1's pair)."""
    a = np.asarray(axis, dtype=np.float64)
    b = np.arange(max(1, min(int(a[-1]), LOOKUP_MAX)) + 1, dtype=np.float64)
    b[0] = 1.0
    i = np.clip(np.searchsorted(a[:-1], b, side="right") - 1, 0, len(a) - 2)
    w = (b - a[i]) / (a[i + 1] - a[i])
    return np.column_stack([i.astype(np.float64), w]).ravel()


# Axes along which a time cannot fall: attention over more new or cached tokens, a step of more
# sequences or longer ones (and the part outside attention over more tokens: its one axis).
MONOTONE_AXES = {"gemm": (0,), "attention": (1, 2), "decode": (0, 1)}


def lower_envelope(values: np.ndarray, axes: tuple[int, ...] | None = None) -> np.ndarray:
    """Non-decreasing along `axes` (default all): each value becomes the least value at any point
    at least as large on those axes (a reversed running minimum per axis)."""
    out = np.array(values, dtype=np.float64)
    for axis in range(out.ndim) if axes is None else axes:
        out = np.flip(np.minimum.accumulate(np.flip(out, axis), axis=axis), axis)
    return out


def _axis(doc: dict, key: str, path: str) -> np.ndarray:
    v = doc.get(key)
    if not isinstance(v, list) or len(v) < 2:
        raise SpecError(f"{path}.{key}", "must be a list of at least two numbers")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        raise SpecError(f"{path}.{key}", "must hold numbers only")
    a = np.asarray(v, dtype=np.float64)
    if not np.all(np.isfinite(a)) or a[0] < 0:
        raise SpecError(f"{path}.{key}", "must be finite and non-negative")
    if not np.all(np.diff(a) >= 1.0):
        raise SpecError(f"{path}.{key}", "must increase by at least 1 between points")
    return a


def _values(
    doc: dict, key: str, path: str, shape: tuple[int, ...], axes: tuple[int, ...] | None, zero: bool = False
) -> np.ndarray:
    try:
        a = np.asarray(doc.get(key), dtype=np.float64)
    except (TypeError, ValueError):
        raise SpecError(f"{path}.{key}", f"must be a {len(shape)}-dimensional array of numbers") from None
    if a.shape != shape:
        raise SpecError(f"{path}.{key}", f"must have shape {list(shape)} (the axes), got {list(a.shape)}")
    if not np.all(np.isfinite(a)) or not np.all(a >= 0 if zero else a > 0):
        raise SpecError(f"{path}.{key}", f"every time must be a finite number of ms {'>=' if zero else '>'} 0")
    if axes is not None and not np.array_equal(a, lower_envelope(a, axes)):
        raise SpecError(f"{path}.{key}", "must be non-decreasing in tokens and context (poa_mc.model.aic writes it so)")
    return a


def parse(doc: Any, path: str) -> TimingTable:
    """A table from its decoded JSON; SpecError names `path.section.key` for anything wrong."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SpecError(path, f'not a timing table (expected "format": "{FORMAT}")')
    sections = {}
    for sec in ("prefill", "decode"):
        if not isinstance(doc.get(sec), dict):
            raise SpecError(f"{path}.{sec}", "missing table section")
        sections[sec] = doc[sec]
    p, d = sections["prefill"], sections["decode"]
    envelope = doc.get("envelope", True)
    if not isinstance(envelope, bool):
        raise SpecError(f"{path}.envelope", "must be true or false")

    def mono(kind: str) -> tuple[int, ...] | None:
        return MONOTONE_AXES[kind] if envelope else None

    pt = _axis(p, "tokens", f"{path}.prefill")
    pb, pu, pc = (_axis(p, k, f"{path}.prefill") for k in ("batch", "uncached", "cached"))
    if pt[0] < 1 or pb[0] < 1 or pu[0] < 1:
        raise SpecError(f"{path}.prefill", "the tokens, batch and uncached axes start at 1 or more")
    db, dc = (_axis(d, k, f"{path}.decode") for k in ("batch", "context"))
    if db[0] < 1:
        raise SpecError(f"{path}.decode.batch", "must start at 1 or more")
    pg = _values(p, "gemm_ms", f"{path}.prefill", (len(pt),), mono("gemm"))
    pa = _values(p, "attention_ms", f"{path}.prefill", (len(pb), len(pu), len(pc)), mono("attention"), zero=True)
    dv = _values(d, "ms", f"{path}.decode", (len(db), len(dc)), mono("decode"))
    table = TimingTable(str(doc.get("name", "")), pt, pg, pb, pu, pc, pa, db, dc, dv)
    sha = hashlib.sha256(np.concatenate(table.parts()).tobytes()).hexdigest()[:16]
    prov = doc.get("provenance", {})
    return dataclasses.replace(table, provenance=prov if isinstance(prov, dict) else {}, sha=sha)


@functools.lru_cache(maxsize=32)
def _read(file: str, mtime_ns: int) -> TimingTable:
    try:
        doc = json.loads(Path(file).read_text())
    except json.JSONDecodeError as e:
        raise SpecError(file, f"not valid JSON (line {e.lineno}: {e.msg})") from None
    return parse(doc, file)


_BY_SHA: dict[str, TimingTable] = {}


def load(ref: str, base_dir: Path | None = None, path: str = "profile.table") -> TimingTable:
    """A shipped table by name, or a table file (relative paths from base_dir, default the working
    directory). The table is remembered by its digest for `for_profile` (the kernels' packer)."""
    builtin = builtin_tables()
    if ref in builtin:
        file = builtin[ref]
    else:
        file = Path(ref).expanduser()
        if not file.is_absolute():
            file = (base_dir or Path.cwd()) / file
        if not file.is_file():
            names = ", ".join(builtin) or "none"
            raise SpecError(path, f"no table file {str(file)!r} and no shipped table named {ref!r} (shipped: {names})")
    try:
        table = _read(str(file), file.stat().st_mtime_ns)
    except SpecError as e:
        raise SpecError(path, f"{file}: {e.path.removeprefix(str(file)).lstrip('.') or 'file'}: {e.message}") from None
    _BY_SHA[table.sha] = table
    return table


def for_profile(ref: str, sha: str) -> TimingTable:
    """The table a resolved profile names: the one loaded when the profile was resolved in this
    process, or, in a process that never resolved it (`poa-mc reduce` re-pricing PoA-hat from a
    run's cells), loaded again by its shipped name or file and checked against the run's digest."""
    if sha in _BY_SHA:
        return _BY_SHA[sha]
    try:
        table = load(ref)
    except SpecError:
        raise SpecError(
            "profile.table",
            f"the run's timing table {ref!r} (digest {sha}) is neither shipped nor a file from here: "
            "run the command from the folder the grid's relative table path starts at",
        ) from None
    if table.sha != sha:
        raise SpecError("profile.table", f"table {ref!r} changed since the run: digest {table.sha}, the run's {sha}")
    return table
