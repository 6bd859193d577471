import numpy as np
import polars as pl
import pytest

from poa_mc.config import loads_grid
from poa_mc.plots import plot_poa_heatmap, plot_poa_vs_load, plot_run
from poa_mc.runner import run_grid
from tests import fake_engine
from tests.grids_for_tests import SMALL

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    out = tmp_path_factory.mktemp("plots") / "run"
    report = run_grid(loads_grid(SMALL), out=out, simulate=fake_engine.simulate, quiet=True)
    assert report.reduced
    return out


def test_plot_run_writes_three_pngs(reduced):
    paths = plot_run(reduced)
    assert sorted(p.name for p in paths) == ["poa_heatmap.png", "poa_vs_load.png", "ttft_p99.png"]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == PNG and len(data) > 10_000


def test_plots_survive_nan_and_inf(reduced, tmp_path):
    poa = pl.read_parquet(reduced / "poa.parquet")
    poa = poa.with_columns(
        pl.when(pl.col("point") == 0).then(np.nan).otherwise(pl.col("poa_hat")).alias("poa_hat"),
        pl.when(pl.col("point") == 1).then(np.inf).otherwise(pl.col("poa_cf_hi")).alias("poa_cf_hi"),
    )
    assert plot_poa_vs_load(poa, tmp_path / "a.png").read_bytes()[:8] == PNG
    assert plot_poa_heatmap(poa, tmp_path / "b.png").read_bytes()[:8] == PNG
