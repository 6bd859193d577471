"""Where compiled kernels are cached on disk, keyed by the kernel sources themselves.

Numba revalidates a cached function by its own file's timestamp only. Our drivers inline or link
functions from every module of poa_mc/kernels/, so after an edit to, say, decode.py a cached driver in
cpu.py would be loaded stale and silently run the old code. Caching under a directory named by
a hash of every kernel source makes any change of any kernel file a fresh cache.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from numba.core import config


def sources_hash() -> str:
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _base_dir() -> Path:
    if config.CACHE_DIR:
        return Path(config.CACHE_DIR)
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "poa-mc" / "numba"


@contextmanager
def keyed_cache_dir(target: str) -> Iterator[Path]:
    """Decorate kernels inside this block: their caches go to BASE/<target>-<sources hash>."""
    path = _base_dir() / f"{target}-{sources_hash()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        path = Path(tempfile.gettempdir()) / "poa-mc-numba" / f"{target}-{sources_hash()}"
        path.mkdir(parents=True, exist_ok=True)
    old = config.CACHE_DIR
    config.CACHE_DIR = str(path)
    try:
        yield path
    finally:
        config.CACHE_DIR = old


def is_warm(target: str) -> bool:
    """True when this target's kernels for the current sources are already in the on-disk cache."""
    path = _base_dir() / f"{target}-{sources_hash()}"
    return path.is_dir() and any(path.rglob("*.nbi"))
