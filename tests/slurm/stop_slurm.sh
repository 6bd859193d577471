#!/usr/bin/env bash
# Stops the daemons that tests/slurm/start_slurm.sh DIR started, by the pids it recorded (never by
# name: a real Slurm or another test's cluster on the same host must survive). Safe to call twice.
# Usage: tests/slurm/stop_slurm.sh DIR
set -uo pipefail

DIR=${1:?usage: stop_slurm.sh DIR}
PIDS="$DIR/pids"
[ -d "$PIDS" ] || exit 0

# Cancel this cluster's jobs while its daemons still run, so that they end the normal way
# (SLURM_CONF points every client at this cluster only).
CONF="$DIR/etc/slurm.conf"
ctld_pid=$(cat "$PIDS/slurmctld.pid" 2>/dev/null || true)
if [ -n "$ctld_pid" ] && kill -0 "$ctld_pid" 2>/dev/null && [ -f "$CONF" ]; then
    jobs=$(SLURM_CONF="$CONF" squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
        # shellcheck disable=SC2086
        SLURM_CONF="$CONF" scancel $jobs 2>/dev/null
        for _ in $(seq 50); do
            [ -z "$(SLURM_CONF="$CONF" squeue -h -o %A 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
fi

# The job steps' slurmstepd processes of this cluster (found by their open slurmd log under DIR):
# collected now, while slurmd still runs, and killed with their children after the daemons.
stepds=""
for p in /proc/[0-9]*; do
    { cmd=$(tr '\0' ' ' <"$p/cmdline"); } 2>/dev/null || continue
    case "$cmd" in
        slurmstepd*)
            for fd in "$p"/fd/*; do
                case "$(readlink "$fd" 2>/dev/null)" in
                    "$DIR"/*) stepds="$stepds ${p#/proc/}"; break ;;
                esac
            done ;;
    esac
done

stop_pid() {
    local pid=$1
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
}

# slurmd first, so running jobs' steps are reaped by it; then slurmctld; munged last since both
# daemons authenticate through it while shutting down.
for name in slurmd slurmctld munged; do
    f="$PIDS/$name.pid"
    [ -s "$f" ] || continue
    stop_pid "$(cat "$f")"
    rm -f "$f"
done

kill_tree() {
    local pid=$1 child
    # shellcheck disable=SC2013  # pids: one word each
    for child in $(grep -l "^PPid:[[:space:]]*$pid\$" /proc/[0-9]*/status 2>/dev/null | cut -d/ -f3); do
        kill_tree "$child"
    done
    kill -KILL "$pid" 2>/dev/null
}
for pid in $stepds; do
    kill_tree "$pid"
done
exit 0
