# shellcheck shell=bash
# `cluster.sh up`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
# and the kubelet of a single-node cluster, as root, all under $CLUSTER_WORK (plus the
# kubelet's fixed /var/lib/kubelet). Sourced by cluster.sh after the other lib/ files.

# A caller's scheduler settings (profiles, extenders, ...): a YAML file of top-level
# KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1beta1) fields, appended to ours.
SCHEDULER_EXTRA_CONFIG="${HYGON_DCU_SCHEDULER_CONFIG:-}"

kubectl_admin() {
    "$BUILD_BIN/kubectl" --kubeconfig "$PKI/admin.kubeconfig" --request-timeout=10s "$@"
}

start_etcd() {
    start_daemon etcd etcd --name default --data-dir "$CLUSTER_WORK/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" \
        --logger zap --log-level warn
    wait_daemon 30 etcd "etcd on 127.0.0.1:$ETCD_CLIENT_PORT" \
        curl -sf --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health"
}

start_apiserver() {
    start_daemon kube-apiserver "$BUILD_BIN/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --bind-address "$BRIDGE_IP" --advertise-address "$BRIDGE_IP" \
        --secure-port "$APISERVER_PORT" --insecure-port 0 \
        --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
        --client-ca-file "$PKI/ca.crt" \
        --token-auth-file "$PKI/tokens.csv" \
        --authorization-mode Node,RBAC \
        --enable-admission-plugins NodeRestriction \
        --allow-privileged=true \
        --service-cluster-ip-range "$SERVICE_CIDR" \
        --service-account-key-file "$PKI/service-account.pub" \
        --service-account-signing-key-file "$PKI/service-account.key" \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
        --kubelet-certificate-authority "$PKI/ca.crt" \
        --kubelet-preferred-address-types InternalIP \
        --enable-aggregator-routing=true \
        --profiling=false \
        --v 1
    wait_daemon 60 kube-apiserver "kube-apiserver /readyz" kubectl_admin get --raw /readyz
}

start_controller_manager() {
    start_daemon kube-controller-manager "$BUILD_BIN/kube-controller-manager" \
        --kubeconfig "$PKI/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "$CONTROLLER_MANAGER_PORT" --port 0 \
        --use-service-account-credentials \
        --service-account-private-key-file "$PKI/service-account.key" \
        --root-ca-file "$PKI/ca.crt" \
        --allocate-node-cidrs=false \
        --leader-elect=false \
        --profiling=false \
        --v 1
}

write_scheduler_config() {
    local path="$1"
    if [[ -n "$SCHEDULER_EXTRA_CONFIG" ]]; then
        [[ -f "$SCHEDULER_EXTRA_CONFIG" ]] || die "HYGON_DCU_SCHEDULER_CONFIG: no file $SCHEDULER_EXTRA_CONFIG"
        if grep -Eq '^(apiVersion|kind|clientConnection|leaderElection|healthzBindAddress|metricsBindAddress):' \
            "$SCHEDULER_EXTRA_CONFIG"; then
            die "HYGON_DCU_SCHEDULER_CONFIG sets a field the tier owns (apiVersion, kind, clientConnection, leaderElection, healthz/metricsBindAddress)"
        fi
    fi
    {
        cat <<CONFIG
apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $PKI/scheduler.kubeconfig
leaderElection:
  leaderElect: false
healthzBindAddress: 127.0.0.1:$SCHEDULER_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$SCHEDULER_HEALTHZ_PORT
CONFIG
        [[ -n "$SCHEDULER_EXTRA_CONFIG" ]] && cat "$SCHEDULER_EXTRA_CONFIG"
        :
    } >"$path"
}

start_scheduler() {
    write_scheduler_config "$CLUSTER_WORK/scheduler.yaml"
    start_daemon kube-scheduler "$BUILD_BIN/kube-scheduler" \
        --config "$CLUSTER_WORK/scheduler.yaml" \
        --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" \
        --v 1
    wait_daemon 30 kube-scheduler "kube-scheduler healthz" \
        curl -sf --max-time 2 "http://127.0.0.1:$SCHEDULER_HEALTHZ_PORT/healthz"
}

restart_scheduler() {
    stop_daemon kube-scheduler
    start_scheduler
}

write_containerd_config() {
    mkdir -p "$CONTAINERD_DIR"
    cat >"$CONTAINERD_DIR/config.toml" <<TOML
version = 2
root = "$CONTAINERD_DIR/root"
state = "$CONTAINERD_DIR/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "$CONTAINERD_SOCKET"

[ttrpc]
  address = "$CONTAINERD_DIR/containerd.ttrpc.sock"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$CONTAINERD_DIR/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Without CAP_SYS_RESOURCE every sandbox fails with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  disable_hugetlb_controller = true
  tolerate_missing_hugetlb_controller = true
  enable_selinux = false
  # Pod network namespaces under the work dir, not /run/netns: down finds them with the rest.
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$CONTAINERD_DIR/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CLUSTER_WORK/cni/net.d"
    max_conf_num = 1
TOML
}

ctr_k8s() {
    ctr --address "$CONTAINERD_SOCKET" --namespace k8s.io "$@"
}

start_containerd() {
    write_containerd_config
    start_daemon containerd containerd --config "$CONTAINERD_DIR/config.toml"
    wait_daemon 30 containerd "containerd on $CONTAINERD_SOCKET" ctr_k8s version
}

