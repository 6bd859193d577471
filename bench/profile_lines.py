"""Where the build users run spends its time, line by line.

    python bench/profile_lines.py [--seconds 20] [--top 40] [--grid GRID --cell INDEX]

bench/profile_functions.py compiles every per-event function out of line so that a sampling
profiler can name it, which is not the build users run. This script profiles the release build:
it compiles the lean kernels with DWARF line tables only (numba's full debug info adds bounds
checks and keeps variables in stack slots, which ran the engine 40% slower; line tables leave
the code as it is), in a cache directory of its own, runs the reference cell of bench_engine.py
on one thread under `perf record`, and maps each sample in the replica loop's object code (the
event loop and every function it calls are linked into it) back to a source line through the
object's line table. Numba names one file per compiled function, so the lines of code it inlined
from another module would carry the caller's file name: the profiling build writes each line
number as file index x FILE_STRIDE + line. Needs `perf` and `readelf`; the first run compiles
the profiling build (about two minutes) in a run of its own.

Prints, in % of the samples in the replica loop's code:
- self time by source line (line 0: instructions with no line, such as spills and moves),
- self time by the kernel function whose body holds that line,
and the samples outside it (the host's allocation and page faults, Python), in % of all samples.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import glob
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("POA_MC_PROFILE_CACHE", Path(tempfile.gettempdir()) / "poa-mc-profile-lines"))


def _object_code(nbc: Path) -> bytes:
    """The ELF object numba cached in a .nbc file (a pickled bytes object right after the name)."""
    data = nbc.read_bytes()
    i = data.find(b"\x7fELF")
    (n,) = struct.unpack("<I", data[i - 4 : i])
    return data[i : i + n]


def _functions() -> dict[str, list[tuple[int, int, str]]]:
    """Per kernel file, the (first line, last line, name) of every function defined in it."""
    import ast

    out = {}
    for name in KERNEL_FILES:
        tree = ast.parse((KERNEL_DIR / name).read_text())
        defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        out[name] = sorted(((d.lineno, d.end_lineno, d.name) for d in defs), key=lambda x: x[1] - x[0])
    return out


def _function_at(defs: dict, where: str) -> str:
    """The innermost kernel function whose body holds `file:line`."""
    name, _, line = where.rpartition(":")
    if line.isdigit():
        for lo, hi, fn in defs.get(name, ()):
            if lo <= int(line) <= hi:
                return f"{name.removesuffix('.py')}.{fn}"
    return where


def _code_size(obj: Path) -> int:
    """Bytes of executable code in the object (numba's large code model puts it in .ltext)."""
    out = subprocess.run(["readelf", "-S", "-W", str(obj)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.replace("[ ", "[").split()
        if len(f) > 6 and f[1] in (".ltext", ".text") and int(f[5], 16) > 0:
            return int(f[5], 16)
    raise SystemExit(f"no code section in {obj}")


def _lines(obj: Path, offsets: list[int]) -> dict[int, str]:
    """offset -> "file:line", from the object's line table."""
    out = subprocess.run(
        ["readelf", "--debug-dump=decodedline", str(obj)], capture_output=True, text=True, check=True
    ).stdout
    rows = []  # (address, "file:line"), None where a sequence ends
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 3 and (f[2].startswith("0x") or f[2] == "0") and (f[1] == "-" or f[1].isdigit()):
            rows.append((int(f[2], 16), None if f[1] == "-" else _short_path(f"{f[0]}:{f[1]}")))
    rows.sort(key=lambda r: r[0])
    starts = [r[0] for r in rows]
    found = {}
    for off in set(offsets):
        k = bisect.bisect_right(starts, off) - 1
        found[off] = (rows[k][1] if k >= 0 else None) or "?"
    return found


def _short_path(where: str) -> str:
    p, _, line = where.rpartition(":")
    if not line.isdigit():
        return where
    idx, n = divmod(int(line), FILE_STRIDE)
    name = KERNEL_FILES[idx - 1] if idx else Path(p).name
    return f"{name}:{n}"


KERNEL_DIR = HERE.parent / "poa_mc" / "kernels"  # the profiled package's (another commit's, under bench/at_commit.py)
KERNEL_FILES: list[str] = []


def _set_kernels(path: Path) -> None:
    global KERNEL_DIR, KERNEL_FILES
    KERNEL_DIR = path
    KERNEL_FILES = sorted(p.name for p in path.glob("*.py"))


FILE_STRIDE = 100_000  # a debug line number is file index x FILE_STRIDE + line


def _tag_lines_with_files() -> None:
    """numba's debug info names one file per compiled function, so code that numba inlined from
    another module carries its own line numbers under the caller's file name. For this profile,
    every line number carries its file too: index in KERNEL_FILES x FILE_STRIDE + line."""
    from numba.core import cpu, lowering

    finalize = cpu.CPUTargetOptions.finalize

    def release_codegen(self, flags, options):
        # line tables only: numba's full debug info turns bounds checks on, keeps every variable
        # alive to its function's end and in a stack slot (the engine ran 40% slower): off, so
        # that what is profiled is the release code
        flags.boundscheck = False
        flags.dbg_extend_lifetimes = False
        flags.dbg_directives_only = True
        finalize(self, flags, options)

    cpu.CPUTargetOptions.finalize = release_codegen
    original = lowering.Lower.lower_inst

    def lower_inst(self, inst):
        mark = self.debuginfo.mark_location
        name = os.path.basename(self.loc.filename or "")
        idx = KERNEL_FILES.index(name) + 1 if name in KERNEL_FILES else 0

        def tagged(builder, line):
            mark(builder, idx * FILE_STRIDE + line)

        self.debuginfo.mark_location = tagged
        try:
            return original(self, inst)
        finally:
            del self.debuginfo.mark_location

    lowering.Lower.lower_inst = lower_inst


def _cell(grid: str | None, index: int) -> tuple:
    """(spec, simulate's sizes): the reference cell of bench_engine.py, or cell `index` of a grid
    (a file or a built-in name) at its [run] sizes."""
    if grid is None:
        from bench_engine import reference_cell

        return reference_cell(), dict(replicas=64, requests=2000, warmup=200, seed=1, stream=0)
    from poa_mc.cli.common import load_grid_arg

    g = load_grid_arg(grid)
    cell = g.cells()[index]
    r = g.run
    return cell.spec, dict(replicas=r.replicas, requests=r.requests, warmup=r.warmup, seed=r.seed, stream=cell.stream)


def child(seconds: float, grid: str | None, index: int) -> None:
    """The profiled process: load the kernels, print the event loop's address, run the cell."""
    sys.path.insert(0, str(HERE))
    from poa_mc.engine.engine import simulate
    from poa_mc.kernels import cpu  # compiles nothing yet

    spec, sizes = _cell(grid, index)
    _set_kernels(Path(cpu.__file__).parent)
    _tag_lines_with_files()
    simulate(spec, replicas=1, requests=10, warmup=0, seed=1, stream=0, parallel=False)
    loop = getattr(cpu, "_run_lean", None) or cpu._run_replicas  # older commits: one build
    (cres,) = loop.overloads.values()
    ptr = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    kernels = Path(cpu.__file__).parent
    where = loop._cache._cache_path  # this build's cache folder (older sources' may sit beside it)
    print(f"ADDR {ptr} {cres.fndesc.llvm_func_name} {kernels} {loop.__name__} {where}", flush=True)
    sys.stdin.readline()  # the parent starts perf, then lets us go
    t0 = time.time()
    n = 0
    while time.time() - t0 < seconds:
        res = simulate(spec, **sizes, parallel=False)
        n += res.simulated_requests
    print(f"RATE {n / (time.time() - t0) / 1e6:.3f}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--grid", help="profile a cell of this grid (a file or a built-in name) instead")
    ap.add_argument("--cell", type=int, default=0, help="which cell of --grid (its index in grid order)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.seconds, args.grid, args.cell)
        return 0
    env = dict(os.environ, NUMBA_DEBUGINFO="1", NUMBA_CACHE_DIR=str(CACHE), NUMBA_NUM_THREADS="1")
    where_from = ["--grid", args.grid, "--cell", str(args.cell)] if args.grid else []
    child_cmd = [sys.executable, __file__, "--child", *where_from, "--seconds"]
    # a process that compiles runs its own copy of the event loop, not the one the cache holds:
    # compile (or find the cache) in a process of its own, then profile one that loads the cache.
    # Always: the cache folder may hold another source's build only (poa_mc/kernels/*.py changed)
    print("compiling the profiling build if its cache lacks it (about two minutes)", file=sys.stderr)
    subprocess.run([*child_cmd, "0"], input="go\n", text=True, env=env, check=True, stdout=subprocess.DEVNULL)
    proc = subprocess.Popen(
        [*child_cmd, str(args.seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stdout.readline()
    if not line.startswith("ADDR"):
        print(line, proc.stdout.read())
        return 1
    _, addr, name, kernels, loop, where = line.split()
    base = int(addr)
    _set_kernels(Path(kernels))
    work = Path(tempfile.mkdtemp())
    data = work / "perf.data"
    perf = subprocess.Popen(
        ["perf", "record", "-F", "4000", "-p", str(proc.pid), "-o", str(data)], stderr=subprocess.DEVNULL
    )
    time.sleep(1.0)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    rate = proc.stdout.readline().split()[1]
    proc.wait()
    perf.wait()
    rows = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "ip,sym,dso"], capture_output=True, text=True
    ).stdout.splitlines()
    (nbc,) = glob.glob(str(Path(where) / f"cpu.{loop}-*.nbc"))
    obj = work / "loop.o"
    obj.write_bytes(_object_code(Path(nbc)))
    syms = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout.split("\n")
    start = next(int(s.split()[0], 16) for s in syms if s.endswith(name))
    size = _code_size(obj)
    offsets, elsewhere = [], collections.Counter()
    for row in rows:
        ip, _, where = row.strip().partition(" ")
        off = int(ip, 16) - base + start
        if 0 <= off < size:
            offsets.append(off)
        else:
            sym, _, dso = where.rpartition(" ")
            elsewhere[f"{Path(dso.strip('()')).name}: {sym if not sym.startswith('[unknown]') else '?'}"] += 1
    other = sum(elsewhere.values())
    where = _lines(obj, offsets)
    total = len(offsets)
    defs = _functions()
    by_line, by_fn = collections.Counter(), collections.Counter()
    for off in offsets:
        fn = _function_at(defs, where[off])
        by_line[f"{where[off]} ({fn})"] += 1
        by_fn[fn] += 1
    print(f"{total} samples in the replica loop's code, {other} elsewhere")
    print(f"rate while profiled: {rate} M req/s (one thread, host work included)\n")
    for title, counter in (("self, by source line", by_line), ("self, by kernel function", by_fn)):
        print(f"{title}:")
        for key, n in counter.most_common(args.top):
            print(f"  {100 * n / total:5.1f}%  {key}")
        print()
    print("elsewhere, in % of all samples:")
    for key, n in elsewhere.most_common(args.top // 2):
        print(f"  {100 * n / (total + other):5.1f}%  {key[:110]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
