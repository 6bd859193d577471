"""Per-replica accumulators: streamed batches equal one whole reduction, samples on or off give
the same summary, and a reduction with other [poa] settings needs the samples."""

import numpy as np
import polars as pl
import pytest

from poa_mc.engine import engine, memory
from poa_mc.io.store import RunDirError
from poa_mc.model.config import loads_grid
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_workload import Dist, WorkloadSpec
from poa_mc.run.runner import run_grid
from poa_mc.stats import sketch
from poa_mc.stats.accumulate import accumulate, from_frame
from poa_mc.stats.reduce import reduce_run

SPEC = CellSpec(
    cluster=ClusterSpec(n_prefill=1, n_decode=3, flow="prefill_first"),
    workload=WorkloadSpec(
        isl=Dist("uniform", low=200, high=3000),
        osl=Dist("lognormal", mean=40, sigma=0.6, cap=300),
        prefix_groups=4,
        prefix_ratio=0.5,
        concurrency=24,
    ),  # fmt: skip
    policy=PolicySpec(kind="kv", temperature=0.5),
)
RUN = dict(replicas=7, requests=240, warmup=20, seed=3, stream=1)
POA = {"window": 8, "cost": "router", "stage": "auto", "pricing": "slot", "freeze": True, "slots": 0}
SLO = {"ttft_ms": 400.0, "itl_ms": 20.0}


def _reducer(spec):
    spec_d = spec
    return lambda cols, rep, logs: accumulate(cols, rep, spec_d, POA, SLO, logs)


def test_streamed_batches_equal_one_reduction_of_every_sample(monkeypatch):
    whole = engine.simulate(SPEC, **RUN)
    ref = accumulate({**whole.samples, **whole.candidates}, whole.replica, SPEC, POA, SLO)
    # a batch budget of about two replicas: four batches, nothing kept
    per_rep = memory.memory_plan(SPEC, replicas=1, requests=RUN["requests"], warmup=RUN["warmup"])["state"]
    monkeypatch.setattr(memory, "STREAM_BATCH_BYTES", 3 * per_rep)
    streamed = engine.simulate(SPEC, **RUN, keep=0, reduce=_reducer(SPEC))
    assert streamed.batches >= 3
    assert next(iter(streamed.samples.values())).shape == (RUN["replicas"], 0)
    assert set(streamed.acc) == set(ref)
    for k, v in ref.items():
        np.testing.assert_array_equal(streamed.acc[k], v, err_msg=k)
    # histograms are held as the span of bins the batches fill, not whole (memory, docs/outputs.md)
    for m in ("ttft", "e2e"):
        bins = sketch.bin_of(whole.samples[f"{m}_ms"])
        assert (streamed.acc[f"hist_{m}_lo"] == bins.min()).all()
        assert streamed.acc[f"hist_{m}"].shape == (RUN["replicas"], bins.max() - bins.min() + 1)
    assert np.isfinite(ref["poa_opt"]).all() and ref["poa_windows"][0] == RUN["requests"] // POA["window"]
    # each replica tallied in the kernels as it ends (poa_mc/kernels/tally.py): the same bits again
    tallied = engine.simulate(SPEC, **RUN, keep=0, reduce=_reducer(SPEC), tally=True, slo=SLO)
    assert set(tallied.acc) == set(ref)
    for k, v in ref.items():
        np.testing.assert_array_equal(tallied.acc[k], v, err_msg=k)
    with pytest.raises(ValueError, match="SLO bounds"):  # tallied against other bounds than its reduction's
        engine.simulate(SPEC, **RUN, keep=0, reduce=_reducer(SPEC), tally=True, slo={})
    # keep N: the first N measured requests of each replica, as in the whole run
    some = engine.simulate(SPEC, **RUN, keep=30, reduce=_reducer(SPEC))
    np.testing.assert_array_equal(some.samples["ttft_ms"], whole.samples["ttft_ms"][:, :30])
    np.testing.assert_array_equal(some.candidates["cand_blocks"], whole.candidates["cand_blocks"][:, :30])
    np.testing.assert_array_equal(some.acc["hist_ttft"], ref["hist_ttft"])


