#!/usr/bin/env bash
# Starts a throwaway one-node Slurm cluster on this machine, entirely under DIR:
#   DIR/etc/slurm.conf      the configuration (point clients at it with SLURM_CONF)
#   DIR/munge/              a private munged (own key, socket, pid, log, seed)
#   DIR/spool/, DIR/state/  slurmd spool and slurmctld state
#   DIR/log/                munged.log, slurmctld.log, slurmd.log
#   DIR/pids/               munged.pid, slurmctld.pid, slurmd.pid (the pids this script started)
#   DIR/env.sh              `export SLURM_CONF=...` for a shell that wants to use the cluster
#
# Usage: tests/slurm/start_slurm.sh DIR [PARTITION]     (PARTITION defaults to "gpu")
# Stop it with tests/slurm/stop_slurm.sh DIR. Needs root (slurmd launches jobs as their owner), the
# Debian packages slurm-wlm and munge (.ci/install_slurm.sh), and no systemd or cgroups: it uses
# proctrack/linuxproc and task/none so that it works in containers and sandboxes.
# Exits 0 once `sinfo` shows the node idle; otherwise prints every daemon log and exits 1.
set -euo pipefail

DIR=${1:?usage: start_slurm.sh DIR [PARTITION]}
PARTITION=${2:-gpu}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

for bin in munged slurmctld slurmd sinfo; do
    if ! command -v "$bin" >/dev/null 2>&1; then
        echo "start_slurm: '$bin' not found; install slurm-wlm and munge (bash .ci/install_slurm.sh)" >&2
        exit 1
    fi
done

mkdir -p "$DIR"/{etc,munge,spool,state,log,pids}
# munged refuses to use a socket directory that others may write to, and a key others may read.
chmod 700 "$DIR/munge"

dump_logs() {
    for f in "$DIR"/log/*.log; do
        [ -e "$f" ] || continue
        echo "===== $f =====" >&2
        tail -n 60 "$f" >&2 || true
    done
}

fail() {
    echo "start_slurm: $*" >&2
    dump_logs
    exit 1
}

# Two free TCP ports: unusual ones, so that a real Slurm on the same host (6817/6818) is never hit.
read -r CTLD_PORT SLURMD_PORT < <(python3 - <<'PY'
import socket

socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
for s in socks:
    s.close()
PY
)

NODE=$(hostname -s)
CPUS=$(nproc)
# Half of the available memory, so that slurmd never finds less than configured (which would drain
# the node); config_overrides below covers any remaining detection mismatch.
MEM_MB=$(awk '/MemAvailable/ {printf "%d", $2 / 1024 / 2}' /proc/meminfo)
[ "$MEM_MB" -ge 256 ] || MEM_MB=256

MUNGE_SOCKET="$DIR/munge/munge.socket"
CONF="$DIR/etc/slurm.conf"
cat >"$CONF" <<EOF
# Written by tests/slurm/start_slurm.sh: a one-node cluster for tests; not for production.
ClusterName=poamctest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/pids/slurmctld.pid.own
SlurmdPidFile=$DIR/pids/slurmd.pid.own
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
# Quick scheduling and quick cleanup, so that a test does not wait on Slurm's defaults.
SchedulerParameters=sched_interval=2
MinJobAge=300
KillWait=5
InactiveLimit=0
Waittime=0
MessageTimeout=10
SlurmdTimeout=60
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
printf 'export SLURM_CONF=%q\n' "$CONF" >"$DIR/env.sh"
export SLURM_CONF="$CONF"

# A private munge key: generated, never copied from /etc, so the test needs nothing pre-configured.
KEY="$DIR/munge/munge.key"
if [ ! -s "$KEY" ]; then
    if command -v mungekey >/dev/null 2>&1; then
        mungekey --create --keyfile="$KEY" --force >/dev/null
    else
        dd if=/dev/urandom of="$KEY" bs=1 count=1024 status=none
    fi
fi
chmod 400 "$KEY"

start_bg() {
    # start_bg NAME CMD...: runs CMD in its own session (so that it outlives this script and a
    # Ctrl-C in the caller's terminal), its output appended to DIR/log/NAME.out, pid in DIR/pids.
    local name=$1
    shift
    setsid "$@" >>"$DIR/log/$name.out" 2>&1 </dev/null &
    echo $! >"$DIR/pids/$name.pid"
}

start_bg munged munged --foreground --force --socket="$MUNGE_SOCKET" --key-file="$KEY" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
for _ in $(seq 50); do
    [ -S "$MUNGE_SOCKET" ] && break
    kill -0 "$(cat "$DIR/pids/munged.pid")" 2>/dev/null || fail "munged exited: $(cat "$DIR/log/munged.out")"
    sleep 0.1
done
[ -S "$MUNGE_SOCKET" ] || fail "munged did not create $MUNGE_SOCKET"
if command -v munge >/dev/null 2>&1 && command -v unmunge >/dev/null 2>&1; then
    munge --socket="$MUNGE_SOCKET" -n | unmunge --socket="$MUNGE_SOCKET" >/dev/null \
        || fail "munge round trip failed on $MUNGE_SOCKET"
fi

# -i: ignore state left by an earlier run in the same DIR (jobs from a killed test must not return).
start_bg slurmctld slurmctld -D -i -f "$CONF"
start_bg slurmd slurmd -D -f "$CONF" -N "$NODE"

# Wait for the node to report idle: this is the moment jobs can run.
state=""
for _ in $(seq 120); do
    for name in slurmctld slurmd; do
        kill -0 "$(cat "$DIR/pids/$name.pid")" 2>/dev/null || fail "$name exited: $(cat "$DIR/log/$name.out")"
    done
    state=$(sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n1 || true)
    case "$state" in
        idle*) break ;;
        down*|drain*|fail*)
            # ReturnToService=2 brings a node back once slurmd registers; nudge it anyway.
            scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
done
case "$state" in
    idle*) ;;
    *) fail "node $NODE not idle after 60 s (state: '${state:-unknown}')" ;;
esac
echo "start_slurm: node $NODE idle in partition $PARTITION (SLURM_CONF=$CONF, ports $CTLD_PORT/$SLURMD_PORT)"
