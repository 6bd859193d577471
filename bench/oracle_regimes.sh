#!/usr/bin/env bash
# Runs every regime of bench/regimes.py through Dynamo's replay (bench/dynamo_oracle.py), 4 seeds
# each, and writes OUT/NAME.SEED.json. Optional: needs a Python with ai-dynamo-runtime 1.6.1
# (DYNAMO_PY, default /work/dynamo-venv/bin/python); never part of the tests.
#   bash bench/oracle_regimes.sh OUT [REQUESTS]
set -euo pipefail
out=${1:?usage: oracle_regimes.sh OUT [REQUESTS]}
requests=${2:-2000}
py=${DYNAMO_PY:-/work/dynamo-venv/bin/python}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for name in $(python3 -c "import sys; sys.path.insert(0, '$here'); import regimes; print(' '.join(regimes.REGIMES))"); do
  for seed in 1 2 3 4; do
    # shellcheck disable=SC2046
    DYN_LOG=warn "$py" "$here/dynamo_oracle.py" $(python3 "$here/regimes.py" --oracle-args "$name" --requests "$requests" --seed "$seed") \
      > "$out/$name.$seed.json"
  done
  echo "$name done"
done
