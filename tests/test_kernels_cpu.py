"""The CPU driver (kernels/cpu.py): which build a cell runs on, that both builds load from the
on-disk cache in a new process (a cache miss costs every `poa-mc run` a minute of compilation),
and that a finished batch's arrays are reused only when nothing views them, with the same results."""

import os
import subprocess
import sys
import textwrap

import numpy as np
from poa_mc.kernels import cpu
from poa_mc.kernels import layout as L

from poa_mc.engine import pack_params, simulate
from poa_mc.spec import CellSpec, ClusterSpec, Dist, PolicySpec, WorkloadSpec

WL = WorkloadSpec(
    isl=Dist("fixed", 1024), osl=Dist("fixed", 16), prefix_groups=60, popularity="zipf", prefix_ratio=0.5,
    concurrency=2,
)  # fmt: skip
G1 = CellSpec(cluster=ClusterSpec(n_prefill=1, n_decode=1), workload=WL, policy=PolicySpec())
# G1 too small for the prefixes: G2 serves hits, which only the full build can give
TIERS = CellSpec(
    cluster=ClusterSpec(n_prefill=1, n_decode=1, prefill_kv_blocks=80, g2_blocks=160), workload=WL, policy=PolicySpec()
)
RUN = dict(replicas=2, requests=300, warmup=5, seed=1, stream=0)


def _ip(spec):
    return pack_params(spec, requests=20, warmup=2, seed=1, stream=0, record_candidates=True)[0]


def test_cells_without_tiers_or_a_trace_run_the_lean_build():
    assert cpu.lean(_ip(G1))
    assert not cpu.lean(_ip(TIERS))


def _run(script: str, cache_dir) -> str:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_both_builds_load_from_the_cache_in_a_new_process_and_stay_apart(tmp_path):
    hits = simulate(TIERS, **RUN).samples["cached_g2"].sum()
    assert hits > 0
    # each build compiled by a process of its own, into a fresh cache (so that each numbers its
    # functions alike), then a third process loads both, the lean one first: the full one must
    # still run its own code (same-named symbols would link its calls into the lean build's)
    head = "from poa_mc.engine import simulate\nfrom tests.test_kernels_cpu import G1, RUN, TIERS\n"
    _run(head + "simulate(G1, **RUN)", tmp_path)
    _run(head + "simulate(TIERS, **RUN)", tmp_path)
    out = _run(
        head
        + textwrap.dedent("""
            from poa_mc.kernels import cpu
            simulate(G1, **RUN)
            print(simulate(TIERS, **RUN).samples["cached_g2"].sum())
            for d in (cpu._run_lean, cpu._run_full):
                print(sum(d.stats.cache_hits.values()), sum(d.stats.cache_misses.values()))
        """),
        tmp_path,
    )
    assert out.split() == [str(hits), "1", "0", "1", "0"], out


def _batch(seed: int, n: int):
    from poa_mc.engine import _shapes

    ip, fp, tabs = pack_params(G1, requests=40, warmup=5, seed=seed, stream=0, record_candidates=True)
    shapes = _shapes(ip, fp, int(ip[L.P_NP] + ip[L.P_ND]), 40, True)
    return cpu.run_batch(ip, fp, tabs, shapes, n)[0]


def _copies(arrays: dict) -> dict:
    return {name: arr.copy() for name, arr in arrays.items()}


def test_a_finished_batchs_arrays_are_reused_and_give_the_same_results():
    cpu.drop_spares()
    fresh = _copies(_batch(1, 3))
    cpu.drop_spares()
    other = _batch(2, 4)  # different values left in the arrays the next batches reuse
    where = other["out_f"].ctypes.data
    assert not np.array_equal(other["out_f"][:3], fresh["out_f"])
    del other
    again = _batch(1, 3)  # the first 3 replicas' rows of the spares: outputs not zeroed by the host
    assert again["out_f"].ctypes.data == where
    for name, arr in fresh.items():
        assert np.array_equal(again[name], arr, equal_nan=True), name
    # an array still viewed (here cand) is not lent again: the next batch gets a fresh one
    view = again["cand"][:, 0]
    held, free = again["cand"].ctypes.data, again["out_f"].ctypes.data
    del again
    third = _batch(1, 3)
    assert third["cand"].ctypes.data != held and third["out_f"].ctypes.data == free
    assert view.ctypes.data == held
    for name, arr in fresh.items():
        assert np.array_equal(third[name], arr, equal_nan=True), name
