"""A tune's finished load points on disk: each one's result in DIR/points/<cell id>.json, written
atomically as soon as the point is done, so an interrupted tune (Ctrl-C, a Slurm time limit, a
lost node) loses nothing finished and a rerun, or another shard, goes on where it stopped.

DIR/tune.json records what was tuned (the [tune] table, the grid's points and run settings, the
baselines and the poa-mc version); a directory that holds another tune is refused, naming it. A
point file that cannot be read back (cut short, edited) is not done: it is tuned again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from poa_mc.io.files import atomic_write_json
from poa_mc.model.grid import Cell
from poa_mc.run.tune.search import Gain, PointResult, Round
from poa_mc.run.tune.space import TuneSpec
from poa_mc.version import __version__

MANIFEST = "tune.json"
POINTS = "points"


class TuneDirError(Exception):
    """DIR holds something else: one line naming it."""


def fingerprint(spec: TuneSpec) -> dict:
    """What decides a tune's results: two tunes with the same fingerprint compute the same points."""
    cells = spec.grid.cells()
    what = {
        "policy": dataclasses.asdict(spec.policy),
        "objective": spec.objective,
        "space": {k: list(v) for k, v in spec.space.items()},
        "candidates": spec.candidates,
        "replicas": spec.replicas,
        "validate_replicas": spec.validate_replicas,
        "refine": spec.refine,
        "compare": [dataclasses.asdict(p) for p in spec.compare],
        "run": dataclasses.asdict(spec.grid.run),
        "slo": dataclasses.asdict(spec.grid.slo),
        "points": [c.cell_id for c in cells],
    }
    text = json.dumps(what, sort_keys=True, default=str)
    return {"version": __version__, "digest": hashlib.sha256(text.encode()).hexdigest()[:16], "points": len(cells)}


def prepare(spec: TuneSpec, out: Path) -> None:
    """Create DIR for this tune, or check that it holds this tune (a resume)."""
    want = fingerprint(spec)
    path = out / MANIFEST
    if path.is_file():
        try:
            have = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise TuneDirError(f"{path}: cannot read: {e}") from None
        if have != want:
            why = "another poa-mc version" if have.get("version") != want["version"] else "another grid or [tune] table"
            raise TuneDirError(f"{out} holds a tune of {why}: give --out another directory")
    elif out.exists() and any(p.name not in ("slurm", "logs") for p in out.iterdir()):
        raise TuneDirError(f"{out} is not empty and holds no tune: give --out another directory")
    else:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, want)
    (out / POINTS).mkdir(exist_ok=True)


def _path(out: Path, cell: Cell) -> Path:
    return out / POINTS / f"{cell.cell_id}.json"


def save(out: Path, p: PointResult) -> None:
    atomic_write_json(
        _path(out, p.cell),
        {"rounds": [dataclasses.asdict(r) for r in p.rounds], "best": p.best, "own": p.own,
         "gains": [dataclasses.asdict(g) for g in p.gains]},
    )  # fmt: skip


def _parse(d: dict, cell: Cell | None) -> PointResult:
    return PointResult(
        cell,  # type: ignore[arg-type] - None only to check that a file reads back
        tuple(Round(**r) for r in d["rounds"]),
        {k: float(v) for k, v in d["best"].items()},
        {k: float(v) for k, v in d["own"].items()},
        tuple(Gain(**g) for g in d["gains"]),
    )


def load(out: Path, cell: Cell) -> PointResult | None:
    """The point's saved result, or None when it is not there or cannot be read back."""
    try:
        return _parse(json.loads(_path(out, cell).read_text()), cell)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def saved_ids(out: Path) -> set[str]:
    """The cell ids of the point files that read back (without the grid: `poa-mc status`)."""
    ids = set()
    for path in (out / POINTS).glob("*.json") if (out / POINTS).is_dir() else ():
        try:
            _parse(json.loads(path.read_text()), None)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        ids.add(path.stem)
    return ids


def done(out: Path, cells: list[Cell]) -> dict[str, PointResult]:
    """cell id -> its saved result, for the points already tuned."""
    found = {c.cell_id: load(out, c) for c in cells}
    return {k: v for k, v in found.items() if v is not None}


RACE = "race.json"


def save_race(out: Path, cands: list[dict[str, float]], winner: int, rounds: list[Round]) -> None:
    """A controller's finished race: its validations per point may then be interrupted and resumed."""
    atomic_write_json(
        out / RACE, {"candidates": cands, "winner": winner, "rounds": [dataclasses.asdict(r) for r in rounds]}
    )


def load_race(out: Path) -> tuple[list[dict[str, float]], int, list[Round]] | None:
    try:
        d = json.loads((out / RACE).read_text())
        return d["candidates"], int(d["winner"]), [Round(**r) for r in d["rounds"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
