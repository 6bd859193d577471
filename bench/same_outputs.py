"""Are a run's outputs unchanged? Runs built-in grids with `poa-mc run` in this process and,
with --compare, checks every Parquet file they wrote (summary, poa, the games' tables, each
cell's accumulator rows) against another commit's, frame by frame:

    python bench/at_commit.py COMMIT bench/same_outputs.py /tmp/before
    python bench/same_outputs.py /tmp/after --compare /tmp/before

For changes after the kernels (the reduction, the accumulators, the store): bench/same_results.py
checks the simulation itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path

GRIDS = ("quickstart", "paper-70b-1p5d", "agentic-tiers", "pd-planner", "cache-game", "pd-game")


def run(out: Path, grids: list[str]) -> None:
    from poa_mc.cli.main import main

    for g in grids:
        try:
            main(["run", "--grid", g, "--out", str(out / g), "--quiet"], prog_name="poa-mc", standalone_mode=False)
        except SystemExit as e:  # click's exit after a command
            if e.code:
                raise


def _read(path: Path):
    """A Parquet file; in cells.parquet, a built-in trace's path from the package's data folder on
    (bench/at_commit.py runs the other commit from a temporary copy of the package)."""
    import polars as pl

    df = pl.read_parquet(path)
    if path.name == "cells.parquet":
        df = df.with_columns(pl.col("spec_json").str.replace_all(r'"path": "[^"]*/data/', '"path": "<package>/data/'))
    return df


def compare(after: Path, before: Path) -> int:
    """Every Parquet file of the grids run in `after`, against `before`'s, on the columns both have;
    columns one side lacks are listed (an added output column is not a changed figure)."""
    grids = {p.name for p in after.iterdir() if p.is_dir()}
    files = sorted(
        p.relative_to(before)
        for p in before.rglob("*.parquet")
        if "samples" not in p.parts and p.relative_to(before).parts[0] in grids
    )
    differ, added, removed, filled = [], set(), set(), set()
    for f in files:
        if not (after / f).exists():
            differ.append(f)
            continue
        a, b = _read(after / f), _read(before / f)
        added |= set(a.columns) - set(b.columns)
        filled |= {c for c in set(a.columns) - set(b.columns) if a[c].null_count() < a.height}
        removed |= set(b.columns) - set(a.columns)
        common = [c for c in b.columns if c in a.columns]
        if not a.select(common).equals(b.select(common)):
            differ.append(f)
    for f in differ[:20]:
        print(f"differs: {f}")
    if added or removed:
        print(f"columns added: {sorted(added)}; removed: {sorted(removed)}")
        print(f"of the added columns, those with values (the rest are null in every row): {sorted(filled)}")
    print(f"{len(differ)} of {len(files)} Parquet files differ (on the columns both have)")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--grids", nargs="+", default=list(GRIDS))
    ap.add_argument("--compare", type=Path, default=None, help="another commit's output folder")
    a = ap.parse_args()
    run(a.out, a.grids)
    return compare(a.out, a.compare) if a.compare else 0


if __name__ == "__main__":
    raise SystemExit(main())
