"""`poa-mc calibrate` (poa_mc/run/calibrate/): a benchmark of known truth, written in each supported
format, is calibrated back to its parameters; bad deployments and files are one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tomllib
from click.testing import CliRunner

from poa_mc.cli.main import main
from poa_mc.engine.engine import simulate
from poa_mc.model.config import loads_grid
from poa_mc.run.calibrate import fit as fit_module
from poa_mc.run.calibrate.deployment import load_deployment
from poa_mc.run.calibrate.figures import apply
from poa_mc.run.calibrate.report import calibrate, profile_toml
from tests.calibrate_truth import (
    BENCH_REQUESTS,
    GRID,
    HANDOVER_CLUSTER,
    HANDOVER_FIT,
    HANDOVER_TRUTH,
    LOADS,
    TRANSFER_CLUSTER,
    TRANSFER_FIT,
    TRANSFER_TRUTH,
    TRUTH,
    deployment,
    measured,
)


@pytest.fixture(scope="module")
def truth_figures():
    return measured(seed=99)


@pytest.fixture(scope="module")
def calibrated(truth_figures, tmp_path_factory):
    """The vLLM files' deployment, calibrated (40 refits behind the intervals)."""
    dep = load_deployment(deployment(tmp_path_factory.mktemp("vllm"), "vllm", truth_figures))
    return dep, calibrate(dep, simulate, bootstrap=40)


@pytest.mark.parametrize("fmt", ["aiperf", "genai-perf"])
def test_each_format_gives_the_same_deployment(fmt, truth_figures, calibrated, tmp_path):
    """The same benchmark written by AIPerf's and genai-perf's schemas reads as the vLLM one does:
    the same loads and figures to the bit, so it calibrates to the same answer (common random
    numbers make the fit a function of the figures)."""
    dep = load_deployment(deployment(tmp_path, fmt, truth_figures))
    assert {p.format for p in dep.points} != {calibrated[0].points[0].format}
    assert [p.load for p in dep.points] == [p.load for p in calibrated[0].points] == [float(c) for c in LOADS]
    assert dep.measured() == calibrated[0].measured()
    assert [p.requests for p in dep.points] == [p.requests for p in calibrated[0].points]


def test_a_benchmark_of_known_truth_is_calibrated_back_to_it(calibrated):
    """tests/calibrate_truth.py's benchmark (prefill scale 1.4, decode scale 0.8, 3 ms of host time
    per request) is recovered within each 95% interval (bench/calibrate_coverage.py measures how
    often that holds over seeds)."""
    dep, cal = calibrated
    f = cal.fit
    for name, v, lo, hi in zip(f.names, f.values, f.lo, f.hi):
        assert lo <= TRUTH[name] <= hi, (name, v, lo, hi)
        assert hi - lo < 0.5 * TRUTH[name] + 1.0, (name, lo, hi)  # an interval that says something
    # held out: the middle load, interpolated, within three times a benchmark's own noise (and
    # 1%); the end loads, extrapolated from the other two, within 10%
    assert np.all(np.abs(cal.held_out[1]) <= 3 * f.noise[1] + 0.01), (cal.held_out[1], f.noise[1])
    assert np.all(np.abs(cal.held_out) <= 0.10), cal.held_out


