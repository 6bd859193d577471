#!/usr/bin/env bash
# One prepared GPU check (issue: CUDA backend). Usage: bash bench/gpu_check.sh LOGDIR
#  1. versions; 2. CPU-vs-CUDA equality on the device; 3. reference-workload benchmark;
#  4. the quickstart grid with --backend cuda. Full log in LOGDIR/gpu_check.log, short table last.
set -u
LOG_DIR=${1:-/tmp/gpu_check}
mkdir -p "$LOG_DIR"
LOG="$LOG_DIR/gpu_check.log"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$LOG") 2>&1
cd "$(dirname "$0")/.."
if [ -d .whl ]; then  # packages the device image lacks (polars), carried as wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
if ! python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1; then
  # no editable install there: lay the package out by hand (kernels/, cli/, data/ live inside poa_mc)
  rm -rf /tmp/shim && mkdir -p /tmp/shim && cp -r poa_mc /tmp/shim/ && cp -r kernels /tmp/shim/poa_mc/kernels \
    && cp -r cli /tmp/shim/poa_mc/cli && cp -r data /tmp/shim/poa_mc/data && export PYTHONPATH=/tmp/shim:${PYTHONPATH:-}
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
echo "== 1. equality CPU vs CUDA"
timeout 200 python3 bench/gpu_equality.py 1024 300; EQ=$?
echo "== 2. benchmark"
(cd bench && timeout 240 python3 gpu_bench.py --requests 2000 --max-s 12) | tee "$LOG_DIR/bench_table.txt"
echo "== 2b. threads per block, 1P/5D C=64, 65536 replicas"
for tpb in 32 128; do
  (cd bench && POA_MC_CUDA_TPB=$tpb timeout 60 python3 gpu_bench.py --requests 2000 --sizes 65536 --topologies 1P/5D --loads 64 \
    | grep replicas= | sed "s/^/tpb=$tpb /")
done
echo "== 3. quickstart on cuda"
(cd /tmp && timeout 150 python3 -m poa_mc.cli.main run --backend cuda --out "$LOG_DIR/quickstart" --quiet); QS=$?
python3 -c "import json,sys; m=json.load(open('$LOG_DIR/quickstart/manifest.json')); print('backend', m.get('backend'), m.get('device'))" || true
echo "== summary"; echo "equality exit=$EQ quickstart exit=$QS"; tail -12 "$LOG_DIR/bench_table.txt"
