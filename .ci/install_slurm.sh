#!/usr/bin/env bash
# Installs the Slurm daemons and client tools plus munge, which tests/test_slurm_real.py drives on
# a one-node localhost cluster. Idempotent and noninteractive, so .ci/run can call it every time.
set -euo pipefail

have_all() {
    command -v sbatch >/dev/null 2>&1 && command -v slurmctld >/dev/null 2>&1 \
        && command -v slurmd >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 \
        && command -v sacct >/dev/null 2>&1
}

if have_all; then
    echo "install_slurm: slurm and munge already installed"
    exit 0
fi

SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
# The package scripts must not try to start services (there is no systemd in CI sandboxes): a
# policy-rc.d returning 101 tells invoke-rc.d to skip them, and is removed again afterwards.
POLICY=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod +x "$POLICY"
    made_policy=1
fi
cleanup() {
    if [ "$made_policy" = 1 ]; then
        $SUDO rm -f "$POLICY"
    fi
}
trap cleanup EXIT

# A mirror hiccup should not fail CI: try the update and install a few times.
for attempt in 1 2 3; do
    if $SUDO apt-get update -q \
        && $SUDO apt-get install -y -q --no-install-recommends slurm-wlm slurm-client munge; then
        break
    fi
    [ "$attempt" = 3 ] && { echo "install_slurm: apt-get failed 3 times" >&2; exit 1; }
    sleep 5
done
if ! have_all; then
    echo "install_slurm: packages installed but sbatch/slurmctld/slurmd/munged/sacct still missing" >&2
    exit 1
fi
slurm_v=$(dpkg-query -W -f='${Version}' slurmctld)
munge_v=$(dpkg-query -W -f='${Version}' munge)
echo "install_slurm: installed slurm $slurm_v, munge $munge_v"
