# shellcheck shell=bash
# `down`, `check-clean` and `kill-containers`: stop what `up` started, container processes and
# shims included, unmount what it mounted, remove its network pieces; then prove nothing is left.
# Sourced by cluster.sh after the other lib/ files.

# Prints the mount points under the given directories, deepest first.
mounts_under() {
    local prefix
    for prefix in "$@"; do
        awk -v p="$prefix" '{
            m = $5; gsub(/\\040/, " ", m)
            if (m == p || index(m, p "/") == 1) print m
        }' /proc/self/mountinfo
    done | sort -u -r
}

# Prints the pids of every process below the given ones (children first found, any depth).
descendants() {
    local -A children=()
    local stat pid ppid rest
    for stat in /proc/[0-9]*/stat; do
        read -r pid _ rest 2>/dev/null <"$stat" || continue
        # The command name may contain spaces: the parent pid is the 2nd field after ')'.
        rest="${rest##*) }"
        read -r _ ppid _ <<<"$rest"
        children[$ppid]+="$pid "
    done
    local queue=("$@") next
    while ((${#queue[@]})); do
        next="${queue[0]}"
        queue=("${queue[@]:1}")
        for pid in ${children[$next]:-}; do
            printf '%s\n' "$pid"
            queue+=("$pid")
        done
    done
}

# Pids of processes in the cgroup of a task of our containerd (runc puts each container in
# /k8s.io/ID): finds container processes a killed shim left behind.
our_container_processes() {
    local tasks="$CONTAINERD_DIR/state/io.containerd.runtime.v2.task/k8s.io"
    [[ -d "$tasks" ]] || return 0
    local patterns
    patterns="$(find "$tasks" -mindepth 1 -maxdepth 1 -type d -printf ':/k8s.io/%f\n')"
    [[ -n "$patterns" ]] || return 0
    grep -s -l -F "$patterns" /proc/[0-9]*/cgroup 2>/dev/null |
        sed 's#^/proc/\([0-9]*\)/cgroup$#\1#' || true
}

# Processes in any CRI container cgroup: after down there must be none.
cri_container_processes() {
    grep -s -l -E '^[0-9]+:pids:/k8s.io/[0-9a-f]{64}$' /proc/[0-9]*/cgroup 2>/dev/null |
        sed 's#^/proc/\([0-9]*\)/cgroup$#\1#' || true
}

our_shims() {
    our_daemons | awk '$2 == "containerd-shim" { print $1 }'
}

# SIGKILL for every process of every pod (sandbox and containers) and their shims, as a power
# loss would; the control plane, containerd and the kubelet keep running.
kill_containers() {
    local shims=() procs=()
    mapfile -t shims < <(our_shims)
    if ((${#shims[@]})); then
        mapfile -t procs < <(descendants "${shims[@]}")
    fi
    mapfile -t procs < <({ printf '%s\n' "${procs[@]}"; our_container_processes; } | sed '/^$/d' | sort -u)
    ((${#shims[@]} + ${#procs[@]})) || return 0
    kill -KILL "${procs[@]}" "${shims[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + 10))
    while [[ -n "$(our_shims)" ]] && ((SECONDS < deadline)); do
        sleep 0.2
    done
    log "killed ${#procs[@]} container processes and ${#shims[@]} shims"
}

unmount_all() {
    local point
    while read -r point; do
        [[ -n "$point" ]] || continue
        umount "$point" 2>/dev/null || umount -l "$point" 2>/dev/null ||
            log "could not unmount $point"
    done
}

cluster_down() {
    require_root
    local started="$SECONDS" foreign
    step stop-kubelet stop_daemon kubelet 15
    step kill-containers kill_containers
    # Stopping in reverse start order; whatever survives its grace time is SIGKILLed.
    step stop-containerd stop_daemon containerd 10
    local name
    for name in kube-scheduler kube-controller-manager kube-apiserver etcd; do
        step "stop-$name" stop_daemon "$name" 15
    done
    # Daemons of ours whose pid file is gone (a failed up, a crashed script).
    local pids=()
    mapfile -t pids < <(our_daemons | awk '{print $1}')
    if ((${#pids[@]})); then
        log "stopping leftover processes: ${pids[*]}"
        stop_pids 5 "${pids[@]}"
    fi
    # Pod volumes, container root filesystems, sandbox /dev/shm and network namespaces.
    step unmount unmount_all < <(mounts_under "$CLUSTER_WORK" "$KUBELET_ROOT")
    step network network_down
    foreign="$(kubelet_root_owners | head -n 1)"
    if [[ -e "$KUBELET_ROOT_MARKER" && -z "$foreign" ]]; then
        rm -rf --one-file-system "${KUBELET_ROOT:?}"
    elif [[ -n "$foreign" ]]; then
        log "leaving $KUBELET_ROOT: in use by $foreign"
    fi
    # Keep the logs of the last run; the rest of the work dir is state of a dead cluster.
    if [[ -d "$CLUSTER_WORK" ]] && [[ -z "$(mounts_under "$CLUSTER_WORK")" ]]; then
        find "$CLUSTER_WORK" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf --one-file-system {} +
    fi
    log "down in $((SECONDS - started)) s"
}

# Prints one line per thing of ours still there; exits 1 if there is any.
cluster_check_clean() {
    local left=() line
    while read -r line; do
        [[ -n "$line" ]] && left+=("process: $line")
    done < <(our_daemons)
    while read -r line; do
        [[ -n "$line" ]] && left+=("container process: $line $(comm_of "$line")")
    done < <(cri_container_processes)
    while read -r line; do
        [[ -n "$line" ]] && left+=("mount: $line")
    done < <(mounts_under "$CLUSTER_WORK" "$KUBELET_ROOT")
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        left+=("bridge: $BRIDGE")
    fi
    while read -r line; do
        [[ -n "$line" ]] && left+=("route: $line")
    done < <(ip route show "$SERVICE_CIDR" 2>/dev/null; ip route show "$POD_CIDR" 2>/dev/null)
    while read -r line; do
        [[ -n "$line" ]] && left+=("iptables: $line")
    done < <(our_dnat_rules)
    while read -r line; do
        [[ -n "$line" ]] && left+=("listening port: $line")
    done < <(taken_ports)
    if [[ -e "$KUBELET_ROOT_MARKER" ]]; then
        left+=("directory: $KUBELET_ROOT (made by this tier)")
    fi
    if [[ -f "$ENV_FILE" ]]; then
        left+=("env file: $ENV_FILE")
    fi
    if ((${#left[@]})); then
        printf '[cluster] left over: %s\n' "${left[@]}" >&2
        # shellcheck disable=SC2034  # read by the EXIT trap of cluster.sh
        FAILURE_REPORTED=1
        return 1
    fi
    log "clean"
}
