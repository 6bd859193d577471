"""`poa-mc tune`'s files: the search history (tune.parquet), each point's winner with its validated
gains over the baselines (tuned.parquet), the winners as grid TOML to paste back (tuned.toml), and
the objective over the space (tune.png)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from poa_mc.io.files import atomic_write_bytes, atomic_write_parquet
from poa_mc.model.spec_policy import REGIMES
from poa_mc.run.tune.search import Gain, PointResult, TuneResult
from poa_mc.run.tune.space import TuneSpec, apply


def _point(spec: TuneSpec, p: PointResult | None) -> dict:
    if p is None:  # a controller's gain over the whole load axis
        return {"topology": "all", "load_axis": spec.grid.load_axis, "load": None}
    return {"topology": p.cell.topology, "load_axis": spec.grid.load_axis, "load": float(p.cell.load)}


def history(spec: TuneSpec, result: TuneResult) -> pl.DataFrame:
    rows = [
        {**_point(spec, p), "candidate": r.candidate, "rung": r.rung, "replicas": r.replicas,
         "objective": r.objective, "score": r.score, **{k: r.settings[k] for k in spec.space}}
        for p in result.points
        for r in p.rounds
    ]  # fmt: skip
    return pl.DataFrame(rows)


def _gain_row(spec: TuneSpec, p: PointResult | None, best: dict[str, float], g: Gain) -> dict:
    row = {**_point(spec, p), "objective": spec.objective, "baseline": g.baseline}
    row.update({f"best_{k}": v for k, v in best.items()})
    row.update(baseline_objective=g.baseline_objective, best_objective=g.best_objective, gain=g.gain,
               gain_lo=g.lo, gain_hi=g.hi, validate_replicas=spec.validate_replicas)  # fmt: skip
    return row


def winners(spec: TuneSpec, result: TuneResult) -> pl.DataFrame:
    """One row per load point and baseline (the own settings first), and for a controller one per
    baseline over the whole load axis (topology "all", load null)."""
    rows = [_gain_row(spec, p, p.best, g) for p in result.points for g in p.gains]
    rows += [_gain_row(spec, None, result.points[0].best, g) for g in result.overall]
    return pl.DataFrame(rows, schema_overrides={"load": pl.Float64})


def _validated(g: Gain) -> str:
    sign = "+" if g.gain >= 0 else ""
    return f"# validated against {g.baseline}: {sign}{g.gain:.1%} [{g.lo:+.1%}, {g.hi:+.1%}]"


def _controller_toml(spec: TuneSpec, best: dict[str, float]) -> list[str]:
    c = apply(spec.policy, best).controller
    lines = ["[controller]"]
    for k in ("threshold_unit", "theta1", "theta2", "period_ms", "window", "ewma_alpha", "hysteresis", "min_dwell_ms"):
        lines.append(f"{k} = {getattr(c, k)!r}".replace("'", '"'))
    for i, regime in enumerate(REGIMES):
        lines += ["", f"[controller.{regime}]", f"temperature = {c.temperature[i]!r}"]
        lines.append(f"overlap_weight = {c.overlap_weight[i]!r}")
    return lines


def tuned_toml(spec: TuneSpec, result: TuneResult) -> str:
    head = f"# `poa-mc tune {spec.source.name}`: the best settings of policy {spec.policy.name!r} for {spec.objective}"
    if spec.joint:
        best = result.points[0].best
        lines = [head + " over every load point;", "# paste both tables into a grid (one [controller] per grid)", ""]
        lines += ["[[policy]]", f'name = "{spec.policy.name}-tuned"', 'kind = "adaptive"']
        lines += [_validated(g) + " (mean over the load points)" for g in result.overall]
        return "\n".join(lines + [""] + _controller_toml(spec, best)) + "\n"
    lines = [head + ", per load point;", "# paste the one for your load into a grid's policies"]
    for p in result.points:
        tag = f"{p.cell.topology}-{spec.grid.load_axis}{p.cell.load:g}".replace("/", "")
        lines += ["", "[[policy]]", f'name = "{spec.policy.name}-tuned-{tag}"', f'kind = "{spec.policy.kind}"']
        lines += [f"{k} = {v!r}" for k, v in p.best.items()]
        lines += [_validated(g) for g in p.gains]
    return "\n".join(lines) + "\n"


def write(spec: TuneSpec, result: TuneResult, out: Path) -> list[Path]:
    from poa_mc.plots.tune_figure import plot_tune

    out.mkdir(parents=True, exist_ok=True)
    hist = history(spec, result)
    won = winners(spec, result)
    paths = [out / "tune.parquet", out / "tuned.parquet", out / "tuned.toml"]
    atomic_write_parquet(hist, paths[0])
    atomic_write_parquet(won, paths[1])
    atomic_write_bytes(paths[2], tuned_toml(spec, result).encode())
    paths.append(plot_tune(hist, won, list(spec.space), spec.objective, spec.joint, out / "tune.png"))
    return paths
