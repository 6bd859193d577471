"""Where the reference cell's time goes, by kernel function: a copy of poa_mc/kernels/ with the per-event
inlining off (so that every function is its own symbol) runs the cell of bench_engine.py on one
thread, writes /tmp/perf-<pid>.map naming every compiled function, and profiles itself with
`perf record`; prints each function's and each module's share of the samples.

    python bench/profile_functions.py [--seconds 25] [--inlined]      (needs Linux perf)

--inlined keeps the per-event inlining: the shares are then those of the functions the engine
really calls out of line (the event loop holding everything inlined into it).

The copy compiles into a temporary cache (about 2 minutes): a function's symbols are only known
from a library compiled in this process, not from one loaded from the cache.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
INLINE = '_JIT_INLINE = numba.njit(cache=True, nogil=True, _nrt=False, inline="always")'


def load_kernels_without_inlining(tmp: Path, inlined: bool = False) -> object:
    """poa_mc/kernels/ copied into tmp with _JIT_INLINE = _JIT (unless `inlined`), imported as poa_mc.kernels."""
    src = tmp / "kernels"
    shutil.copytree(HERE.parent / "poa_mc" / "kernels", src, ignore=shutil.ignore_patterns("__pycache__"))
    cpu = src / "cpu.py"
    text = cpu.read_text()
    if INLINE not in text:
        sys.exit("poa_mc/kernels/cpu.py no longer defines _JIT_INLINE as this script expects")
    if not inlined:
        cpu.write_text(text.replace(INLINE, "_JIT_INLINE = _JIT"))
    os.environ["NUMBA_CACHE_DIR"] = str(tmp / "numba")
    spec = importlib.util.spec_from_file_location(
        "poa_mc.kernels", src / "__init__.py", submodule_search_locations=[str(src)]
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["poa_mc.kernels"] = mod
    spec.loader.exec_module(mod)
    import poa_mc.kernels.cpu as cpu_mod

    return cpu_mod


def write_perf_map(cpu_mod) -> int:
    syms, seen = [], set()
    for name in dir(cpu_mod):
        disp = getattr(cpu_mod, name)
        for cres in getattr(disp, "overloads", {}).values():
            lib = cres.library
            if id(lib) in seen:
                continue
            seen.add(id(lib))
            for fn in lib._final_module.functions:
                if not fn.is_declaration:
                    addr = lib.get_pointer_to_function(fn.name)
                    if addr:
                        syms.append((addr, fn.name))
    syms.sort()
    with open(f"/tmp/perf-{os.getpid()}.map", "w") as f:
        for (a, n), (b, _) in zip(syms, syms[1:] + [(syms[-1][0] + 65536, "")]):
            f.write(f"{a:x} {min(b - a, 1 << 20):x} {n}\n")
    return len(syms)


def shares(perf_data: Path) -> tuple[collections.Counter, collections.Counter]:
    out = subprocess.run(
        ["perf", "report", "-i", str(perf_data), "--sort", "sym", "--stdio"], capture_output=True, text=True
    ).stdout
    by_fn, by_mod = collections.Counter(), collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[(.)\]\s+(\S+)", line)
        if not m:
            continue
        pct, kind, sym = float(m.group(1)), m.group(2), m.group(3)
        k = re.search(r"kernels(\d+)(\w+?)5build12_3clocals_3e(\d+)(\w+)", sym)
        if k:
            mod, fn = k.group(2)[: int(k.group(1))], k.group(4)[: int(k.group(3))].replace("_lean", "")
            by_fn[f"{mod}.{fn}"] += pct
            by_mod[mod] += pct
        else:
            by_mod["the operating system" if kind == "k" else f"other ({sym[:40]})"] += pct
    return by_fn, by_mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument(
        "--inlined", action="store_true", help="profile the build as it runs: what is inlined counts as its caller"
    )
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="poa-prof-"))
    cpu_mod = load_kernels_without_inlining(tmp, a.inlined)
    sys.path.insert(0, str(HERE))
    from bench_engine import reference_cell

    from poa_mc.engine.engine import simulate

    kw = dict(replicas=64, requests=2000, warmup=200, seed=1, stream=0, parallel=False)
    simulate(reference_cell(), **kw)  # compiles
    print(f"{write_perf_map(cpu_mod)} compiled functions mapped", file=sys.stderr)
    stop = threading.Event()

    done = []

    def work() -> None:
        while not stop.is_set():
            res = simulate(reference_cell(), **kw)
            done.append((res.simulated_requests, res.wall_s))

    th = threading.Thread(target=work, daemon=True)
    th.start()
    data = tmp / "perf.data"
    subprocess.run(["perf", "record", "-q", "-F", "2999", "-p", str(os.getpid()), "-o", str(data), "--",
                    "sleep", str(a.seconds)], check=True)  # fmt: skip
    stop.set()
    th.join()
    by_fn, by_mod = shares(data)
    n, wall = sum(d[0] for d in done), sum(d[1] for d in done)
    # a function's time per request is its share times the mean time per request
    print(f"{n / wall / 1e6:.3f} M simulated req/s while profiled ({1e9 * wall / n:.0f} ns a request)")
    for title, table in (("module", by_mod), ("function", by_fn)):
        print(f"\nshare of samples by {title}")
        for k, v in table.most_common(25):
            print(f"{v:6.2f}%  {k}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
