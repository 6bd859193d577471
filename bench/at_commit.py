"""Run a benchmark script against the poa-mc of another commit, for before/after figures.

    python bench/at_commit.py COMMIT bench/bench_engine.py --serial --repeat 7

Exports COMMIT's tree into a temporary folder laid out as the installed package (poa_mc with its
kernels, cli and data subpackages; a commit from before the layers kept those three beside
poa_mc/, and setup.py mapped them in), puts it first on the import path with
the editable install of this checkout out of the way, and runs the script of this checkout, so
that one script measures both sides the same way.
"""

from __future__ import annotations

import io
import os
import runpy
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path


def export(commit: str, dest: Path) -> Path:
    """COMMIT's tree under dest/tree and the package layout under dest/pkg; returns dest/pkg."""
    repo = Path(__file__).resolve().parents[1]
    data = subprocess.run(["git", "-C", str(repo), "archive", commit], check=True, capture_output=True).stdout
    tree = dest / "tree"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tree, filter="data")
    pkg = dest / "pkg" / "poa_mc"
    pkg.parent.mkdir(parents=True)
    (tree / "poa_mc").rename(pkg)
    for sub in ("kernels", "cli", "data"):  # a commit before the layers kept these beside poa_mc/
        if (tree / sub).is_dir():
            (tree / sub).rename(pkg / sub)
    return pkg.parent


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    commit, script, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    with tempfile.TemporaryDirectory() as tmp:
        root = export(commit, Path(tmp))
        # the editable install's finder would import this checkout instead
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
        sys.path.insert(0, str(root))
        # and processes the script starts (the figure workers) import the same commit
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        sys.argv = [script, *args]
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
