# shellcheck shell=bash
# Node-level helpers for product tests: restart or kill the kubelet, load an image from podman's
# store into the cluster's containerd. Sourced by cluster.sh after the other lib/ files.

require_up() {
    if ! [[ -f "$ENV_FILE" ]] || ! daemon_running kube-apiserver || ! daemon_running containerd; then
        die "the cluster is not up (no $ENV_FILE or no apiserver/containerd of ours); run: $0 up"
    fi
    # The build the running cluster uses, as the env file records it.
    BUILD_BIN="$(sed -n 's/^export HYGON_DCU_CLUSTER_BIN="\(.*\)"$/\1/p' "$ENV_FILE")"
    [[ -x "$BUILD_BIN/kubelet" ]] || die "the env file names no kubelet build ($ENV_FILE)"
}

kill_kubelet() {
    local pid
    if pid="$(daemon_pid kubelet)"; then
        kill -KILL "$pid"
        while [[ -e "/proc/$pid" ]] && [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]]; do
            sleep 0.1
        done
        log "kubelet $pid killed"
    else
        log "no kubelet of ours runs"
    fi
    rm -f "$RUN_DIR/kubelet.pid"
}

# Ready as reported by a kubelet started at or after SINCE (UTC, RFC 3339): the heartbeat of the
# kubelet before a restart can still be fresh.
node_ready_since() {
    local node="$1" since="$2" status heartbeat
    read -r status heartbeat < <(kubectl_admin get node "$node" -o \
        jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}{"\n"}')
    [[ "$status" == True && ! "$heartbeat" < "$since" ]]
}

start_kubelet_ready() {
    if daemon_running kubelet; then
        die "the kubelet of this cluster already runs; use restart-kubelet"
    fi
    local node since
    node="$(node_name)"
    since="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    # The new kubelet makes its registration socket anew: its appearance means it is serving.
    rm -f "$KUBELET_ROOT/device-plugins/kubelet.sock"
    start_kubelet
    wait_daemon 30 kubelet "the kubelet's device-plugin socket" test -S "$KUBELET_ROOT/device-plugins/kubelet.sock"
    wait_daemon 90 kubelet "node $node Ready from the new kubelet" node_ready_since "$node" "$since"
}

restart_kubelet() {
    stop_daemon kubelet 15
    start_kubelet_ready
}

load_image() {
    local tag="$1" archive
    [[ "$tag" =~ ^[a-zA-Z0-9][a-zA-Z0-9._/:@-]*$ ]] || die "not an image reference: $tag"
    podman_cmd image exists "$tag" || die "podman has no image $tag (CONTAINERS_CONF=${CONTAINERS_CONF:-plugin_image/containers.conf})"
    archive="$(mktemp "${TMPDIR:-/var/tmp}/hygon-dcu-image.XXXXXX.tar")"
    if ! podman_cmd save --format docker-archive -o "$archive" "$tag" >/dev/null 2>&1; then
        rm -f "$archive"
        die "podman save $tag failed"
    fi
    if ! ctr_k8s images import "$archive" >/dev/null; then
        rm -f "$archive"
        die "importing $tag into the cluster's containerd failed"
    fi
    rm -f "$archive"
    log "loaded $tag into the cluster's containerd"
}
