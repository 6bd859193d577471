"""The package's version: in a run's manifest and fingerprint (a new version is a new engine);
and the engine's sources' hash, which tells two engines of one version apart (an edited checkout)."""

import hashlib
from pathlib import Path

__version__ = "0.3.0"

# what a cell's results are made by: the kernels, and the engine that packs their parameters and
# reads their arrays (the grid file's meaning is fixed by the resolved grid in the manifest)
_ENGINE_DIRS = ("kernels", "engine")


def engine_source() -> str:
    """A hash of the engine's source files (poa_mc/kernels, poa_mc/engine): recorded with each
    cell, so that a run resumed by an engine edited since refuses to mix the two (--resume)."""
    root = Path(__file__).parent
    h = hashlib.sha256()
    for d in _ENGINE_DIRS:
        for path in sorted((root / d).glob("*.py")):
            h.update(f"{d}/{path.name}".encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]
