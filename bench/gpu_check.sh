#!/usr/bin/env bash
# One prepared GPU check (issue: CUDA backend). Usage: bash bench/gpu_check.sh LOGDIR
#  1. versions; 2. CPU-vs-CUDA equality on the device (the documented cases, then every kernel path
#     and each built-in grid's smallest cell); 3. reference-workload benchmark;
#  4. the quickstart grid and a paper preset (paper-70b-1p2d, 8 replicas) with --backend cuda;
#  5. LOGDIR/gpu_results.json (also bench/gpu_results.json): date, device, commit, kernel_rps and
#     wall_rps at the reference point (1P/5D, C = 64), equal_to_cpu.
# GPU_CHECK_VARIANTS=1 also times the kernel built without forced inlining and with registers capped
# at 168 and 128 (each compiles anew, about 2 minutes more each).
# Full log in LOGDIR/gpu_check.log, short table last. On the device tool, where the tree has no .git:
#   POA_MC_COMMIT=<sha of HEAD here> bash bench/gpu_check.sh "$OUT"
set -u
LOG_DIR=${1:-/tmp/gpu_check}
mkdir -p "$LOG_DIR" && LOG_DIR=$(cd "$LOG_DIR" && pwd)  # absolute: the script changes folders
LOG="$LOG_DIR/gpu_check.log"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$LOG") 2>&1
cd "$(dirname "$0")/.."
if [ -d .whl ]; then  # packages the device image lacks (polars), carried as wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
if ! python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1; then
  export PYTHONPATH=$PWD:${PYTHONPATH:-}  # no editable install there: the tree holds the whole package
fi
echo "== versions"; date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 - <<'PY'
import sys, numba, numpy
print("python", sys.version.split()[0], "numba", numba.__version__, "numpy", numpy.__version__)
for m in ("numba_cuda", "cupy", "polars", "click", "matplotlib", "scipy"):
    try:
        mod = __import__(m); print(m, getattr(mod, "__version__", "?"))
    except Exception as e:
        print(m, "MISSING", e)
from numba import cuda; print("device:", cuda.get_current_device().name)
PY
# the device's memory in use, sampled every 250 ms for the whole check: its peak is reported last
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > "$LOG_DIR/memory_mib.txt" 2>/dev/null &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT
echo "== 1. equality CPU vs CUDA"
timeout 200 python3 bench/gpu_equality.py 1024 300; EQ=$?
echo "== 1b. equality on every kernel path and each built-in grid's smallest cell"
timeout 240 python3 bench/gpu_equality.py 64 200 --wide; EQW=$?
echo "== 2. benchmark"
(cd bench && timeout 240 python3 gpu_bench.py --requests 2000 --max-s 12 --json "$LOG_DIR/ref_point.json") \
  | tee "$LOG_DIR/bench_table.txt"
echo "== 2b. threads per block, 1P/5D C=64, 65536 replicas"
for tpb in 32 128; do
  (cd bench && POA_MC_CUDA_TPB=$tpb timeout 60 python3 gpu_bench.py --requests 2000 --sizes 65536 --topologies 1P/5D --loads 64 \
    | grep replicas= | sed "s/^/tpb=$tpb /")
done
if [ "${GPU_CHECK_VARIANTS:-0}" = 1 ]; then  # each variant compiles the kernels anew: about 2 min each
  echo "== 2c. kernel variants, 1P/5D C=64, 65536 replicas (inlining, register caps: docs/backends.md)"
  for v in POA_MC_CUDA_INLINE=0 POA_MC_CUDA_MAXREG=168 POA_MC_CUDA_MAXREG=128; do
    (cd bench && env $v timeout 240 python3 gpu_bench.py --requests 2000 --sizes 65536 --topologies 1P/5D --loads 64 \
      | grep replicas= | sed "s/^/$v /")
  done
fi
echo "== 3. quickstart on cuda"
(cd /tmp && timeout 150 python3 -m poa_mc.cli.main run --backend cuda --out "$LOG_DIR/quickstart" --quiet); QS=$?
python3 -c "import json,sys; m=json.load(open('$LOG_DIR/quickstart/manifest.json')); print('backend', m.get('backend'), m.get('device'))" || true
echo "== 4. a paper preset on cuda"
(cd /tmp && timeout 240 python3 -m poa_mc.cli.main run --grid paper-70b-1p2d --backend cuda --replicas 8 \
  --out "$LOG_DIR/paper" --quiet); PP=$?
kill $SMI 2>/dev/null
PEAK=$(sort -n "$LOG_DIR/memory_mib.txt" 2>/dev/null | tail -1)
echo "== 5. results"
EQ=$EQ EQW=$EQW PEAK=${PEAK:-} LOG_DIR=$LOG_DIR python3 - <<'PY'
import datetime, json, os, subprocess
log = os.environ["LOG_DIR"]
try:
    ref = json.load(open(os.path.join(log, "ref_point.json")))
except (OSError, ValueError):
    ref = {"replicas": None, "kernel_rps": None, "wall_rps": None}
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
except OSError:
    smi = subprocess.CompletedProcess([], 1, "", "")
git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
commit = os.environ.get("POA_MC_COMMIT") or git.stdout.strip() or None  # the device's copy may have no .git
out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "device": smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None,
       "commit": commit, **ref, "equal_to_cpu": os.environ["EQ"] == "0",
       "equal_to_cpu_every_path": os.environ["EQW"] == "0",
       "peak_device_mib": int(os.environ["PEAK"]) if os.environ["PEAK"].isdigit() else None}
for path in (os.path.join(log, "gpu_results.json"), "bench/gpu_results.json"):
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
print(json.dumps(out))
PY
echo "== summary"; echo "equality exit=$EQ every-path exit=$EQW quickstart exit=$QS paper exit=$PP peak MiB=${PEAK:-?}"; tail -12 "$LOG_DIR/bench_table.txt"
