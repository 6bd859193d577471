"""poa_mc.stats.columns: summary.parquet and poa.parquet have exactly the declared columns, in
order and type, in every run; an undeclared figure is refused; docs/outputs.md describes each."""

import re
from pathlib import Path

import polars as pl
import pytest

from poa_mc.model.config import loads_grid
from poa_mc.run.runner import run_grid
from poa_mc.stats import columns
from poa_mc.stats.reduce import reduce_run
from tests import fake_engine
from tests.grids_for_tests import SMALL

ROOT = Path(__file__).resolve().parent.parent


def test_every_run_has_the_declared_columns_null_where_a_figure_does_not_apply(tmp_path):
    out = tmp_path / "run"
    run_grid(loads_grid(SMALL), out=out, simulate=fake_engine.simulate, quiet=True, finish=False)
    summary, poa = reduce_run(out)
    assert summary.schema == pl.Schema(columns.schema(columns.SUMMARY))
    assert poa.schema == pl.Schema(columns.schema(columns.POA))
    # SMALL has no client, no tiers, no links: those figures are null in every row, not absent
    for name in ("client_wait_mean_ms", "hit_rate_g2", "link_util_hi"):
        assert summary[name].null_count() == summary.height > 0, name
    assert summary["ttft_p99_ms"].null_count() == 0


def test_a_figure_nobody_declared_is_refused():
    with pytest.raises(ValueError, match="undeclared ttft_p42_ms"):
        columns.frame([{"cell_id": "c", "ttft_p42_ms": 1.0}], columns.IDENTITY[:1] + columns.SUMMARY_FIGURES, "x")


def _documented(section: str) -> set[str]:
    """The column names in the first cell of each row of a docs/outputs.md section's table."""
    text = (ROOT / "docs" / "outputs.md").read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in body.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([a-z0-9_]+)`", line.split(" | ")[0]))
    return names


@pytest.mark.parametrize("section,cols", [("summary.parquet", columns.SUMMARY), ("poa.parquet", columns.POA)])
def test_docs_describe_each_declared_column_and_no_other(section, cols):
    declared = set(columns.schema(cols))
    documented = _documented(section)
    bare = {c.name for c in cols}  # an interval's _lo and _hi are described once, for the table
    assert bare - documented == set(), f"declared, not in docs/outputs.md's {section}"
    assert documented - declared == set(), f"in docs/outputs.md's {section}, not declared"