@pytest.mark.parametrize(
    "truth,fit,cluster",
    [(TRANSFER_TRUTH, TRANSFER_FIT, TRANSFER_CLUSTER), (HANDOVER_TRUTH, HANDOVER_FIT, HANDOVER_CLUSTER)],
    ids=["transfer", "handover"],
)
def test_a_transfer_or_handover_is_calibrated_back_to_it(truth, fit, cluster, tmp_path):
    """A disaggregated deployment whose P->D transfers take time (20 GB/s for 1,024 tokens of 70B
    KV: 16.8 ms each), or whose decode workers post vLLM's handover reads (6 us each, 160 per
    block), with 3 ms of host time per request: both parameters are recovered within their 95%
    intervals, and the calibrated profile file names the [cluster] one."""
    figs = measured(seed=99, truth=truth, cluster=cluster)
    path = deployment(tmp_path, "vllm", figs, fit=fit, cluster=cluster, held_out=False)
    dep = load_deployment(path)
    cal = calibrate(dep, simulate, bootstrap=40)
    f = cal.fit
    for name, v, lo, hi in zip(f.names, f.values, f.lo, f.hi):
        assert lo <= truth[name] <= hi, (name, v, lo, hi)
        assert hi - lo < 0.5 * truth[name] + 1.0, (name, lo, hi)
    text = profile_toml(cal.profile(dep), dep, f.as_dict())
    cluster_key = next(k for k in truth if k != "prefill_host_request_ms")
    assert f"# {cluster_key} = {f.as_dict()[cluster_key]!r}" in text
    tomllib.loads(text)


def test_the_interval_is_not_the_asymptotic_one(truth_figures, tmp_path):
    """What the percentile bootstrap is for: the fit at the grid's seed alone (no refits) gives no
    interval, and refits move (the intervals have width, the parameters trade off)."""
    dep = load_deployment(deployment(tmp_path, "vllm", truth_figures))
    plain = fit_module.fit(dep, simulate)
    assert np.isnan(plain.lo).all() and plain.noise is None
    draws, synthetic = fit_module.refits(dep, plain, simulate, 8)
    assert draws.shape == (8, 3) and synthetic.shape == (8, len(LOADS), len(dep.figures))
    assert (draws.std(axis=0) > 0).all()
    # a ridge: a larger prefill scale goes with a smaller per-request host time
    assert np.corrcoef(draws[:, 0], draws[:, 2])[0, 1] < 0


def test_the_calibrated_profile_is_a_grid_profile(truth_figures, tmp_path):
    dep = load_deployment(deployment(tmp_path, "vllm", truth_figures, held_out=False))
    cal = calibrate(dep, simulate, bootstrap=0)
    text = profile_toml(cal.profile(dep), dep)
    grid_text = GRID.format(replicas=2, requests=20, loads=[2], cluster="").replace(
        '[profile]\nname = "dynamo-mocker"\n', text
    )
    grid = loads_grid(grid_text)
    want = apply(dep.grid.profile, cal.fit.as_dict())
    for k in ("p0", "p1", "p2", "d0", "d1", "d2", "d_min", "prefill_host_request_ms"):
        assert getattr(grid.profile, k) == getattr(want, k), k


def test_the_command_writes_its_files_and_prints_the_fit(truth_figures, tmp_path):
    path = deployment(tmp_path, "aiperf", truth_figures)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["calibrate", str(path), "--out", str(out), "--bootstrap", "4"])
    assert r.exit_code == 0, r.output
    assert "prefill_scale" in r.output and "95% [" in r.output and "held out" in r.output
    assert sorted(p.name for p in out.iterdir()) == [
        "calibration.json", "calibration.parquet", "calibration.png", "profile.toml"
    ]  # fmt: skip
    summary = json.loads((out / "calibration.json").read_text())
    assert set(summary["parameters"]) == set(TRUTH) and summary["loads"] == [2.0, 8.0, 24.0]
    tomllib.loads((out / "profile.toml").read_text())
    import polars as pl

    rows = pl.read_parquet(out / "calibration.parquet")
    assert rows.height == len(LOADS) * 4 and rows["held_out_error"].null_count() == 0


