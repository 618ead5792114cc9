# shellcheck shell=bash
# What `up` refuses: a kubelet or apiserver that is not ours, any other owner of
# /var/lib/kubelet (the kubelet's device-plugin path is fixed there), a /var/lib/kubelet this
# tier did not make, taken ports, a leftover bridge or route, a cluster of ours already up.
# Each refusal is one line naming what was found and what to do.
# Sourced by cluster.sh after common.sh and procs.sh.

refuse() {
    printf '[cluster] refusing to start: %s\n' "$*" >&2
    # shellcheck disable=SC2034  # read by the EXIT trap of cluster.sh
    FAILURE_REPORTED=1
    exit 3
}

# Prints "PID COMM" of running kubelet/kube-apiserver processes that are not ours.
foreign_control_plane() {
    local pid comm
    while read -r pid comm; do
        # A daemon of ours just stopped has no command line left until it is reaped.
        exited "$pid" && continue
        [[ "$(cmdline_of "$pid")" == *"$CLUSTER_WORK/"* ]] || printf '%s %s\n' "$pid" "$comm"
    done < <(processes_named kubelet kube-apiserver hyperkube k3s k3s-server k3s-agent kubelite)
    return 0
}

# Prints "PID COMM PATH" for processes of this mount namespace that are not ours and have their
# working directory, root, an open file or a unix socket under /var/lib/kubelet.
kubelet_root_owners() {
    local own_ns link target pid comm inode socket_inodes=" " seen=" "
    own_ns="$(readlink /proc/self/ns/mnt)"
    # Sockets show up in /proc/PID/fd as socket:[INODE]; their paths are in /proc/net/unix.
    while read -r inode; do
        socket_inodes+="$inode "
    done < <(awk -v root="$KUBELET_ROOT/" 'index($8, root) == 1 { print $7 }' /proc/net/unix)
    # One find over every process's links: a readlink per descriptor takes minutes on a busy host.
    while IFS=' ' read -r link target; do
        pid="${link#/proc/}"
        pid="${pid%%/*}"
        [[ "$seen" == *" $pid "* || "$pid" == "$$" || "$pid" == "$BASHPID" ]] && continue
        if [[ "$target" == socket:\[*\] ]]; then
            inode="${target#socket:[}"
            inode="${inode%]}"
            [[ "$socket_inodes" == *" $inode "* ]] || continue
            target="unix socket under $KUBELET_ROOT"
        elif [[ "$target" != "$KUBELET_ROOT" && "$target" != "$KUBELET_ROOT/"* ]]; then
            continue
        fi
        [[ "$(readlink "/proc/$pid/ns/mnt" 2>/dev/null)" == "$own_ns" ]] || continue
        [[ "$(cmdline_of "$pid")" == *"$CLUSTER_WORK/"* ]] && continue
        comm="$(comm_of "$pid")" || continue
        seen+="$pid "
        printf '%s %s %s\n' "$pid" "$comm" "$target"
    done < <(find /proc/[0-9]*/cwd /proc/[0-9]*/root /proc/[0-9]*/fd -maxdepth 1 -type l \
        \( -lname "$KUBELET_ROOT" -o -lname "$KUBELET_ROOT/*" -o -lname 'socket:*' \) \
        -printf '%p %l\n' 2>/dev/null)
}

# Prints "PORT LISTENER" for each port of ours that something listens on (any address).
taken_ports() {
    local port line
    for port in "${CLUSTER_PORTS[@]}"; do
        line="$(ss -Hltnp "sport = :$port" 2>/dev/null | head -n 1)"
        [[ -n "$line" ]] && printf '%s %s\n' "$port" "$(awk '{print $4, $6}' <<<"$line")"
    done
    return 0
}

# Prints the PID of the `run` that made the cluster when that process is gone (killed with its
# session or by a timeout before its teardown): the cluster is abandoned. Nothing otherwise,
# and nothing for a cluster brought up by hand.
abandoned_by() {
    local pid started
    [[ -f "$RUN_OWNER_FILE" ]] || return 0
    read -r pid started <"$RUN_OWNER_FILE" || return 0
    [[ "$pid" =~ ^[0-9]+$ && -n "$started" ]] || return 0
    [[ "$(started_at "$pid")" == "$started" ]] && return 0
    printf '%s\n' "$pid"
}

preflight_up() {
    local found owner
    found="$(our_daemons)"
    if [[ -n "$found" || -f "$ENV_FILE" ]]; then
        owner="$(abandoned_by)"
        if [[ -n "$owner" ]]; then
            log "the cluster left by run $owner, which is gone, is taken down first"
            cluster_down
            cluster_check_clean ||
                refuse "the cluster left by run $owner could not be taken down; run: $0 down"
            found="$(our_daemons)"
        fi
    fi
    if [[ -n "$found" || -f "$ENV_FILE" ]]; then
        refuse "a cluster of this tier is up or was not taken down (${found:-env file $ENV_FILE}); run: $0 down"
    fi
    found="$(foreign_control_plane)"
    [[ -z "$found" ]] || refuse "a kubelet/apiserver not started by this tier runs: $(tr '\n' ';' <<<"$found")"
    found="$(kubelet_root_owners | head -n 3)"
    [[ -z "$found" ]] || refuse "$KUBELET_ROOT is in use by another process: $(tr '\n' ';' <<<"$found")"
    if [[ -d "$KUBELET_ROOT" && ! -e "$KUBELET_ROOT_MARKER" ]] &&
        [[ -n "$(ls -A "$KUBELET_ROOT")" ]]; then
        refuse "$KUBELET_ROOT has content this tier did not make (no $KUBELET_ROOT_MARKER); another kubelet's? move it away first"
    fi
    found="$(mounts_under "$KUBELET_ROOT" "$CLUSTER_WORK" | head -n 3)"
    [[ -z "$found" ]] || refuse "mounts left under $KUBELET_ROOT or $CLUSTER_WORK: $(tr '\n' ' ' <<<"$found"); run: $0 down"
    found="$(taken_ports)"
    [[ -z "$found" ]] || refuse "ports taken: $(tr '\n' ';' <<<"$found")"
    ! ip link show "$BRIDGE" >/dev/null 2>&1 || refuse "bridge $BRIDGE exists (left over?); run: $0 down"
    found="$(ip route show to match "$BRIDGE_IP" | grep -v '^default' || true)$(ip route show to match "$SERVICE_API_IP" | grep -v '^default' || true)"
    [[ -z "$found" ]] || refuse "this host already routes the cluster's ranges ($POD_CIDR, $SERVICE_CIDR): $found"
    found="$(our_dnat_rules)"
    [[ -z "$found" ]] || refuse "iptables rules of this tier are installed: $found; run: $0 down"
}
