#!/usr/bin/env bash
# A throw-away ONE-node Slurm cluster on loopback (127.0.0.1), for the test suite.
#   scripts/slurm_local.sh start|stop|status [STATE_DIR]   (default /tmp/gengraph-slurm)
# `start` is idempotent; its last stdout line is SLURM_CONF=<path>; on failure it
# prints the daemon log tails to stderr and exits 1 (daemons are left up; `stop`).
# STATE_DIR holds slurm.conf, logs, pid files, controller state and slurmd spool.
# Nothing is written to /etc/slurm, so every client (sbatch, squeue, scontrol,
# sinfo) needs:  export SLURM_CONF=$STATE_DIR/slurm.conf
# Runs as root (apt, munge key, SlurmUser=root). munged is system-wide and `stop`
# leaves it running. Env: SLURM_LOCAL_WAIT_S (default 60) bounds the idle wait.
#
# Final job state without slurmdbd (sacct does NOT work: no accounting storage):
#  * JobCompType=jobcomp/filetxt appends a line per finished job / array task to
#    $STATE_DIR/jobcomp.log:  JobId=7 ... JobState=FAILED ... ArrayJobId=5
#    ArrayTaskId=1 ... ExitCode=1:0   (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...)
#  * MinJobAge=86400 keeps finished jobs in slurmctld memory, so after completion
#    `squeue -h -t all -j <array_id> -o '%K %T'` (task id, state) and
#    `scontrol show job <id>` (JobState=, ExitCode=) still answer, until
#    slurmctld restarts (start uses -c: a clean job table).
# Sandbox (gVisor/container) notes: no systemd, so daemons are started directly;
# no cgroups (proctrack/linuxproc, task/none, jobacct_gather/none, no cgroup.conf).
set -euo pipefail

CMD=${1:-}
STATE_DIR=$(realpath -m "${2:-/tmp/gengraph-slurm}") # slurm.conf needs absolute paths
CONF="$STATE_DIR/slurm.conf"
export SLURM_CONF="$CONF"
HOST=$(hostname -s)
WAIT_S=${SLURM_LOCAL_WAIT_S:-60}

log() { echo "slurm_local: $*" >&2; }
die() { log "$*"; exit 1; }
[[ $STATE_DIR != *[[:space:]]* ]] || die "STATE_DIR must not contain whitespace (slurm.conf)"

# Print the tail of the daemon logs to stderr (the "why" on failure).
dump_logs() {
  local f
  for f in "$STATE_DIR"/slurmctld.log "$STATE_DIR"/slurmd.log /var/log/munge/munged.log; do
    [[ -f $f ]] && { echo "----- tail $f -----"; tail -n 25 "$f"; } >&2
  done || true
}
fail() { log "$*"; dump_logs; exit 1; }

# alive_pid NAME: print the pid in $STATE_DIR/NAME.pid if that process is alive
# and really is NAME (guards against stale pid files / reused pids).
alive_pid() {
  local f="$STATE_DIR/$1.pid" p
  [[ -s $f ]] && p=$(<"$f") && [[ $(cat "/proc/$p/comm" 2>/dev/null) == "$1" ]] && echo "$p"
}

