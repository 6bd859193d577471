"""Where a cell's kernels run: the backend `auto`, `cpu` or `cuda` resolves to, whether a CUDA
device can be used, the compiled build a cell runs on (its on-disk cache's name) and the CPU's
thread count.

Apart from the launch because the CLI and the runner choose the backend before any cell runs: this
module imports no numba and no compiled kernels, and asks numba-cuda only where a GPU device file
(or CUDA's simulator) says a device may be there.
"""

from __future__ import annotations

import os
import sys

from poa_mc.model.spec import CellSpec
from poa_mc.model.spec_error import SpecError

# Device files an NVIDIA driver makes (WSL2's GPU: /dev/dxg). On Linux without any of them no CUDA
# device can be opened, and importing numba.cuda to ask took 75-155 ms of every start of a run
# with backend = "auto" (bench/NOTES.md).
_CUDA_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def cuda_available() -> bool:
    """True when a CUDA device can be used (poa_mc.kernels.cuda_available, which asks numba.cuda),
    answered without numba.cuda on a Linux machine with no GPU device file (CUDA's simulator aside)."""
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    if sys.platform.startswith("linux") and not simulator and not any(map(os.path.exists, _CUDA_DEVICE_FILES)):
        return False
    from poa_mc.kernels import cuda_available as probe

    return probe()


def resolve_backend(backend: str) -> str:
    if backend not in ("auto", "cpu", "cuda"):
        raise SpecError("run.backend", f"must be auto, cpu or cuda, got {backend!r}")
    if backend == "auto":
        return "cuda" if cuda_available() else "cpu"
    return backend


def kernel_build(spec: CellSpec, backend: str) -> str:
    """The compiled build a cell runs on (its on-disk cache's name): on the CPU, cells without lower
    KV tiers or a replayed trace run the lean build (poa_mc/kernels/source.py), as kernels.cpu.lean decides
    from the packed parameters."""
    if backend != "cpu":
        return backend
    return "cpu" if spec.cluster.has_tiers() or spec.workload.trace is not None else "cpu-lean"


def default_threads() -> int:
    return int(os.environ.get("NUMBA_NUM_THREADS", os.cpu_count() or 1))