import_images() {
    ctr_k8s images import "$WORKLOAD_ARCHIVE" >/dev/null
    ctr_k8s images import "$SCHEDULER_ARCHIVE" >/dev/null
    ctr_k8s images tag --force "$WORKLOAD_IMAGE" "$PAUSE_IMAGE" >/dev/null
}

write_kubelet_config() {
    local node="$1"
    mkdir -p "$CLUSTER_WORK/kubelet/volume-plugins"
    cat >"$CLUSTER_WORK/kubelet/config.yaml" <<CONFIG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $BRIDGE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
makeIPTablesUtilChains: false
# Imported images cannot be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
# Extended resources of a device plugin show up on the node within seconds.
nodeStatusUpdateFrequency: 4s
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
volumePluginDir: $CLUSTER_WORK/kubelet/volume-plugins
CONFIG
}

start_kubelet() {
    local node
    node="$(node_name)"
    start_daemon kubelet "$BUILD_BIN/kubelet" \
        --config "$CLUSTER_WORK/kubelet/config.yaml" \
        --kubeconfig "$PKI/kubelet.kubeconfig" \
        --root-dir "$KUBELET_ROOT" \
        --container-runtime remote \
        --container-runtime-endpoint "unix://$CONTAINERD_SOCKET" \
        --pod-infra-container-image "$PAUSE_IMAGE" \
        --hostname-override "$node" \
        --node-ip "$BRIDGE_IP" \
        --v 1
}

node_ready() {
    [[ "$(kubectl_admin get node "$1" \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

wait_node_ready() {
    local node
    node="$(node_name)"
    wait_daemon 90 kubelet "node $node Ready" node_ready "$node"
}

write_env_file() {
    local node="$1" name value
    {
        echo "# Written by tests/cluster/cluster.sh up; source it (sh) or read KEY=\"VALUE\" lines."
        while read -r name value; do
            [[ "$value" != *[\"\$\`\\]* ]] || die "unquotable value for $name: $value"
            printf 'export %s="%s"\n' "$name" "$value"
        done <<VARS
KUBECONFIG $PKI/admin.kubeconfig
HYGON_DCU_CLUSTER_WORK $CLUSTER_WORK
HYGON_DCU_CLUSTER_NODE $node
HYGON_DCU_CLUSTER_KUBECTL $BUILD_BIN/kubectl
HYGON_DCU_CLUSTER_BIN $BUILD_BIN
HYGON_DCU_CLUSTER_API https://$BRIDGE_IP:$APISERVER_PORT
HYGON_DCU_CLUSTER_SERVICE_API $SERVICE_API_IP:443
HYGON_DCU_CLUSTER_CONTAINERD_SOCKET $CONTAINERD_SOCKET
HYGON_DCU_CLUSTER_WORKLOAD_IMAGE $WORKLOAD_IMAGE
HYGON_DCU_CLUSTER_PAUSE_IMAGE $PAUSE_IMAGE
HYGON_DCU_CLUSTER_SCHEDULER_IMAGE $SCHEDULER_IMAGE
HYGON_DCU_CLUSTER_SCHEDULER_CONFIG $CLUSTER_WORK/scheduler.yaml
HYGON_DCU_CLUSTER_CA $PKI/ca.crt
VARS
    } >"$ENV_FILE"
}

prepare_work_dir() {
    local node="$1"
    rm -rf --one-file-system "${CLUSTER_WORK:?}"
    mkdir -p "$CLUSTER_WORK" "$RUN_DIR" "$LOG_DIR"
    chmod 700 "$CLUSTER_WORK"
    make_pki "$node"
    write_cni_config "$CLUSTER_WORK/cni"
    write_kubelet_config "$node"
    mkdir -p "$KUBELET_ROOT"
    touch "$KUBELET_ROOT_MARKER"
}

default_token_exists() {
    [[ -n "$(kubectl_admin get secret -n default \
        --field-selector type=kubernetes.io/service-account-token -o name 2>/dev/null)" ]]
}

# Pods are refused until their namespace's ServiceAccount has a token.
wait_default_service_account() {
    wait_daemon 60 kube-controller-manager "the default ServiceAccount's token" default_token_exists
}

cluster_up() {
    require_root
    local started="$SECONDS" node
    node="$(node_name)"
    step preflight preflight_up
    cluster_build
    step images prepare_images
    step work-dir prepare_work_dir "$node"
    # Who owns the cluster: a later `up` takes it down if that run is gone (preflight.sh).
    if [[ -n "${HYGON_DCU_CLUSTER_RUN_OWNER:-}" ]]; then
        printf '%s\n' "$HYGON_DCU_CLUSTER_RUN_OWNER" >"$RUN_OWNER_FILE"
    fi
    step network network_up
    step etcd start_etcd
    step kube-apiserver start_apiserver
    step controller-manager start_controller_manager
    step kube-scheduler start_scheduler
    step containerd start_containerd
    step import-images import_images
    step kubelet start_kubelet
    step node-ready wait_node_ready
    step service-account wait_default_service_account
    write_env_file "$node"
    log "up in $((SECONDS - started)) s; node $node Ready; env file:"
    printf '%s\n' "$ENV_FILE"
}
