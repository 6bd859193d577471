#!/usr/bin/env bash
# Paired A/B of the engine's speed: an older commit and this checkout run bench/ab_once.py at the
# same time, each pinned to its own core, swapping cores every round, so that both see the same
# machine (this VM's speed drifts by 10-15% over minutes, more than most changes we measure).
#
#   bash bench/ab_paired.sh COMMIT [ROUNDS [ab_once.py options]]   (2 cores needed; ROUNDS: 6)
set -euo pipefail
commit=$1; rounds=${2:-6}; shift $(($# < 2 ? $# : 2))
here=$(cd "$(dirname "$0")/.." && pwd)
old=$(mktemp -d)
python3 -c "import sys; sys.path.insert(0, '$here/bench'); from at_commit import export; from pathlib import Path; export('$commit', Path('$old'))"
for i in $(seq 1 "$rounds"); do
  if [ $((i % 2)) = 1 ]; then a=0; b=1; else a=1; b=0; fi
  (cd "$old" && PYTHONPATH="$old/pkg" NUMBA_CACHE_DIR="$old/numba" taskset -c $a python3 "$here/bench/ab_once.py" "$@" | sed "s/^/$commit cpu$a /") &
  (cd "$here" && taskset -c $b python3 "$here/bench/ab_once.py" "$@" | sed "s/^/this cpu$b /") &
  wait
done
rm -rf "$old"
