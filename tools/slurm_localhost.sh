#!/usr/bin/env bash
# A real SLURM on this one machine: Debian's slurm-wlm (slurmctld + slurmd) with munge, one node
# (this host) in one partition, for trying tinylm's SLURM paths and for the tests marked `slurm`.
#
#   sudo tools/slurm_localhost.sh          # install (apt-get) if needed, configure, start; idempotent
#   sudo tools/slurm_localhost.sh stop     # stop the daemons this script started
#   srun -N1 -n2 hostname                  # then: SLURM runs jobs here
#
# Needs root (or sudo) and Debian/Ubuntu's apt-get for the install; exits non-zero with one line
# saying why when it cannot (no apt-get, no root, a daemon that does not start).
# The node is this host with all its cores, oversubscribed (a task per core is not enforced), so a
# 2-task DDP job fits a 2-core machine. State, logs and the config live under /var/lib/tinylm-slurm.
set -euo pipefail

STATE=${TINYLM_SLURM_STATE:-/var/lib/tinylm-slurm}
CONF_DIR=/etc/slurm
say() { echo "slurm_localhost: $*"; }
fail() { echo "error: slurm_localhost: $*" >&2; exit 1; }

stop() {
    for daemon in slurmd slurmctld; do
        if [ -f "$STATE/$daemon.pid" ]; then
            kill "$(cat "$STATE/$daemon.pid")" 2>/dev/null || true
            rm -f "$STATE/$daemon.pid"
        fi
    done
    say "stopped"
}

if [ "${1:-}" = "stop" ]; then stop; exit 0; fi
[ "$(id -u)" = 0 ] || fail "must run as root (sudo $0): it installs packages and starts daemons"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || fail "slurm-wlm is not installed and there is no apt-get to install it: install slurmctld, slurmd and munge"
    say "installing slurm-wlm and munge (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt=(-o Acquire::http::Timeout=20 -o Acquire::https::Timeout=20 -o Acquire::Retries=1)  # offline: fail soon
    (apt-get "${apt[@]}" install -y -q slurm-wlm munge >/dev/null 2>&1 ||
     { apt-get "${apt[@]}" update -q >/dev/null 2>&1 && apt-get "${apt[@]}" install -y -q slurm-wlm munge >/dev/null 2>&1; }) ||
        fail "apt-get could not install slurm-wlm and munge (offline? run apt-get install -y slurm-wlm munge to see why)"
fi

HOST=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
mkdir -p "$STATE/spool/ctld" "$STATE/spool/d" "$STATE/log" "$CONF_DIR"

# munge: one key, one daemon
if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
id munge >/dev/null 2>&1 && chown munge:munge /etc/munge/munge.key
chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
id munge >/dev/null 2>&1 && chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    if id munge >/dev/null 2>&1; then
        su -s /bin/sh munge -c "munged --force" || fail "munged did not start (see /var/log/munge/munged.log)"
    else
        munged --force || fail "munged did not start (see /var/log/munge/munged.log)"
    fi
    for _ in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n </dev/null | unmunge >/dev/null 2>&1 || fail "munge does not work (see /var/log/munge/munged.log)"

cat > "$CONF_DIR/slurm.conf" <<CONF
# written by tinylm's tools/slurm_localhost.sh: a one-machine cluster
ClusterName=tinylm
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
JobRequeue=1
KillWait=10
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
Waittime=0
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
rm -f "$CONF_DIR/cgroup.conf"  # 22.05 has no cgroup/disabled: none is used (proctrack/linuxproc, task/none)

# No slurmdbd (it needs a database): `sacct` has no accounting to read. The job completion log has each
# job's end state, which `sacct -c` reads; $STATE/bin/sacct (put it first on PATH: submitit asks `sacct`
# whether a job that wrote no result is done) reads it so.
mkdir -p "$STATE/bin"
cat > "$STATE/bin/sacct" <<SH
#!/bin/bash
# sacct from the job completion log (written by tools/slurm_localhost.sh: there is no slurmdbd).
# submitit's question (sacct -o JobID,State,NodeList --parsable2 -j ID ...) is answered from the log itself,
# naming an array job's tasks <array id>_<task> as sacct does with accounting; anything else: sacct -c.
LOG=$STATE/log/jobcomp.txt
SH
cat >> "$STATE/bin/sacct" <<'SH'
if [[ "$*" == "-o JobID,State,NodeList --parsable2 "* ]]; then
    ids=$(printf '%s\n' "$@" | awk 'prev == "-j" {print} {prev = $0}' | tr '\n' ' ')
    echo "JobID|State|NodeList"
    [ -f "$LOG" ] || exit 0
    awk -v ids=" $ids" '{
        delete f
        for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = substr($i, length(kv[1]) + 2) }
        base = ("ArrayJobId" in f && f["ArrayJobId"] != "") ? f["ArrayJobId"] : f["JobId"]
        id = ("ArrayTaskId" in f && f["ArrayTaskId"] != "") ? base "_" f["ArrayTaskId"] : f["JobId"]
        if (index(ids, " " base " ")) print id "|" f["JobState"] "|" f["NodeList"]
    }' "$LOG"
    exit 0
fi
exec 3>&1
/usr/bin/sacct -c "$@" 2>&1 1>&3 | grep -v "Unknown type Array" >&2
exit "${PIPESTATUS[0]}"
SH
chmod +x "$STATE/bin/sacct"

running() { [ -f "$STATE/$1.pid" ] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }
running slurmctld || slurmctld || fail "slurmctld did not start (see $STATE/log/slurmctld.log)"
running slurmd || slurmd || fail "slurmd did not start (see $STATE/log/slurmd.log)"
for _ in $(seq 100); do
    state=$(timeout 5 sinfo -h -N -o %t 2>/dev/null | head -1 || true)  # a hung slurmctld: 5 s, not MessageTimeout
    case "$state" in idle*|mix*|alloc*) break ;; down*|drain*) scontrol update nodename="$HOST" state=resume 2>/dev/null || true ;; esac
    sleep 0.2
done
case "$state" in idle*|mix*|alloc*) ;; *) fail "node $HOST is '${state:-unknown}', not idle (see $STATE/log/)" ;; esac
say "running: node $HOST, $CPUS CPUs, partition debug (stop with: $0 stop; sacct without slurmdbd: PATH=$STATE/bin:\$PATH)"
