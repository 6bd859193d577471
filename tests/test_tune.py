"""`poa-mc tune` (poa_mc/run/tune/): the search finds a known optimum, the validation's interval
covers a known gain at its nominal rate, bad [tune] tables name their key, and the command runs
the real engine end to end."""

from __future__ import annotations

import dataclasses
import json
import math
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
    best = {"overlap_weight": 0.5, "temperature": 0.5}  # the own settings: omega 1, tau 0
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

        (g,) = search.validate(s, cell, best, simulate)
        hits += g.lo <= 0.10 <= g.hi
    assert 0.90 * n <= hits <= n, hits  # 95% nominal: 200 draws fall below 90% with probability < 0.3%


def each_names_its_key(tmp_path, cases: dict[str, str]) -> None:
    """Each bad grid (key named -> text) is a one-line error naming the key, exit code 2, nothing written."""
    p = tmp_path / "grid.toml"
    for want, bad in cases.items():
        p.write_text(bad)
        r = CliRunner().invoke(main, ["tune", str(p), "--out", str(tmp_path / "out")])
        assert r.exit_code == 2, r.output
        assert len(r.output.strip().splitlines()) == 1 and want in r.output, (want, r.output)
    assert not (tmp_path / "out").exists()


def test_a_bad_tune_table_names_its_key(tmp_path):
    text = GRID.format(seed=1, objective="ttft_mean", candidates=4, validate=8)
    cases = {
        "tune.space.omega": text.replace("overlap_weight = [0.0, 2.0]", "omega = [0.0, 2.0]"),
        "tune.space.temperature": text.replace("temperature = [0.0, 1.0]", "temperature = [1.0, 0.0]"),
        "tune.objective": text.replace('objective = "ttft_mean"', 'objective = "fastest"'),
        "tune.policy": text.replace('policy = "greedy"', 'policy = "rr"'),
        "tune.candidates": text.replace("candidates = 4", "candidates = 1"),
    }
    each_names_its_key(tmp_path, cases)


def test_the_command_runs_the_engine_and_writes_its_files(tmp_path):
    p = tmp_path / "grid.toml"
    p.write_text(GRID.format(seed=3, objective="ttft_p99", candidates=4, validate=8))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["tune", str(p), "--out", str(out)])
    assert r.exit_code == 0, r.output
    files = ["points", "tune.json", "tune.parquet", "tune.png", "tuned.parquet", "tuned.toml"]
    assert sorted(x.name for x in out.iterdir()) == files
    hist = pl.read_parquet(out / "tune.parquet")
    assert hist.height == 4 + 2 + 1 and set(hist["rung"]) == {0, 1, 2}
    won = pl.read_parquet(out / "tuned.parquet")
    assert won.height == 1 and won["gain_lo"][0] <= won["gain"][0] <= won["gain_hi"][0]
    import tomllib

    tuned = tomllib.loads((out / "tuned.toml").read_text())
    assert tuned["policy"][0]["kind"] == "kv" and set(tuned["policy"][0]) >= {"overlap_weight", "temperature"}
    json.dumps(won.to_dicts())


CONTROLLER_GRID = """
[run]
name = "tune-ctl-test"
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
concurrency = [8, 32, 128]

[[policy]]
name = "static"
kind = "kv"

[[policy]]
name = "ctl"
kind = "adaptive"

[controller]
theta1 = 1000.0
theta2 = 10000.0

[tune]
policy = "ctl"
objective = "ttft_mean"
space = {{ theta1 = [100.0, 4000.0], saturated_temperature = [0.0, 1.0], below_overlap_weight = [0.0, 2.0] }}
candidates = {candidates}
replicas = 2
validate_replicas = {validate}
compare = ["static"]
"""


def _ctl_spec(tmp_path, seed=1, candidates=32, validate=32):
    p = tmp_path / "ctl.toml"
    p.write_text(CONTROLLER_GRID.format(seed=seed, candidates=candidates, validate=validate))
    return load_tune(p)


def ctl_truth(policy) -> float:
    """A known objective: a controller's cost is least at theta1 1500, the saturated regime's
    temperature 0.6 and the below regime's overlap weight 0.4; a static policy costs 120."""
    if policy.kind != "adaptive":
        return 120.0
    c = policy.controller
    return 100.0 * (
        1 + ((c.theta1 - 1500) / 4000) ** 2 + (c.temperature[2] - 0.6) ** 2 + (c.overlap_weight[0] - 0.4) ** 2
    )


