"""The CUDA kernels compiled for a GPU architecture on a machine without a GPU: NVVM's PTX, then
ptxas's account of what each kernel needs (registers, stack frame, spills) and the occupancy that
allows.

numba-cuda ships NVVM and, through the CUDA wheels of `poa-mc[gpu]`, ptxas: both run without a
GPU or driver. A typing or lowering failure that only the real CUDA compiler sees, and register
pressure that spills the event loop's state to local memory, show up here and in the tests
(tests/test_ptx.py), not first on a borrowed device.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from poa_mc.engine import memory, packing
from poa_mc.kernels import layout as L
from poa_mc.model.spec import CellSpec
from poa_mc.stats import sketch

ARCHS = {"sm_90": (9, 0), "sm_100": (10, 0)}  # H100/H200, B200
THREADS_PER_BLOCK = 64  # poa_mc/kernels/cuda.THREADS_PER_BLOCK, without importing numba-cuda to read it
# an SM of sm_90 or sm_100: its register file, warps and blocks; registers are given to a warp in
# units of 256 (the CUDA occupancy calculator's allocation granularity for these architectures)
_SM_REGISTERS = 65536
_SM_WARPS = 64
_SM_BLOCKS = 32
_REG_UNIT = 256
_SUB_PARTITIONS = 4


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel on one architecture."""

    kernel: str
    arch: str
    registers: int
    stack_bytes: int  # the kernel's own stack frame (local memory per thread)
    spill_stores: int  # bytes, in the kernel and the functions it calls
    spill_loads: int
    cumulative_stack_bytes: int  # with the frames of the functions it calls
    ptx_bytes: int

    def occupancy(self, threads_per_block: int = THREADS_PER_BLOCK) -> float:
        """Resident warps per SM over the most it can hold, as registers allow: each of the SM's
        four sub-partitions holds the warps its quarter of the register file fits (as the CUDA
        occupancy calculator counts them)."""
        warps = -(-threads_per_block // 32)
        per_warp = -(-self.registers * 32 // _REG_UNIT) * _REG_UNIT
        by_registers = (_SM_REGISTERS // _SUB_PARTITIONS // per_warp) * _SUB_PARTITIONS
        blocks = min(_SM_BLOCKS, by_registers // warps, _SM_WARPS // warps)
        return blocks * warps / _SM_WARPS

    def row(self) -> dict:
        return {**asdict(self), "occupancy_64": self.occupancy()}


def ptxas() -> str | None:
    """The ptxas of the nvidia-cuda-nvcc wheel (the toolkit NVVM's PTX comes from: an older ptxas
    refuses a newer PTX version or sm_100), else one on PATH; None when neither is there."""
    try:
        import nvidia.cuda_nvcc as nvcc
    except ImportError:
        return shutil.which("ptxas")
    for root in nvcc.__path__:
        path = Path(root) / "bin" / "ptxas"
        if path.is_file():
            return str(path)
    return shutil.which("ptxas")


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(
    r"Function properties for (\S+)\s*\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED = re.compile(r"Used (\d+) registers([^\n]*)")
_CUMULATIVE = re.compile(r"(\d+) bytes cumulative stack size")


def parse_ptxas(text: str) -> dict[str, dict[str, int]]:
    """ptxas -v's report -> {entry function: registers, stack frame, spills (its own and its
    callees'), cumulative stack}. Callees' spills count toward every entry (a module here has one)."""
    props = {m.group(1): tuple(int(m.group(k)) for k in (2, 3, 4)) for m in _PROPS.finditer(text)}
    names = [m.group(1) for m in _ENTRY.finditer(text)]
    callees = [v for k, v in props.items() if k not in names]
    entries = {}
    for m in _ENTRY.finditer(text):
        name = m.group(1)
        used = _USED.search(text, m.end())
        if used is None or name not in props:
            raise ValueError(f"ptxas printed no resources for entry {name[:60]}")
        stack, stores, loads = props[name]
        entries[name] = {
            "registers": int(used.group(1)),
            "stack_bytes": stack,
            "spill_stores": stores + sum(c[1] for c in callees),
            "spill_loads": loads + sum(c[2] for c in callees),
            "cumulative_stack_bytes": int(cum.group(1)) if (cum := _CUMULATIVE.search(used.group(2))) else stack,
        }
    return entries


def assemble(ptx: str, arch: str, max_registers: int | None = None) -> dict[str, int]:
    """Assemble `ptx` for `arch` (e.g. "sm_90") with ptxas -v, registers capped at `max_registers`
    if given; the one entry's resources. Raises RuntimeError with ptxas's message when it fails."""
    exe = ptxas()
    if exe is None:
        raise RuntimeError("ptxas not found: pip install 'poa-mc[gpu]' (the nvidia-cuda-nvcc wheel brings it)")
    with tempfile.TemporaryDirectory(prefix="poa-mc-ptx-") as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        done = subprocess.run(
            [exe, f"-arch={arch}", "-v", *([f"-maxrregcount={max_registers}"] if max_registers else []), str(src)]
            + ["-o", str(Path(tmp) / "kernel.cubin")],
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if "error" in line.lower()] or done.stderr.splitlines()
        raise RuntimeError(f"ptxas -arch={arch} failed: " + " | ".join(said[:5]))
    entries = parse_ptxas(done.stderr + done.stdout)
    if len(entries) != 1:
        raise RuntimeError(f"expected one entry function in the PTX, ptxas reported {len(entries)}")
    return next(iter(entries.values()))


def launch_types(spec: CellSpec, *, requests: int = 64, record: bool = True, tally: bool = True) -> dict:
    """The argument types the CUDA kernels get when the engine runs `spec` (with the kernels'
    tallies, as `poa-mc run` does, or without)."""
    from poa_mc.kernels import cuda as target  # numba-cuda: only where PTX is asked for

    ip, fp, tabs = packing.pack_params(spec, requests=requests, warmup=0, seed=0, stream=0, record_candidates=record)
    ip[L.P_TALLY] = 1 if tally else 0
    shapes = memory.kernel_shapes(ip, fp, requests, record)
    return target.argument_types(ip, fp, tabs, sketch.EDGES, shapes)


def compile_kernels(
    spec: CellSpec, archs: tuple[str, ...] = tuple(ARCHS), max_registers: tuple[int | None, ...] = (None,)
) -> list[Resources]:
    """Both CUDA kernels ("run", "poa") as the engine launches them for `spec`, compiled to PTX and
    assembled for each of `archs` (and each register cap in `max_registers`, None: ptxas's own
    choice). Each architecture's ptxas runs while NVVM compiles the next."""
    from poa_mc.kernels import cuda as target

    types = launch_types(spec)
    jobs = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for kernel in ("run", "poa"):
            for arch in archs:
                ptx = target.kernel_ptx(kernel, types[kernel], ARCHS[arch])
                for cap in max_registers:
                    name = kernel if cap is None else f"{kernel} (max {cap} registers)"
                    jobs.append((name, arch, len(ptx), pool.submit(assemble, ptx, arch, cap)))
        return [Resources(kernel=k, arch=a, ptx_bytes=n, **job.result()) for k, a, n, job in jobs]
