#!/usr/bin/env bash
# A shorter device check for a nearly spent lease: equality on fewer replicas, then the reference
# workload at 65,536 replicas only. Usage: bash bench/gpu_quick.sh LOGDIR
set -u
LOG_DIR=${1:-/tmp/gpu_quick}
mkdir -p "$LOG_DIR"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$LOG_DIR/gpu_quick.log") 2>&1
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD:${PYTHONPATH:-}  # the tree holds the whole package (poa_mc/)
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== equality CPU vs CUDA"
timeout 120 python3 bench/gpu_equality.py 512 200; EQ=$?
echo "== benchmark"
(cd bench && timeout 150 python3 gpu_bench.py --requests 2000 --sizes 65536 --topologies 1P/5D,1P/2D --loads 64,512 --max-s 60)
echo "equality exit=$EQ"