def by_load(truth):
    """The objective at concurrency C: C times truth (each load on its own scale)."""

    def simulate(spec, *, stream, **kw):
        rng_scale = spec.workload.concurrency
        return fake_engine(lambda p: rng_scale * truth(p), noise=0.05)(spec, stream=stream, **kw)

    return simulate


def test_a_controller_table_is_searched_over_every_load_at_once(tmp_path):
    spec = _ctl_spec(tmp_path)
    assert spec.joint
    result = search.tune(spec, by_load(ctl_truth))
    cands = search.candidates(spec)
    assert cands[0] == {"theta1": 1000.0, "saturated_temperature": 0.8, "below_overlap_weight": 1.0}  # the paper's
    assert all(c["theta1"] < spec.policy.controller.theta2 for c in cands)
    true = [ctl_truth(search.apply(spec.policy, c)) for c in cands]
    best = cands[int(np.argmin(true))]
    assert all(p.best == best for p in result.points)  # one table for every load
    # the race ran every candidate at every load: 32 x 3 rows in the first round
    assert sum(r.rung == 0 for p in result.points for r in p.rounds) == 32 * 3
    # validated against the own table and the static policy, per load and over the load axis
    for p in result.points:
        assert [g.baseline for g in p.gains] == ["ctl", "static"]
    own, static = result.overall
    want_own = 1 - min(true) / true[0]
    assert own.lo <= want_own <= own.hi and own.lo > 0
    assert static.lo <= 1 - min(true) / 120.0 <= static.hi


def test_a_controllers_mean_gain_covers_the_truth_at_its_nominal_rate(tmp_path):
    """Three loads whose true gains over the own table are 20%, 10% and 0% (a mean of 10%), noise of
    20% per replica not common to the pair; 200 validations on independent seeds."""
    spec = _ctl_spec(tmp_path, validate=8)
    cells = spec.grid.cells()
    best = {"theta1": 2000.0, "saturated_temperature": 0.5, "below_overlap_weight": 0.5}
    gain_at = {8: 0.2, 32: 0.1, 128: 0.0}

    def truth(spec_):
        own = spec_.policy.controller.theta1 == 1000.0
        return 100.0 if own else 100.0 * (1 - gain_at[spec_.workload.concurrency])

    hits = 0
    n = 200
    for k in range(n):
        run = dataclasses.replace(spec.grid.run, seed=k)
        s = dataclasses.replace(spec, grid=dataclasses.replace(spec.grid, run=run), compare=())

        def simulate(sp, *, stream, **kw):
            stream += 0 if sp.policy.controller.theta1 == 1000.0 else 7919
            return fake_engine(lambda p: truth(sp), noise=0.2)(sp, stream=stream, **kw)

        gains = [search.validate(s, c, best, simulate)[0] for c in cells]
        m = search.mean_gain(gains, "ctl")
        hits += m.lo <= 0.10 <= m.hi
    assert 0.90 * n <= hits <= n, hits


def test_a_bad_controller_space_names_its_key(tmp_path):
    text = CONTROLLER_GRID.format(seed=1, candidates=4, validate=8)
    cases = {
        "tune.space.overlap_weight": text.replace("below_overlap_weight = [0.0, 2.0]", "overlap_weight = [0.0, 2.0]"),
        "tune.space.theta1": text.replace("theta1 = [100.0, 4000.0]", "theta1 = [100.0, 20000.0]"),
        "tune.compare[0]": text.replace('compare = ["static"]', 'compare = ["nope"]'),
        "tune.compare": text.replace('compare = ["static"]', 'compare = "static"'),
    }
    each_names_its_key(tmp_path, cases)


