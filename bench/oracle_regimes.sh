#!/usr/bin/env bash
# Runs every regime of bench/regimes.py through Dynamo's replay (bench/dynamo_oracle.py), 4 seeds
# each, and writes OUT/NAME.SEED.json. Optional, never part of the tests; it needs a Python with
# Dynamo's replay engine, which ai-dynamo-runtime 1.6.1 holds (ai-dynamo itself is not needed):
#   python3 -m venv /tmp/dyn && /tmp/dyn/bin/pip install ai-dynamo-runtime==1.6.1
#   DYNAMO_PY=/tmp/dyn/bin/python bash bench/oracle_regimes.sh OUT [REQUESTS]
set -euo pipefail
out=${1:?usage: oracle_regimes.sh OUT [REQUESTS]}
requests=${2:-2000}
py=${DYNAMO_PY:?set DYNAMO_PY to a python with ai-dynamo-runtime 1.6.1 (see above)}
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
