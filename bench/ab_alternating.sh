#!/usr/bin/env bash
# A/B of the engine's speed on all cores (the default of `poa-mc run`): an older commit and this
# checkout run bench/ab_once.py --parallel one after the other, alternating which goes first each
# round, so that both see the VM's drift alike (they cannot run at once: each takes every core).
#
#   bash bench/ab_alternating.sh COMMIT [ROUNDS [ab_once.py options]]   (ROUNDS: 8; the first
#                                          round compiles the older commit's kernels)
set -euo pipefail
commit=$1; rounds=${2:-8}; shift $(($# < 2 ? $# : 2)); extra=("$@")
here=$(cd "$(dirname "$0")/.." && pwd)
old=$(mktemp -d)
python3 -c "import sys; sys.path.insert(0, '$here/bench'); from at_commit import export; from pathlib import Path; export('$commit', Path('$old'))"
run_old() { (cd "$old" && PYTHONPATH="$old/pkg" NUMBA_CACHE_DIR="$old/numba" python3 "$here/bench/ab_once.py" --parallel ${extra[@]+"${extra[@]}"} | sed "s/^/$commit all /"); }
run_new() { (cd "$here" && python3 "$here/bench/ab_once.py" --parallel ${extra[@]+"${extra[@]}"} | sed "s/^/this all /"); }
for i in $(seq 1 "$rounds"); do
  if [ $((i % 2)) = 1 ]; then run_old; run_new; else run_new; run_old; fi
done
rm -rf "$old"