def test_a_tuned_controller_table_is_grid_toml(tmp_path):
    """The command on the real engine: the tuned [controller] pastes back into a grid."""
    import tomllib

    from poa_mc.model.config import loads_grid

    p = tmp_path / "ctl.toml"
    p.write_text(CONTROLLER_GRID.format(seed=2, candidates=4, validate=4).replace("[8, 32, 128]", "[8, 32]"))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["tune", str(p), "--out", str(out)])
    assert r.exit_code == 0, r.output
    won = pl.read_parquet(out / "tuned.parquet")
    # per load and over the load axis, against the own table and the static policy
    assert won.height == 3 * 2 and set(won["baseline"]) == {"ctl", "static"}
    assert won.filter(pl.col("topology") == "all")["load"].is_null().all()
    assert (won["gain_lo"] <= won["gain"]).all() and (won["gain"] <= won["gain_hi"]).all()
    tuned = tomllib.loads((out / "tuned.toml").read_text())
    base = p.read_text().split("[[policy]]")[0]
    grid = loads_grid(base + (out / "tuned.toml").read_text())
    (pol,) = grid.policies
    best = {k: v for k, v in won.row(0, named=True).items() if k.startswith("best_") and k != "best_objective"}
    assert pol.kind == "adaptive" and pol.controller.theta1 == best["best_theta1"] == tuned["controller"]["theta1"]
    assert pol.controller.temperature[2] == best["best_saturated_temperature"]
    assert pol.controller.overlap_weight[0] == best["best_below_overlap_weight"]


def _tune(*args: str) -> object:
    return CliRunner().invoke(main, ["tune", *map(str, args)])


def test_a_sharded_tune_equals_one_tune_and_a_damaged_point_is_tuned_again(tmp_path):
    p = tmp_path / "grid.toml"
    p.write_text(GRID.format(seed=5, objective="ttft_p99", candidates=4, validate=4).replace("[8]", "[4, 8, 16]"))
    one, parts = tmp_path / "one", tmp_path / "parts"
    assert _tune(p, "--out", one).exit_code == 0
    for k in range(2):
        r = _tune(p, "--out", parts, "--shard", f"{k}/2")
        assert r.exit_code == 0 and "Once every shard has ended" in r.output, r.output
    assert not (parts / "tuned.parquet").exists()  # the shards write only their points
    saved = sorted((parts / "points").iterdir())
    assert len(saved) == 3
    saved[1].write_text('{"rounds": [')  # cut short: that point is tuned again
    r = _tune(p, "--out", parts)
    assert r.exit_code == 0, r.output
    assert "(2 done before)" in r.output
    for name in ("tune.parquet", "tuned.parquet"):
        assert pl.read_parquet(parts / name).equals(pl.read_parquet(one / name)), name
    assert (parts / "tuned.toml").read_text() == (one / "tuned.toml").read_text()
    # another [tune] table in the same directory is refused, naming it
    p.write_text(p.read_text().replace("candidates = 4", "candidates = 5"))
    r = _tune(p, "--out", parts)
    assert r.exit_code == 2 and "holds a tune of another grid or [tune] table" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1
    # a controller is raced over every load at once: it cannot be sharded
    c = tmp_path / "ctl.toml"
    c.write_text(CONTROLLER_GRID.format(seed=1, candidates=4, validate=4))
    r = _tune(c, "--out", tmp_path / "ctl", "--shard", "0/2")
    assert r.exit_code == 2 and "--shard" in r.output, r.output


