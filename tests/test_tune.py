"""`poa-mc tune` (poa_mc/run/tune/): the search finds a known optimum, the validation's interval
covers a known gain at its nominal rate, bad [tune] tables name their key, and the command runs
the real engine end to end."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import polars as pl
from click.testing import CliRunner

from poa_mc.cli.main import main
from poa_mc.run.tune import search
from poa_mc.run.tune.space import load_tune

GRID = """
[run]
name = "tune-test"
seed = {seed}
replicas = 4
requests = 60
warmup = 20

[workload]
isl = 512
osl = 16
prefix_groups = 4

[cluster]
flow = "prefill_first"

[grid]
topology = ["1P/2D"]
concurrency = [8]

[[policy]]
name = "greedy"
kind = "kv"

[[policy]]
name = "rr"
kind = "round_robin"

[tune]
policy = "greedy"
objective = "{objective}"
space = {{ overlap_weight = [0.0, 2.0], temperature = [0.0, 1.0] }}
candidates = {candidates}
replicas = 2
validate_replicas = {validate}
"""


def _spec(tmp_path, seed=1, objective="ttft_mean", candidates=32, validate=64, extra=""):
    p = tmp_path / "grid.toml"
    p.write_text(GRID.format(seed=seed, objective=objective, candidates=candidates, validate=validate) + extra)
    return load_tune(p)


def fake_engine(truth, noise):
    """A stand-in engine whose replica r's TTFTs average truth(settings) times a noise factor that
    depends only on (seed, stream, r): candidates compared on the same replicas share it."""

    def simulate(spec, *, replicas, requests, warmup, seed, stream, **_):
        base = truth(spec.policy)
        rows = []
        for r in range(replicas):
            rng = np.random.default_rng([seed, stream, r])
            rows.append(base * (1 + noise * rng.standard_normal()) + rng.normal(0, 0.01, requests))
        ttft = np.array(rows)
        return SimpleNamespace(samples={"ttft_ms": ttft, "e2e_ms": ttft}, replica={"window_ms": np.full(replicas, 1e3)})

    return simulate


def bowl(policy) -> float:
    return 100.0 + 50.0 * ((policy.overlap_weight - 0.7) ** 2 + (policy.temperature - 0.3) ** 2)


def test_the_search_finds_a_known_optimum(tmp_path):
    spec = _spec(tmp_path)
    (cell,) = spec.grid.cells()
    got = search.tune_point(spec, cell, fake_engine(bowl, noise=0.05))
    cands = search.candidates(spec)
    assert cands[0] == {"overlap_weight": 1.0, "temperature": 0.0}  # the policy's own settings first
    true = [bowl(dataclasses.replace(spec.policy, **c)) for c in cands]
    assert got.best == cands[int(np.argmin(true))]
    assert abs(got.best["overlap_weight"] - 0.7) < 0.25 and abs(got.best["temperature"] - 0.3) < 0.15
    # successive halving: 32 candidates, then 16, 8, 4, 2, 1, the replicas doubling each round
    per_rung = [sum(r.rung == k for r in got.rounds) for k in range(6)]
    assert per_rung == [32, 16, 8, 4, 2, 1]
    assert [r.replicas for r in got.rounds if r.candidate == cands.index(got.best)] == [2, 4, 8, 16, 32, 64]
    assert got.gain > 0 and got.gain_lo > 0  # clearly better than the own settings (omega 1, tau 0)


def test_the_validation_interval_covers_the_true_gain_at_its_nominal_rate(tmp_path):
    """A case with a known answer: the own settings' figure 100, the winner's 90 (a gain of 10%),
    per-replica noise of 20%; 200 validations on independent seeds."""
    spec = _spec(tmp_path, validate=16)
    (cell,) = spec.grid.cells()
    own, best = {"overlap_weight": 1.0, "temperature": 0.0}, {"overlap_weight": 0.5, "temperature": 0.5}
    engine = fake_engine(lambda p: 100.0 if p.overlap_weight == 1.0 else 90.0, noise=0.2)
    hits = 0
    n = 200
    for k in range(n):
        s = dataclasses.replace(
            spec, grid=dataclasses.replace(spec.grid, run=dataclasses.replace(spec.grid.run, seed=k))
        )

        # noise that is not common to the pair: each setting its own stream
        def simulate(sp, **kw):
            kw["stream"] = kw["stream"] + (0 if sp.policy.overlap_weight == 1.0 else 7919)
            return engine(sp, **kw)

        gain, lo, hi, *_ = search.validate(s, cell, own, best, simulate)
        hits += lo <= 0.10 <= hi
    assert 0.90 * n <= hits <= n, hits  # 95% nominal: 200 draws fall below 90% with probability < 0.3%


def test_a_bad_tune_table_names_its_key(tmp_path):
    p = tmp_path / "grid.toml"
    text = GRID.format(seed=1, objective="ttft_mean", candidates=4, validate=8)
    cases = {
        "tune.space.omega": text.replace("overlap_weight = [0.0, 2.0]", "omega = [0.0, 2.0]"),
        "tune.space.temperature": text.replace("temperature = [0.0, 1.0]", "temperature = [1.0, 0.0]"),
        "tune.objective": text.replace('objective = "ttft_mean"', 'objective = "fastest"'),
        "tune.policy": text.replace('policy = "greedy"', 'policy = "rr"'),
        "tune.candidates": text.replace("candidates = 4", "candidates = 1"),
    }
    for want, bad in cases.items():
        p.write_text(bad)
        r = CliRunner().invoke(main, ["tune", str(p), "--out", str(tmp_path / "out")])
        assert r.exit_code == 2, r.output
        assert len(r.output.strip().splitlines()) == 1 and want in r.output, (want, r.output)
    assert not (tmp_path / "out").exists()


def test_the_command_runs_the_engine_and_writes_its_files(tmp_path):
    p = tmp_path / "grid.toml"
    p.write_text(GRID.format(seed=3, objective="ttft_p99", candidates=4, validate=8))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["tune", str(p), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(x.name for x in out.iterdir()) == ["tune.parquet", "tune.png", "tuned.parquet", "tuned.toml"]
    hist = pl.read_parquet(out / "tune.parquet")
    assert hist.height == 4 + 2 + 1 and set(hist["rung"]) == {0, 1, 2}
    won = pl.read_parquet(out / "tuned.parquet")
    assert won.height == 1 and won["gain_lo"][0] <= won["gain"][0] <= won["gain_hi"][0]
    import tomllib

    tuned = tomllib.loads((out / "tuned.toml").read_text())
    assert tuned["policy"][0]["kind"] == "kv" and set(tuned["policy"][0]) >= {"overlap_weight", "temperature"}
    json.dumps(won.to_dicts())