# free_port FROM [SKIP]: first TCP port >= FROM (!= SKIP) nobody listens on
# (a bash /dev/tcp connect to 127.0.0.1 fails). 6817/6818 are Slurm's defaults.
free_port() {
  local p=$1
  while [[ $p == "${2:-}" ]] || (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
  echo "$p"
}

ensure_packages() {
  local missing=() p # dpkg-query first: no apt call when all is installed
  for p in slurmctld slurmd slurm-client munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  log "installing slurm-wlm munge (missing: ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq slurm-wlm munge >&2
}

# Runs a daemon without the caller's open files beyond stdin/out/err: a daemon that inherits them
# holds them for its life (a build lock taken with flock around the tests, a pipe a CI log waits
# on), and whoever waits on them waits forever.
without_inherited_fds() {
  (
    local fd
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if ((fd > 2 && fd != 255)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec "$@"
  )
}

ensure_munge() {
  local i
  if [[ ! -s /etc/munge/munge.key ]]; then
    log "creating /etc/munge/munge.key"
    install -d -o munge -g munge -m 0700 /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  fi
  chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
  # systemd would create the runtime dir (RuntimeDirectory=munge); do it by hand.
  install -d -o munge -g munge -m 0755 /run/munge
  if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    without_inherited_fds runuser -u munge -- /usr/sbin/munged || fail "munged failed to start"
    for ((i = 0; i < 50; i++)); do
      munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
      sleep 0.2
    done
    fail "munged is not answering on /run/munge/munge.socket.2"
  fi
}

write_conf() {
  local hw ctld_port slurmd_port
  # `slurmd -C` prints the node's real layout (CPUs, sockets, cores, threads,
  # RealMemory); reuse it minus NodeName/UpTime, else fall back to nproc/free.
  hw=$(slurmd -C 2>/dev/null | head -n 1 | grep -o ' CPUs=.*RealMemory=[0-9]*' || true)
  [[ -n $hw ]] || hw=" CPUs=$(nproc) RealMemory=$(free -m | awk '/^Mem:/{print $2}')"
  ctld_port=$(free_port 6817)
  slurmd_port=$(free_port $((ctld_port + 1)) "$ctld_port")
  cat >"$CONF" <<EOF
# Generated by scripts/slurm_local.sh -- one-node loopback test cluster.
ClusterName=gengraph-test
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE_DIR/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=86400
StateSaveLocation=$STATE_DIR/ctld_state
SlurmdSpoolDir=$STATE_DIR/slurmd_spool
SlurmctldPidFile=$STATE_DIR/slurmctld.pid
SlurmdPidFile=$STATE_DIR/slurmd.pid
SlurmctldLogFile=$STATE_DIR/slurmctld.log
SlurmdLogFile=$STATE_DIR/slurmd.log
NodeName=$HOST NodeAddr=127.0.0.1 NodeHostname=$HOST$hw State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
}

node_state() { sinfo -h -N -n "$HOST" -o '%T' 2>/dev/null | head -n 1; }

wait_idle() {
  local deadline=$((SECONDS + WAIT_S)) st resumed=0
  while ((SECONDS < deadline)); do
    alive_pid slurmctld >/dev/null || fail "slurmctld is not running"
    alive_pid slurmd >/dev/null || fail "slurmd is not running"
    st=$(node_state || true)
    case $st in
      idle* | mixed* | allocated*) return 0 ;;
      down* | drain* | fail*) # resume once; ReturnToService=2 usually makes this moot
        ((resumed++)) || { log "node is '$st': resume"; scontrol update nodename="$HOST" state=resume >&2 || true; } ;;
    esac
    sleep 0.5
  done
  fail "node $HOST not idle after ${WAIT_S}s (state: '${st:-none}')"
}

stop_one() { # NAME
  local pid i
  pid=$(alive_pid "$1") || { rm -f "$STATE_DIR/$1.pid"; return 0; }
  log "stopping $1 (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { log "$1 ignored SIGTERM for 10s: SIGKILL"; kill -KILL "$pid" || true; sleep 0.2; }
  rm -f "$STATE_DIR/$1.pid"
}

do_start() {
  local i
  [[ $EUID -eq 0 ]] || die "must run as root"
  ensure_packages
  ensure_munge
  mkdir -p "$STATE_DIR"
  # Idempotent: both daemons already up with this config -> just wait for idle.
  if [[ -f $CONF ]] && alive_pid slurmctld >/dev/null && alive_pid slurmd >/dev/null; then
    log "already running"
  else
    do_stop
    rm -rf "$STATE_DIR/ctld_state" "$STATE_DIR/slurmd_spool"
    mkdir -p "$STATE_DIR/ctld_state" "$STATE_DIR/slurmd_spool"
    : >"$STATE_DIR/jobcomp.log"; : >"$STATE_DIR/slurmctld.log"; : >"$STATE_DIR/slurmd.log"
    write_conf
    # -c: start with a clean job table (no jobs left from a previous run).
    without_inherited_fds slurmctld -c -f "$CONF" || fail "slurmctld failed to start"
    without_inherited_fds slurmd -f "$CONF" || fail "slurmd failed to start"
    # Both fork into the background; their pid files appear shortly after.
    for ((i = 0; i < 50; i++)); do
      [[ -s $STATE_DIR/slurmctld.pid && -s $STATE_DIR/slurmd.pid ]] && break
      sleep 0.2
    done
  fi
  wait_idle
  echo "SLURM_CONF=$CONF"
}

do_stop() { stop_one slurmd; stop_one slurmctld; }

do_status() {
  [[ -f $CONF ]] || die "no $CONF (not started?)"
  echo "SLURM_CONF=$CONF"
  sinfo -N -l
  squeue -a
}

case $CMD in
  start | stop | status) "do_$CMD" ;;
  *) die "usage: $0 {start|stop|status} [STATE_DIR]" ;;
esac
