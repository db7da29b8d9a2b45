#!/usr/bin/env bash
# A one-node SLURM cluster on this machine (to try sbatch, submitit or hydra's submitit launcher;
# the tests use it too). Needs root and Debian's packages:
#   apt-get install slurmctld slurmd slurm-client munge
#
#   bash tools/slurm_local.sh start STATE_DIR   # then run the printed `export SLURM_CONF=...`
#   bash tools/slurm_local.sh stop STATE_DIR
#
# start writes STATE_DIR/slurm.conf (one node: this host, all its cores; partition "local"), starts
# munged (when none answers on the default socket; its socket is then in STATE_DIR), slurmctld and
# slurmd, their state, spool, logs and pid files in STATE_DIR, and waits (30 s at most) until the
# node is idle. stop cancels the cluster's jobs and stops the daemons start started, and waits.
# Environment: SLURM_LOCAL_PORT: slurmctld's port, slurmd's is the next one (default 6817).
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin
NAME=slurm_local.sh
case "${1:-}" in
  start|stop) [ $# = 2 ] || { echo "$NAME: usage: $NAME start|stop STATE_DIR" >&2; exit 2; } ;;
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "$NAME: usage: $NAME start|stop STATE_DIR (or --help)" >&2; exit 2 ;;
esac
for program in slurmctld slurmd sinfo munged; do
  command -v $program >/dev/null || { echo "$NAME: $program not found: apt-get install slurmctld slurmd slurm-client munge is needed" >&2; exit 1; }
done
[ "$1" = stop ] && [ ! -d "$2" ] && exit 0   # nothing to stop
mkdir -p "$2" 2>/dev/null && [ -w "$2" ] || { echo "$NAME: cannot use $2 as STATE_DIR (not a writable folder)" >&2; exit 1; }
STATE=$(cd "$2" && pwd)
export SLURM_CONF=$STATE/slurm.conf

# of the pids given, those running a daemon of STATE_DIR: their command lines name it (a zombie's,
# a daemon that exited where nothing reaps it, is empty)
running() { local p; for p in "$@"; do tr '\0' ' ' 2>/dev/null </proc/"$p"/cmdline | grep -qF -- "$STATE/" && echo "$p"; done; true; }
daemons() { running $(cat "$STATE"/{slurmd,slurmctld,munged}.pid 2>/dev/null || true); }

if [ "$1" = stop ]; then
  PIDS=$(daemons)
  [ -n "$PIDS" ] && { squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true; }
  kill $PIDS 2>/dev/null || true
  for _ in $(seq 100); do [ -z "$(running $PIDS)" ] && exit 0; sleep 0.1; done
  kill -KILL $(running $PIDS) 2>/dev/null || true; exit 0
fi

[ "$(id -u)" = 0 ] || { echo "$NAME: start needs root (slurmd runs jobs as their users)" >&2; exit 1; }
[ -z "$(daemons)" ] || { echo "$NAME: a cluster is already running in $STATE (stop it first)" >&2; exit 1; }
PORT=${SLURM_LOCAL_PORT:-6817} HOST=$(hostname -s)
for p in $PORT $((PORT + 1)); do   # another cluster's daemons there would answer our sinfo
  ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo "$NAME: port $p is in use (set SLURM_LOCAL_PORT to another)" >&2; exit 1; }
done
trap '[ $? = 0 ] || bash "$0" stop "$STATE"' EXIT   # a start that fails stops what it started
AUTH=""   # the machine's munged, on its default socket, when one answers there; else our own
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  if [ ! -s /etc/munge/munge.key ]; then   # as Debian's package makes it: munge's, 0600
    mkdir -p /etc/munge && mungekey --create --keyfile=/etc/munge/munge.key
    chown -R munge:munge /etc/munge 2>/dev/null || true; chmod 600 /etc/munge/munge.key
  fi
  # as root, munged wants a key owned by root: --force makes that a warning
  munged --force --socket="$STATE/munge.socket" --pid-file="$STATE/munged.pid" \
    --log-file="$STATE/munged.log" --seed-file="$STATE/munged.seed"
  AUTH="AuthInfo=socket=$STATE/munge.socket"
fi

cat > "$SLURM_CONF" <<EOF
ClusterName=local
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
AuthType=auth/munge
$AUTH
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$(awk '/^MemTotal/ { print int($2 / 1024 * 0.9) }' /proc/meminfo) State=UNKNOWN
PartitionName=local Default=YES Nodes=ALL MaxTime=INFINITE State=UP
EOF
mkdir -p "$STATE/ctld" "$STATE/spool"
slurmctld -f "$SLURM_CONF" && slurmd -f "$SLURM_CONF"
for _ in $(seq 60); do   # until the node is idle: about a second
  [ "$(sinfo -h -N -o %t 2>/dev/null)" = idle ] && { echo "export SLURM_CONF=$SLURM_CONF"; exit 0; }; sleep 0.5
done
echo "$NAME: the node did not come up idle within 30 s (see $STATE/slurmctld.log and slurmd.log)" >&2
exit 1