@pytest.mark.parametrize(
    "change,says",
    [
        (
            lambda t: t.replace("prefill_scale = [0.5, 2.5]", "prefill_speed = [0.5, 2.5]"),
            "calibrate.fit.prefill_speed",
        ),
        (
            lambda t: t.replace("prefill_scale = [0.5, 2.5]", "prefill_scale = [2.5, 0.5]"),
            "calibrate.fit.prefill_scale",
        ),
        (lambda t: t.replace('"ttft_mean", "ttft_p99"', '"ttft_mean", "ttft_p42"'), "calibrate.figures"),
        (lambda t: t.replace("measured = [", 'measured = ["nothing.json", '), "nothing.json: no such file"),
        (lambda t: t.replace('topology = ["1P/2D"]', 'topology = ["1P/2D", "1P/3D"]'), "grid.topology"),
        (lambda t: t.replace("[calibrate]", "[calibration]"), "calibrate"),
        # a transfer's bandwidth needs the bytes a transfer moves; a handover's posting time vLLM's handover
        (
            lambda t: t.replace("fit = {", "fit = { transfer_gbps = [5.0, 80.0],"),
            "calibrate.fit.transfer_gbps: transfers",
        ),
        (lambda t: t.replace("fit = {", "fit = { nixl_post_us = [0.5, 10.0],"), "calibrate.fit.nixl_post_us: vLLM"),
        (
            lambda t: t.replace("fit = {", "fit = { transfer_gbps = [0.0, 80.0],").replace(
                'flow = "prefill_first"', 'flow = "prefill_first"\nkv_bytes_per_token = 327680'
            ),
            "calibrate.fit.transfer_gbps: a bandwidth's low must be > 0",
        ),
        (
            lambda t: (
                t.replace("fit = {", "fit = { transfer_latency_ms = [0.0, 5.0],")
                .replace('flow = "prefill_first"', 'flow = "aggregated"')
                .replace('topology = ["1P/2D"]', 'topology = ["0P/2D"]')
            ),
            "calibrate.fit.transfer_latency_ms: a disaggregated",
        ),
    ],
)
def test_a_bad_deployment_is_one_line_naming_the_key(change, says, truth_figures, tmp_path):
    path = deployment(tmp_path, "vllm", truth_figures)
    path.write_text(change(path.read_text()))
    r = CliRunner().invoke(main, ["calibrate", str(path), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and says in r.output, r.output
    assert not (tmp_path / "out").exists()


def test_a_malformed_benchmark_file_is_named_with_its_line(truth_figures, tmp_path):
    path = deployment(tmp_path, "vllm", truth_figures)
    bad = tmp_path / "vllm-c8.json"
    bad.write_text(bad.read_text().replace(f'"completed": {BENCH_REQUESTS}', '"completed": -3'))
    r = CliRunner().invoke(main, ["calibrate", str(path)])
    assert r.exit_code == 2 and "vllm-c8.json" in r.output and "completed" in r.output, r.output


def test_the_shipped_example_calibrates(tmp_path):
    """examples/calibrate (docs/calibrate.md's worked example): read, fitted and written."""
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "calibrate" / "deployment.toml"
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["calibrate", str(example), "--out", str(out), "--bootstrap", "2"])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "calibration.json").read_text())
    got = {k: v["value"] for k, v in summary["parameters"].items()}
    assert abs(got["prefill_scale"] - 1.4) < 0.1 and abs(got["decode_scale"] - 0.8) < 0.02, got
    assert max(summary["held_out_max_abs_error"].values()) < 0.05, summary


def test_a_staged_benchmark_is_replayed_and_calibrated_back_to_it(tmp_path):
    """A benchmark whose stages (C = 24, 2, 8) ran back to back, replayed as a [schedule]
    (`replay = "schedule"`): the stages keep their order, each stage's figures come from its own
    requests of the one run, and the known parameters are recovered within their 95% intervals."""
    from tests.calibrate_truth import STAGES, measured_stages, staged_deployment

    figs = measured_stages(seed=99)
    dep = load_deployment(staged_deployment(tmp_path, figs))
    assert dep.staged and [p.load for p in dep.points] == [float(c) for c in STAGES]
    assert [st.load for st in dep.grid.workload.schedule] == [float(c) for c in STAGES]
    cal = calibrate(dep, simulate, bootstrap=20)
    f = cal.fit
    for name, v, lo, hi in zip(f.names, f.values, f.lo, f.hi):
        assert lo <= TRUTH[name] <= hi, (name, v, lo, hi)
        assert hi - lo < 0.5 * TRUTH[name] + 1.0, (name, lo, hi)
