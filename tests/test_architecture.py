"""The host side's layers (docs/architecture.md): the import contract in pyproject.toml holds, and
no module imports one that imports it back, however long the way round."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

from poa_mc.kernels.layout import POLICY_TABLE

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contract_holds():
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"]
        + ["--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import graph's strongly connected parts of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return found


def test_no_import_circle():
    assert _cycles(grimp.build_graph("poa_mc")) == []


def test_a_circle_is_found():
    """The check above can fail: a graph with a circle three modules round."""
    g = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        g.add_import(importer=a, imported=b)
    assert _cycles(g) == [["p.a", "p.b", "p.c"]]


_TOY_POLICY = """
import numpy as np
from poa_mc.engine.engine import simulate
from poa_mc.model.config import loads_grid
from poa_mc.model.spec_policy import POLICY_KINDS

assert "first" in POLICY_KINDS
grid = loads_grid('''
[run]
replicas = 2
requests = 40
warmup = 0
[grid]
topology = ["3P/1D"]
concurrency = [6]
[[policy]]
name = "toy"
kind = "first"
[[policy]]
name = "rr"
kind = "round_robin"
''')
toy, rr = (simulate(c.spec, replicas=2, requests=40, warmup=0, seed=1, stream=c.stream) for c in grid.cells())
print(sorted(set(np.unique(toy.samples["prefill_worker"]).tolist())), len(np.unique(rr.samples["prefill_worker"])))
"""


def test_a_policy_added_as_docs_architecture_says(tmp_path):
    """docs/architecture.md's steps for a policy without a parameter, taken on a copy of the package:
    a line in POLICY_TABLE and a function in router.py with its line in `choose`. The grid accepts
    the new kind, and the kernels, compiled anew, route every request as it says."""
    pkg = tmp_path / "poa_mc"
    shutil.copytree(ROOT / "poa_mc", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    layout = pkg / "kernels" / "layout.py"
    text = layout.read_text()
    assert '    ("hash", 8),' in text
    toy_id = max(i for _, i in POLICY_TABLE) + 1  # the next free kernel id
    layout.write_text(
        text.replace('    ("hash", 8),', f'    ("hash", 8),\n    ("first", {toy_id}),  # a toy: the first candidate')
    )
    router = pkg / "kernels" / "router.py"
    text = router.read_text()
    assert "        if policy == POL_KV:\n" in text and "    @jit\n    def choose(" in text
    text = text.replace(
        "        if policy == POL_KV:\n",
        f"        if policy == {toy_id}:\n            return first(lo)\n" + "        if policy == POL_KV:\n",
    )
    text = text.replace(
        "    @jit\n    def choose(", "    @jit\n    def first(lo):\n        return lo\n\n    @jit\n    def choose("
    )
    router.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    done = subprocess.run(
        [sys.executable, "-c", _TOY_POLICY], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first, spread = done.stdout.split("]")
    assert first.strip("[ ").split(",") == ["0"]  # every prompt to the first prefill worker
    assert int(spread) == 3  # where round robin uses all three


_TOY_METRIC = """
from pathlib import Path
from poa_mc.model.config import loads_grid
from poa_mc.run.runner import run_grid
from poa_mc.stats.reduce import reduce_run
from tests import fake_engine
from tests.grids_for_tests import SMALL

out = Path("run")
run_grid(loads_grid(SMALL), out=out, simulate=fake_engine.simulate, quiet=True, finish=False)
summary, _ = reduce_run(out)
print(summary["prefill_wait_share"].to_list(), summary["prefill_wait_share_lo"].null_count())
"""


def test_a_summary_metric_added_as_docs_architecture_says(tmp_path):
    """docs/architecture.md's steps for a summary figure made from the accumulators, taken on a copy
    of the package: its declaration in poa_mc/stats/columns.py and its arithmetic in
    poa_mc/stats/cell_stats.py's cell_stats. The summary then has it, with its interval, in every row
    (the stand-in engine's prefill wait is half its TTFT: the share is 0.5)."""
    pkg = tmp_path / "poa_mc"
    shutil.copytree(ROOT / "poa_mc", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    cols = pkg / "stats" / "columns.py"
    text = cols.read_text()
    anchor = '    Col("hit_rate", F, "share", True),\n'
    assert anchor in text
    cols.write_text(text.replace(anchor, anchor + '    Col("prefill_wait_share", F, "share", True),\n'))
    arithmetic = pkg / "stats" / "cell_stats.py"
    text = arithmetic.read_text()
    anchor = '    _put(row, "hit_rate", proportion_interval(cached, prompt))\n'
    assert anchor in text
    toy = '    _put(row, "prefill_wait_share", t_interval(mean("prefill_wait_ms") / mean("ttft_ms")))\n'
    arithmetic.write_text(text.replace(anchor, anchor + toy))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", _TOY_METRIC], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    values, nulls = done.stdout.rsplit(" ", 1)
    shares = [float(v) for v in values.strip("[]").split(",")]
    assert len(shares) == 8 and all(abs(v - 0.5) < 1e-12 for v in shares), shares
    assert int(nulls) == 0