def test_accumulators_against_the_requests():
    res = engine.simulate(SPEC, **RUN)
    s = res.samples
    acc = accumulate({**s, **res.candidates}, res.replica, SPEC, POA, SLO)
    np.testing.assert_allclose(acc["sum_ttft_ms"] / acc["n"], s["ttft_ms"].mean(axis=1), rtol=1e-13)
    gaps = np.maximum(s["osl"] - 1, 0)
    np.testing.assert_allclose(acc["sum_itl_gaps"], (s["itl_ms"] * gaps).sum(axis=1), rtol=1e-13)
    met = ((s["ttft_ms"] <= SLO["ttft_ms"]) & ((gaps == 0) | (s["itl_ms"] <= SLO["itl_ms"]))).sum(axis=1)
    np.testing.assert_array_equal(acc["slo_met"], met)
    for m, x in (("ttft", s["ttft_ms"]), ("e2e", s["e2e_ms"])):
        for q in (0.5, 0.9, 0.99):
            got = sketch.quantile(acc[f"hist_{m}"], q, acc[f"min_{m}"], acc[f"max_{m}"], acc[f"hist_{m}_lo"])
            exact = np.quantile(x, q, axis=1, method="inverted_cdf")
            assert np.all(np.abs(got / exact - 1) <= sketch.RESOLUTION), (m, q)
    np.testing.assert_array_equal(acc["replica_window_ms"], res.replica["window_ms"])


