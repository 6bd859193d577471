"""`poa-mc tune`'s files: the search history (tune.parquet), each point's winner with its validated
gain (tuned.parquet), the winners as [[policy]] tables to paste into a grid (tuned.toml), and the
objective over the space (tune.png)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from poa_mc.io.files import atomic_write_bytes, atomic_write_parquet
from poa_mc.run.tune.search import PointResult
from poa_mc.run.tune.space import TuneSpec


def _point(spec: TuneSpec, p: PointResult) -> dict:
    return {"topology": p.cell.topology, "load_axis": spec.grid.load_axis, "load": float(p.cell.load)}


def history(spec: TuneSpec, results: list[PointResult]) -> pl.DataFrame:
    rows = [
        {**_point(spec, p), "candidate": r.candidate, "rung": r.rung, "replicas": r.replicas,
         "objective": r.objective, **{k: r.settings[k] for k in spec.space}}
        for p in results
        for r in p.rounds
    ]  # fmt: skip
    return pl.DataFrame(rows)


def winners(spec: TuneSpec, results: list[PointResult]) -> pl.DataFrame:
    rows = []
    for p in results:
        row = {**_point(spec, p), "objective": spec.objective}
        row.update({f"best_{k}": v for k, v in p.best.items()})
        row.update({f"own_{k}": v for k, v in p.own.items()})
        row.update(own_objective=p.own_objective, best_objective=p.best_objective, gain=p.gain,
                   gain_lo=p.gain_lo, gain_hi=p.gain_hi, validate_replicas=spec.validate_replicas)  # fmt: skip
        rows.append(row)
    return pl.DataFrame(rows)


def tuned_toml(spec: TuneSpec, results: list[PointResult]) -> str:
    lines = [f"# `poa-mc tune {spec.source.name}`: the best settings of policy {spec.policy.name!r} for "
             f"{spec.objective}, per load point;", "# paste the one for your load into a grid's policies"]  # fmt: skip
    for p in results:
        tag = f"{p.cell.topology}-{spec.grid.load_axis}{p.cell.load:g}".replace("/", "")
        lines += ["", "[[policy]]", f'name = "{spec.policy.name}-tuned-{tag}"', f'kind = "{spec.policy.kind}"']
        lines += [f"{k} = {v!r}" for k, v in p.best.items()]
        sign = "+" if p.gain >= 0 else ""
        lines.append(f"# validated: {sign}{p.gain:.1%} [{p.gain_lo:+.1%}, {p.gain_hi:+.1%}] against the own settings")
    return "\n".join(lines) + "\n"


def write(spec: TuneSpec, results: list[PointResult], out: Path) -> list[Path]:
    from poa_mc.plots.tune_figure import plot_tune

    out.mkdir(parents=True, exist_ok=True)
    hist = history(spec, results)
    paths = [out / "tune.parquet", out / "tuned.parquet", out / "tuned.toml"]
    atomic_write_parquet(hist, paths[0])
    atomic_write_parquet(winners(spec, results), paths[1])
    atomic_write_bytes(paths[2], tuned_toml(spec, results).encode())
    paths.append(plot_tune(hist, list(spec.space), spec.objective, out / "tune.png"))
    return paths
