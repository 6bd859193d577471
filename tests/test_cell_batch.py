"""A batch of cells in one launch (poa_mc/engine/cell_batch.py) gives each cell exactly what it gets
simulated on its own: samples, per-replica arrays, logs and accumulators, bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from poa_mc.engine import cell_batch
from poa_mc.engine.engine import EngineError, pack, simulate
from poa_mc.model.config import loads_grid
from poa_mc.stats.accumulate import accumulate

# two policies, two loads, two topologies (their workers' rows padded to one shape), a controller
# (its switch log) and a cell that overflows (its error stays its own)
MIXED = """
[run]
name = "mixed"
seed = 11
replicas = 5
requests = 60
warmup = 10

[workload]
isl = 700
osl = 24
prefix_groups = 3
arrival = "poisson"

[cluster]
flow = "prefill_first"
max_inflight = 24

[grid]
topology = ["1P/2D", "2P/3D"]
rate = [2.0, 400.0]

[[policy]]
name = "kv"
kind = "kv"

[[policy]]
name = "rr"
kind = "round_robin"

[[policy]]
name = "ad"
kind = "adaptive"

[poa]
selfish = "kv"
window = 4
"""


def _grid(text: str = MIXED):
    return loads_grid(text)


def _packed(grid, cell, poa, slo):
    r = grid.run
    return pack(
        cell.spec,
        requests=r.requests,
        warmup=r.warmup_for(cell.concurrency),
        seed=r.seed,
        stream=cell.stream,
        tallied=True,
        slo=slo,
        poa=poa,
    )


def _alone(grid, cell, poa, slo):
    r = grid.run

    def red(cols, rep, logs, spec=cell.spec):
        return accumulate(cols, rep, spec, poa, slo, logs)

    try:
        res = simulate(
            cell.spec,
            replicas=r.replicas,
            requests=r.requests,
            warmup=r.warmup_for(cell.concurrency),
            seed=r.seed,
            stream=cell.stream,
            keep=None,
            reduce=red,
            tally=True,
            slo=slo,
            poa=poa,
        )
    except EngineError as e:
        return e
    res.reduced()
    return res


def _same(a, b) -> None:
    for part in ("samples", "candidates", "replica", "extra", "acc"):
        da, db = getattr(a, part), getattr(b, part)
        assert da.keys() == db.keys(), part
        for k in da:
            np.testing.assert_array_equal(np.asarray(da[k]), np.asarray(db[k]), err_msg=f"{part}.{k}")


def _settings(grid):
    from poa_mc.run.runner import build_manifest

    g = build_manifest(grid, "cpu")["grid"]
    return g["poa"], g.get("slo", {})


def test_a_mixed_batch_equals_its_cells_one_by_one():
    grid = _grid()
    poa, slo = _settings(grid)
    cells = grid.cells()
    packed = [_packed(grid, c, poa, slo) for c in cells]
    assert len({c.n_workers for c in packed}) == 2 and len({c.spec.policy.kind for c in packed}) == 3
    keys = {cell_batch.batch_key(p) for p in packed}
    assert len(keys) == 1, "two topologies, policies and loads pad to one shape"
    reduce = [lambda cols, rep, logs, spec=c.spec: accumulate(cols, rep, spec, poa, slo, logs) for c in cells]
    together = cell_batch.simulate_cells(packed, replicas=grid.run.replicas, reduce=reduce)
    failed = 0
    for cell, got in zip(cells, together):
        want = _alone(grid, cell, poa, slo)
        if isinstance(want, EngineError):
            failed += 1
            assert isinstance(got, EngineError) and str(got) == str(want) and got.key == want.key
            continue
        got.reduced()
        _same(got, want)
        assert got.extra.get("switch_log") is not None or cell.spec.policy.kind != "adaptive"
    assert 0 < failed < len(cells), "the overloaded cells fail, each on its own"


def test_one_thread_and_two_give_the_same_batch():
    grid = _grid(MIXED.replace("rate = [2.0, 400.0]", "rate = [2.0]"))
    poa, slo = _settings(grid)
    packed = [_packed(grid, c, poa, slo) for c in grid.cells()]
    one = cell_batch.simulate_cells(packed, replicas=4, parallel=False)
    two = cell_batch.simulate_cells(packed, replicas=4, parallel=True)
    for a, b in zip(one, two):
        _same(a, b)


def test_cells_of_other_shapes_are_refused_and_planned_apart():
    grid = _grid()
    poa, slo = _settings(grid)
    cells = grid.cells()
    packed = [_packed(grid, c, poa, slo) for c in cells]
    other = _grid(MIXED.replace("prefix_groups = 3", "prefix_groups = 5")).cells()[0]
    odd = _packed(grid, other, poa, slo)  # its prefix cache has other rows: not padded
    assert cell_batch.batch_key(odd) != cell_batch.batch_key(packed[0])
    with pytest.raises(ValueError, match="agree"):
        cell_batch.batch_shapes([packed[0], odd])
    batches = cell_batch.plan([*packed, odd], replicas=5, backend="cpu")
    assert sorted(i for b in batches for i in b) == list(range(len(packed) + 1))
    assert [len(packed)] in batches
    assert all(len({cell_batch.batch_key(([*packed, odd])[i]) for i in b}) == 1 for b in batches)


def test_plan_fills_batches_to_the_memory_and_replica_caps(monkeypatch):
    grid = _grid()
    poa, slo = _settings(grid)
    packed = [_packed(grid, c, poa, slo) for c in grid.cells()]
    n = len(packed)
    assert cell_batch.plan(packed, replicas=5, backend="cpu") == [list(range(n))]
    # at most CPU_MAX_REPLICAS replicas a launch: 256 // 100 = 2 cells each
    assert [len(b) for b in cell_batch.plan(packed, replicas=100, backend="cpu")] == [2] * (n // 2) + [1] * (n % 2)
    # a cell of more than half of that runs alone
    assert cell_batch.plan(packed, replicas=200, backend="cpu") == [[i] for i in range(n)]
    one = 5 * cell_batch.streamed_per_replica(packed[0], "cpu")
    monkeypatch.setattr(cell_batch, "stream_cap", lambda backend: int(2.5 * one))
    sizes = [len(b) for b in cell_batch.plan(packed, replicas=5, backend="cpu")]
    assert max(sizes) <= 2 and sum(sizes) == n


def test_a_mixed_batch_on_the_cuda_target_equals_the_cpu_cell_by_cell():
    """One CUDA launch (Numba's CUDA simulator) of two policies x two loads x two topologies padded
    to one shape, against each cell simulated alone on the CPU."""
    script = textwrap.dedent("""
        import numpy as np
        from tests.test_cell_batch import MIXED, _grid, _packed, _settings
        from poa_mc.engine import cell_batch
        from poa_mc.engine.engine import simulate
        text = MIXED.replace("rate = [2.0, 400.0]", "rate = [2.0, 6.0]").replace('name = "ad"\\nkind = "adaptive"',
                             'name = "rnd"\\nkind = "random"')
        grid = _grid(text.replace("requests = 60", "requests = 16").replace("warmup = 10", "warmup = 4"))
        poa, slo = _settings(grid)
        cells = [c for c in grid.cells() if c.spec.policy.kind in ("kv", "round_robin")]
        packed = [_packed(grid, c, poa, slo) for c in cells]
        got = cell_batch.simulate_cells(packed, replicas=2, backend="cuda")
        r = grid.run
        for cell, g in zip(cells, got):
            want = simulate(cell.spec, replicas=2, requests=r.requests, warmup=r.warmup_for(cell.concurrency),
                            seed=r.seed, stream=cell.stream)
            for k in want.samples:
                assert np.array_equal(g.samples[k], want.samples[k]), (cell.label(), k)
            for k in want.candidates:
                assert np.array_equal(g.candidates[k], want.candidates[k], equal_nan=True), (cell.label(), k)
        print("EQUAL", len(cells), len({c.n_workers for c in packed}), g.device)
    """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "EQUAL 8 2 cuda simulator" in out.stdout, out.stdout
