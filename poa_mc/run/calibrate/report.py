"""A calibration end to end (`calibrate`) and its files (`write`): the fitted values with their
intervals (calibration.json), measured against simulated figures per load point with the held-out
errors (calibration.parquet), the calibrated profile as a [profile] table to paste into a grid
(profile.toml), and the plot of measured against simulated curves (calibration.png)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from poa_mc.io.files import atomic_write_bytes, atomic_write_json, atomic_write_parquet
from poa_mc.model.spec_profile import ProfileSpec
from poa_mc.run.calibrate.deployment import CLUSTER_PARAMS, PARAMS, Deployment
from poa_mc.run.calibrate.figures import apply
from poa_mc.run.calibrate.fit import BOOTSTRAP, Fit, fit, held_out


@dataclass(frozen=True)
class Calibration:
    fit: Fit
    held_out: np.ndarray | None  # (points, figures): relative error of each point fitted without it

    def profile(self, dep: Deployment) -> ProfileSpec:
        return apply(dep.grid.profile, self.fit.as_dict())


def calibrate(dep: Deployment, simulate: Callable, bootstrap: int = BOOTSTRAP) -> Calibration:
    found = fit(dep, simulate, bootstrap=bootstrap)
    return Calibration(found, held_out(dep, found, simulate) if dep.held_out else None)


def frame(dep: Deployment, cal: Calibration) -> pl.DataFrame:
    """One row per (load point, figure): measured, simulated at the fit, their relative error, the
    held-out error, and a benchmark's own relative noise at that point."""
    rows = []
    measured = dep.measured()
    for i, point in enumerate(dep.points):
        for j, figure in enumerate(dep.figures):
            sim = float(cal.fit.simulated[i, j])
            rows.append(
                {
                    "source": point.source,
                    "load_axis": point.load_axis,
                    "load": float(point.load),
                    "figure": figure,
                    "measured": measured[i][j],
                    "simulated": sim,
                    "error": sim / measured[i][j] - 1.0,
                    "held_out_error": None if cal.held_out is None else float(cal.held_out[i, j]),
                    "noise": None if cal.fit.noise is None else float(cal.fit.noise[i, j]),
                }
            )
    return pl.DataFrame(rows, schema={
        "source": pl.String, "load_axis": pl.String, "load": pl.Float64, "figure": pl.String,
        "measured": pl.Float64, "simulated": pl.Float64, "error": pl.Float64, "held_out_error": pl.Float64,
        "noise": pl.Float64,
    })  # fmt: skip


def summary(dep: Deployment, cal: Calibration) -> dict:
    f = cal.fit
    params = {
        name: {
            "value": float(v),
            "lo": None if math.isnan(lo) else float(lo),
            "hi": None if math.isnan(hi) else float(hi),
            "bounds": [p.lo, p.hi],
            "meaning": PARAMS[name],
        }
        for name, v, lo, hi, p in zip(f.names, f.values, f.lo, f.hi, dep.params)
    }
    out = {
        "deployment": str(dep.source),
        "parameters": params,
        "interval": "95%, percentile bootstrap" if f.noise is not None else None,
        "loss": f.loss,
        "loss_is": "sum over load points and figures of ln(simulated / measured)^2",
        "evaluations": f.evaluations,
        "figures": list(dep.figures),
        "load_axis": dep.points[0].load_axis,
        "loads": [float(p.load) for p in dep.points],
    }
    if cal.held_out is not None:
        worst = np.abs(cal.held_out).max(axis=0)
        out["held_out_max_abs_error"] = dict(zip(dep.figures, (float(w) for w in worst)))
    return out


def profile_toml(profile: ProfileSpec, dep: Deployment, values: dict[str, float] | None = None) -> str:
    """The calibrated profile as a [profile] table of docs/grid.md; fitted transfer and handover
    parameters (which belong to [cluster]) follow as comments to copy there."""
    values = values or {}
    lines = [
        f"# calibrated by `poa-mc calibrate {dep.source.name}` from {len(dep.points)} load points;",
        "# paste into a grid file in place of its [profile] table",
        "[profile]",
        f'name = "{profile.name}-calibrated"',
        f'kind = "{profile.kind}"',
    ]
    if profile.kind == "polynomial":
        keys = ("p2", "p1", "p0", "d2", "d1", "d0", "d_min")
    elif profile.kind == "aic":
        keys = ()
        lines.append(f'table = "{profile.table}"')
    else:
        keys = ("prefill_ms", "decode_ms")
    lines += [f"{k} = {getattr(profile, k)!r}" for k in keys]
    lines += [f"{k} = {getattr(profile, k)!r}" for k in ("prefill_host_pass_ms", "prefill_host_request_ms")]
    fitted = [k for k in CLUSTER_PARAMS if k in values]
    if fitted:
        lines += ["", "# and in its [cluster] table:"]
        lines += [f"# {k} = {values[k]!r}" for k in fitted]
    return "\n".join(lines) + "\n"


def write(dep: Deployment, cal: Calibration, out: Path) -> list[Path]:
    from poa_mc.plots.calibration_figure import plot_calibration

    out.mkdir(parents=True, exist_ok=True)
    rows = frame(dep, cal)
    paths = [out / "calibration.json", out / "calibration.parquet", out / "profile.toml"]
    atomic_write_json(paths[0], summary(dep, cal))
    atomic_write_parquet(rows, paths[1])
    atomic_write_bytes(paths[2], profile_toml(cal.profile(dep), dep, cal.fit.as_dict()).encode())
    paths.append(plot_calibration(rows, out / "calibration.png"))
    return paths


def lines(dep: Deployment, cal: Calibration) -> list[str]:
    """What the command prints: each parameter with its interval, then the errors."""
    f = cal.fit
    said = []
    for name, v, lo, hi in zip(f.names, f.values, f.lo, f.hi):
        interval = "" if math.isnan(lo) else f"  95% [{lo:.4g}, {hi:.4g}]"
        said.append(f"{name:<26} {v:.4g}{interval}")
    err = np.abs(f.simulated / np.array(dep.measured()) - 1.0).max(axis=0)
    said.append("fit, largest |error| by figure: " + ", ".join(f"{n} {e:.1%}" for n, e in zip(dep.figures, err)))
    if cal.held_out is not None:
        ho = np.abs(cal.held_out).max(axis=0)
        said.append("held out (each load fitted without it): " + ", ".join(
            f"{n} {e:.1%}" for n, e in zip(dep.figures, ho)))  # fmt: skip
    return said