GRID = """
[run]
name = "acc"
seed = 5
replicas = 4
requests = 160
warmup = 16
samples = {samples}

[workload]
isl = {{ dist = "uniform", low = 200, high = 2000 }}
osl = {{ dist = "lognormal", mean = 30, sigma = 0.5, cap = 200 }}
prefix_groups = 4
prefix_ratio = 0.5

[cluster]
flow = "prefill_first"

[grid]
topology = ["1P/2D"]
concurrency = [8, 32]

[[policy]]
name = "greedy"
kind = "kv"

[[policy]]
name = "rr"
kind = "round_robin"

[poa]
selfish = "greedy"
window = 8

[slo]
ttft_ms = 300.0
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("acc")
    out = {}
    for samples in ('"all"', '"none"', "25"):
        d = root / samples.strip('"')
        run_grid(loads_grid(GRID.format(samples=samples)), out=d, backend="cpu", quiet=True)
        out[samples.strip('"')] = d
    return out


def test_samples_on_or_off_give_the_same_summary(runs):
    frames = {k: pl.read_parquet(d / "summary.parquet") for k, d in runs.items()}
    assert frames["all"].equals(frames["none"]) and frames["all"].equals(frames["25"])
    assert pl.read_parquet(runs["all"] / "poa.parquet").equals(pl.read_parquet(runs["none"] / "poa.parquet"))
    assert not (runs["none"] / "samples").exists() or not list((runs["none"] / "samples").rglob("*.parquet"))
    few = pl.read_parquet(next((runs["25"] / "samples").rglob("part.parquet")))
    assert few.height == 4 * 25 and few.group_by("replica").len()["len"].to_list() == [25] * 4
    # the summary's quantiles from the sketches, against exact ones over the kept samples
    s = pl.read_parquet(runs["all"] / "summary.parquet").sort("index")
    cells = pl.read_parquet(runs["all"] / "cells.parquet").sort("index")
    for cid, p99, run_p99 in zip(cells["cell_id"], s["ttft_p99_ms"], s["ttft_p99_run_ms"]):
        df = pl.read_parquet(runs["all"] / "samples" / f"cell_id={cid}" / "part.parquet").sort(["replica", "seq"])
        ttft = df["ttft_ms"].to_numpy().reshape(4, 160)
        # the cell's P99: the nearest rank of all its requests; the "run" P99: each replica's, averaged
        exact = np.quantile(ttft.ravel(), 0.99, method="inverted_cdf")
        assert abs(p99 / exact - 1) <= sketch.RESOLUTION
        exact_run = np.quantile(ttft, 0.99, axis=1, method="inverted_cdf").mean()
        assert abs(run_p99 / exact_run - 1) <= sketch.RESOLUTION


def test_other_poa_settings_need_the_samples(runs, tmp_path):
    import shutil

    for kind in ("all", "none"):
        shutil.copytree(runs[kind], tmp_path / kind)
    with pytest.raises(RunDirError, match=r"poa\.window: cell \w+ kept 0 samples"):
        reduce_run(tmp_path / "none", overrides={"window": 16})
    summary, _ = reduce_run(tmp_path / "all", overrides={"window": 16})
    # recomputed from the samples: the same as a run made with window = 16
    fresh = tmp_path / "fresh"
    run_grid(loads_grid(GRID.format(samples='"none"').replace("window = 8", "window = 16")), out=fresh, quiet=True)
    again = pl.read_parquet(fresh / "summary.parquet")
    assert summary["poa_hat"].to_list() == again["poa_hat"].to_list()
    assert summary["poa_hat_windows"].to_list() == [4 * 10] * 4
    # what the run wrote is a frame of one row per replica
    cid = pl.read_parquet(runs["none"] / "cells.parquet")["cell_id"][0]
    acc = from_frame(pl.read_parquet(runs["none"] / "acc" / f"cell_id={cid}" / "part.parquet"))
    assert acc["n"].tolist() == [160] * 4 and acc["hist_ttft"].shape == (4, sketch.NBINS)


def test_load_reads_the_accumulators_of_every_cell(runs):
    import poa_mc

    acc = poa_mc.load(runs["none"]).acc.collect()
    assert acc.height == 4 * 4 and acc["cell_id"].n_unique() == 4
    assert (acc["n"] == 160).all() and acc["hist_ttft_lo"].dtype == pl.Int32
    # the cells' histogram spans differ (lists here): rebuilt whole, a cell's rows are its file's
    for f in (runs["none"] / "acc").glob("cell_id=*/part.parquet"):
        rows = acc.filter(pl.col("cell_id") == f.parent.name[len("cell_id=") :])
        whole = from_frame(rows)["hist_ttft"]
        assert whole.shape == (4, sketch.NBINS) and (whole.sum(axis=1) == 160).all()
        np.testing.assert_array_equal(whole, from_frame(pl.read_parquet(f))["hist_ttft"])
    # samples hold per-request columns only; per-replica ones are in acc/
    few = pl.read_parquet(next((runs["25"] / "samples").rglob("part.parquet")))
    assert not [c for c in few.columns if c.startswith("replica_")]


def test_resume_with_other_poa_settings_reuses_what_it_can(runs, tmp_path):
    import shutil

    other = GRID.replace("window = 8", "window = 16")
    fresh = tmp_path / "fresh"
    run_grid(loads_grid(other.format(samples='"none"')), out=fresh, quiet=True)
    want = pl.read_parquet(fresh / "summary.parquet")
    for kind, rerun in (("all", 0), ("none", 4)):
        d = tmp_path / kind
        shutil.copytree(runs[kind], d)
        samples = '"all"' if kind == "all" else '"none"'
        report = run_grid(loads_grid(other.format(samples=samples)), out=d, quiet=True, resume=True)
        # every sample kept: re-reduced from them; none kept: simulated again
        assert len(report.ran) == rerun and len(report.skipped) == 4 - rerun, kind
        got = pl.read_parquet(d / "summary.parquet")
        assert got["poa_hat"].to_list() == want["poa_hat"].to_list(), kind


@pytest.mark.parametrize("rows", [0, 1, 5])
def test_a_frame_keeps_the_histograms_whole_through_their_span(rows):
    from poa_mc.stats.accumulate import frame

    rng = np.random.default_rng(rows)
    hist = {m: np.zeros((rows, sketch.NBINS), dtype=np.int32) for m in ("ttft", "e2e", "itl")}
    if rows:
        hist["ttft"][:, 40:60] = rng.integers(0, 3, (rows, 20))
        hist["ttft"][:, [40, 59]] = 1  # the span's ends are non-empty
        hist["e2e"][0, 0] = 2  # the first bin and the last
        hist["e2e"][-1, -1] = 1
        # hist_itl stays empty (no request with a gap to time)
    acc = {"n": np.arange(rows, dtype=np.int64), **{f"hist_{m}": h for m, h in hist.items()}}
    df = frame(acc)
    assert df.schema["hist_ttft"].size == (20 if rows else 1)  # the span of bins 40-59 only
    back = from_frame(pl.read_parquet(_written(df)))
    for m, h in hist.items():
        np.testing.assert_array_equal(back[f"hist_{m}"], h)
        assert back[f"hist_{m}"].dtype == np.int32


def _written(df: pl.DataFrame):
    import io

    buf = io.BytesIO()
    df.write_parquet(buf)
    buf.seek(0)
    return buf
