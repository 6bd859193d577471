"""The CUDA kernels compiled for H100/H200 (sm_90) and B200 (sm_100) without a GPU: NVVM's PTX
assembled by ptxas, with budgets on what each kernel spills (poa_mc/engine/ptx.py).

The compile needs `poa-mc[gpu]` (numba-cuda with the CUDA 12.9 wheels): skipped where it is not
installed, except in CI (CI=true), whose .ci/run installs it, where its absence fails."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from poa_mc import data
from poa_mc.engine import ptx
from poa_mc.model.config import load_grid
from tests.every_path import cells, trace_cells

# ptxas -v as it prints an entry that calls one function it did not inline (names shortened)
_REPORT = """ptxas info    : 1800 bytes gmem
ptxas info    : Compiling entry function '_Z3runv' for 'sm_90'
ptxas info    : Function properties for _Z3runv
    1064 bytes stack frame, 2088 bytes spill stores, 5580 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 1064 bytes cumulative stack size
ptxas info    : Compile time = 53178.430 ms
ptxas info    : Function properties for _Z6demotev
    0 bytes stack frame, 0 bytes spill stores, 28 bytes spill loads
"""

# Budgets: today's counts (bench/RESULTS.md, "The CUDA kernels' resources") and a quarter more.
# The event loop takes 238 (sm_100) to 255 (sm_90, all a thread may have) registers, so at 64
# threads a block an SM holds 4 blocks, 8 of its 64 warps (12.5%), until a thread needs 168 or
# fewer (18.8%); what a change adds goes to local memory as spills instead (each an extra memory
# round trip inside the event loop), which the budget catches. sm_100 spills nothing today: a
# few words (64 bytes) are allowed before the test asks for a look. A change past a budget is
# one to time on a device (bench/gpu_check.sh) before it lands. The load schedule's stage switch
# (poa_mc/kernels/schedule.py) took sm_90's stack frame from 912 to 976 bytes with the spill
# bytes inside their budget (1,724 stores, 5,676 loads) and sm_100 unchanged; no device was lent
# to time it, so the frame's budget moved to 1,000 on that record (bench/RESULTS.md, "Load
# schedules") and the next device run times it.
_BUDGET = {  # (kernel, arch): (registers, spill stores, spill loads, stack frame) at most
    ("run", "sm_90"): (255, 1745, 5765, 1000),
    ("run", "sm_100"): (255, 64, 64, 64),
    ("poa", "sm_90"): (255, 64, 64, 64),
    ("poa", "sm_100"): (255, 64, 64, 64),
}


def test_parse_ptxas_reads_an_entry_and_its_callees_spills():
    (entry,) = ptx.parse_ptxas(_REPORT).items()
    assert entry == (
        "_Z3runv",
        {
            "registers": 255,
            "stack_bytes": 1064,
            "spill_stores": 2088,
            "spill_loads": 5580 + 28,
            "cumulative_stack_bytes": 1064,
        },
    )


def test_parse_ptxas_without_a_stack():
    text = _REPORT.replace(", 1064 bytes cumulative stack size", "").replace(
        "1064 bytes stack frame", "0 bytes stack frame"
    )
    assert ptx.parse_ptxas(text)["_Z3runv"]["cumulative_stack_bytes"] == 0


@pytest.mark.parametrize(
    "registers, occupancy",
    # the CUDA occupancy calculator's figures for compute capability 9.0, 64 threads a block
    [(255, 0.125), (192, 0.125), (168, 0.1875), (136, 0.1875), (128, 0.25), (64, 0.5), (40, 0.75), (32, 1.0)],
)
def test_occupancy_at_64_threads_a_block(registers, occupancy):
    r = ptx.Resources("run", "sm_90", registers, 0, 0, 0, 0, 0)
    assert r.occupancy(64) == occupancy


def test_every_cell_launches_the_same_kernels():
    """One compile serves every launch: the kernels' argument types do not depend on the cell (its
    policy, flow, tiers, trace, client, handover or links), so the PTX checked below is the PTX of
    every cell a run can launch."""
    first = ptx.launch_types(cells()[0][3])
    specs = [spec for *_, spec in cells()] + [spec for _, spec in trace_cells()]
    for path in sorted((Path(data.__file__).parent / "grids").glob("*.toml")):  # every built-in grid's cells
        specs += [c.spec for c in load_grid(path).cells()]
    for spec in specs:
        assert ptx.launch_types(spec) == first
    assert ptx.launch_types(cells()[0][3], record=False) == first  # no candidates: a (1, 1, k) array
    assert ptx.launch_types(cells()[0][3], tally=False) == first  # no tallies: (1,) and (1, 1) arrays


def _compiler_present() -> bool:
    return importlib.util.find_spec("numba_cuda") is not None and ptx.ptxas() is not None


@pytest.mark.ptx
def test_kernels_compile_for_sm90_and_sm100_within_budget():
    if not _compiler_present():
        if os.environ.get("CI") == "true":
            pytest.fail("CI must compile the CUDA kernels: .ci/run installs poa-mc[gpu] (numba-cuda, ptxas)")
        pytest.skip("numba-cuda and ptxas not installed: pip install -e '.[gpu]'")
    rows = ptx.compile_kernels(cells()[0][3])
    assert {(r.kernel, r.arch) for r in rows} == set(_BUDGET)
    over = []
    for r in rows:
        budget = _BUDGET[(r.kernel, r.arch)]
        seen = (r.registers, r.spill_stores, r.spill_loads, r.stack_bytes)
        if any(s > b for s, b in zip(seen, budget)):
            over.append(f"{r.kernel} {r.arch}: registers, spill stores, loads, stack {seen} > {budget}")
    assert not over, "; ".join(over)
