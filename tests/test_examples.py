"""examples/: the notebook and the script run on the quickstart's output (the real engine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "analysis.ipynb"
SCRIPT = ROOT / "examples" / "analysis.py"


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> Path:
    """`poa-mc run --out DIR`: the built-in quickstart grid (about 5 s once the kernels are compiled)."""
    out = tmp_path_factory.mktemp("quickstart") / "run"
    r = subprocess.run(
        [sys.executable, "-c", "from poa_mc.cli.main import main; main()", "run", "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert (out / "poa.parquet").exists() and (out / "summary.parquet").exists()
    return out


def test_committed_notebook_has_no_outputs():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def test_notebook_runs_and_draws(quickstart, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("POA_MC_RUN", str(quickstart))  # the kernel inherits the environment
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    summary = pl.read_parquet(quickstart / "summary.parquet")
    cells = f"{summary.height} cells = {summary['topology'].n_unique()} topologies x "
    assert str(quickstart) in text and cells in text, text[:500]
    pngs = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(pngs) >= 4  # the PoA heatmap, PoA against load, the TTFT and the end-to-end CDFs
    assert not list(tmp_path.iterdir())  # the notebook writes nothing where it runs


def test_script_still_runs(quickstart):
    env = {**os.environ, "MPLBACKEND": "Agg"}
    r = subprocess.run(
        [sys.executable, str(SCRIPT), str(quickstart)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert "quickstart seed" in r.stdout and "poa_cf" in r.stdout and "hit_rate" in r.stdout
