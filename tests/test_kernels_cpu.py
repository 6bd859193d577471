"""The CPU driver (poa_mc/kernels/cpu.py): which build a cell runs on, and that both builds load from the
on-disk cache in a new process (a cache miss costs every `poa-mc run` a minute of compilation)."""

import os
import subprocess
import sys
import textwrap

import numpy as np

from poa_mc.engine.engine import simulate
from poa_mc.engine.packing import pack_params
from poa_mc.kernels import cpu
from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_cluster import ClusterSpec
from poa_mc.model.spec_policy import PolicySpec
from poa_mc.model.spec_workload import Dist, WorkloadSpec

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
    head = "from poa_mc.engine.engine import simulate\nfrom tests.test_kernels_cpu import G1, RUN, TIERS\n"
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


def test_kernels_never_index_with_a_negative_number(tmp_path):
    # the kernels compile without Numba's wrapping of negative indices (cpu._plain_indices): one
    # would read outside its array. Compiled under NUMBA_BOUNDSCHECK, where any index outside its
    # dimension raises IndexError, both builds run cells of every path of the kernels, and
    # PoA-hat's pass over their rows (poa_mc/kernels/poa_hat.py) works out each price's windows
    script = textwrap.dedent("""
        import dataclasses
        import numpy as np
        from poa_mc.stats.accumulate import accumulate
        from poa_mc.engine.engine import simulate
        from poa_mc.kernels import cpu
        from tests.every_path import cells, trace_cells
        assert cpu.arrayobj.fix_integer_index.__name__ == "fix_integer_index"
        specs = [spec for *_, spec in cells()] + [spec for _, spec in trace_cells()]
        solved = 0
        for spec in specs:
            for poa in ({"window": 4}, {"window": 4, "cost": "ttft"}, {"window": 4, "cost": "observed"},
                        {"window": 4, "cost": "observed", "observed_from": "client"}):
                made = []
                def red(c, rep, lg, d=spec, p=poa):
                    made.append(c.get("poa_kernel"))
                    return accumulate(c, rep, d, p, {}, lg)
                r = simulate(spec, replicas=3, requests=40, warmup=5, seed=5, stream=1, keep=0, reduce=red,
                             tally=True, slo={}, poa=poa)
                r.reduced()
                assert (r.replica["status"] == 0).all()
                solved += sum(m is not None and bool(np.isfinite(m).all()) for m in made)
        runs = (cpu._run_lean, cpu._run_full, cpu._run_poa)
        print(len(specs), sum(n for d in runs for n in d.stats.cache_misses.values()), solved > 40)
    """)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_BOUNDSCHECK": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=1200, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    # 25 cells, each build and the PoA-hat pass compiled here, most cells' windows solved there
    assert out.stdout.split() == ["25", "3", "True"], out.stdout


def test_plain_indices_apply_while_the_kernels_compile_only():
    original = cpu.arrayobj.fix_integer_index
    with cpu._plain_indices():
        assert cpu.arrayobj.fix_integer_index is not original
    assert cpu.arrayobj.fix_integer_index is original


def test_the_window_solver_refuses_non_finite_costs_instead_of_looping(tmp_path):
    """A NaN row never reaches a free column: the solver (poa_mc/kernels/poa_hat.py: assign_min) returns NaN
    and the host raises. Run in a process of its own, so that a regression fails on the timeout
    instead of hanging the suite (compiled code cannot be interrupted)."""
    finite = np.arange(24, dtype=np.float64).reshape(2, 4, 3) % 5
    want = cpu.batch_assign(finite, 2)  # compiled (and cached) here: the child only loads it
    assert np.isfinite(want).all()
    script = textwrap.dedent("""
        import numpy as np
        from poa_mc.kernels import cpu

        def outcome(f, *args):
            try:
                f(*args)
            except ValueError as e:
                return str(e)
            return "no error"

        costs = np.ones((3, 4, 2))
        costs[1, 2] = np.nan
        print(outcome(cpu.batch_assign, costs, 2))
        prices = np.ones((2, 3, 6))
        prices[1, 0, 4] = -np.inf
        print(outcome(cpu.batch_assign_priced, prices, 3))
        print(outcome(cpu.assign_min, np.full((2, 2), np.inf), 2))
        print(outcome(cpu.batch_assign, np.ones((1, 5, 2)), 2))  # 5 rows, 4 columns
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "PoA-hat window 1: non-finite costs in row 2; the assignment needs finite costs"
    assert lines[1] == "PoA-hat window 1: non-finite costs in row 0; the assignment needs finite costs"
    assert lines[2].startswith("assign_min: the assignment needs finite costs")
    assert lines[3].startswith("PoA-hat window 0: no assignment")
    np.testing.assert_array_equal(cpu.batch_assign(finite, 2), want)
