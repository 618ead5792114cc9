# shellcheck shell=bash
# The tier's processes: started detached with a pid file and a log, recognised afterwards by
# their command name plus a command line that names the work dir (never by a name alone).
# Sourced by cluster.sh after common.sh.

# Command names (as /proc/PID/comm truncates them) of the daemons this tier starts.
DAEMON_COMMS=(etcd kube-apiserver kube-controller kube-scheduler kubelet containerd containerd-shim)

start_daemon() {
    local name="$1"
    shift
    mkdir -p "$RUN_DIR" "$LOG_DIR"
    # A session of its own: the daemon outlives this script and ignores its terminal.
    setsid "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
    local pid=$! deadline=$((SECONDS + 10)) comm
    printf '%s\n' "$pid" >"$RUN_DIR/$name.pid"
    # The forked shell execs setsid, which execs the daemon. Until the daemon itself runs, the
    # command line is this script's or setsid's, and during the second exec it can read empty:
    # checked then, a daemon that is starting would look dead. Wait for the daemon's own name.
    comm="$(basename "$1")"
    comm="${comm:0:15}"
    until [[ "$(comm_of "$pid" || true)" == "$comm" && "$(cmdline_of "$pid" || true)" == *"$CLUSTER_WORK/"* ]]; do
        [[ -e "/proc/$pid" ]] || die "$name exited at once; log: $LOG_DIR/$name.log"
        ((SECONDS < deadline)) || die "$name did not start within 10 s"
        sleep 0.05
    done
}

cmdline_of() {
    local args=()
    mapfile -d '' -t args 2>/dev/null <"/proc/$1/cmdline" || return 1
    printf '%s ' "${args[@]}"
}

# The process's start time (clock ticks since boot, /proc/PID/stat field 22); nothing when gone.
started_at() {
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
    # Fields after the command name, which may hold spaces: field 22 is the 20th of them.
    stat="${stat##*) }"
    awk '{print $20}' <<<"$stat"
}

comm_of() {
    local comm
    read -r comm 2>/dev/null <"/proc/$1/comm" || return 1
    printf '%s' "$comm"
}

# Prints "PID COMM" for every process whose command name is one of the arguments. One grep over
# every /proc/PID/comm: a read per process takes seconds on a busy host.
processes_named() {
    local pattern
    pattern="$(printf '%s\n' "$@")"
    grep -s -H -x -F -e "$pattern" /proc/[0-9]*/comm 2>/dev/null |
        sed -n 's#^/proc/\([0-9]*\)/comm:#\1 #p' || true
}

# Prints "PID COMM" for every daemon of ours still running (also ones whose pid file is gone).
our_daemons() {
    local pid comm
    while read -r pid comm; do
        [[ "$(cmdline_of "$pid")" == *"$CLUSTER_WORK/"* ]] && printf '%s %s\n' "$pid" "$comm"
    done < <(processes_named "${DAEMON_COMMS[@]}")
    return 0
}

daemon_pid() {
    local name="$1" pid
    [[ -f "$RUN_DIR/$name.pid" ]] || return 1
    pid="$(<"$RUN_DIR/$name.pid")"
    [[ "$pid" =~ ^[0-9]+$ ]] && [[ "$(cmdline_of "$pid")" == *"$CLUSTER_WORK/"* ]] || return 1
    printf '%s\n' "$pid"
}

daemon_running() {
    daemon_pid "$1" >/dev/null
}

# stop_pids SECONDS PID...: SIGTERM, then SIGKILL whatever still runs after SECONDS.
# The process has exited and waits to be reaped (a zombie: it runs nothing, holds nothing).
exited() {
    [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" == Z ]]
}

stop_pids() {
    local timeout="$1" pid deadline alive
    shift
    (($# == 0)) && return 0
    kill -TERM "$@" 2>/dev/null || true
    deadline=$((SECONDS + timeout))
    while :; do
        alive=()
        for pid in "$@"; do
            [[ -e "/proc/$pid" ]] && ! exited "$pid" && alive+=("$pid")
        done
        ((${#alive[@]} == 0)) && return 0
        if ((SECONDS >= deadline)); then
            kill -KILL "${alive[@]}" 2>/dev/null || true
            sleep 0.2
            return 0
        fi
        sleep 0.2
    done
}

stop_daemon() {
    local name="$1" timeout="${2:-10}" pid
    if pid="$(daemon_pid "$name")"; then
        stop_pids "$timeout" "$pid"
    fi
    rm -f "$RUN_DIR/$name.pid"
}

# Fails with the end of its log when the daemon has exited.
require_alive() {
    local name="$1"
    daemon_running "$name" && return 0
    tail -n 15 "$LOG_DIR/$name.log" >&2 || true
    die "$name exited; log: $LOG_DIR/$name.log"
}

# wait_daemon SECONDS NAME WHAT COMMAND...: wait_for, failing early when the daemon died.
wait_daemon() {
    local timeout="$1" name="$2" what="$3" deadline
    shift 3
    deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        require_alive "$name"
        ((SECONDS < deadline)) || die "timed out after ${timeout} s waiting for $what; log: $LOG_DIR/$name.log"
        sleep 0.5
    done
}