def test_sigterm_keeps_the_finished_points_and_a_rerun_goes_on(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    p = tmp_path / "grid.toml"
    text = GRID.format(seed=6, objective="ttft_mean", candidates=8, validate=8)
    p.write_text(text.replace("[8]", "[2, 4, 8, 16, 32, 64]").replace("requests = 60", "requests = 400"))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "poa_mc.cli.main", "tune", str(p), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120

    def finished() -> list:  # a point's file once renamed into place (its temporary file is not one)
        return list((out / "points").glob("*.json")) if (out / "points").is_dir() else []

    while not finished():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    kept = len(finished())
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert 1 <= kept < 6 and f"{kept} of 6 load points are tuned in {out}; go on with:" in err, err
    assert not (out / "tuned.parquet").exists()
    r = _tune(p, "--out", out)
    assert r.exit_code == 0 and f"({kept} done before)" in r.output, r.output
    assert pl.read_parquet(out / "tuned.parquet").height == 6


def test_the_example_tunes_load():
    """examples/tune*.toml, the files docs/tune.md and docs/paper-comparison.md run."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "examples"
    found = {p.name: load_tune(p) for p in sorted(root.glob("tune*.toml"))}
    assert len(found) == 4, sorted(found)
    joint = {n for n, s in found.items() if s.joint}
    assert joint == {"tune-controller-paper-70b-1p5d.toml", "tune-controller-paper-340b-1p2d.toml"}
    assert all(s.compare for n, s in found.items() if n != "tune.toml")


def test_the_other_routers_settings_are_searched(tmp_path):
    """An sglang policy's thresholds (the integer one rounded) and an llmd policy's weights: the
    search finds the candidate nearest a known optimum; a bound outside a setting's range is named."""
    p = tmp_path / "grid.toml"
    sgl = (
        GRID.format(seed=1, objective="ttft_mean", candidates=32, validate=16)
        .replace('name = "greedy"\nkind = "kv"', 'name = "greedy"\nkind = "sglang"')
        .replace(
            "overlap_weight = [0.0, 2.0], temperature = [0.0, 1.0]",
            "cache_threshold = [0.0, 1.0], balance_abs_threshold = [0, 128], balance_rel_threshold = [1.0, 3.0]",
        )
    )
    p.write_text(sgl)
    spec = load_tune(p)

    def truth(pol) -> float:
        if pol.kind != "sglang":
            return 200.0
        assert isinstance(pol.balance_abs_threshold, int)
        return 100.0 * (1 + (pol.cache_threshold - 0.6) ** 2 + ((pol.balance_abs_threshold - 16) / 64) ** 2)

    (cell,) = spec.grid.cells()
    got = search.tune_point(spec, cell, fake_engine(truth, noise=0.05))
    cands = search.candidates(spec)
    assert cands[0] == {"cache_threshold": 0.3, "balance_abs_threshold": 64.0, "balance_rel_threshold": 1.5}
    assert all(c["balance_abs_threshold"] == int(c["balance_abs_threshold"]) for c in cands)
    assert got.best == cands[int(np.argmin([truth(search.apply(spec.policy, c)) for c in cands]))]
    llmd = sgl.replace('kind = "sglang"', 'kind = "llmd"').replace(
        "cache_threshold = [0.0, 1.0], balance_abs_threshold = [0, 128], balance_rel_threshold = [1.0, 3.0]",
        "prefix_weight = [0.0, 5.0], queue_weight = [0.0, 5.0]",
    )
    p.write_text(llmd)
    assert load_tune(p).space == {"prefix_weight": (0.0, 5.0), "queue_weight": (0.0, 5.0)}
    each_names_its_key(
        tmp_path,
        {
            "tune.space.cache_threshold": sgl.replace("cache_threshold = [0.0, 1.0]", "cache_threshold = [0.0, 2.0]"),
            "tune.space.balance_rel_threshold": sgl.replace("[1.0, 3.0]", "[0.5, 3.0]"),
            "tune.space.overlap_weight": llmd.replace("prefix_weight = [0.0, 5.0]", "overlap_weight = [0.0, 5.0]"),
        },
    )


def test_refinement_races_around_the_winner_and_gets_closer(tmp_path):
    """A coarse race (8 candidates) lands away from the bowl's optimum (omega 0.7, tau 0.3); two
    refinements around its winner, each in a box half as wide, end nearer it. The rungs go on
    across the races, the winner on the last."""
    plain = _spec(tmp_path, candidates=8)
    (cell,) = plain.grid.cells()
    engine = fake_engine(bowl, noise=0.01)
    first = search.tune_point(plain, cell, engine)
    more = dataclasses.replace(plain, refine=2)
    got = search.tune_point(more, cell, engine)

    def miss(s):
        return math.hypot(s["overlap_weight"] - 0.7, s["temperature"] - 0.3)

    assert miss(got.best) < miss(first.best) and bowl(search.apply(more.policy, got.best)) < bowl(
        search.apply(plain.policy, first.best)
    )
    refined = search.refined(more, first.best, 1)
    assert len(refined) == 7 and all(abs(r["overlap_weight"] - first.best["overlap_weight"]) <= 0.5 for r in refined)
    rungs = [r.rung for r in got.rounds]
    assert rungs == sorted(rungs) and max(rungs) == 3 * 3 + 2  # three races of 8: rungs 0-3, 4-7, 8-11
    assert [r.candidate for r in got.rounds if r.rung == max(rungs)] == [got.rounds[-1].candidate]
    assert first.rounds[0].settings == got.rounds[0].settings  # the first race is the same
