#!/usr/bin/env bash
# A one-node Slurm cluster on loopback for tests, under DIR (which holds slurm.conf, written by
# SlurmCluster.swift): munged with its own key, slurmctld and slurmd, each as a daemon.
# Usage: slurm-cluster.sh start DIR | stop DIR
set -euo pipefail
command=$1 dir=$2
export SLURM_CONF="$dir/slurm.conf"
case "$command" in
start)
    # The daemons keep the descriptors they inherit: given the caller's pipes (including ones it
    # let leak into this shell), the caller would wait for their end. Close all but 0-2 first.
    for fd in /proc/$$/fd/*; do
        n=${fd##*/}
        if [ "$n" -gt 2 ] 2>/dev/null; then eval "exec $n>&-" 2>/dev/null || true; fi
    done
    munged --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
        --log-file="$dir/log/munged.log" --seed-file="$dir/munged.seed" </dev/null >/dev/null 2>&1
    slurmctld -i </dev/null >/dev/null 2>&1
    slurmd </dev/null >/dev/null 2>&1
    for _ in $(seq 600); do
        [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && exit 0
        sleep 0.1
    done
    echo "the Slurm node did not become idle in 60 s; logs in $dir/log" >&2
    exit 1
    ;;
stop)
    scontrol shutdown >/dev/null 2>&1 || true
    for name in slurmd slurmctld munged; do
        pid=$(cat "$dir/$name.pid" 2>/dev/null || true)
        [ -n "$pid" ] || continue
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    ;;
esac
