#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for tests/cluster (docs/guides/cluster.md).
#   scripts/slurm_cluster.sh start   # munged (unless one runs), slurmctld, slurmd; waits until idle
#   scripts/slurm_cluster.sh stop
# Needs Debian's packages (root): apt-get install slurmctld slurmd slurm-client munge.
# No systemd: the daemons are started by hand. ProctrackType=proctrack/linuxproc and
# TaskPlugin=task/none need no cgroups; JobRequeue=1 lets a job requeue itself (scontrol requeue).
# Every start is a fresh cluster (slurmctld -c: no old jobs; job ids start at 1 again).
# State and logs: $SLURM_CLUSTER_DIR (default /tmp/lightning_cls_slurm).
set -euo pipefail
DIR=${SLURM_CLUSTER_DIR:-/tmp/lightning_cls_slurm}
CONF=/etc/slurm/slurm.conf
HOST=$(hostname -s)
CPUS=${SLURM_CLUSTER_CPUS:-2}

die() { echo "slurm_cluster.sh: $*" >&2; exit 1; }

stop() {
    for pidfile in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munged.pid"; do
        pid=$(cat "$pidfile" 2> /dev/null || true)
        if [[ -n $pid ]] && kill -0 "$pid" 2> /dev/null; then
            kill "$pid"
            for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
        fi
        rm -f "$pidfile"
    done
}

# A munge daemon that already answers (installing Debian's munge starts one, as on every host
# with SLURM installed) is reused and left running by stop(): a second munged fails on its
# socket lock ("Failed to lock ... munge.socket.2.lock"). Otherwise ours starts as the munge user.
start_munge() {
    if munge -n 2> /dev/null | unmunge > /dev/null 2>&1; then
        echo "slurm_cluster.sh: reusing the munge daemon already running" >&2
        return 0
    fi
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    [[ -s /etc/munge/munge.key ]] || { mungekey --create 2> /dev/null || /usr/sbin/create-munge-key -f; }
    runuser -u munge -- munged --pid-file="$DIR/munged.pid.tmp" 2> "$DIR/munged.err" \
        || die "munged did not start: $(cat "$DIR/munged.err")"
    # munged writes its pid file as the munge user; keep ours where stop() looks.
    cp "$DIR/munged.pid.tmp" "$DIR/munged.pid" 2> /dev/null || pgrep -n -x munged > "$DIR/munged.pid"
}

start() {
    for cmd in munged slurmctld slurmd sbatch; do
        command -v "$cmd" > /dev/null || die "$cmd not found; install Debian's packages: apt-get install slurmctld slurmd slurm-client munge"
    done
    [[ $(id -u) == 0 ]] || die "run as root (the daemons run as root on this test cluster)"
    stop
    mkdir -p "$DIR/state" "$DIR/spool" "$(dirname "$CONF")"
    start_munge
    cat > "$CONF" << CONF
# Written by scripts/slurm_cluster.sh: a one-node test cluster.
ClusterName=lightningcls
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobRequeue=1
# A requeued job waits cred_expire seconds before it may start again (default 120). 5 is the
# least slurmctld 22.05 takes: cred_expire=1 fell back to 120 s (a 3-signal job waited 2 min a
# requeue).
AuthInfo=cred_expire=5
ReturnToService=2
MpiDefault=none
SchedulerType=sched/backfill
# A job that became eligible (a requeued one, after cred_expire) starts within a second or two,
# not at the next 30 s backfill pass.
SchedulerParameters=bf_interval=1,sched_interval=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=5
MinJobAge=600
NodeName=$HOST CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
    slurmctld -c || die "slurmctld did not start; see $DIR/slurmctld.log"
    slurmd || die "slurmd did not start; see $DIR/slurmd.log"
    for _ in $(seq 100); do
        state=$(sinfo -h -n "$HOST" -o %T 2> /dev/null || true)
        [[ $state == idle ]] && { echo "slurm cluster up: node $HOST ($CPUS CPUs) idle"; return 0; }
        sleep 0.2
    done
    die "node $HOST is '${state:-unknown}', not idle after 20 s; see $DIR/slurmctld.log and $DIR/slurmd.log"
}

# Sourced (tests/cluster/test_slurm_script.py), it only defines its functions.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0
case ${1:-} in
    start) start ;;
    stop) stop ;;
    *) die "usage: scripts/slurm_cluster.sh start|stop" ;;
esac
